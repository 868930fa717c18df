"""N connections (N in 2, 4, 8) on one moraine-backed lake commit in a loop, each to its own table, for a bounded
time. Every acknowledged commit must be present afterwards, snapshot ids must be consecutive, and the only
error allowed is DuckLake's own conflict after it exhausts its retries. Prints commits per second."""

import threading
import time

import harness

SECONDS = 3.0


def soak(tmp, n):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("SET ducklake_max_retry_count = 100")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog_%d' AS lake (DATA_PATH '%s/data_%d/')" % (tmp, n, tmp, n))
    con.execute("USE lake")
    for i in range(n):
        con.execute("CREATE TABLE t%d (x INTEGER)" % i)
    start_snapshot = con.execute("SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
    acked = [0] * n
    errors = []
    deadline = time.time() + SECONDS

    def work(i):
        cur = con.cursor()
        cur.execute("USE lake")
        while time.time() < deadline:
            try:
                cur.execute("INSERT INTO t%d VALUES (%d)" % (i, acked[i]))
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
    for i in range(n):
        assert con.execute("SELECT count(*) FROM t%d" % i).fetchone()[0] == acked[i]
    ids = [r[0] for r in con.execute(
        "SELECT snapshot_id FROM ducklake_snapshots('lake') WHERE snapshot_id > %d ORDER BY 1" % start_snapshot)
        .fetchall()]
    assert ids == list(range(start_snapshot + 1, start_snapshot + 1 + sum(acked))), ids[:20]
    for e in errors:
        assert "conflict" in e.lower() or "retry count" in e.lower(), e
    print("N=%d: %d commits in %.1f s = %.1f commits/s, %d gave up after DuckLake's retries"
          % (n, sum(acked), elapsed, sum(acked) / elapsed, len(errors)))


def test_two_connections_soak(tmp):
    soak(tmp, 2)


def test_four_connections_soak(tmp):
    soak(tmp, 4)


def test_eight_connections_soak(tmp):
    soak(tmp, 8)
