"""Deleted catalog keys give their bytes back (issue 6): 500 commits of churn on a local-filesystem lake, expiry
of every snapshot but the last, cleanup, then moraine_reclaim. The store directory must end at most twice the live
logical bytes plus the audit's fixed overhead, and must have shrunk by more than half. The audit flags UNBOUNDED
growth before expiry is configured and nothing once the sequence has run."""

import os

import harness

FIXED_OVERHEAD = 1 << 20


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def audit(con, section, item):
    rows = con.execute(
        "SELECT value, detail FROM moraine_audit('lake') WHERE section = ? AND item = ?", [section, item]).fetchall()
    return rows


def test_churn_expire_cleanup_reclaim_gives_bytes_back(tmp):
    harness.require_extension("moraine")
    con = harness.connect()
    catalog = os.path.join(tmp, "catalog")
    con.execute("SET threads=1")
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/', "
                "META_GC_MIN_AGE_SECONDS '1', META_COMPACTION_CHECKPOINT_SECONDS '1')" % (catalog, tmp))
    con.execute("USE lake")
    for t in range(3):
        con.execute("CREATE TABLE t%d (id INTEGER, payload VARCHAR)" % t)
    con.execute("CREATE TABLE doomed (id INTEGER)")
    commits = 4
    i = 0
    while commits < 500:
        t = i % 3
        if i % 3 == 0:
            con.execute("INSERT INTO t%d VALUES (%d, repeat('x', 200))" % (t, i))
        elif i % 3 == 1:
            con.execute("UPDATE t%d SET payload = repeat('y', 200) WHERE id %% 7 = %d" % (t, i % 7))
        else:
            con.execute("DELETE FROM t%d WHERE id %% 11 = %d" % (t, i % 11))
        commits += 1
        i += 1
        if commits == 250:
            con.execute("DROP TABLE doomed")
            commits += 1
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
    assert after * 2 < before
    assert sorted(con.execute("SELECT * FROM t0 UNION ALL SELECT * FROM t1 UNION ALL SELECT * FROM t2").fetchall()) \
        == live_rows
    findings = audit(con, "finding", "UNBOUNDED") + audit(con, "finding", "RECLAIMABLE") + \
        audit(con, "finding", "BACKLOG")
    assert findings == [], findings
