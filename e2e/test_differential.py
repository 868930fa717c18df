"""Differential tests: the same statement stream on DuckLake's DuckDB-file catalog and on a moraine catalog must
give the same query results and the same (masked) metadata tables. See differential.py.

E2E_LAKE=duckdb compares the file catalog with itself (checks the streams and the masking, no moraine needed).
"""

import os

import differential

SIDES = None
if os.environ.get("E2E_LAKE") == "duckdb":
    SIDES = (differential.reference_side, differential.reference_side)


def same(tmp, statements):
    return differential.assert_same(tmp, statements, sides=SIDES)


# duckdb-runtime.md §5, without the maintenance calls (flush, merge, expire, cleanup, orphans, checkpoint).
WALKTHROUGH = [
    "USE lake",
    "CREATE TABLE items (id INTEGER, name VARCHAR, qty INTEGER)",
    "INSERT INTO items SELECT i, 'item ' || i, i * 10 FROM range(0, 20) t(i)",
    "INSERT INTO items SELECT i, 'item ' || i, i * 10 FROM range(20, 40) t(i)",
    "INSERT INTO items SELECT i, 'item ' || i, i * 10 FROM range(40, 60) t(i)",
    "INSERT INTO items VALUES (100, 'small', 1), (101, 'small2', 2)",
    "UPDATE items SET qty = -1 WHERE id = 5",
    "DELETE FROM items WHERE id BETWEEN 30 AND 34",
    "SELECT count(*) FROM items AT (VERSION => 2)",
    "SELECT count(*) FROM items AT (VERSION => 4)",
    "SELECT qty FROM items AT (VERSION => 5) WHERE id = 5",
    "SELECT qty FROM items WHERE id = 5",
    "SET VARIABLE ts_v3 = (SELECT snapshot_time FROM ducklake_snapshots('lake') WHERE snapshot_id = 3)",
    "SELECT count(*) FROM items AT (TIMESTAMP => getvariable('ts_v3'))",
    "SELECT * FROM items ORDER BY id",
    "SELECT snapshot_id, schema_version, changes, author, commit_message, commit_extra_info "
    "FROM ducklake_snapshots('lake') ORDER BY snapshot_id",
    "SELECT table_name, schema_id, table_id, file_count, file_size_bytes, delete_file_count, delete_file_size_bytes "
    "FROM ducklake_table_info('lake')",
    "SELECT data_file, data_file_size_bytes, delete_file FROM ducklake_list_files('lake', 'items')",
    "SELECT snapshot_id, rowid, change_type, id, name, qty FROM ducklake_table_changes('lake', 'main', 'items', 0, 7) "
    "ORDER BY snapshot_id, rowid, change_type",
    "SELECT * FROM ducklake_table_insertions('lake', 'main', 'items', 5, 7) ORDER BY id",
    "SELECT * FROM ducklake_table_deletions('lake', 'main', 'items', 5, 7) ORDER BY id",
]


def test_walkthrough_matches_file_catalog(tmp):
    out = same(tmp, WALKTHROUGH)
    # the documented results (duckdb-runtime.md §5)
    assert [r for _, r in out.ref_results[8:12]] == [[(20,)], [(60,)], [(50,)], [(-1,)]], out.ref_results[8:12]
    assert out.ref_results[13][1] == [(40,)], out.ref_results[13]


def test_flush_inlined_data_matches_file_catalog(tmp):
    same(tmp, [
        "USE lake",
        "CREATE TABLE t (id INTEGER, v VARCHAR)",
        "INSERT INTO t SELECT i, 'v' || i FROM range(30) r(i)",
        "INSERT INTO t VALUES (100, 'a'), (101, 'b')",
        "DELETE FROM t WHERE id IN (3, 100)",
        "CALL ducklake_flush_inlined_data('lake')",
        "SELECT * FROM t ORDER BY id",
        "SELECT data_file, delete_file FROM ducklake_list_files('lake', 't')",
    ])


DDL_STREAM = [
    "USE lake",
    "CREATE SCHEMA s1",
    "CREATE TABLE s1.a (id INTEGER, name VARCHAR, n INTEGER)",
    "CREATE TABLE main.b (k VARCHAR, v DOUBLE)",
    "INSERT INTO s1.a VALUES (1, 'x', 10), (2, 'y', 20)",
    "CREATE VIEW s1.va AS SELECT id, id * 2 AS id2 FROM s1.a",
    "ALTER TABLE s1.a ADD COLUMN extra VARCHAR DEFAULT 'd'",
    "INSERT INTO s1.a VALUES (3, 'z', 30, 'e')",
    "ALTER TABLE s1.a DROP COLUMN name",
    "ALTER TABLE s1.a RENAME COLUMN extra TO extra2",
    "ALTER TABLE s1.a ALTER COLUMN n SET DATA TYPE BIGINT",
    "INSERT INTO s1.a VALUES (4, 9000000000, 'big')",
    "ALTER TABLE main.b RENAME TO b2",
    "COMMENT ON TABLE s1.a IS 'table a'",
    "COMMENT ON COLUMN s1.a.n IS 'the n'",
    "CREATE MACRO lake.main.plus1(x) AS x + 1",
    "CREATE MACRO lake.s1.a_from(lim) AS TABLE SELECT id FROM lake.s1.a WHERE id >= lim",
    "CREATE TABLE s1.p (k VARCHAR, v INTEGER)",
    "ALTER TABLE s1.p SET PARTITIONED BY (k)",
    "INSERT INTO s1.p SELECT CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END, i FROM range(30) r(i)",
    "CALL ducklake_set_option('lake', 'data_inlining_row_limit', 5, table_name => 'b2')",
    "INSERT INTO b2 VALUES ('q', 1.5)",
    "CREATE TABLE s1.gone (i INTEGER)",
    "INSERT INTO s1.gone VALUES (1)",
    "DROP TABLE s1.gone",
    "CREATE VIEW main.vb AS SELECT * FROM b2",
    "DROP VIEW main.vb",
    "CREATE SCHEMA s2",
    "DROP SCHEMA s2",
    "SELECT * FROM s1.a ORDER BY id",
    "SELECT * FROM s1.va ORDER BY id",
    "SELECT plus1(41)",
    "SELECT * FROM lake.s1.a_from(3) ORDER BY id",
    "SELECT k, count(*), sum(v) FROM s1.p GROUP BY k ORDER BY k",
    "SELECT * FROM b2",
    "SELECT database_name, schema_name, table_name, comment FROM duckdb_tables() WHERE database_name = 'lake' "
    "ORDER BY schema_name, table_name",
    "SELECT schema_name, table_name, column_name, data_type, comment FROM duckdb_columns() "
    "WHERE database_name = 'lake' ORDER BY schema_name, table_name, column_index",
    "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = 'lake' ORDER BY ALL",
    "SELECT snapshot_id, schema_version, changes FROM ducklake_snapshots('lake') ORDER BY snapshot_id",
    "SELECT option_name, value, scope, scope_entry FROM ducklake_options('lake') ORDER BY ALL",
]


def test_ddl_stream_matches_file_catalog(tmp):
    same(tmp, DDL_STREAM)


NESTED_STREAM = [
    "USE lake",
    "CREATE TABLE nested (id INTEGER, s STRUCT(a INTEGER, b VARCHAR), l INTEGER[], m MAP(VARCHAR, INTEGER), "
    "d DECIMAL(10, 2), ts TIMESTAMPTZ, bl BLOB, u UUID, ll VARCHAR[][], sl STRUCT(x DOUBLE, y BOOLEAN)[])",
    "INSERT INTO nested VALUES "
    "(1, {'a': 1, 'b': 'one'}, [1, 2, 3], MAP {'k1': 1, 'k2': 2}, 12.34, TIMESTAMPTZ '2024-01-02 03:04:05+00', "
    "'\\xAA\\xBB'::BLOB, '6b0cf2ce-4f6a-4b3e-9d39-1b8a0a4c2e11', [['a'], ['b', 'c']], [{'x': 1.5, 'y': true}]), "
    "(2, {'a': NULL, 'b': 'two'}, [], MAP {}, -0.01, TIMESTAMPTZ '1999-12-31 23:59:59.999999+00', "
    "''::BLOB, '00000000-0000-0000-0000-000000000000', [], []), "
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(4, {'a': -7, 'b': ''}, [NULL, 4], MAP {'z': NULL}, 99999999.99, TIMESTAMPTZ '2262-04-11 00:00:00+00', "
    "'abc'::BLOB, 'ffffffff-ffff-ffff-ffff-ffffffffffff', [NULL, ['d', NULL]], [NULL, {'x': NULL, 'y': false}])",
    "SELECT * FROM nested ORDER BY id",
    "SELECT id, s.a, s.b, l[1], len(l), m['k1'], d * 2, ts, octet_length(bl), u::VARCHAR FROM nested ORDER BY id",
    "UPDATE nested SET l = list_append(l, 9), d = d + 1 WHERE id = 1",
    "DELETE FROM nested WHERE id = 3",
    "INSERT INTO nested (id, s) VALUES (5, {'a': 5, 'b': 'five'})",
    "SELECT * FROM nested ORDER BY id",
    "SELECT * FROM nested AT (VERSION => 2) ORDER BY id",
    "SELECT count(*) FROM ducklake_list_files('lake', 'nested')",
]


def test_nested_types_inlining_matches_file_catalog(tmp):
    out = same(tmp, NESTED_STREAM)
    # the stream really exercised inlining: no Parquet file was written
    assert out.ref_results[-1][1] == [(0,)], out.ref_results[-1]


def test_expiry_and_cleanup_leave_the_same_catalog(tmp):
    """RFC 0007: after the same workload and the same expiry (interior versions, so the set is deterministic)
    and cleanup, every ducklake_* table holds the same rows on both catalogs."""
    same(tmp, WALKTHROUGH[:8] + [
        "CALL ducklake_merge_adjacent_files('lake')",
        "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', versions => [1, 2, 3, 5]) ORDER BY 1",
        "SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY snapshot_id",
        "SELECT count(*) FROM ducklake_cleanup_old_files('lake', cleanup_all => true)",
        "SELECT * FROM items ORDER BY id",
        "DROP TABLE items",
        "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', versions => [4, 6, 7, 8]) ORDER BY 1",
        "SELECT count(*) FROM ducklake_cleanup_old_files('lake', cleanup_all => true)",
        "SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY snapshot_id",
    ])


def natural_rows(out, table, columns):
    """`columns` of moraine's rows of metadata table `table` in the order a scan without ORDER BY served them."""
    names, rows = out.mor_meta[table]
    pick = [names.index(c) for c in columns]
    return [tuple(r[i] for i in pick) for r in rows]


def test_unordered_metadata_scans_keep_insertion_order(tmp):
    """A metadata table read without ORDER BY comes back in insertion order, with updated rows (DuckLake's
    `SET end_snapshot`) where they were: the example of the row-faithfulness issue, on Parquet files only.
    The metadata dumps compare every table in its natural order."""
    out = same(tmp, [
        "USE lake",
        "CALL lake.set_option('data_inlining_row_limit', 0)",
        "CREATE TABLE a (i INTEGER)",
        "CREATE TABLE b (i INTEGER)",
        "INSERT INTO b VALUES (1)",
        "INSERT INTO a VALUES (1)",
        "INSERT INTO b VALUES (2)",
        "INSERT INTO a VALUES (2)",
        "ALTER TABLE a ALTER i SET DEFAULT 7",
        "ALTER TABLE b ADD COLUMN j INTEGER DEFAULT 42",
        "CALL ducklake_merge_adjacent_files('lake')",
    ])
    seen = [r[:3] + (r[3] is None,)
            for r in natural_rows(out, "ducklake_column", ("table_id", "column_id", "default_value", "end_snapshot"))]
    assert seen == [(1, 1, 'NULL', False), (2, 1, 'NULL', True), (1, 1, '7', True), (2, 2, '42', True)], seen


def test_inlined_rows_keep_insertion_order_not_row_id_order(tmp):
    """An UPDATE inserts new row versions in the order it meets the rows: here a row of a Parquet file (row id
    4) before an inlined one (row id 1), with one thread. A DuckDB table keeps them in that order, so a read of
    the inlined data table without ORDER BY does too. (Query results are compared sorted; the metadata dumps,
    in natural order.)"""
    out = same(tmp, [
        "USE lake",
        "CREATE TABLE t (id INTEGER, s VARCHAR)",
        "INSERT INTO t SELECT i, 'b' FROM range(3) r(i)",
        "INSERT INTO t SELECT i, 'p' FROM range(20) r(i)",
        "UPDATE t SET s = 'z' WHERE id = 1",
        "SELECT row_id, begin_snapshot, end_snapshot, id, s "
        "FROM __ducklake_metadata_lake.main.ducklake_inlined_data_1_1",
        "DELETE FROM t WHERE id = 0",
        "SELECT id, s FROM t",
    ])
    kept = natural_rows(out, "ducklake_inlined_data_1_1", ("row_id", "begin_snapshot", "end_snapshot", "s"))
    assert kept == [(0, 2, 5, "b"), (1, 2, 4, "b"), (2, 2, None, "b"), (4, 4, None, "z"), (1, 4, None, "z")], kept


def test_data_files_are_visited_in_the_file_catalogs_order(tmp):
    """DuckLake lists a table's files by a LEFT JOIN of `ducklake_data_file` and `ducklake_delete_file` without
    ORDER BY, so rows come in the order of the side DuckDB's planner probes. After delete files replaced others,
    DuckDB's own table still counts the deleted rows and the planner flips the join; moraine's estimates count
    them too, and its scans take and prune filters as DuckDB's do, so the plan, the row order of `list(id)` and
    `LIMIT`, and the Parquet files later statements write from them are the same."""
    same(tmp, [
        "USE lake",
        "CREATE TABLE t2 (id INTEGER, b DOUBLE)",
        "INSERT INTO t2 (id, b) SELECT i, (i / 5)::DOUBLE FROM range(428, 578) r(i)",
        "UPDATE t2 SET b = b * 2 WHERE id % 7 = 3",
        "ALTER TABLE t2 ADD COLUMN c1 DOUBLE",
        "UPDATE t2 SET b = b * 2 WHERE id % 2 = 1",
        "DELETE FROM t2 WHERE id % 7 = 6",
        "INSERT INTO t2 (id, b, c1) SELECT i, (i / 2)::DOUBLE, (i / 4)::DOUBLE FROM range(97, 98) r(i)",
        "INSERT INTO t2 (id, b, c1) SELECT i, (i / 4)::DOUBLE, (i / 4)::DOUBLE FROM range(320, 470) r(i)",
        "UPDATE t2 SET id = id + 1000 WHERE id % 4 = 1",
        "CALL ducklake_flush_inlined_data('lake')",
        "DELETE FROM t2 WHERE id % 9 = 0",
        "DELETE FROM t2 WHERE id % 7 = 3",
        "SELECT list(id) FROM t2",
        "SELECT id FROM t2 LIMIT 3",
    ])


# Every kind of object DuckLake's expiry cascade handles (RFC 0007, steps 5, 6 and 8): views, tags and column
# tags, scalar and table macros, partitions, sort keys, column and name mappings (files added from outside),
# inlined data and inlined deletions, dropped schemas and dropped tables, inline tables included.
CASCADE_STREAM = [
    "USE lake",
    "CREATE SCHEMA s",
    "CREATE TABLE s.gone (i INTEGER)",
    "INSERT INTO s.gone VALUES (1), (2)",
    "CREATE TABLE t (id INTEGER, part INTEGER, name VARCHAR)",
    "INSERT INTO t SELECT i, i % 3, 'n' || i FROM range(30) r(i)",
    "INSERT INTO t VALUES (100, 1, 'inl'), (101, 2, 'inl2')",
    "COPY (SELECT 7 AS id, 1 AS part, 'added' AS name) TO '{tmp}/added.parquet'",
    "CALL ducklake_add_data_files('lake', 't', '{tmp}/added.parquet')",
    "COMMENT ON TABLE t IS 'table comment'",
    "COMMENT ON COLUMN t.name IS 'column comment'",
    "COMMENT ON TABLE t IS 'second comment'",
    "CREATE VIEW v AS SELECT id FROM t WHERE id < 10",
    "CREATE OR REPLACE VIEW v AS SELECT id FROM t WHERE id < 5",
    "CREATE MACRO plus_one(a) AS a + 1",
    "CREATE MACRO small_ids() AS TABLE SELECT id FROM t WHERE id < 3",
    "ALTER TABLE t SET PARTITIONED BY (part)",
    "INSERT INTO t SELECT i, i % 3, 'p' || i FROM range(200, 230) r(i)",
    "ALTER TABLE t SET SORTED BY (id)",
    "INSERT INTO t SELECT i, i % 3, 's' || i FROM range(300, 330) r(i)",
    "DELETE FROM t WHERE id IN (1, 2)",
    "CREATE TABLE dropped_inline (x INTEGER)",
    "INSERT INTO dropped_inline VALUES (1)",
    "DROP TABLE dropped_inline",
    "DROP MACRO plus_one",
    "DROP MACRO TABLE small_ids",
    "DROP VIEW v",
    "ALTER TABLE t RESET PARTITIONED BY",
    "DROP TABLE s.gone",
    "DROP SCHEMA s",
    "CALL ducklake_flush_inlined_data('lake')",
    "CALL ducklake_merge_adjacent_files('lake')",
    "SELECT count(*), sum(id) FROM t",
    "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', older_than => now()) ORDER BY 1",
    "SELECT count(*) FROM ducklake_snapshots('lake')",
    "SELECT count(*) > 0 FROM ducklake_cleanup_old_files('lake', cleanup_all => true)",
    "SELECT count(*) FROM ducklake_delete_orphaned_files('lake', cleanup_all => true)",
    "SELECT count(*), sum(id) FROM t",
    "SELECT * FROM t ORDER BY id LIMIT 5",
]


def test_expiry_cascade_over_every_object_kind_leaves_the_same_catalog(tmp):
    """After expiring everything but the head, cleanup and orphan removal, every metadata table holds exactly what
    the DuckDB-file catalog holds (compared in natural order)."""
    base = os.path.join(tmp, "files")
    os.makedirs(base, exist_ok=True)
    same(tmp, [s.replace("{tmp}", base) for s in CASCADE_STREAM])


def test_merge_update_from_and_a_changed_inlining_limit_match_file_catalog(tmp):
    """MERGE INTO and UPDATE ... FROM stage their changes through joins, and a lake whose inlining limit is
    changed by `ducklake_set_option` splits later inserts between inlined rows and Parquet files."""
    out = same(tmp, [
        "USE lake",
        "CREATE TABLE a AS SELECT range AS id, range % 4 AS k, 'n' || range AS name FROM range(50)",
        "CREATE TABLE b (id INTEGER, k INTEGER, name VARCHAR)",
        "MERGE INTO b USING a ON b.id = a.id WHEN MATCHED THEN UPDATE SET name = a.name "
        "WHEN NOT MATCHED THEN INSERT VALUES (a.id, a.k, a.name)",
        "MERGE INTO b USING (SELECT id, 'm' AS name FROM a WHERE id < 10) s ON b.id = s.id "
        "WHEN MATCHED THEN UPDATE SET name = s.name",
        "UPDATE b SET name = a.name || '!' FROM a WHERE a.id = b.id AND a.k = 1",
        "SELECT k, count(*), min(name), max(name) FROM b GROUP BY k ORDER BY k",
        "CALL ducklake_set_option('lake', 'data_inlining_row_limit', 5)",
        "INSERT INTO b VALUES (1000, 0, 'small')",
        "INSERT INTO b SELECT range + 2000, 1, 'big' FROM range(20)",
        "ALTER TABLE b SET PARTITIONED BY (k)",
        "INSERT INTO b SELECT range + 3000, range % 2, 'p' FROM range(30)",
        "SELECT count(*) FROM ducklake_list_files('lake', 'b')",
        "DELETE FROM b WHERE k = 1 AND id > 2000",
        "SET VARIABLE deleted_at = (SELECT max(snapshot_id) FROM ducklake_snapshots('lake'))",
        "SELECT count(*) FROM ducklake_table_deletions('lake', 'main', 'b', 0, getvariable('deleted_at'))",
        "CALL ducklake_merge_adjacent_files('lake')",
        "SELECT count(*), sum(id) FROM b",
        "SELECT count(*) FROM b AT (VERSION => 3)",
    ])
    # ids below 10 took the second MERGE's 'm'; every k = 1 row then took UPDATE ... FROM's '!'
    assert out.ref_results[6][1] == [(0, 13, "m", "n48"), (1, 13, "n1!", "n9!"), (2, 12, "m", "n46"),
                                     (3, 12, "m", "n47")], out.ref_results[6]
    # the delete kept id 2000 and the k = 0 half of the partitioned insert
    kept = list(range(50)) + [1000, 2000] + list(range(3000, 3030, 2))
    assert out.ref_results[-2][1] == [(len(kept), sum(kept))], out.ref_results[-2]


# Statements DuckDB or DuckLake refuses: the same message on both catalogs, and nothing of them in either.
REFUSED = [
    "INSERT INTO n VALUES (NULL, 'x')",
    "INSERT INTO n VALUES (3, NULL)",
    "CREATE TABLE n (x INTEGER)",
    "DROP TABLE nonexistent",
    "SELECT * FROM n AT (VERSION => 999)",
]


def test_rolled_back_and_refused_statements_leave_the_same_catalog(tmp):
    out = differential.assert_same(tmp, [
        "USE lake",
        "CREATE TABLE n (id INTEGER NOT NULL, v VARCHAR)",
        REFUSED[0],
        "INSERT INTO n VALUES (1, 'a')",
        "BEGIN",
        "INSERT INTO n VALUES (2, 'b')",
        "UPDATE n SET v = 'aa' WHERE id = 1",
        "SELECT * FROM n ORDER BY id",
        "ROLLBACK",
        "SELECT * FROM n ORDER BY id",
        "BEGIN",
        "CREATE TABLE scratch (x INTEGER)",
        "INSERT INTO scratch VALUES (1)",
        "DROP TABLE scratch",
        "COMMIT",
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake' ORDER BY 1",
        "ALTER TABLE n ALTER COLUMN v SET NOT NULL",
        REFUSED[1],
        "ALTER TABLE n ALTER COLUMN v DROP NOT NULL",
        "INSERT INTO n VALUES (3, NULL)",
        "SELECT * FROM n ORDER BY id",
    ] + REFUSED[2:], allow_errors=True, sides=SIDES)
    assert [statement for statement, _ in out.ref_errors()] == REFUSED, out.ref_errors()
    assert out.ref_results[9][1] == [(1, "a")], out.ref_results[9]
    assert out.ref_results[15][1] == [("n",)], out.ref_results[15]
    assert out.ref_results[20][1] == [(1, "a"), (3, None)], out.ref_results[20]
