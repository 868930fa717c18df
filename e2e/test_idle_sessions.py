"""Sessions that commit nothing do not make the next attach slower. Opening SlateDB's writer writes a zero-byte WAL
fence, and a session that then writes nothing has no memtable to flush at DETACH; left alone, every such fence would
stay after the manifest's replay point and every later open would read them all (one GET each on S3). A closing
writer that leaves more than a few moves the replay point past them (src/store/turn.rs, `close`)."""

import os
import signal
import subprocess
import sys
import time

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


def test_sessions_that_only_read_collect_at_one_close_in_four(tmp):
    """A session that only reads changes nothing in the store but the manifest its writer's open replaces. Its closing
    collection was a third of its detach, to delete that one manifest; such a close now collects at one writer epoch
    in four (src/store/turn.rs, `OpenedWriter::collects_at_close`). The manifests such sessions leave wait for the
    next collecting close, so they come and go, a handful at most, however many sessions read the lake."""
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute(attach_sql(tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("INSERT INTO lake.t VALUES (1)")
    con.execute("DETACH lake")
    manifests = os.path.join(tmp, "catalog", "catalog", "manifest")
    counts = []
    for _ in range(40):
        short_session(con, attach_sql(tmp))
        counts.append(len([n for n in os.listdir(manifests) if n.endswith(".manifest")]))
    con.execute(attach_sql(tmp))
    assert con.execute("SELECT count(*) FROM lake.t").fetchall() == [(1,)]
    con.close()
    print("manifests after each of 40 sessions that only read: %s" % counts)
    grew = sum(1 for a, b in zip(counts, counts[1:]) if b > a)
    fell = sum(1 for a, b in zip(counts, counts[1:]) if b < a)
    assert grew >= 20, counts
    assert fell >= 8, counts
    assert max(counts) <= 10, counts


def test_every_detach_of_writing_sessions_finishes_its_final_merge(tmp):
    """A detach merges the store's tree into one sorted run once it holds three L0s or runs. The background compactor
    may have scheduled some of those L0s a moment before; the merge used to wait out its 3 s deadline on the job SlateDB
    then failed, on every third detach of a small lake (src/store/upkeep.rs, `compact_fully`)."""
    harness.require_extension("moraine")
    con = harness.connect()
    for session in range(9):
        con.execute(attach_sql(tmp))
        if session == 0:
            con.execute("CREATE TABLE lake.t (x INTEGER)")
        for i in range(5):
            con.execute("INSERT INTO lake.t VALUES (%d)" % i)
        con.execute("DETACH lake")
    con.execute(attach_sql(tmp))
    stats = dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())
    assert con.execute("SELECT count(*) FROM lake.t").fetchall() == [(45,)]
    con.close()
    print("final merges of nine detaches: %s finished, %s unfinished"
          % (stats["close_merges"], stats["close_merges_unfinished"]))
    assert int(stats["close_merges_unfinished"]) == 0, stats
    assert int(stats["close_merges"]) >= 2, stats


def test_commits_drive_the_writer_themselves_and_idle_writes_still_finish(tmp):
    """A commit runs SlateDB's batch writer and WAL writer on its own thread (src/store/writes.rs): two writes it
    drives per commit. The writes no commit drives (the memtable flush every 128 commits, the detach's flush, merge and
    close) run on the driver thread once the session is idle, so a detach after a burst of commits finishes, and a new
    session finds every row."""
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute(attach_sql(tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    stats = lambda: {k: int(v) for k, v in con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall()}
    before = stats()
    for i in range(300):
        con.execute("INSERT INTO lake.t VALUES (%d)" % i)
    after = stats()
    driven = after["writes_on_caller"] - before["writes_on_caller"]
    assert driven >= 2 * 300, (before, after)
    con.execute("DETACH lake")
    con.execute(attach_sql(tmp))
    assert con.execute("SELECT count(*), sum(x) FROM lake.t").fetchall() == [(300, 299 * 300 // 2)]
    print("writes driven by 300 commits: %d on the committing thread; driver took the runtime %d times"
          % (driven, after["writes_by_driver"] - before["writes_by_driver"]))
    con.close()


def fence_names(tmp):
    """The zero-byte WAL fences of the lake's store."""
    wal = os.path.join(tmp, "catalog", "catalog", "wal")
    return {n for n in os.listdir(wal) if n.endswith(".sst") and os.path.getsize(os.path.join(wal, n)) == 0}


def store_files(tmp):
    """How many compacted SSTs and zero-byte WAL fences the lake's store holds."""
    compacted = [n for n in os.listdir(os.path.join(tmp, "catalog", "catalog", "compacted")) if n.endswith(".sst")]
    return len(compacted), len(fence_names(tmp))


def short_session(con, attach, rows=()):
    """Attaches, commits each of `rows` into lake.t one by one (or, with none, reads the table), and detaches."""
    con.execute(attach)
    for x in rows:
        con.execute("INSERT INTO lake.t VALUES (%d)" % x)
    if not rows:
        con.execute("SELECT count(*) FROM lake.t").fetchall()
    con.execute("DETACH lake")


def test_short_sessions_give_back_merged_ssts_and_fences(tmp):
    """A lake used only by sessions that end before the collection beside their writer first runs (2 s) is collected
    by each closing writer alone. That collection took the session's WAL objects and manifests but never the SSTs its
    merges replaced, nor the zero-byte fence each open writes: 900 probe sessions left 183 SSTs (18 MB) and 918
    fences, which every close then listed (src/store/settings.rs, `close_collection_options`). Here both go once
    older than their minimum ages and free of the merges' checkpoints, all set near zero."""
    harness.require_extension("moraine")
    attach = attach_sql(tmp)[:-1] + (", META_GC_MIN_AGE_SECONDS '0', META_WAL_FENCE_MIN_AGE_SECONDS '0', "
                                     "META_COMPACTION_CHECKPOINT_SECONDS '1')")
    con = harness.connect()

    def session(writes):
        short_session(con, attach, range(3) if writes else ())
        return store_files(tmp)

    con.execute(attach)
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("DETACH lake")
    early = [session(writes=k % 2 == 0) for k in range(24)]
    # The merges' checkpoints keep what they replaced readable for a second.
    time.sleep(1.5)
    late = [session(writes=True) for _ in range(2)] + [session(writes=False) for _ in range(2)]
    con.execute(attach)
    assert con.execute("SELECT count(*) FROM lake.t").fetchall() == [(42,)]
    con.close()
    print("compacted SSTs and fences after each session: %s, then after a pause %s" % (early, late))
    compacted, fences = zip(*late)
    assert max(compacted[1:]) <= 4, late
    assert max(fences) <= 2, (early, late)


def test_fences_of_released_leases_go_and_a_takeovers_fence_stays(tmp):
    """Each writer's open writes a zero-byte WAL fence, which only matters to a writer that was still running when the
    lease was taken from it. A writer that found the lease free (its holder released it after stopping) wrote one that
    turns nobody away, and deletes it, with those of earlier such sessions, once the replay point has passed them; a
    writer that took over a stale lease moves the replay point past its fence at once, and no one deletes that fence
    before the collection's minimum age, a day here (src/store/fences.rs). Before, every session left its fence for a
    day, and every open and close listed them all."""
    harness.require_extension("moraine")
    con = harness.connect()

    def session(writes):
        short_session(con, attach_sql(tmp), (1,) if writes else ())
        return len(fence_names(tmp))

    con.execute(attach_sql(tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("DETACH lake")
    counts = [session(writes=k % 3 == 0) for k in range(36)]
    # At most the sessions since the replay point last moved keep theirs: a close moves it past more than eight.
    assert max(counts) <= 10, counts

    # A writer killed while it holds the lease: the next one takes the lease over, and its fence stays.
    script = ("import sys; sys.path.insert(0, %r); import harness, time; con = harness.connect(); con.execute(%r); "
              "con.execute('INSERT INTO lake.t VALUES (3)'); print('held', flush=True); time.sleep(60)"
              % (os.path.dirname(os.path.abspath(harness.__file__)), attach_sql(tmp)))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before_takeover = fence_names(tmp)
        session(writes=True)
        guarded = fence_names(tmp) - before_takeover
        assert guarded, "the takeover's open wrote a fence"
        later = [session(writes=k % 3 == 0) for k in range(24)]
        assert guarded <= fence_names(tmp), (guarded, sorted(fence_names(tmp)))
        assert max(later) <= 10 + len(before_takeover | guarded), later
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con.execute(attach_sql(tmp))
    assert con.execute("SELECT count(*) FROM lake.t").fetchall() == [(12 + 1 + 1 + 8,)]
    con.close()
    print("fences after each of 36 short sessions: %s; after a takeover and 24 more: %s (the takeover's %s kept)"
          % (counts, later, sorted(guarded)))


def test_a_closing_merge_keeps_nothing_readable_for_long(tmp):
    """A detach merges the store's tree every other writing session. A merge's checkpoint keeps what it replaced
    readable for the process's read transactions, and at a close there are none; kept for the usual two minutes,
    each close's checkpoint held a manifest and the merge's inputs, and every later collection read them all: over
    1,000 short sessions in three minutes a detach slowed from 4.6 to 12.5 ms (src/store/upkeep.rs,
    `Compaction::urgent_at_close`). Here the manifests stay few however many sessions went before."""
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute(attach_sql(tmp))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("DETACH lake")
    manifests = os.path.join(tmp, "catalog", "catalog", "manifest")
    counts = []
    for k in range(150):
        short_session(con, attach_sql(tmp), (k,) if k % 3 == 0 else ())
        counts.append(len([n for n in os.listdir(manifests) if n.endswith(".manifest")]))
    con.close()
    print("manifests after every 25th of 150 short sessions: %s" % counts[24::25])
    assert max(counts[30:]) <= 10, counts
