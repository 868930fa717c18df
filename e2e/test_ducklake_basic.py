"""DuckLake on a moraine catalog, driven through the official CLI: one behaviour per test.

Every test attaches `ducklake:moraine:<tmp>/catalog` as `lake` (DATA_PATH `<tmp>/data/`) in fresh CLI processes.
Setting E2E_LAKE=duckdb runs the same tests on DuckLake's DuckDB-file catalog instead (checks the tests themselves);
test_s3_workload.py runs them with BACKEND = "s3": the catalog in a bucket of a local S3-compatible server.
"""

import os

import harness

BACKEND = os.environ.get("E2E_LAKE", "moraine")


def attach_sql(tmp):
    if BACKEND == "duckdb":
        return "ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)
    if BACKEND == "s3":
        import s3server

        # DuckDB attaches remote paths READ_ONLY unless told READ_WRITE.
        return s3server.secret_sql() + "ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/', READ_WRITE);\n" % (
            s3server.url(tmp, "catalog"), tmp)
    return "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)


def extensions():
    if BACKEND == "duckdb":
        return ("ducklake",)
    harness.require_extension("moraine")
    if BACKEND == "s3":
        return ("ducklake", "moraine", "httpfs")
    return ("ducklake", "moraine")


def lake(tmp, sql):
    """Runs `sql` in a new CLI process with the lake attached and `USE lake`; returns the result sets."""
    results = harness.run_cli(attach_sql(tmp) + "USE lake;\n" + sql, load=extensions()).ok().results()
    # CREATE SECRET answers with a result set of its own.
    return results[1:] if BACKEND == "s3" else results


def lake_fails(tmp, sql):
    """Runs `sql` like lake() but expects failure; returns stderr."""
    r = harness.run_cli(attach_sql(tmp) + "USE lake;\n" + sql, load=extensions())
    assert r.rc != 0, "expected failure, got:\n" + r.stdout
    return r.stderr


def one(tmp, sql):
    """The single value of the last result set of `sql`."""
    rs = lake(tmp, sql)
    assert rs, "no result set"
    assert len(rs[-1]) == 1 and len(rs[-1][0]) == 1, rs[-1]
    return list(rs[-1][0].values())[0]


def snapshot_count(tmp):
    return one(tmp, "SELECT count(*) AS n FROM ducklake_snapshots('lake');")


def max_snapshot(tmp):
    return one(tmp, "SELECT max(snapshot_id) AS n FROM ducklake_snapshots('lake');")


ITEMS = """
CREATE TABLE items (id INTEGER, name VARCHAR, qty INTEGER);
INSERT INTO items SELECT i, 'item ' || i, i * 10 FROM range(0, 20) t(i);
"""


# ------------------------------------------------------------------------------------------------
# attach, create, insert, select


def test_attach_creates_lake_with_snapshot_zero(tmp):
    rs = lake(tmp, "SELECT snapshot_id, schema_version FROM ducklake_snapshots('lake');")
    assert rs == [[{"snapshot_id": 0, "schema_version": 0}]], rs


def test_create_schema_table_and_view(tmp):
    rs = lake(tmp, """
        CREATE SCHEMA s1;
        CREATE TABLE s1.t (a INTEGER, b VARCHAR);
        INSERT INTO s1.t VALUES (1, 'x'), (2, 'y');
        CREATE VIEW s1.v AS SELECT a * 2 AS a2 FROM s1.t;
        SELECT a2 FROM s1.v ORDER BY a2;
        SELECT table_name FROM duckdb_tables() WHERE database_name = 'lake' AND schema_name = 's1';
        SELECT view_name FROM duckdb_views() WHERE database_name = 'lake' AND schema_name = 's1';
    """)
    assert rs == [[{"a2": 2}, {"a2": 4}], [{"table_name": "t"}], [{"view_name": "v"}]], rs


def test_small_insert_is_inlined(tmp):
    rs = lake(tmp, """
        CREATE TABLE t (a INTEGER, b VARCHAR);
        INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three');
        SELECT * FROM t ORDER BY a;
        SELECT count(*) AS files FROM ducklake_list_files('lake', 't');
    """)
    assert rs == [[{"a": 1, "b": "one"}, {"a": 2, "b": "two"}, {"a": 3, "b": "three"}], [{"files": 0}]], rs
    assert not os.path.exists(os.path.join(tmp, "data", "main", "t")) or not os.listdir(
        os.path.join(tmp, "data", "main", "t"))


def test_large_insert_writes_parquet(tmp):
    rs = lake(tmp, ITEMS + """
        SELECT count(*) AS n, sum(qty)::BIGINT AS s FROM items;
        SELECT count(*) AS files FROM ducklake_list_files('lake', 'items');
    """)
    assert rs == [[{"n": 20, "s": 1900}], [{"files": 1}]], rs
    files = os.listdir(os.path.join(tmp, "data", "main", "items"))
    assert len(files) == 1 and files[0].endswith(".parquet"), files


def test_update_rows(tmp):
    rs = lake(tmp, ITEMS + """
        INSERT INTO items VALUES (100, 'small', 1);
        UPDATE items SET qty = -1 WHERE id IN (5, 100);
        SELECT id, qty FROM items WHERE qty < 0 ORDER BY id;
        SELECT count(*) AS n FROM items;
    """)
    assert rs == [[{"id": 5, "qty": -1}, {"id": 100, "qty": -1}], [{"n": 21}]], rs


def test_delete_rows(tmp):
    rs = lake(tmp, ITEMS + """
        INSERT INTO items VALUES (100, 'small', 1), (101, 'small2', 2);
        DELETE FROM items WHERE id BETWEEN 3 AND 7 OR id = 100;
        SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM items;
        SELECT list(id ORDER BY id) AS ids FROM items WHERE id < 10;
    """)
    assert rs == [[{"n": 16, "lo": 0, "hi": 101}], [{"ids": [0, 1, 2, 8, 9]}]], rs


def test_new_process_sees_committed_state(tmp):
    lake(tmp, ITEMS + """
        CREATE SCHEMA s1;
        CREATE TABLE s1.small (k VARCHAR);
        INSERT INTO s1.small VALUES ('a'), ('b');
        UPDATE items SET name = 'renamed' WHERE id = 4;
        DELETE FROM items WHERE id = 7;
        CREATE VIEW v AS SELECT count(*) AS n FROM items;
    """)
    rs = lake(tmp, """
        SELECT count(*) AS n, sum(qty)::BIGINT AS s FROM items;
        SELECT name FROM items WHERE id = 4;
        SELECT k FROM s1.small ORDER BY k;
        SELECT n FROM v;
        SELECT max(snapshot_id) AS m FROM ducklake_snapshots('lake');
    """)
    assert rs == [[{"n": 19, "s": 1830}], [{"name": "renamed"}], [{"k": "a"}, {"k": "b"}], [{"n": 19}],
                  [{"m": 8}]], rs


# ------------------------------------------------------------------------------------------------
# transactions and snapshots


def test_explicit_transaction_commits_one_snapshot(tmp):
    lake(tmp, "CREATE TABLE a (i INTEGER); CREATE TABLE b (i INTEGER);")
    before = snapshot_count(tmp)
    lake(tmp, """
        BEGIN;
        INSERT INTO a VALUES (1), (2);
        INSERT INTO b SELECT * FROM range(30);
        COMMIT;
    """)
    assert snapshot_count(tmp) == before + 1
    rs = lake(tmp, "SELECT (SELECT count(*) FROM a) AS a, (SELECT count(*) FROM b) AS b;")
    assert rs == [[{"a": 2, "b": 30}]], rs


def test_rollback_leaves_snapshots_unchanged(tmp):
    lake(tmp, "CREATE TABLE a (i INTEGER); INSERT INTO a VALUES (1);")
    before = snapshot_count(tmp)
    rs = lake(tmp, """
        BEGIN;
        INSERT INTO a VALUES (2), (3);
        INSERT INTO a SELECT * FROM range(40);
        CREATE TABLE b (j INTEGER);
        ROLLBACK;
        SELECT count(*) AS n FROM a;
        SELECT count(*) AS n FROM duckdb_tables() WHERE database_name = 'lake' AND table_name = 'b';
    """)
    assert rs == [[{"n": 1}], [{"n": 0}]], rs
    assert snapshot_count(tmp) == before


def test_time_travel_at_version(tmp):
    rs = lake(tmp, """
        CREATE TABLE items (id INTEGER, name VARCHAR, qty INTEGER);
        INSERT INTO items SELECT i, 'n' || i, i FROM range(0, 20) t(i);
        INSERT INTO items SELECT i, 'n' || i, i FROM range(20, 40) t(i);
        INSERT INTO items VALUES (100, 'small', 1);
        UPDATE items SET qty = -1 WHERE id = 5;
        SELECT count(*) AS n FROM items AT (VERSION => 2);
        SELECT count(*) AS n FROM items AT (VERSION => 3);
        SELECT qty FROM items AT (VERSION => 4) WHERE id = 5;
        SELECT qty FROM items WHERE id = 5;
    """)
    assert rs == [[{"n": 20}], [{"n": 40}], [{"qty": 5}], [{"qty": -1}]], rs
    # and from a new process
    rs = lake(tmp, "SELECT count(*) AS n FROM items AT (VERSION => 4);")
    assert rs == [[{"n": 41}]], rs


def test_table_changes(tmp):
    rs = lake(tmp, """
        CREATE TABLE t (id INTEGER, v VARCHAR);
        INSERT INTO t VALUES (1, 'a'), (2, 'b');
        UPDATE t SET v = 'B' WHERE id = 2;
        DELETE FROM t WHERE id = 1;
        SELECT snapshot_id, change_type, id, v FROM ducklake_table_changes('lake', 'main', 't', 0, 4)
        ORDER BY snapshot_id, change_type, id;
    """)
    assert rs == [[
        {"snapshot_id": 2, "change_type": "insert", "id": 1, "v": "a"},
        {"snapshot_id": 2, "change_type": "insert", "id": 2, "v": "b"},
        {"snapshot_id": 3, "change_type": "update_postimage", "id": 2, "v": "B"},
        {"snapshot_id": 3, "change_type": "update_preimage", "id": 2, "v": "b"},
        {"snapshot_id": 4, "change_type": "delete", "id": 1, "v": "a"},
    ]], rs


def test_flush_inlined_data(tmp):
    rs = lake(tmp, """
        CREATE TABLE t (id INTEGER);
        INSERT INTO t VALUES (1), (2), (3);
        SELECT count(*) AS files FROM ducklake_list_files('lake', 't');
        CALL ducklake_flush_inlined_data('lake');
        SELECT count(*) AS files FROM ducklake_list_files('lake', 't');
        SELECT sum(id)::BIGINT AS s FROM t;
    """)
    assert rs[0] == [{"files": 0}], rs
    assert [(r["table_name"], int(r["rows_flushed"])) for r in rs[1]] == [("t", 3)], rs
    assert rs[2:] == [[{"files": 1}], [{"s": 6}]], rs
    rs = lake(tmp, "SELECT sum(id)::BIGINT AS s FROM t; SELECT count(*) AS files FROM ducklake_list_files('lake', 't');")
    assert rs == [[{"s": 6}], [{"files": 1}]], rs


def test_checkpoint(tmp):
    lake(tmp, """
        CREATE TABLE t (id INTEGER);
        INSERT INTO t SELECT * FROM range(20);
        INSERT INTO t SELECT * FROM range(20, 40);
        INSERT INTO t VALUES (100);
        CHECKPOINT lake;
    """)
    rs = lake(tmp, "SELECT count(*) AS n, sum(id)::BIGINT AS s FROM t;")
    assert rs == [[{"n": 41, "s": 880}]], rs


# ------------------------------------------------------------------------------------------------
# schema changes


def test_alter_table_add_column(tmp):
    rs = lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t VALUES (1);
        ALTER TABLE t ADD COLUMN b VARCHAR DEFAULT 'dflt';
        INSERT INTO t VALUES (2, 'two');
        SELECT a, b FROM t ORDER BY a;
    """)
    assert rs == [[{"a": 1, "b": "dflt"}, {"a": 2, "b": "two"}]], rs
    rs = lake(tmp, "SELECT a, b FROM t ORDER BY a;")
    assert rs == [[{"a": 1, "b": "dflt"}, {"a": 2, "b": "two"}]], rs


def test_alter_table_drop_column(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER, b VARCHAR, c INTEGER);
        INSERT INTO t VALUES (1, 'x', 10);
        ALTER TABLE t DROP COLUMN b;
    """)
    rs = lake(tmp, "SELECT * FROM t; SELECT b FROM t AT (VERSION => 2);")
    assert rs == [[{"a": 1, "c": 10}], [{"b": "x"}]], rs


def test_alter_table_rename_column(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t SELECT * FROM range(15);
        ALTER TABLE t RENAME COLUMN a TO renamed;
    """)
    rs = lake(tmp, "SELECT sum(renamed)::BIGINT AS s FROM t;")
    assert rs == [[{"s": 105}]], rs
    assert "a" in lake_fails(tmp, "SELECT a FROM t;")


def test_alter_column_type_promotion(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t VALUES (1);
        ALTER TABLE t ALTER COLUMN a SET DATA TYPE BIGINT;
        INSERT INTO t VALUES (9000000000);
    """)
    rs = lake(tmp, """
        SELECT a FROM t ORDER BY a;
        SELECT data_type FROM duckdb_columns() WHERE database_name = 'lake' AND table_name = 't';
    """)
    assert rs == [[{"a": 1}, {"a": 9000000000}], [{"data_type": "BIGINT"}]], rs


def test_rename_table(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t VALUES (1), (2);
        ALTER TABLE t RENAME TO t2;
    """)
    rs = lake(tmp, "SELECT count(*) AS n FROM t2; SELECT count(*) AS n FROM t AT (VERSION => 2);")
    assert rs == [[{"n": 2}], [{"n": 2}]], rs
    assert "t" in lake_fails(tmp, "SELECT * FROM t;")


def test_drop_table(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t SELECT * FROM range(20);
        DROP TABLE t;
    """)
    rs = lake(tmp, """
        SELECT count(*) AS n FROM duckdb_tables() WHERE database_name = 'lake';
        SELECT count(*) AS n FROM t AT (VERSION => 2);
    """)
    assert rs == [[{"n": 0}], [{"n": 20}]], rs
    lake_fails(tmp, "SELECT * FROM t;")


def test_scalar_macro(tmp):
    lake(tmp, "CREATE MACRO lake.main.m(x) AS x + 1;")
    rs = lake(tmp, "SELECT lake.main.m(41) AS v;")
    assert rs == [[{"v": 42}]], rs


def test_table_macro(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER);
        INSERT INTO t VALUES (1), (2), (3);
        CREATE MACRO lake.main.big(lim) AS TABLE SELECT a FROM lake.main.t WHERE a >= lim;
    """)
    rs = lake(tmp, "SELECT a FROM lake.main.big(2) ORDER BY a;")
    assert rs == [[{"a": 2}, {"a": 3}]], rs


def test_comments_on_table_and_column(tmp):
    lake(tmp, """
        CREATE TABLE t (a INTEGER, b VARCHAR);
        COMMENT ON TABLE t IS 'the table';
        COMMENT ON COLUMN t.b IS 'the column';
    """)
    rs = lake(tmp, """
        SELECT comment FROM duckdb_tables() WHERE database_name = 'lake' AND table_name = 't';
        SELECT column_name, comment FROM duckdb_columns() WHERE database_name = 'lake' AND table_name = 't'
        ORDER BY column_name;
    """)
    assert rs == [[{"comment": "the table"}],
                  [{"column_name": "a", "comment": None}, {"column_name": "b", "comment": "the column"}]], rs


def test_partitioned_inserts(tmp):
    lake(tmp, """
        CREATE TABLE t (k VARCHAR, v INTEGER);
        ALTER TABLE t SET PARTITIONED BY (k);
        INSERT INTO t SELECT CASE WHEN i % 2 = 0 THEN 'even' ELSE 'odd' END, i FROM range(40) r(i);
    """)
    rs = lake(tmp, """
        SELECT k, count(*) AS n, sum(v)::BIGINT AS s FROM t GROUP BY k ORDER BY k;
        SELECT count(*) AS files FROM ducklake_list_files('lake', 't');
        SELECT count(*) AS n FROM t WHERE k = 'odd';
    """)
    assert rs == [[{"k": "even", "n": 20, "s": 380}, {"k": "odd", "n": 20, "s": 400}], [{"files": 2}],
                  [{"n": 20}]], rs
    dirs = sorted(os.listdir(os.path.join(tmp, "data", "main", "t")))
    assert dirs == ["k=even", "k=odd"], dirs
