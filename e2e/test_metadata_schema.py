"""DuckLake's METADATA_SCHEMA on moraine: several lakes in one catalog location, each in a schema of its own with
its own head, snapshots and maintenance; unusual schema names; a second process finds each lake again."""

import os

import harness

SCHEMAS = {"l1": "meta_s1", "l2": "Meta-S2 \"odd\" name"}


def attach_sql(tmp, lake, schema):
    return "ATTACH 'ducklake:moraine:%s/catalog' AS %s (METADATA_SCHEMA '%s', DATA_PATH '%s/data_%s/')" % (
        tmp, lake, schema.replace("'", "''"), tmp, lake)


def connect(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    for lake, schema in SCHEMAS.items():
        con.execute(attach_sql(tmp, lake, schema))
    return con


def snapshot_ids(con, lake):
    return [r[0] for r in con.execute(
        "SELECT snapshot_id FROM ducklake_snapshots('%s') ORDER BY 1" % lake).fetchall()]


def test_two_lakes_in_one_location_are_independent(tmp):
    con = connect(tmp)
    con.execute("CREATE TABLE l1.t (x INTEGER)")
    con.execute("INSERT INTO l1.t VALUES (1), (2)")
    con.execute("INSERT INTO l1.t VALUES (3)")
    con.execute("CREATE TABLE l2.u (y VARCHAR)")
    con.execute("INSERT INTO l2.u VALUES ('a')")
    assert con.execute("SELECT sum(x) FROM l1.t").fetchone()[0] == 6
    assert con.execute("SELECT y FROM l2.u").fetchall() == [("a",)]
    assert snapshot_ids(con, "l1") == [0, 1, 2, 3]
    assert snapshot_ids(con, "l2") == [0, 1, 2]
    # Each lake's tables exist only in its own schema.
    for lake, table in (("l1", "u"), ("l2", "t")):
        try:
            con.execute("SELECT * FROM %s.%s" % (lake, table))
            raise AssertionError("%s.%s should not exist" % (lake, table))
        except Exception as e:
            assert "does not exist" in str(e), e
    # Maintenance on one lake leaves the other alone.
    con.execute("CALL ducklake_expire_snapshots('l1', older_than => now())")
    assert snapshot_ids(con, "l1") == [3]
    assert snapshot_ids(con, "l2") == [0, 1, 2]
    stats = dict(con.execute("SELECT name, value FROM moraine_stats('l1')").fetchall())
    assert stats["commits_landed"] >= 1, stats
    unbounded = "SELECT count(*) FROM moraine_audit('%s') WHERE section = 'finding' AND item = 'UNBOUNDED'"
    # l1 expired down to its head; l2 keeps history with no horizon.
    assert con.execute(unbounded % "l1").fetchone()[0] == 0
    assert con.execute(unbounded % "l2").fetchone()[0] == 1
    con.close()
    # Each schema is a store of its own under the location.
    schemas = sorted(os.listdir(os.path.join(tmp, "catalog", "schemas")))
    assert len(schemas) == 2, schemas
    # A second process finds both lakes again.
    con = connect(tmp)
    assert con.execute("SELECT sum(x) FROM l1.t").fetchone()[0] == 6
    assert con.execute("SELECT count(*) FROM l2.u").fetchone()[0] == 1
    con.execute("INSERT INTO l2.u VALUES ('b')")
    assert snapshot_ids(con, "l2") == [0, 1, 2, 3]
    con.close()


def test_a_lake_in_main_and_one_in_a_schema_share_a_location(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS plain (DATA_PATH '%s/data_plain/')" % (tmp, tmp))
    con.execute(attach_sql(tmp, "l1", "meta_s1"))
    con.execute("CREATE TABLE plain.p (x INTEGER)")
    con.execute("CREATE TABLE l1.t (x INTEGER)")
    con.execute("INSERT INTO plain.p VALUES (1)")
    con.execute("INSERT INTO l1.t VALUES (2)")
    assert con.execute("SELECT x FROM plain.p").fetchall() == [(1,)]
    assert con.execute("SELECT x FROM l1.t").fetchall() == [(2,)]
    con.close()


def test_metadata_catalog_with_unusual_quoting(tmp):
    """METADATA_CATALOG names the metadata catalog DuckLake attaches; quotes and spaces in it work, and the
    moraine functions take that name."""
    harness.require_extension("moraine")
    name = 'meta "odd" cat\'s'
    con = harness.connect()
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (METADATA_CATALOG '%s', DATA_PATH '%s/data/')"
                % (tmp, name.replace("'", "''"), tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("INSERT INTO lake.t VALUES (1), (2)")
    assert con.execute("SELECT sum(x) FROM lake.t").fetchone()[0] == 3
    quoted = '"%s"' % name.replace('"', '""')
    assert con.execute("SELECT count(*) FROM %s.main.ducklake_snapshot" % quoted).fetchone()[0] == 3
    stats = dict(con.execute("SELECT name, value FROM moraine_stats(?)", [name]).fetchall())
    assert stats["commits_landed"] >= 2, stats
    con.close()
    con = harness.connect()
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS again (METADATA_CATALOG '%s')"
                % (tmp, name.replace("'", "''")))
    assert con.execute("SELECT sum(x) FROM again.t").fetchone()[0] == 3
    con.close()
