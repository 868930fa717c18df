"""Several writer processes on one lake, through the official Python module: they take turns at the writer lease
(design 0010), every commit lands once, snapshot ids stay consecutive, and nobody is refused. A writer killed
mid-stream delays the others by seconds at most, and a writer paused past its turn is fenced when it resumes.
The same on the S3 test server, with the catalog in the bucket."""

import json
import os
import signal
import subprocess
import sys
import time

import harness
import s3server

WRITERS = 3
COMMITS = 20

# A writer process: attaches, waits for the start signal, then commits alternately into the shared table and its
# own, and prints what it saw. DuckLake's retry settings are raised as its documentation suggests under contention.
WORKER = r"""
import json, os, sys, time
sys.path.insert(0, %(e2e)r)
import harness
me, commits, start, setup, attach = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
con = harness.connect(load=tuple(json.loads(sys.argv[6])))
con.execute("SET threads=1")
con.execute("SET ducklake_max_retry_count=100")
con.execute("SET ducklake_retry_wait_ms=20")
con.execute("SET ducklake_retry_backoff=1.2")
if setup:
    con.execute(setup)
con.execute(attach)
print("attached", flush=True)
while not os.path.exists(start):
    time.sleep(0.005)
acknowledged = []
for i in range(commits):
    con.execute("INSERT INTO lake.shared VALUES (?, ?)", [me, i])
    acknowledged.append(("shared", i))
    print("ack shared %%d" %% i, flush=True)
    con.execute("INSERT INTO lake.own_%%d VALUES (?)" %% me, [i])
    acknowledged.append(("own", i))
    print("ack own %%d" %% i, flush=True)
stats = dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())
print("stats " + json.dumps(stats), flush=True)
""" % {"e2e": os.path.dirname(os.path.abspath(__file__))}


def local_lake(tmp, extra=""):
    return "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/'%s)" % (tmp, tmp, extra), "", None


def s3_lake(tmp, extra=""):
    attach = "ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s', READ_WRITE%s)" % (
        s3server.url(tmp, "lake"), s3server.url(tmp, "lake", "data/"), extra)
    return attach, s3server.secret_sql().strip(), s3server.LOAD


def prepare(tmp, lake):
    attach, setup, load = lake
    con = harness.connect(load=load or harness.DEFAULT_LOAD)
    if setup:
        con.execute(setup)
    con.execute(attach)
    con.execute("CREATE TABLE lake.shared (writer INTEGER, i INTEGER)")
    for w in range(WRITERS):
        con.execute("CREATE TABLE lake.own_%d (i INTEGER)" % w)
    first = con.execute("SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
    con.close()
    return first


def start_writers(tmp, lake, count=WRITERS, commits=COMMITS):
    attach, setup, load = lake
    start = os.path.join(tmp, "start")
    procs = []
    for w in range(count):
        p = subprocess.Popen([sys.executable, "-c", WORKER, str(w), str(commits), start, setup, attach,
                              json.dumps(list(load or harness.DEFAULT_LOAD))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
    for p in procs:
        line = p.stdout.readline()
        assert line.strip() == "attached", "a writer did not attach: %s %s" % (line, p.stderr.read())
    open(start, "w").close()
    return procs


def finish(procs, timeout=300):
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        outputs.append((p.returncode, out, err))
    return outputs


def stats_of(out):
    for line in out.splitlines():
        if line.startswith("stats "):
            return json.loads(line[len("stats "):])
    return {}


def check_lake(lake, first, expected_rows):
    attach, setup, load = lake
    con = harness.connect(load=load or harness.DEFAULT_LOAD)
    if setup:
        con.execute(setup)
    con.execute(attach)
    ids = [r[0] for r in con.execute("SELECT snapshot_id FROM ducklake_snapshots('lake') ORDER BY 1").fetchall()]
    assert ids == list(range(ids[0], ids[0] + len(ids))), "snapshot ids are not consecutive: %s" % ids
    shared = sorted(con.execute("SELECT writer, i FROM lake.shared").fetchall())
    own = {w: sorted(r[0] for r in con.execute("SELECT i FROM lake.own_%d" % w).fetchall()) for w in range(WRITERS)}
    con.close()
    return ids, shared, own


def run_three_writers(tmp, lake):
    first = prepare(tmp, lake)
    started = time.time()
    outputs = finish(start_writers(tmp, lake))
    took = time.time() - started
    for rc, out, err in outputs:
        assert rc == 0, "a writer failed (rc=%d): %s" % (rc, err[-3000:])
    ids, shared, own = check_lake(lake, first, WRITERS * COMMITS * 2)
    assert shared == sorted((w, i) for w in range(WRITERS) for i in range(COMMITS)), shared
    for w in range(WRITERS):
        assert own[w] == list(range(COMMITS)), (w, own[w])
    assert ids[-1] == first + WRITERS * COMMITS * 2, (first, ids[-1])
    stats = [stats_of(out) for _, out, _ in outputs]
    attempts = sum(int(s.get("commits_attempted", 0)) for s in stats)
    landed = sum(int(s.get("commits_landed", 0)) for s in stats)
    handovers = sum(int(s.get("turns_handed_over", 0)) for s in stats)
    assert landed >= WRITERS * COMMITS * 2, stats
    requests = {k: sum(int(s.get(k, 0)) for s in stats) for k in stats[0]
                if k.startswith("object_store_") or k.startswith("turn_")}
    print("%d writers x %d commits: %.1f s, %.1f commits/s, %.2f attempts per commit, %d handovers; requests %s" % (
        WRITERS, 2 * COMMITS, took, WRITERS * COMMITS * 2 / took, attempts / max(landed, 1), handovers, requests))
    return requests, landed


# Requests per landed commit with three writers on the S3 test server. GETs: 209 when every open re-read the
# whole WAL since the last L0, 66 once write-once objects were kept in memory (store/remembered.rs), 24 once
# garbage collection stopped running at every open (upkeep::spawn_collection). LISTs: 6.1, then 1.3.
MOST_GETS_PER_COMMIT_ON_S3 = 60
MOST_LISTS_PER_COMMIT_ON_S3 = 4.5


def test_three_writer_processes_commit_to_one_lake(tmp):
    harness.require_extension("moraine")
    run_three_writers(tmp, local_lake(tmp))


def test_three_writer_processes_commit_to_one_lake_on_s3(tmp):
    harness.require_extension("moraine")
    harness.require_extension("httpfs")
    requests, landed = run_three_writers(tmp, s3_lake(tmp))
    assert requests["object_store_reads_remembered"] > 0, requests
    assert requests["object_store_gets"] / landed <= MOST_GETS_PER_COMMIT_ON_S3, requests
    assert requests["object_store_lists"] / landed <= MOST_LISTS_PER_COMMIT_ON_S3, requests


def test_a_writer_killed_mid_stream_does_not_stop_the_others(tmp):
    harness.require_extension("moraine")
    lake = local_lake(tmp)
    prepare(tmp, lake)
    procs = start_writers(tmp, lake)
    victim = procs[0]
    acked = []
    # Let the victim land a few commits, then kill it wherever it is.
    while len(acked) < 5:
        line = victim.stdout.readline()
        assert line, "the victim ended early: %s" % victim.stderr.read()
        if line.startswith("ack "):
            acked.append(line.split()[1:])
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    rest = victim.stdout.read()
    acked += [line.split()[1:] for line in rest.splitlines() if line.startswith("ack ")]
    started = time.time()
    outputs = finish(procs[1:])
    for rc, out, err in outputs:
        assert rc == 0, "a surviving writer failed (rc=%d): %s" % (rc, err[-3000:])
    ids, shared, own = check_lake(lake, None, None)
    for w in (1, 2):
        assert own[w] == list(range(COMMITS)), (w, own[w])
        assert sorted(i for (x, i) in shared if x == w) == list(range(COMMITS))
    # Every acknowledged commit of the victim is there; the one in flight is wholly there or wholly absent.
    victim_shared = sorted(i for (x, i) in shared if x == 0)
    acked_shared = sorted(int(i) for kind, i in acked if kind == "shared")
    acked_own = sorted(int(i) for kind, i in acked if kind == "own")
    assert victim_shared[:len(acked_shared)] == acked_shared and len(victim_shared) <= len(acked_shared) + 1, (
        victim_shared, acked_shared)
    assert own[0][:len(acked_own)] == acked_own and len(own[0]) <= len(acked_own) + 1, (own[0], acked_own)
    print("after SIGKILL of one writer the other two finished in %.1f s" % (time.time() - started))


def test_a_writer_paused_past_its_turn_is_fenced_and_lands_nothing(tmp):
    harness.require_extension("moraine")
    lake = local_lake(tmp)
    prepare(tmp, lake)
    attach = lake[0]
    # The paused writer holds the turn inside an open transaction, with one row staged.
    paused = subprocess.Popen([sys.executable, "-c", r"""
import sys, time
sys.path.insert(0, %r)
import harness
con = harness.connect()
con.execute(%r)
con.execute("BEGIN")
con.execute("INSERT INTO lake.shared VALUES (9, 9)")
print("holding", flush=True)
sys.stdin.readline()
try:
    con.execute("COMMIT")
    print("committed", flush=True)
except Exception as e:
    print("error " + str(e).replace(chr(10), " "), flush=True)
""" % (os.path.dirname(os.path.abspath(__file__)), attach)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    assert paused.stdout.readline().strip() == "holding", paused.stderr.read()
    paused.send_signal(signal.SIGSTOP)
    try:
        # Another writer waits out the paused holder's turn and takes the lease over. It only reads, so its own
        # detach has nothing to flush and would leave its fence after the replay point.
        started = time.time()
        con = harness.connect()
        con.execute(attach)
        con.execute("SELECT count(*) FROM lake.shared").fetchall()
        waited = time.time() - started
        con.execute("DETACH lake")
        # Sessions that find the lease free delete the fences that guard nothing (design 0025); the fence that
        # turns the paused writer away is the takeover's, and must outlast them.
        for k in range(12):
            con.execute(attach)
            if k % 2 == 0:
                con.execute("INSERT INTO lake.shared VALUES (2, %d)" % k)
            else:
                con.execute("SELECT count(*) FROM lake.shared").fetchall()
            con.execute("DETACH lake")
        con.close()
    finally:
        paused.send_signal(signal.SIGCONT)
    out, err = paused.communicate("\n", timeout=120)
    assert "error" in out and "fenced" in out.lower(), (out, err[-2000:])
    ids, shared, _ = check_lake(lake, None, None)
    assert sorted(shared) == [(2, k) for k in range(0, 12, 2)], shared
    print("a writer paused past its turn: the next one waited %.1f s; the resumed one said: %s" % (
        waited, out.strip()[:200]))


def test_an_exclusive_writer_refuses_a_second_one(tmp):
    harness.require_extension("moraine")
    attach, _, _ = local_lake(tmp, ", META_EXCLUSIVE_WRITER 1")
    con = harness.connect()
    con.execute(attach)
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    r = harness.run_cli(local_lake(tmp)[0] + ";\nINSERT INTO lake.t VALUES (1);\n", bail=False)
    assert r.rc != 0 and "in use by another writer" in r.stderr, r.stderr
    con.execute("INSERT INTO lake.t VALUES (2)")
    assert con.execute("SELECT x FROM lake.t").fetchall() == [(2,)]
    con.close()
    # Once the exclusive writer detached, turn-taking writers come in again.
    r = harness.run_cli(local_lake(tmp)[0] + ";\nINSERT INTO lake.t VALUES (3);\n")
    assert r.rc == 0, r.stderr


def test_a_forced_takeover_happens_once_then_the_writers_take_turns(tmp):
    """`META_FORCE_TAKEOVER 1` takes the lease from its holder at ATTACH. After that the attach takes turns like any
    writer: a live writer it forced out loses at most the transaction it had open then, not one at every turn."""
    harness.require_extension("moraine")
    attach = local_lake(tmp)[0]
    con = harness.connect()
    con.execute(attach)
    con.execute("CREATE TABLE lake.t (w INTEGER)")
    con.close()
    live = subprocess.Popen([sys.executable, "-c", r"""
import sys, time
sys.path.insert(0, %r)
import harness
con = harness.connect()
con.execute(%r)
print("ready", flush=True)
failed = []
for i in range(60):
    try:
        con.execute("INSERT INTO lake.t VALUES (1)")
    except Exception as e:
        failed.append(str(e).replace(chr(10), " "))
    time.sleep(0.05)
print("failed %%d %%s" %% (len(failed), failed[:2]), flush=True)
""" % (os.path.dirname(os.path.abspath(__file__)), attach)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert live.stdout.readline().strip() == "ready", live.stderr.read()
    time.sleep(0.5)
    con = harness.connect()
    con.execute(attach[:-1] + ", META_FORCE_TAKEOVER 1)")
    for _ in range(20):
        con.execute("INSERT INTO lake.t VALUES (2)")
        time.sleep(0.05)
    out, err = live.communicate(timeout=120)
    failed = int(out.split()[1])
    assert failed <= 1 and all("fenced" in line for line in out.splitlines()[-1:] if failed), (out, err[-2000:])
    rows = dict(con.execute("SELECT w, count(*) FROM lake.t GROUP BY w").fetchall())
    assert rows == {1: 60 - failed, 2: 20}, rows
    con.close()
