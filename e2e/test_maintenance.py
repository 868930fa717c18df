"""RFC 0007 live obligations through the official Python module and real DuckLake: expiry, cleanup, orphan
removal and compaction on a moraine-backed lake."""

import glob
import hashlib
import os
import subprocess
import sys

import harness


def open_lake(tmp, data=None):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    data = data or os.path.join(tmp, "data")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/', DATA_INLINING_ROW_LIMIT 0)"
                % (tmp, data))
    con.execute("USE lake")
    return con


def snapshots(con):
    return [r[0] for r in con.execute("SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY 1").fetchall()]


def parquet_files(root):
    return sorted(glob.glob(os.path.join(root, "**", "*.parquet"), recursive=True))


def build_history(con):
    con.execute("CREATE TABLE items (id INTEGER, qty INTEGER)")  # 1
    for lo in (0, 20, 40):  # 2, 3, 4
        con.execute("INSERT INTO items SELECT i, i FROM range(%d, %d) t(i)" % (lo, lo + 20))
    con.execute("DELETE FROM items WHERE id < 10")  # 5
    con.execute("UPDATE items SET qty = -1 WHERE id = 15")  # 6


def test_expire_older_than_then_cleanup_reclaims_files(tmp):
    con = open_lake(tmp)
    build_history(con)
    current = sorted(con.execute("SELECT * FROM items").fetchall())
    files_before = parquet_files(os.path.join(tmp, "data"))
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    assert snapshots(con) == [6]
    try:
        con.execute("SELECT count(*) FROM items AT (VERSION => 3)").fetchall()
        raise AssertionError("time travel to an expired snapshot must fail")
    except Exception as e:  # noqa: BLE001 - DuckLake's own error type
        assert "No snapshot found" in str(e), e
    assert sorted(con.execute("SELECT * FROM items").fetchall()) == current
    scheduled = con.execute("SELECT path FROM __ducklake_metadata_lake.main.ducklake_files_scheduled_for_deletion") \
        .fetchall()
    assert scheduled, "the superseded files must be scheduled"
    # Scheduled files survive until cleanup.
    assert parquet_files(os.path.join(tmp, "data")) == files_before
    deleted = con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)").fetchall()
    assert len(deleted) == len(scheduled)
    assert con.execute("SELECT count(*) FROM __ducklake_metadata_lake.main.ducklake_files_scheduled_for_deletion") \
        .fetchone()[0] == 0
    assert len(parquet_files(os.path.join(tmp, "data"))) == len(files_before) - len(deleted)
    assert sorted(con.execute("SELECT * FROM items").fetchall()) == current


def test_expire_versions_names_interior_snapshots(tmp):
    con = open_lake(tmp)
    build_history(con)
    at4 = sorted(con.execute("SELECT * FROM items AT (VERSION => 4)").fetchall())
    con.execute("CALL ducklake_expire_snapshots('lake', versions => [2, 3])")
    assert snapshots(con) == [0, 1, 4, 5, 6]
    for gone in (2, 3):
        try:
            con.execute("SELECT count(*) FROM items AT (VERSION => %d)" % gone).fetchall()
            raise AssertionError("snapshot %d must be gone" % gone)
        except Exception as e:  # noqa: BLE001
            assert "No snapshot found" in str(e), e
    assert sorted(con.execute("SELECT * FROM items AT (VERSION => 4)").fetchall()) == at4


def test_delete_orphaned_files_removes_a_stray_and_keeps_catalogued_files(tmp):
    con = open_lake(tmp)
    build_history(con)
    data = os.path.join(tmp, "data")
    catalogued = parquet_files(data)
    stray = os.path.join(data, "main", "items", "stray.parquet")
    con.execute("COPY (SELECT 42 AS x) TO '%s'" % stray)
    removed = [r[0] for r in con.execute("CALL ducklake_delete_orphaned_files('lake', cleanup_all => true)").fetchall()]
    assert [os.path.basename(p) for p in removed] == ["stray.parquet"], removed
    assert parquet_files(data) == catalogued
    assert con.execute("SELECT count(*) FROM items").fetchone()[0] == 50


def test_store_inside_data_path_survives_orphan_cleanup(tmp):
    data = os.path.join(tmp, "data")
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/', DATA_INLINING_ROW_LIMIT 0)"
                % (data, data))
    con.execute("USE lake")
    build_history(con)
    con.execute("USE memory")
    con.execute("DETACH lake")
    store = os.path.join(data, "catalog")

    def digest():
        out = {}
        for root, _, files in os.walk(store):
            for f in files:
                p = os.path.join(root, f)
                with open(p, "rb") as fh:
                    out[p] = hashlib.sha256(fh.read()).hexdigest()
        return out

    before = digest()
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/', READ_ONLY)" % (data, data))
    assert con.execute("SELECT count(*) FROM lake.items").fetchone()[0] == 50
    con.execute("DETACH lake")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/')" % (data, data))
    removed = [r[0] for r in con.execute("CALL ducklake_delete_orphaned_files('lake', cleanup_all => true)").fetchall()]
    assert not any(p.startswith(store) for p in removed), removed
    assert con.execute("SELECT count(*) FROM lake.items").fetchone()[0] == 50
    after = digest()
    # Every object the store had survives byte for byte (the writer may add new ones). Names with `#` are no
    # objects: spares, and the journals, which every commit and manifest write appends to.
    for path, h in before.items():
        if path in after and "#" not in os.path.basename(path):
            assert after[path] == h, path


def test_merge_adjacent_then_expire_then_cleanup_keeps_rows_and_row_ids(tmp):
    con = open_lake(tmp)
    con.execute("CREATE TABLE m (id INTEGER)")
    for lo in range(0, 60, 20):
        con.execute("INSERT INTO m SELECT i FROM range(%d, %d) t(i)" % (lo, lo + 20))
    rows_before = sorted(con.execute("SELECT rowid, id FROM m").fetchall())
    files_before = parquet_files(os.path.join(tmp, "data"))
    merged = con.execute("CALL ducklake_merge_adjacent_files('lake')").fetchall()
    assert merged, "merge_adjacent_files must merge the three files"
    assert sorted(con.execute("SELECT rowid, id FROM m").fetchall()) == rows_before
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
    assert sorted(con.execute("SELECT rowid, id FROM m").fetchall()) == rows_before
    files_after = parquet_files(os.path.join(tmp, "data"))
    assert len(files_after) == 1 and not set(files_after) & set(files_before), (files_before, files_after)


def test_rewrite_data_files_keeps_rows_row_ids_and_time_travel(tmp):
    con = open_lake(tmp)
    con.execute("CREATE TABLE r (id INTEGER)")
    con.execute("INSERT INTO r SELECT i FROM range(0, 40) t(i)")
    con.execute("DELETE FROM r WHERE id % 4 = 0")
    before_version = snapshots(con)[-1]
    rows_before = sorted(con.execute("SELECT rowid, id FROM r").fetchall())
    rewritten = con.execute("CALL ducklake_rewrite_data_files('lake', delete_threshold => 0)").fetchall()
    assert rewritten, "rewrite_data_files must rewrite the file with deletes"
    assert sorted(con.execute("SELECT rowid, id FROM r").fetchall()) == rows_before
    assert sorted(con.execute("SELECT rowid, id FROM r AT (VERSION => %d)" % before_version).fetchall()) \
        == rows_before
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
    assert sorted(con.execute("SELECT rowid, id FROM r").fetchall()) == rows_before


def test_detach_after_expiring_a_long_history_finishes(tmp):
    """Lakes with 1,000 commits each, attached again in one process and expired, detach promptly: closing the
    writer flushes no memtable, so it never waits on a compactor that has already stopped. (With a memtable
    flush at close, this process hung in its first detach after an expiry.)"""
    harness.require_extension("moraine")
    script = r"""
import os, sys
sys.path.insert(0, %r)
import harness
lakes = []
for n in range(6):
    path = os.path.join(%r, "lake%%d" %% n)
    attach = "ATTACH 'ducklake:moraine:%%s/catalog' AS lake%%d (DATA_PATH '%%s/data/')" %% (path, n, path)
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute(attach)
    con.execute("CREATE TABLE lake%%d.h (id INTEGER)" %% n)
    for i in range(1000):
        con.execute("INSERT INTO lake%%d.h VALUES (%%d)" %% (n, i))
    con.close()
    lakes.append((n, attach))
for n, attach in lakes:
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute(attach)
    assert con.execute("SELECT count(*) FROM lake%%d.h" %% n).fetchone()[0] == 1000
    con.execute("CALL ducklake_expire_snapshots('lake%%d', older_than => now())" %% n).fetchall()
    con.close()
    print("closed", n, flush=True)
""" % (os.path.dirname(os.path.abspath(__file__)), tmp)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "closed 5" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
