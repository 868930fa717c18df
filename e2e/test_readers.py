"""READ_ONLY attaches: a reader in another process sees what the writer acknowledged, never fences it, and
refuses writes with a clear message."""

import harness


def writer(tmp, extra=""):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/'%s)" % (tmp, tmp, extra))
    con.execute("USE lake")
    return con


def reader_sql(tmp, sql):
    attach = "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/', READ_ONLY);\n" % (tmp, tmp)
    return harness.run_cli(attach + sql, bail=False)


def test_reader_sees_acknowledged_commits_and_writer_keeps_committing(tmp):
    con = writer(tmp)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    r = reader_sql(tmp, "SELECT count(*) AS n FROM lake.t;").ok()
    assert r.results() == [[{"n": 2}]], r.stdout
    # The writer was not fenced by the reader.
    con.execute("INSERT INTO t VALUES (3)")
    r = reader_sql(tmp, "SELECT count(*) AS n FROM lake.t;").ok()
    assert r.results() == [[{"n": 3}]], r.stdout


def test_write_through_read_only_attach_is_refused(tmp):
    con = writer(tmp)
    con.execute("CREATE TABLE t (x INTEGER)")
    r = reader_sql(tmp, "INSERT INTO lake.t VALUES (9);")
    assert r.rc != 0
    assert "read-only" in r.stderr.lower() or "read_only" in r.stderr.lower(), r.stderr
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_second_read_write_attach_fails_fast_while_an_exclusive_writer_keeps_committing(tmp):
    con = writer(tmp, ", META_EXCLUSIVE_WRITER 1")
    con.execute("CREATE TABLE t (x INTEGER)")
    attach = "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)
    r = harness.run_cli(attach + "INSERT INTO lake.t VALUES (9);", bail=False)
    assert r.rc != 0
    assert "in use by another writer" in r.stderr and "READ_ONLY" in r.stderr, r.stderr
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("INSERT INTO t VALUES (2)")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 2


def test_many_readers_attach_while_the_writer_commits(tmp):
    """Four READ_ONLY reader processes attach and read while the writer commits in a loop: each sees at least every
    commit acknowledged before it started, and the writer is never fenced."""
    import subprocess
    import threading

    con = writer(tmp)
    con.execute("CREATE TABLE t (x INTEGER)")
    acked = [0]
    stop = threading.Event()
    failures = []

    def commit_loop():
        cur = con.cursor()
        cur.execute("USE lake")
        while not stop.is_set():
            try:
                cur.execute("INSERT INTO t VALUES (%d)" % acked[0])
                acked[0] += 1
            except Exception as e:  # noqa: BLE001 - any writer error fails the test
                failures.append(str(e))
                return

    loop = threading.Thread(target=commit_loop)
    loop.start()
    try:
        rounds = []
        for _ in range(3):
            floor = acked[0]
            attach = "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/', READ_ONLY);\n" % (tmp, tmp)
            sql = harness.preamble() + attach + "SELECT count(*) AS n FROM lake.t;\n"
            procs = [subprocess.Popen([harness.CLI, "-unsigned", "-json", ":memory:"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
            for p in procs:
                out, err = p.communicate(sql, timeout=120)
                assert p.returncode == 0, err
                n = harness.parse_json_stream(out)[0][0]["n"]
                assert n >= floor, (n, floor)
                rounds.append(n)
    finally:
        stop.set()
        loop.join()
    assert not failures, failures
    assert acked[0] > 0 and con.execute("SELECT count(*) FROM t").fetchone()[0] == acked[0]
    print("readers: 12 reader attaches saw %d..%d rows while the writer acknowledged %d commits"
          % (min(rounds), max(rounds), acked[0]))
