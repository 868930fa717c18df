"""Filters DuckDB pushes into moraine's scans (src/staged/pushdown.rs, extension/moraine_scan.cpp).

A scan may leave out the rows its pushed filters cannot keep, and applies DuckDB's filters to what it emits. What
a query sees must not change: DuckLake's own queries at every snapshot, below and above an expiry, and filtered
reads of the metadata tables of every shape DuckDB pushes (comparisons, ranges, IN lists, NULL tests, ORs, join
filters), give what DuckLake's DuckDB-file catalog gives on the same statements. And the pushdown is active:
DuckLake's `snapshot_id = (SELECT MAX(snapshot_id) ...)` makes the scans emit a row where they hold the history.
"""

import os

import differential
import harness

META = '"__ducklake_metadata_lake".main'

# A lake whose history holds inlined and Parquet inserts, deletes, an update, a new table, a flush and a drop.
HISTORY = ["USE lake", "CREATE TABLE t (id INTEGER, v VARCHAR)"]
HISTORY += ["INSERT INTO t VALUES (%d, 'v%d')" % (i, i) for i in range(8)]
HISTORY += [
    "INSERT INTO t SELECT i, 'p' || i FROM range(100, 140) r(i)",
    "DELETE FROM t WHERE id % 3 = 0",
    "UPDATE t SET v = 'u' WHERE id = 4",
    "CREATE TABLE u (k BIGINT)",
    "INSERT INTO u SELECT i FROM range(30) r(i)",
    "CALL ducklake_flush_inlined_data('lake')",
    "INSERT INTO t VALUES (500, 'late')",
    "DROP TABLE u",
    "INSERT INTO t SELECT i, 'q' || i FROM range(200, 230) r(i)",
]
LAST = 18  # snapshots 0 … LAST after HISTORY (checked below)


def time_travel(versions):
    return ["SELECT count(*), sum(id), string_agg(v, ',' ORDER BY id) FROM t AT (VERSION => %d)" % v
            for v in versions]


FILTERED_READS = [
    "SELECT snapshot_id, schema_version, next_catalog_id, next_file_id FROM {m}.ducklake_snapshot "
    "WHERE snapshot_id = (SELECT MAX(snapshot_id) FROM {m}.ducklake_snapshot)",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id BETWEEN 3 AND 7 ORDER BY 1",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id IN (2, 5, 11, 99) ORDER BY 1",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id > 4 AND snapshot_id <= 9 ORDER BY 1",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id < 3 OR snapshot_id > 15 ORDER BY 1",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id >= 9223372036854775807",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id < -9223372036854775807",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id > 2.5 AND snapshot_id < 4.5 ORDER BY 1",
    "SELECT snapshot_id, changes_made FROM {m}.ducklake_snapshot_changes WHERE snapshot_id >= 10 ORDER BY 1",
    "SELECT data_file_id, begin_snapshot, end_snapshot FROM {m}.ducklake_data_file "
    "WHERE table_id = 1 AND end_snapshot IS NULL ORDER BY 1",
    "SELECT data_file_id FROM {m}.ducklake_data_file WHERE end_snapshot IS NOT NULL ORDER BY 1",
    "SELECT data_file_id FROM {m}.ducklake_data_file "
    "WHERE 12 >= begin_snapshot AND (12 < end_snapshot OR end_snapshot IS NULL) ORDER BY 1",
    "SELECT table_id, table_name, begin_snapshot, end_snapshot FROM {m}.ducklake_table "
    "WHERE table_id IN (SELECT table_id FROM {m}.ducklake_data_file) ORDER BY 1, 3",
    "SELECT d.data_file_id, s.snapshot_id FROM {m}.ducklake_data_file d "
    "JOIN {m}.ducklake_snapshot s ON d.begin_snapshot = s.snapshot_id WHERE s.snapshot_id > 9 ORDER BY 1",
    "SELECT column_id, column_name FROM {m}.ducklake_column WHERE table_id = 1 AND column_id = 2",
    "SELECT count(*) FROM {m}.ducklake_file_column_stats WHERE data_file_id = 0 OR column_id = 99",
    # ungrouped aggregates DuckDB's optimizer answers from moraine's column statistics
    "SELECT MIN(snapshot_id), MAX(snapshot_id), COUNT(*) FROM {m}.ducklake_snapshot",
    "SELECT MIN(begin_snapshot), MAX(end_snapshot), COUNT(*) FROM {m}.ducklake_data_file",
    "SELECT MAX(end_snapshot) FROM {m}.ducklake_table WHERE end_snapshot IS NULL",
    "SELECT MAX(schema_version), MIN(begin_snapshot) FROM {m}.ducklake_schema_versions",
    "SELECT MAX(snapshot_id) FROM {m}.ducklake_snapshot WHERE snapshot_id < 0",
    "SELECT MIN(table_id), MAX(table_id), COUNT(*) FROM {m}.ducklake_table WHERE table_id = 1",
    "SELECT MAX(delete_file_id), COUNT(*) FROM {m}.ducklake_delete_file",
    # filters the column statistics prove true, or false, of every row: DuckDB drops or empties them
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id >= 0 ORDER BY 1",
    "SELECT snapshot_id FROM {m}.ducklake_snapshot WHERE snapshot_id > 1000 OR snapshot_id < 0",
    "SELECT data_file_id FROM {m}.ducklake_data_file WHERE 1000 >= begin_snapshot "
    "AND (1000 < end_snapshot OR end_snapshot IS NULL) ORDER BY 1",
    "SELECT table_id, table_name FROM {m}.ducklake_table WHERE end_snapshot IS NULL AND table_id >= 0 ORDER BY 1",
    "SELECT count(*) FROM {m}.ducklake_delete_file WHERE end_snapshot IS NULL OR end_snapshot > 0",
    "SELECT count(*), sum(begin_snapshot) FROM {m}.ducklake_data_file WHERE end_snapshot IS NOT NULL "
    "OR begin_snapshot <= 2",
]


def filtered_reads():
    return [sql.format(m=META) for sql in FILTERED_READS]


def test_pushdown_answers_as_the_file_catalog_at_every_snapshot(tmp):
    versions = range(0, LAST + 2)  # LAST + 1 does not exist: both catalogs refuse it alike
    out = differential.assert_same(tmp, HISTORY + time_travel(versions) + filtered_reads(), allow_errors=True)
    results = dict(out.ref_results)
    assert results["SELECT snapshot_id FROM %s.ducklake_snapshot WHERE snapshot_id BETWEEN 3 AND 7 ORDER BY 1"
                   % META] == [(3,), (4,), (5,), (6,), (7,)]
    head = results[filtered_reads()[0]]
    assert head[0][0] == LAST, head
    assert str(out.ref_results[len(HISTORY) + LAST + 1][1]).startswith("ERROR"), "snapshot LAST + 1 must not exist"


def test_pushdown_answers_as_the_file_catalog_below_and_above_an_expiry(tmp):
    expired = [2, 3, 4, 5, 6, 9, 10]
    statements = HISTORY + [
        "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', versions => %s) ORDER BY 1" % expired,
        "CALL ducklake_cleanup_old_files('lake', cleanup_all => true)",
    ] + time_travel(range(0, LAST + 1)) + filtered_reads() + [
        "INSERT INTO t VALUES (900, 'after')",
        "DELETE FROM t WHERE id >= 200 AND id < 210",
    ] + time_travel(range(0, LAST + 3)) + filtered_reads()
    out = differential.assert_same(tmp, statements, allow_errors=True)
    # Below the expiry the kept snapshots answer and the expired ones are refused alike (snapshot 0 has no t).
    first = len(HISTORY) + 2
    answers = [r for _, r in out.ref_results[first:first + LAST + 1]]
    refused = [v for v, r in enumerate(answers) if isinstance(r, str)]
    assert refused == [0] + expired, refused


def stats(con):
    return {k: int(v) for k, v in con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall()}


def test_scans_leave_out_the_rows_duckdbs_filters_cannot_keep(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/')"
                % (os.path.join(tmp, "catalog"), os.path.join(tmp, "data")))
    con.execute("CREATE TABLE lake.t (x BIGINT)")
    for i in range(200):
        con.execute("INSERT INTO lake.t VALUES (%d)" % i)
    before = stats(con)
    query = ("SELECT snapshot_id FROM %s.ducklake_snapshot WHERE snapshot_id = "
             "(SELECT MAX(snapshot_id) FROM %s.ducklake_snapshot)" % (META, META))
    assert con.execute(query).fetchall() == [(201,)]
    after = stats(con)
    held = after["scan_rows"] - before["scan_rows"]
    emitted = after["scan_rows_emitted"] - before["scan_rows_emitted"]
    # MAX is answered from the column's statistics, with no scan (one scan held rows, not two); the joined scan,
    # given its value, holds every snapshot (202) and emits one. The optimizer also reads the scans' statistics.
    assert after["column_stats_served"] - before["column_stats_served"] >= 1
    assert held == 202, (held, emitted)
    assert emitted == 1, (held, emitted)

    before = stats(con)
    for i in range(20):
        con.execute("INSERT INTO lake.t VALUES (%d)" % (1000 + i))
    after = stats(con)
    held = after["scan_rows"] - before["scan_rows"]
    emitted = after["scan_rows_emitted"] - before["scan_rows_emitted"]
    # DuckLake reads the head snapshot's row in each commit: the rows a commit hands DuckDB include no copy of
    # the whole snapshot table, and its two MAX(snapshot_id) come from statistics.
    assert emitted < held * 0.2, (held, emitted)
    assert after["column_stats_served"] - before["column_stats_served"] >= 2 * 20
    print("pushdown: 20 commits at 200 snapshots held %d rows in their scans and emitted %d" % (held, emitted))
    con.close()
