"""N connections (N in 2, 4, 8) on one moraine-backed lake commit in a loop for a bounded time, each to its own
table, and (the contended variant) all to one shared table. Every acknowledged commit must be present afterwards,
snapshot ids must be consecutive, and the only error allowed is DuckLake's own conflict after it exhausts its
retries. Prints commits per second and attempts per commit: DuckLake retries a commit that lost a race, and
`moraine_stats` counts every commit that reached moraine."""

import threading
import time

import harness

SECONDS = 3.0


def stats(con):
    return dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())


def soak(tmp, n, shared=False):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("SET ducklake_max_retry_count = 100")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog_%d' AS lake (DATA_PATH '%s/data_%d/')" % (tmp, n, tmp, n))
    con.execute("USE lake")
    tables = ["shared"] if shared else ["t%d" % i for i in range(n)]
    for name in tables:
        con.execute("CREATE TABLE %s (x INTEGER, writer INTEGER)" % name)
    table = (lambda i: "shared") if shared else (lambda i: "t%d" % i)
    before = stats(con)
    start_snapshot = con.execute("SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
    acked = [0] * n
    errors = []
    deadline = time.time() + SECONDS

    def work(i):
        cur = con.cursor()
        cur.execute("USE lake")
        while time.time() < deadline:
            try:
                cur.execute("INSERT INTO %s VALUES (%d, %d)" % (table(i), acked[i], i))
                acked[i] += 1
            except Exception as e:  # noqa: BLE001 - classified below
                errors.append(str(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    began = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - began
    after = stats(con)
    for i in range(n):
        found = con.execute("SELECT count(*), coalesce(max(x) + 1, 0) FROM %s WHERE writer = %d" % (table(i), i))
        assert found.fetchone() == (acked[i], acked[i])
    ids = [r[0] for r in con.execute(
        "SELECT snapshot_id FROM ducklake_snapshots('lake') WHERE snapshot_id > %d ORDER BY 1" % start_snapshot)
        .fetchall()]
    assert ids == list(range(start_snapshot + 1, start_snapshot + 1 + sum(acked))), ids[:20]
    for e in errors:
        assert "conflict" in e.lower() or "retry count" in e.lower(), e
    attempts = after["commits_attempted"] - before["commits_attempted"]
    landed = after["commits_landed"] - before["commits_landed"]
    assert landed == sum(acked), (landed, acked)
    print("N=%d %s: %d commits in %.1f s = %.1f commits/s, %.2f attempts per commit (%d conflicts retried), "
          "%d gave up after DuckLake's retries"
          % (n, "one shared table" if shared else "own tables", landed, elapsed, landed / elapsed,
             attempts / max(landed, 1), after["commit_conflicts"] - before["commit_conflicts"], len(errors)))


def test_two_connections_soak(tmp):
    soak(tmp, 2)


def test_four_connections_soak(tmp):
    soak(tmp, 4)


def test_eight_connections_soak(tmp):
    soak(tmp, 8)


def test_eight_connections_on_one_table_soak(tmp):
    soak(tmp, 8, shared=True)
