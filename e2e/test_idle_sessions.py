"""Sessions that commit nothing do not make the next attach slower. Opening SlateDB's writer writes a zero-byte WAL
fence, and a session that then writes nothing has no memtable to flush at DETACH; left alone, every such fence would
stay after the manifest's replay point and every later open would read them all (one GET each on S3). A closing
writer that leaves more than a few moves the replay point past them (src/store/turn.rs, `close`)."""

import os

import harness


def attach_sql(tmp):
    return "ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/')" % (
        os.path.join(tmp, "catalog"), os.path.join(tmp, "data"))


def reading_session(tmp):
    """Attaches, reads the table, detaches; returns the object-store GETs this attach made."""
    con = harness.connect()
    con.execute(attach_sql(tmp))
    assert con.execute("SELECT count(*) FROM lake.t").fetchall() == [(20,)]
    gets = int(dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())["object_store_gets"])
    con.close()
    return gets


def test_sessions_that_commit_nothing_leave_the_next_attach_as_cheap(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute(attach_sql(tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    for i in range(20):
        con.execute("INSERT INTO lake.t VALUES (%d)" % i)
    con.close()
    early = [reading_session(tmp) for _ in range(12)]
    late = [reading_session(tmp) for _ in range(48)][-12:]
    # Without the close's flush each session adds one GET to every later attach: 48 more by the end.
    assert max(late) <= max(early) + 10, (early, late)
    print("reads of an attach after 12 sessions that committed nothing: %s GETs; after 60: %s"
          % (max(early), max(late)))
