"""Concurrent writers on one moraine-backed lake, through the Python module: two cursors (separate connections
to the same database) commit at the same time; DuckLake's commit retry must land every commit, and a real conflict
(INSERT racing a DROP of the same table) must fail with DuckLake's conflict error.

E2E_LAKE=duckdb runs the same tests on DuckLake's DuckDB-file catalog (checks the tests themselves).
"""

import os
import threading

import harness

BACKEND = os.environ.get("E2E_LAKE", "moraine")
COMMITS = 10


def open_lake(tmp):
    if BACKEND == "duckdb":
        con = harness.connect(load=("ducklake",))
        attach = "ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp)
    else:
        harness.require_extension("moraine")
        con = harness.connect()
        attach = "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp)
    con.execute("SET threads=1")  # a known DuckLake catalog-cache race
    con.execute(attach)
    return con


def snapshot_ids(con):
    return [r[0] for r in con.execute(
        "SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY snapshot_id").fetchall()]


def _writer(cur, table, barrier, errors, big_every=0):
    try:
        cur.execute("USE lake")
        barrier.wait(timeout=30)
        for i in range(COMMITS):
            if big_every and i % big_every == 0:
                # > 10 rows: a Parquet file instead of inlined rows
                cur.execute("INSERT INTO %s SELECT %d * 1000 + j FROM range(20) r(j)" % (table, i))
            else:
                cur.execute("INSERT INTO %s VALUES (%d)" % (table, i))
    except Exception as e:
        errors.append("%s: %r" % (table, e))


def run_writers(con, big_every=0):
    con.execute("CREATE TABLE lake.main.a (i BIGINT)")
    con.execute("CREATE TABLE lake.main.b (i BIGINT)")
    before = snapshot_ids(con)
    barrier = threading.Barrier(2)
    errors = []
    threads = [threading.Thread(target=_writer, args=(con.cursor(), t, barrier, errors, big_every))
               for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    assert not errors, errors
    return before


def test_concurrent_inlined_commits_to_different_tables_all_land(tmp):
    con = open_lake(tmp)
    before = run_writers(con)
    ids = snapshot_ids(con)
    assert ids == list(range(len(ids))), "snapshot ids have gaps: %s" % ids
    assert len(ids) == len(before) + 2 * COMMITS, ids
    for t in ("a", "b"):
        n, s = con.execute("SELECT count(*), sum(i) FROM lake.main.%s" % t).fetchone()
        assert (n, s) == (COMMITS, sum(range(COMMITS))), (t, n, s)
    con.close()


def test_concurrent_parquet_and_inlined_commits_all_land(tmp):
    con = open_lake(tmp)
    before = run_writers(con, big_every=3)
    ids = snapshot_ids(con)
    assert ids == list(range(len(ids))), "snapshot ids have gaps: %s" % ids
    assert len(ids) == len(before) + 2 * COMMITS, ids
    big = [i for i in range(COMMITS) if i % 3 == 0]
    small = [i for i in range(COMMITS) if i % 3 != 0]
    for t in ("a", "b"):
        n = con.execute("SELECT count(*) FROM lake.main.%s" % t).fetchone()[0]
        assert n == 20 * len(big) + len(small), (t, n)
        files = con.execute("SELECT count(*) FROM ducklake_list_files('lake', '%s')" % t).fetchone()[0]
        assert files == len(big), (t, files)
    con.close()


def test_concurrent_commits_visible_to_a_new_process(tmp):
    con = open_lake(tmp)
    run_writers(con)
    con.close()
    con = open_lake(tmp)
    rows = con.execute("SELECT (SELECT count(*) FROM lake.main.a), (SELECT count(*) FROM lake.main.b)").fetchall()
    assert rows == [(COMMITS, COMMITS)], rows
    ids = snapshot_ids(con)
    assert ids == list(range(len(ids))), ids
    con.close()


def test_insert_racing_drop_table_conflicts(tmp):
    con = open_lake(tmp)
    con.execute("CREATE TABLE lake.main.t (i INTEGER)")
    con.execute("INSERT INTO lake.main.t VALUES (0)")
    con1, con2 = con.cursor(), con.cursor()
    con1.execute("BEGIN")
    con1.execute("INSERT INTO lake.main.t VALUES (1)")
    con2.execute("DROP TABLE lake.main.t")
    before = snapshot_ids(con2)
    try:
        con1.execute("COMMIT")
    except Exception as e:
        assert "conflict" in str(e).lower(), "unexpected error: %r" % e
    else:
        raise AssertionError("COMMIT of an INSERT into a dropped table succeeded")
    assert snapshot_ids(con2) == before
    n = con2.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake'").fetchone()[0]
    assert n == 0
    con.close()
