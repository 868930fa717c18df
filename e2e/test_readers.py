"""READ_ONLY attaches: a reader in another process sees what the writer acknowledged, never fences it, and
refuses writes with a clear message."""

import harness


def writer(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp))
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


def test_second_read_write_attach_fails_fast_while_the_writer_keeps_committing(tmp):
    con = writer(tmp)
    con.execute("CREATE TABLE t (x INTEGER)")
    attach = "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)
    r = harness.run_cli(attach + "INSERT INTO lake.t VALUES (9);", bail=False)
    assert r.rc != 0
    assert "in use by another writer" in r.stderr and "READ_ONLY" in r.stderr, r.stderr
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("INSERT INTO t VALUES (2)")
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 2
