"""Deleted catalog keys give their bytes back (issue 6): 500 commits of churn on a local-filesystem lake, expiry
of every snapshot but the last, cleanup, then moraine_reclaim. The store directory must end at most twice the live
logical bytes plus the audit's fixed overhead, and must have shrunk by more than half. The audit flags UNBOUNDED
growth before expiry is configured and nothing once the sequence has run."""

import os
import time

import harness
from harness import JOURNAL, JOURNAL_BYTES, JOURNALED

FIXED_OVERHEAD = 1 << 20


# A local store's spares (design 0017): files no listing shows, empty; one may hold a write in flight.
MOST_SPARE_BYTES = 4096


def journal_bytes(catalog):
    """Bytes of the store's journals, each a file of a fixed size once made."""
    sizes = [os.path.getsize(os.path.join(catalog, "catalog", folder, JOURNAL)) for folder in JOURNALED]
    assert sizes == [JOURNAL_BYTES] * len(JOURNALED), sizes
    return sum(sizes)


def dir_bytes(path, spares=True):
    """Bytes of the files under `path`; without `spares`, of its objects only. The store is live while this
    walks it: a spare taken by a write, or an object collected, can go between the listing and the size."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            if spares or "#" not in f:
                try:
                    total += os.path.getsize(os.path.join(root, f))
                except FileNotFoundError:
                    pass
    return total


def audit(con, section, item):
    rows = con.execute(
        "SELECT value, detail FROM moraine_audit('lake') WHERE section = ? AND item = ?", [section, item]).fetchall()
    return rows


def churn(con, commits, create=True, first=0):
    """Inserts, updates and deletes over three tables, one commit each (after creating them)."""
    if create:
        for t in range(3):
            con.execute("CREATE TABLE t%d (id INTEGER, payload VARCHAR)" % t)
    for i in range(first, first + commits):
        t = i % 3
        if i % 3 == 0:
            con.execute("INSERT INTO t%d VALUES (%d, repeat('x', 200))" % (t, i))
        elif i % 3 == 1:
            con.execute("UPDATE t%d SET payload = repeat('y', 200) WHERE id %% 7 = %d" % (t, i % 7))
        else:
            con.execute("DELETE FROM t%d WHERE id %% 11 = %d" % (t, i % 11))


def test_churn_expire_cleanup_reclaim_gives_bytes_back(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    catalog = os.path.join(tmp, "catalog")
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/', "
                "META_GC_MIN_AGE_SECONDS '1', META_COMPACTION_CHECKPOINT_SECONDS '1')" % (catalog, tmp))
    con.execute("USE lake")
    con.execute("CREATE TABLE doomed (id INTEGER)")
    churn(con, 245)
    con.execute("DROP TABLE doomed")
    churn(con, 250, create=False, first=245)
    assert audit(con, "finding", "UNBOUNDED"), "the audit must flag unbounded growth before expiry is set"

    live_rows = sorted(con.execute("SELECT * FROM t0 UNION ALL SELECT * FROM t1 UNION ALL SELECT * FROM t2").fetchall())
    before = dir_bytes(catalog)
    con.execute("CALL ducklake_set_option('lake', 'expire_older_than', '1 second')")
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
    report = con.execute("SELECT * FROM moraine_reclaim('lake')").fetchone()
    after = dir_bytes(catalog)
    live = int(audit(con, "live", "total")[0][0])
    print("store directory: %d bytes before, %d after (reclaim reported %s); live logical bytes %d; "
          "bound 2 x live + %d = %d" % (before, after, report, live, FIXED_OVERHEAD, 2 * live + FIXED_OVERHEAD))
    assert after <= 2 * live + FIXED_OVERHEAD
    # Of what history can grow, more than half went back; the journals are files of a fixed size.
    journals = journal_bytes(catalog)
    assert (after - journals) * 2 < before - journals
    assert sorted(con.execute("SELECT * FROM t0 UNION ALL SELECT * FROM t1 UNION ALL SELECT * FROM t2").fetchall()) \
        == live_rows
    findings = audit(con, "finding", "UNBOUNDED") + audit(con, "finding", "RECLAIMABLE") + \
        audit(con, "finding", "BACKLOG")
    assert findings == [], findings


def test_an_idle_writer_gives_bytes_back_without_moraine_reclaim(tmp):
    """Issue 14: a writer that sits idle after churn, expiry and cleanup tidies itself (flush, full compaction,
    collection) within a few collection intervals, to what moraine_reclaim then cannot improve on."""
    harness.require_extension("moraine")
    con = harness.connect()
    catalog = os.path.join(tmp, "catalog")
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/', META_GC_MIN_AGE_SECONDS '1', "
                "META_GC_INTERVAL_SECONDS '1', META_COMPACTOR_POLL_MS '200', "
                "META_COMPACTION_CHECKPOINT_SECONDS '1')" % (catalog, tmp))
    con.execute("USE lake")
    churn(con, 500)
    con.execute("CALL ducklake_set_option('lake', 'expire_older_than', '1 second')")
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
    busy = dir_bytes(catalog)
    started = time.time()
    samples = [dir_bytes(catalog, spares=False)]
    # Settled: the same size for 3 s, below where it started. The longest still stretch on the way is the purge's
    # quiet (0.5 s) and then one idle period (1 s) before the upkeep's tidy, plus the upkeep's tick.
    still = 7
    while time.time() - started < 30 and not (len(samples) > still and samples[-1] < busy and
                                              len(set(samples[-still:])) == 1):
        time.sleep(0.5)
        samples.append(dir_bytes(catalog, spares=False))
    idle = samples[-1]
    spare_bytes = dir_bytes(catalog) - idle - journal_bytes(catalog)
    idle_seconds = time.time() - started
    report = con.execute("SELECT * FROM moraine_reclaim('lake')").fetchone()
    print("idle writer: %d bytes after cleanup, %d in objects after %.1f s idle and %d in spares; "
          "moraine_reclaim then: %s" % (busy, idle, idle_seconds, spare_bytes, report))
    assert idle < busy
    assert idle <= report[1] * 1.1 + 4096, "the idle writer kept %d bytes, reclaim reaches %d" % (idle, report[1])
    assert spare_bytes <= MOST_SPARE_BYTES, spare_bytes


def test_moraine_reclaim_is_quick_and_shows_progress(tmp):
    """Issue 14: moraine_reclaim drives its compactions itself instead of waiting for the compactor's poll: under
    5 s on a 300-commit lake with the default settings, and DuckDB's progress bar sees it advance."""
    harness.require_extension("moraine")
    import threading

    con = harness.connect()
    catalog = os.path.join(tmp, "catalog")
    con.execute("SET threads=1")
    con.execute("SET enable_progress_bar=true")
    con.execute("SET enable_progress_bar_print=false")
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/')" % (catalog, tmp))
    con.execute("USE lake")
    churn(con, 300)
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())")
    con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)")
    seen = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.append(con.query_progress())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.time()
    try:
        report = con.execute("SELECT * FROM moraine_reclaim('lake')").fetchone()
    finally:
        done.set()
        watcher.join()
    elapsed = time.time() - started
    progress = sorted({round(p, 1) for p in seen if p is not None and 0 <= p <= 100})
    print("moraine_reclaim on a 300-commit lake: %.2f s, report %s; progress seen %s" % (elapsed, report, progress))
    assert elapsed < 5, elapsed
    assert any(0 < p < 100 for p in progress), seen


def coverage(con):
    """label -> (declared reclamation path, keys) for every key in the lake's store."""
    rows = con.execute("SELECT item, value, detail FROM moraine_audit('lake') WHERE section = 'coverage'").fetchall()
    return {label: (path, int(detail.split()[0])) for label, path, detail in rows}


def keys(cov, label):
    return cov.get(label, (None, 0))[1]


def test_every_key_of_the_differential_stream_has_a_declared_path_and_each_path_reaps(tmp):
    """Issue 14, the coverage guard driven by a real store: after the differential stream that touches every kind,
    every key in the store belongs to a declared reclamation path (a family added without one shows as UNDECLARED);
    after expiry, cleanup and the inline flush, each path has removed what it should."""
    harness.require_extension("moraine")
    from test_differential import CASCADE_STREAM

    base = os.path.join(tmp, "files")
    os.makedirs(base, exist_ok=True)
    stream = [s.replace("{tmp}", base) for s in CASCADE_STREAM]
    # The maintenance part of the stream starts with the inline flush.
    expiry = next(i for i, s in enumerate(stream) if "ducklake_flush_inlined_data" in s)
    con = harness.connect()
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp))
    for sql in stream[:expiry]:
        con.execute(sql).fetchall()
    before = coverage(con)
    print("before expiry:", before)
    undeclared = {label: v for label, v in before.items() if v[0] == "UNDECLARED"}
    assert not undeclared, undeclared
    assert not [r for r in con.execute("SELECT detail FROM moraine_audit('lake') WHERE item = 'UNDECLARED'").fetchall()]
    cleanup = next(i for i, s in enumerate(stream) if "ducklake_cleanup_old_files" in s)
    for sql in stream[expiry:cleanup]:
        con.execute(sql).fetchall()
    scheduled = coverage(con)
    paths = {path for path, _ in list(before.values()) + list(scheduled.values())}
    # WithParent rows ride inside their parents' records and have no keys of their own.
    assert paths >= {"SnapshotExpiry", "DeadTableCascade", "WithDataFile", "ScheduleCleanup", "OverwrittenInPlace",
                     "InlineFlush", "BoundedByDesign"}, paths
    for sql in stream[cleanup:]:
        con.execute(sql).fetchall()
    after = coverage(con)
    print("after the flush, the merge, expiry, cleanup and orphan removal:", after)
    assert all(path != "UNDECLARED" for path, _ in after.values()), after
    # SnapshotExpiry: only the head snapshot, and no ended version of a kind expiry removes.
    assert keys(after, "snapshot") == 1
    for label, (path, n) in after.items():
        if label.startswith("history/") and path == "SnapshotExpiry":
            assert n == 0, (label, n)
    # DeadTableCascade: the dropped tables are gone; t is the one table left.
    assert keys(before, "current/ducklake_table") + keys(before, "history/ducklake_table") > 1
    assert keys(after, "current/ducklake_table") + keys(after, "history/ducklake_table") == 1, after
    # WithParent: the dropped macros' records, and the implementations and parameters inside them, are gone.
    assert keys(before, "current/ducklake_macro") + keys(before, "history/ducklake_macro") > 0
    assert keys(after, "current/ducklake_macro") + keys(after, "history/ducklake_macro") == 0, after
    # WithDataFile: column statistics only for the data files that are left (t has three columns).
    assert keys(after, "current/ducklake_file_column_stats") == 3 * keys(after, "current/ducklake_data_file"), after
    assert keys(after, "current/ducklake_file_column_stats") < keys(before, "current/ducklake_file_column_stats")
    # ScheduleCleanup: the schedule is drained.
    assert keys(scheduled, "current/ducklake_files_scheduled_for_deletion") > 0
    assert keys(after, "current/ducklake_files_scheduled_for_deletion") == 0, after
    # InlineFlush: flushed and dropped inlined rows leave no chunk and no end mark.
    assert keys(before, "inline/chunk") > 0
    assert keys(after, "inline/chunk") == 0 and keys(after, "inline/ended") == 0, after
    # OverwrittenInPlace: one statistics record per live table.
    assert keys(after, "current/ducklake_table_stats") == 1, after
    # BoundedByDesign: the sys singletons.
    assert sum(n for label, (_, n) in after.items() if label.startswith("sys/")) <= 3, after
