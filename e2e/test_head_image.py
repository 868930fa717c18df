"""The head image (design 0012): a writer that detaches leaves its tables packed, stamped with the head, and
the next cold attach reads them instead of a record per row. An image of an older head is never used: a
writer that ends without DETACH leaves the image stale, and the next attach reads the records, and sees its
commit."""

import os
import subprocess
import sys

import harness


def attach(con, tmp):
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp))


def stats(con):
    return dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())


def keys_read(con):
    return stats(con)["keys_read"]


def contents(con):
    rows = con.execute("SELECT x FROM lake.t ORDER BY x").fetchall()
    snapshots = con.execute("SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY 1").fetchall()
    return rows, snapshots


COMMITS = 300


def inserted(tmp):
    """A connection to a new lake whose table t got COMMITS single-row INSERT commits."""
    harness.require_extension("moraine")
    con = harness.connect()
    attach(con, tmp)
    con.execute("CREATE TABLE lake.t (x BIGINT)")
    for i in range(COMMITS):
        con.execute("INSERT INTO lake.t VALUES (%d)" % i)
    return con


def test_a_detached_lake_attaches_from_its_image_and_a_stale_image_is_ignored(tmp):
    con = inserted(tmp)
    before = contents(con)
    con.close()

    con = harness.connect()
    attach(con, tmp)
    assert contents(con) == before
    from_image = keys_read(con)
    con.close()
    # A record per snapshot and per inlined row would be more than 2 * COMMITS keys.
    assert from_image < COMMITS // 2, from_image

    # A process that commits and exits without DETACH leaves the image one head behind.
    script = ("import sys; sys.path.insert(0, %r); import harness, os\n"
              "con = harness.connect()\n"
              "con.execute(\"ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')\")\n"
              "con.execute('INSERT INTO lake.t VALUES (%d)')\n"
              "os._exit(0)\n" % (os.path.dirname(os.path.abspath(__file__)), tmp, tmp, COMMITS))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    con = harness.connect()
    attach(con, tmp)
    rows, snapshots = contents(con)
    from_records = keys_read(con)
    con.close()
    assert rows == before[0] + [(COMMITS,)]
    assert len(snapshots) == len(before[1]) + 1
    assert from_records > 2 * COMMITS, from_records
    print("head image: a cold attach read %d keys from the image, %d from the records of a stale one"
          % (from_image, from_records))


def test_a_session_that_only_inserted_leaves_its_inlined_rows_in_the_image(tmp):
    con = inserted(tmp)
    # The session never reads lake.t's rows: an INSERT does not.
    con.close()

    con = harness.connect()
    attach(con, tmp)
    assert con.execute("SELECT count(*), sum(x) FROM lake.t").fetchone() == (COMMITS, COMMITS * (COMMITS - 1) // 2)
    cold = keys_read(con)
    con.close()
    # The inlined table's records would be a key per row.
    assert cold < COMMITS // 2, cold


def test_a_cold_attach_and_its_first_queries_read_every_table_from_the_image(tmp):
    """The image holds every table DuckLake reads to load the catalog and to answer a query of a table, also
    those the writing session never read (`ducklake_metadata`, the files of an inlined table), and a read-only
    session's close leaves it whole for the next."""
    con = inserted(tmp)
    con.close()
    for session in range(2):
        con = harness.connect()
        attach(con, tmp)
        assert con.execute("SELECT count(*) FROM lake.t").fetchone() == (COMMITS,)
        con.execute("SELECT * FROM ducklake_snapshots('lake')").fetchall()
        con.execute("SELECT * FROM ducklake_table_info('lake')").fetchall()
        con.execute("SELECT * FROM lake.t AT (VERSION => 2)").fetchall()
        from_records = int(stats(con)["tables_read_from_records"])
        con.close()
        assert from_records == 0, "session %d read %d tables from their records" % (session, from_records)


LONG_HISTORY = 1000


def compacted_files(tmp):
    """{path: bytes} of every SST the store's compactions and flushes wrote, for the ones not yet collected."""
    found = {}
    for folder, _, names in os.walk(os.path.join(tmp, "catalog")):
        if os.path.basename(folder) == "compacted":
            for name in names:
                if name.endswith(".sst"):
                    path = os.path.join(folder, name)
                    found[path] = os.path.getsize(path)
    return found


def test_a_detach_writes_what_its_session_added_and_the_image_stays_whole(tmp):
    """Design 0021: a session that inserts a row and detaches keeps the image's parts and writes the rows it
    added, and its merge leaves the oldest run out, so what a detach writes does not grow with the catalog.
    Every later attach still reads the whole table, from the image, and a delete rewrites the table whole."""
    harness.require_extension("moraine")
    con = harness.connect()
    attach(con, tmp)
    con.execute("CREATE TABLE lake.t (x BIGINT)")
    expected = list(range(LONG_HISTORY))
    for i in expected:
        con.execute("INSERT INTO lake.t VALUES (%d)" % i)
    con.close()

    def session(insert=None, delete=None):
        con = harness.connect()
        attach(con, tmp)
        if insert is not None:
            # Inserts without reading first: the table is carried as its parts plus the appended rows.
            con.execute("INSERT INTO lake.t VALUES (%d)" % insert)
            expected.append(insert)
        if delete is not None:
            con.execute("DELETE FROM lake.t WHERE x = %d" % delete)
            expected.remove(delete)
        con.close()
        con = harness.connect()
        attach(con, tmp)
        rows = [r[0] for r in con.execute("SELECT x FROM lake.t ORDER BY x").fetchall()]
        read = keys_read(con)
        con.close()
        assert rows == sorted(expected)
        # The reading session took everything from the image: far fewer keys than records.
        assert read < COMMITS // 2, read

    # The first detaches after the long session may write the image whole and merge it into the oldest run.
    for k in range(3):
        session(insert=LONG_HISTORY + k)
    seen = compacted_files(tmp)
    catalog = max(seen.values())
    written = []
    for k in range(9):
        session(insert=LONG_HISTORY + 3 + k)
        now = compacted_files(tmp)
        written.append(sum(size for path, size in now.items() if path not in seen))
        seen = now
    print("catalog run %d bytes; bytes nine one-row sessions wrote into SSTs: %s" % (catalog, written))
    # Writing the image whole, or merging into the oldest run, wrote about the catalog at every detach.
    assert max(written) * 4 < catalog and sum(written) < catalog, (catalog, written)
    session(delete=5)
    session(insert=10_000)
