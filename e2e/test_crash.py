"""A DuckLake INSERT killed with SIGKILL part-way, through the official CLI: the lake stays attachable and
consistent. The killed writer's lease names a process of this host that no longer runs, so the next plain
attach takes over at once (the takeover rule); the INSERT is then wholly absent or wholly present, snapshot
ids stay consecutive, and the lake takes new commits. An orphaned Parquet file is acceptable: it is what
`ducklake_delete_orphaned_files` is for."""

import os
import signal
import subprocess
import time

import harness

ROWS = 20_000_000


def attach(tmp, extra=""):
    return "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/'%s);\n" % (tmp, tmp, extra)


def start_insert(tmp):
    sql = harness.preamble() + attach(tmp) + "INSERT INTO lake.t SELECT range AS x FROM range(%d);\n" % ROWS
    proc = subprocess.Popen([harness.CLI, "-unsigned", "-bail", ":memory:"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(sql)
    proc.stdin.close()
    return proc


def lease(tmp):
    return os.path.join(tmp, "catalog", "catalog", "writer.lease")


def wait_for_attach(tmp, proc):
    """Waits until the CLI has attached the lake (its lease exists); returns when it did."""
    deadline = time.time() + 60
    while not os.path.exists(lease(tmp)):
        assert proc.poll() is None, "the INSERT process exited before attaching: %s" % proc.stderr.read()
        assert time.time() < deadline, "the INSERT process never attached"
        time.sleep(0.005)
    return time.time()


def test_sigkill_mid_insert_leaves_a_consistent_lake(tmp):
    harness.require_extension("moraine")
    harness.run_cli(attach(tmp) + "CREATE TABLE lake.t (x BIGINT); INSERT INTO lake.t VALUES (-1);").ok()
    # How long an uninterrupted INSERT runs once its process has attached, so the kills land inside one.
    proc = start_insert(tmp)
    attached = wait_for_attach(tmp, proc)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    whole = time.time() - attached
    interrupted = 0
    cut_points = [0.1, 0.3, 0.55, 0.8]
    rows = 1 + ROWS
    for fraction in cut_points:
        proc = start_insert(tmp)
        wait_for_attach(tmp, proc)
        time.sleep(whole * fraction)
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The killed writer's lease is still there, but its process is gone; unless the kill came after
        # its detach had released the lease, and then its INSERT had committed.
        leased = os.path.exists(lease(tmp))
        r = harness.run_cli(attach(tmp) + """
            SELECT count(*) AS n FROM lake.t;
            SELECT list(snapshot_id ORDER BY snapshot_id) AS ids FROM ducklake_snapshots('lake');
        """).ok()
        count, ids = r.results()
        n = count[0]["n"]
        # The INSERT is all or nothing, on top of what was there.
        assert n in (rows, rows + ROWS), (n, rows)
        assert leased or n == rows + ROWS, "the lease went while the INSERT was still uncommitted"
        if running and leased:
            interrupted += 1
        rows = n
        ids = ids[0]["ids"]
        assert ids == list(range(len(ids))), ids
    assert interrupted >= 1, "no kill landed while an INSERT ran"
    # The lake still takes commits, and orphan cleanup removes what the killed INSERTs left behind.
    r = harness.run_cli(attach(tmp) + """
        INSERT INTO lake.t VALUES (-2);
        CALL ducklake_delete_orphaned_files('lake', cleanup_all => true);
        SELECT count(*) AS n FROM lake.t;
    """).ok()
    n = r.results()[-1][0]["n"]
    assert (n - 2) % ROWS == 0, n
    files = sorted(os.listdir(os.path.join(tmp, "data", "main", "t")))
    listed = harness.run_cli(attach(tmp) + "SELECT count(*) AS n FROM ducklake_list_files('lake', 't');").ok()
    assert len(files) == listed.results()[0][0]["n"], files
    print("sigkill: %d kill points over a %.2fs INSERT, %d landed while it ran" % (len(cut_points), whole, interrupted))


def test_a_session_that_ends_on_an_error_leaves_the_lake_unlocked(tmp):
    """The CLI exits after a failed statement without closing its databases: the exit handler releases
    the lease, so the next writer gets in at once."""
    harness.require_extension("moraine")
    r = harness.run_cli(attach(tmp) + "CREATE TABLE lake.t (x BIGINT); SELECT no_such_function();", bail=True)
    assert r.rc != 0 and "no_such_function" in r.stderr, r.stderr
    assert not os.path.exists(lease(tmp)), "the failed session left its lease"
    started = time.time()
    r = harness.run_cli(attach(tmp) + "INSERT INTO lake.t VALUES (1); SELECT count(*) AS n FROM lake.t;").ok()
    assert r.results()[-1][0]["n"] == 1
    assert time.time() - started < 10


def test_a_killed_writer_is_followed_at_once_and_a_live_one_still_refuses(tmp):
    harness.require_extension("moraine")
    harness.run_cli(attach(tmp) + "CREATE TABLE lake.t (x BIGINT);").ok()
    # A live writer: a CLI that holds the lake open, waiting on its input.
    holder = subprocess.Popen([harness.CLI, "-unsigned", ":memory:"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder.stdin.write(harness.preamble() + attach(tmp, ", META_EXCLUSIVE_WRITER 1") + "INSERT INTO lake.t VALUES (1);\n")
    holder.stdin.flush()
    try:
        wait_for_attach(tmp, holder)
        deadline = time.time() + 30
        while True:  # the holder's INSERT has landed once a reader sees it
            r = harness.run_cli(attach(tmp, ", READ_ONLY") + "SELECT count(*) AS n FROM lake.t;").ok()
            if r.results()[-1][0]["n"] == 1 or time.time() > deadline:
                break
            time.sleep(0.1)
        r = harness.run_cli(attach(tmp) + "SELECT 1;", bail=False)
        assert r.rc != 0 and "in use by another writer" in r.stderr, r.stderr
        holder.send_signal(signal.SIGKILL)
        # Not reaped yet: a zombie, as a killed worker is while its supervisor is busy. It runs no more.
        while open("/proc/%d/stat" % holder.pid).read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        assert os.path.exists(lease(tmp))
        started = time.time()
        r = harness.run_cli(attach(tmp) + "INSERT INTO lake.t VALUES (2); SELECT count(*) AS n FROM lake.t;").ok()
        took = time.time() - started
        holder.wait()
        assert r.results()[-1][0]["n"] == 2
        # The CLI process itself (start, LOAD, attach, commit) is most of this second.
        assert took < 5, took
        print("takeover after SIGKILL: next writer committed in %.2fs" % took)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
