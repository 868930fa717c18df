"""moraine against DuckLake's own catalogs, side by side in one run (`cargo xtask bench --scale small`).

Every back-end runs the same statements through the same official DuckDB 1.5.5 Python module with the real
DuckLake extension. Back-ends are interleaved within each repetition; the report gives median, min and max, a
ratio column (moraine / peer), and writes JSON under target/bench/."""

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness  # noqa: E402

SCALES = {
    "small": {"reps": 3, "commits": 50, "history": [100, 300], "files": [100], "parquet_rows": 1000,
              "growth": 1000, "bucket": 200, "writer_commits": 40},
    "medium": {"reps": 5, "commits": 200, "history": [100, 1000], "files": [100, 1000], "parquet_rows": 1000,
               "growth": 2000, "bucket": 500, "writer_commits": 80},
    # H = 5,000 comes from the growth lakes, which are attached and expired after their last commit.
    "large": {"reps": 3, "commits": 300, "history": [100, 1000], "files": [100, 1000], "parquet_rows": 1000,
              "growth": 5000, "bucket": 1000, "writer_commits": 80},
}
# Writer processes committing at once in the many_writers workload.
MANY_WRITERS = (1, 2, 4, 8)
# The window the growth acceptance compares: the first and the last commits of the run.
GROWTH_WINDOW = 300


class Postgres:
    """A throwaway PostgreSQL server on a loopback port in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="moraine-bench-pg-")
        os.chmod(self.dir, 0o777)
        self.bin = self._find_bin()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        data = os.path.join(self.dir, "pgdata")
        self._as_postgres([os.path.join(self.bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
                           "-E", "UTF8", "--no-locale"])
        with open(os.path.join(data, "postgresql.conf"), "a") as f:
            f.write("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\n"
                    % (self.port, self.dir))
        self._as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"),
                           "-w", "start"])
        self.data = data
        self.dbs = 0

    @staticmethod
    def _find_bin():
        base = "/usr/lib/postgresql"
        if not os.path.isdir(base):
            subprocess.run(["apt-get", "install", "-y", "-q", "postgresql"], check=True, capture_output=True)
        versions = sorted(os.listdir(base))
        return os.path.join(base, versions[-1], "bin")

    def _as_postgres(self, cmd):
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.dir)

    def new_database(self):
        self.dbs += 1
        name = "lake%d" % self.dbs
        self._as_postgres([os.path.join(self.bin, "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                           "-U", "postgres", name])
        return "host=127.0.0.1 port=%d dbname=%s user=postgres" % (self.port, name)

    def stop(self):
        try:
            self._as_postgres([os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "fast", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Backend:
    def __init__(self, name, extensions, attach_for, copyable=True):
        self.name = name
        self.extensions = extensions
        self.attach_for = attach_for  # tmp dir -> ATTACH statement
        self.copyable = copyable  # the whole lake is in its directory, so a copy of it is the same lake

    def attach_sql(self, tmp, parquet_only=False):
        attach = self.attach_for(tmp)
        if parquet_only:
            attach = attach[:-1] + ", DATA_INLINING_ROW_LIMIT 0)"
        return attach

    def connect(self, tmp, parquet_only=False):
        con = harness.connect(load=self.extensions)
        con.execute("SET threads=1")
        con.execute(self.attach_sql(tmp, parquet_only))
        con.execute("USE lake")
        return con


def backends(pg):
    out = [
        Backend("moraine", ("ducklake", "moraine"),
                lambda t: "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (t, t)),
        Backend("duckdb", ("ducklake",),
                lambda t: "ATTACH 'ducklake:%s/meta.ducklake' AS lake (DATA_PATH '%s/data/')" % (t, t)),
        Backend("sqlite", ("ducklake", "sqlite_scanner"),
                lambda t: "ATTACH 'ducklake:sqlite:%s/meta.sqlite' AS lake (DATA_PATH '%s/data/')" % (t, t)),
    ]
    if pg:
        databases = {}

        def pg_attach(t):
            # One database per lake directory, so a re-attach finds the same catalog.
            if t not in databases:
                databases[t] = pg.new_database()
            return "ATTACH 'ducklake:postgres:%s' AS lake (DATA_PATH '%s/data/')" % (databases[t], t)
        out.append(Backend("postgres", ("ducklake", "postgres_scanner"), pg_attach, copyable=False))
    return out


def timed(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000.0


def catalog_bytes(tmp):
    total = 0
    for root, _, files in os.walk(tmp):
        if os.sep + "data" in root:
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def make_history(con, h):
    con.execute("CREATE TABLE IF NOT EXISTS h (id INTEGER)")
    for i in range(h):
        con.execute("INSERT INTO h VALUES (%d)" % i)


# Cold attaches timed at each point of a growth run; their median is reported.
ATTACH_SAMPLES = 15
# The history at which the reference attach is timed.
EARLY_HISTORY = 100
# Expiries of each grown lake, each from a copy of it; their median is reported. The cleanup after an expiry
# is one statement of about 9 ms, nearly all DuckLake reloading its schema, and with 11 samples its median
# moved by up to 9 % between runs of the same build, more than the margin the ratio is read to; 21 narrow that.
EXPIRY_SAMPLES = 21


def rotated(items, k):
    """items, started at position k (modulo their number): turn k of a round in which everyone goes once."""
    k %= len(items)
    return items[k:] + items[:k]


# The phases of a cold attach, each timed on its own: DuckLake loads the catalog at the first USE.
ATTACH_PHASES = ("attach", "use", "query")


def cold_attach_once_ms(backend, t, kind):
    """One cold attach of the lake at t in a fresh database with its extensions already loaded: ATTACH, USE and
    the first query, as a user's first statement against the lake. Returns {phase: ms}."""
    con = harness.connect(load=backend.extensions)
    try:
        con.execute("SET threads=1")
        attach = backend.attach_sql(t, parquet_only=(kind == "parquet"))
        statements = (attach, "USE lake", "SELECT count(*) FROM g")
        phases = {}
        for phase, sql in zip(ATTACH_PHASES, statements):
            phases[phase] = timed(lambda: con.execute(sql).fetchall())
        return phases
    finally:
        con.close()


def cold_attaches_ms(backends_, lakes, kind, early_copies=None):
    """The median of ATTACH_SAMPLES cold attaches of each back-end's lake, whole and by phase. The back-ends
    take turns sample by sample, the order rotating, so a slow minute of this shared VM lands on all of them
    alike. `early_copies` ({name: directory}) adds, to each round, a cold attach of that back-end's lake as it
    was after EARLY_HISTORY commits, reported under "<name>@early": the copy is moved to the lake's own
    path for the sample (a DuckLake catalog records its data path), outside the timed statements.
    Returns ({name: median}, {name: {phase: median}}, {name: the error that stopped its samples},
    {name: every sample's whole, in round order})."""
    early_copies = early_copies or {}
    turns = [(b.name, b, None) for b in backends_]
    turns += [(b.name + "@early", b, early_copies[b.name]) for b in backends_ if b.name in early_copies]
    samples, failed = {key: [] for key, _, _ in turns}, {}
    for k in range(ATTACH_SAMPLES):
        for key, b, copy in rotated(turns, k):
            if key in failed:
                continue
            try:
                with contextlib.nullcontext() if copy is None else swapped_in(copy, lakes[b.name]):
                    samples[key].append(cold_attach_once_ms(b, lakes[b.name], kind))
            except Exception as e:  # noqa: BLE001 - reported by the caller
                failed[key] = e
    kept = {name: v for name, v in samples.items() if name not in failed}
    whole = {name: statistics.median(sum(p.values()) for p in v) for name, v in kept.items()}
    phases = {name: {phase: statistics.median(p[phase] for p in v) for phase in ATTACH_PHASES}
              for name, v in kept.items()}
    rounds = {name: [sum(p.values()) for p in v] for name, v in kept.items()}
    return whole, phases, failed, rounds


@contextlib.contextmanager
def swapped_in(copy, path):
    """The directory `copy` at `path` for the block, and `path`'s own directory aside; both back after."""
    aside = path + ".aside"
    os.rename(path, aside)
    try:
        os.rename(copy, path)
        try:
            yield
        finally:
            os.rename(path, copy)
    finally:
        os.rename(aside, path)


def run_growth(backends_, scale, tmp_root, kind, skipped):
    """Commits into one table `scale['growth']` times, one row per commit, on every back-end at once: commit i
    goes to each back-end in turn (the order rotates), so a slow minute of this shared VM lands on all of
    them alike. Times cold attaches after EARLY_HISTORY commits and after the last, then each grown lake's
    expiry and cleanup. kind: 'inlined' or 'parquet'. Returns {name: (latencies, after)}; a back-end that
    fails is named in `skipped` and left out."""
    n = scale["growth"]
    parquet_only = kind == "parquet"
    lakes, cons, lat, early, early_copies = {}, {}, {}, {}, {}

    def drop(name, e, into=cons, suffix=""):
        skipped[name + suffix] = "failed: %s" % str(e).splitlines()[0]
        con = into.pop(name, None)
        if con is not None:
            con.close()

    for b in backends_:
        try:
            lakes[b.name] = tempfile.mkdtemp(dir=tmp_root)
            cons[b.name] = b.connect(lakes[b.name], parquet_only=parquet_only)
            cons[b.name].execute("CREATE TABLE g (id INTEGER)")
            lat[b.name] = []
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            drop(b.name, e)
    by_name = {b.name: b for b in backends_}
    fresh_cons, fresh_lat = {}, {}
    for i in range(n):
        if i == n - GROWTH_WINDOW and i > EARLY_HISTORY:
            # A young lake per back-end, committed into beside the grown one through the last window: the
            # same minutes of the machine, so what the grown lake's history costs is read with the drift
            # divided out. Its own first EARLY_HISTORY commits are not timed.
            for name in list(cons):
                try:
                    fresh_cons[name] = by_name[name].connect(tempfile.mkdtemp(dir=tmp_root),
                                                             parquet_only=parquet_only)
                    fresh_cons[name].execute("CREATE TABLE g (id INTEGER)")
                    for j in range(EARLY_HISTORY):
                        fresh_cons[name].execute("INSERT INTO g VALUES (%d)" % j)
                    fresh_lat[name] = []
                except Exception as e:  # noqa: BLE001 - only this figure is lost
                    drop(name, e, fresh_cons, "@young")
        if i == EARLY_HISTORY:
            # Every lake is closed while any is attached cold, as a user's first attach of the day would be.
            names = list(cons)
            for name in names:
                cons.pop(name).close()
            early, early_phases, failed, _ = cold_attaches_ms([by_name[name] for name in names], lakes, kind)
            for name, e in failed.items():
                drop(name, e)
            names = list(early)
            # Kept as it is now, to be attached again beside the grown lake in the same minutes.
            for name in names:
                if by_name[name].copyable:
                    early_copies[name] = lakes[name] + ".early"
                    shutil.copytree(lakes[name], early_copies[name])
            for name in names:
                cons[name] = by_name[name].connect(lakes[name], parquet_only=parquet_only)
        turns = [(name, cons, lat) for name in cons] + [(name, fresh_cons, fresh_lat) for name in fresh_cons]
        for name, into, lats in rotated(turns, i):
            try:
                lats[name].append(timed(lambda: into[name].execute("INSERT INTO g VALUES (%d)" % i)))
            except Exception as e:  # noqa: BLE001
                if into is cons:
                    drop(name, e)
                else:
                    drop(name, e, fresh_cons, "@young")
                    fresh_lat.pop(name)
    for con in fresh_cons.values():
        con.close()
    names = list(cons)
    for name in names:
        cons.pop(name).close()
    attach, attach_phases, failed, attach_rounds = cold_attaches_ms(
        [by_name[name] for name in names], lakes, kind, {n: c for n, c in early_copies.items() if n in names})
    for name, e in failed.items():
        # An early copy that fails loses its own figure only, reported as skipped under its name.
        drop(name, e)
    # The early lake attached in the same rounds as the grown one: growth with the machine's drift divided out.
    again = {name: (attach.pop(name + "@early"), attach_rounds.pop(name + "@early"))
             for name in names if name + "@early" in attach}
    for name in names:
        attach_phases.pop(name + "@early", None)
    for name in list(attach):
        try:
            if by_name[name].copyable:
                shutil.copytree(lakes[name], lakes[name] + ".grown")
        except Exception as e:  # noqa: BLE001
            drop(name, e)
            attach.pop(name)
    # An expiry changes its lake, so each sample starts from a copy of the grown lake (a back-end whose
    # catalog lives in a server gets one sample); the back-ends take turns, sample by sample.
    expire, cleanup = {name: [] for name in attach}, {name: [] for name in attach}
    for k in range(EXPIRY_SAMPLES):
        for name in rotated(list(attach), k):
            b, t = by_name[name], lakes[name]
            if k > 0 and not b.copyable:
                continue
            try:
                if k > 0:
                    shutil.rmtree(t)
                    shutil.copytree(t + ".grown", t)
                con = b.connect(t, parquet_only=parquet_only)
                con.execute("SELECT count(*) FROM g").fetchall()
                expire[name].append(timed(lambda: con.execute(
                    "CALL ducklake_expire_snapshots('lake', older_than => now())").fetchall()))
                cleanup[name].append(timed(lambda: con.execute(
                    "CALL ducklake_cleanup_old_files('lake', cleanup_all => true)").fetchall()))
                con.close()
            except Exception as e:  # noqa: BLE001
                drop(name, e)
                attach.pop(name)
    return {name: (lat[name], {"attach_early_ms": early[name], "attach_ms": attach[name],
                               **({"young_commits_ms": fresh_lat[name]} if name in fresh_lat else {}),
                               "attach_early_phases_ms": early_phases[name],
                               "attach_phases_ms": attach_phases[name],
                               **({"attach_early_again_ms": again[name][0]} if name in again else {}),
                               "expire_ms": statistics.median(expire[name]),
                               "cleanup_ms": statistics.median(cleanup[name]),
                               "rounds": {"attach_ms": attach_rounds[name], "expire_ms": expire[name],
                                          "cleanup_ms": cleanup[name],
                                          **({"attach_early_again_ms": again[name][1]} if name in again else {})}})
            for name in attach}


def paired_ratio(mine, peer, metric):
    """The median over rounds of moraine's sample ÷ the peer's sample of the same round: the two ran back to
    back, so a slow minute of the machine divides out. None where the peer has one sample per round of its
    own (PostgreSQL's single expiry) or the metric is not sampled in rounds."""
    a, b = mine.get("rounds", {}).get(metric), peer.get("rounds", {}).get(metric)
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x / y for x, y in zip(a, b))


def growth_report(curves, after, scale):
    """The per-bucket latency curve of every back-end, the first/last window medians and the ratios the
    history acceptance reads."""
    n, bucket, w = scale["growth"], scale["bucket"], GROWTH_WINDOW
    report = {}
    for kind in sorted(curves):
        names = list(curves[kind])
        print("\ngrowth (%s): ms per single-row commit, median per %d commits, %d commits in all"
              % (kind, bucket, n))
        print("%-18s" % "commits" + "".join("%12s" % b for b in names))
        for lo in range(0, n, bucket):
            cells = "".join("%12.2f" % statistics.median(curves[kind][b][lo:lo + bucket]) for b in names)
            print("%-18s" % ("%d-%d" % (lo, min(n, lo + bucket))) + cells)
        first = {b: statistics.median(curves[kind][b][:w]) for b in names}
        last = {b: statistics.median(curves[kind][b][-w:]) for b in names}
        print("%-18s" % ("first %d" % w) + "".join("%12.2f" % first[b] for b in names))
        print("%-18s" % ("last %d" % w) + "".join("%12.2f" % last[b] for b in names))
        print("%-18s" % "last/first" + "".join("%12.2f" % (last[b] / first[b]) for b in names))
        if "moraine" in last:
            print("%-18s" % "moraine/peer last" + "".join("%12.2f" % (last["moraine"] / last[b]) for b in names))
            # Commit i of every back-end ran within the same few milliseconds.
            paired = {b: statistics.median(m / p for m, p in zip(curves[kind]["moraine"][-w:], curves[kind][b][-w:]))
                      for b in names}
            print("%-18s" % "  paired last" + "".join("%12.2f" % paired[b] for b in names))
        # The last window against a young lake's commits in the same minutes (run_growth).
        young = {b: after[kind][b].get("young_commits_ms") for b in names}
        young_median = {b: statistics.median(young[b]) for b in names if young[b]}
        print("%-18s" % ("young %d same" % w) + "".join(
            "%12s" % ("%.2f" % young_median[b] if b in young_median else "-") for b in names))
        print("%-18s" % "last/young same" + "".join(
            "%12s" % ("%.2f" % (last[b] / young_median[b]) if b in young_median else "-") for b in names))
        print("%-18s" % "  paired" + "".join(
            "%12s" % ("-" if not young[b] or len(young[b]) != w else "%.2f" % statistics.median(
                g / y for g, y in zip(curves[kind][b][-w:], young[b]))) for b in names))
        for metric in ("attach_early_ms", "attach_ms", "expire_ms", "cleanup_ms"):
            vals = {b: after[kind][b][metric] for b in names}
            label = "attach h%d" % EARLY_HISTORY if metric == "attach_early_ms" else "%s h%d" % (metric[:-3], n)
            print("%-18s" % label + "".join("%12.1f" % vals[b] for b in names))
            if "moraine" in vals:
                print("%-18s" % "  moraine/peer" + "".join("%12.2f" % (vals["moraine"] / vals[b]) for b in names))
                paired = {b: paired_ratio(after[kind]["moraine"], after[kind][b], metric) for b in names}
                print("%-18s" % "  paired" + "".join("%12s" % ("-" if paired[b] is None else "%.2f" % paired[b])
                                                      for b in names))
        for metric, h in (("attach_early_phases_ms", EARLY_HISTORY), ("attach_phases_ms", n)):
            # ATTACH / USE / first query, in whole ms to fit a column.
            print("%-18s" % ("  a/u/q h%d" % h) + "".join(
                "%12s" % "/".join("%.0f" % after[kind][b][metric][p] for p in ATTACH_PHASES) for b in names))
        growth = {b: after[kind][b]["attach_ms"] / after[kind][b]["attach_early_ms"] for b in names}
        print("%-18s" % ("attach h%d/h%d" % (n, EARLY_HISTORY)) + "".join("%12.2f" % growth[b] for b in names))
        # The lake as it was after EARLY_HISTORY commits, attached again in the grown lake's rounds.
        again = {b: after[kind][b].get("attach_early_again_ms") for b in names}
        print("%-18s" % ("  h%d again" % EARLY_HISTORY) + "".join(
            "%12s" % ("-" if again[b] is None else "%.1f" % again[b]) for b in names))
        print("%-18s" % ("  h%d/h%d same" % (n, EARLY_HISTORY)) + "".join(
            "%12s" % ("-" if again[b] is None else "%.2f" % (after[kind][b]["attach_ms"] / again[b])) for b in names))
        print("%-18s" % "  paired" + "".join(
            "%12s" % ("-" if again[b] is None else "%.2f" % statistics.median(
                g / e for g, e in zip(after[kind][b]["rounds"]["attach_ms"],
                                      after[kind][b]["rounds"]["attach_early_again_ms"]))) for b in names))
        report[kind] = {"first_ms": first, "last_ms": last, "after": after[kind],
                        "buckets": {b: [statistics.median(curves[kind][b][lo:lo + bucket])
                                        for lo in range(0, n, bucket)] for b in names}}
    return report


# The statements of one round of the mixed workload: four commits (a one-row insert, an update, a delete,
# a 20-row insert into a second table) and four reads, against two tables whose history grows with the rounds.
MIXED_STATEMENTS = (
    ("insert", lambda i: "INSERT INTO t VALUES (%d, 'a')" % (1000 + i)),
    ("update", lambda i: "UPDATE t SET v = 'u%d' WHERE id = %d" % (i, i % 50)),
    ("delete", lambda i: "DELETE FROM t WHERE id = %d" % (1000 + i - 3)),
    ("insert_20_rows", lambda i: "INSERT INTO p SELECT range, 'p' FROM range(20)"),
    ("read", lambda i: "SELECT count(*), max(v) FROM t"),
    ("time_travel", lambda i: "SELECT count(*) FROM t AT (VERSION => %d)" % max(1, i // 2)),
    ("snapshots", lambda i: "SELECT count(*) FROM lake.snapshots()"),
    ("changes", lambda i: "SELECT count(*) FROM lake.table_changes('t', %d, %d)" % (max(1, i // 2 - 5), max(2, i // 2))),
)
# How many parts a run is cut into for the mixed and sessions reports.
RUN_PARTS = 4


def run_mixed(backends_, scale, tmp_root, skipped):
    """Rounds of MIXED_STATEMENTS on every back-end at once, statement by statement, the order rotating, so
    that updates, deletes, time travel and the change feed are timed as history grows, not only inserts.
    Returns {name: {statement: [ms per round]}}."""
    rounds = scale["growth"] // 4
    cons, lat = {}, {}
    for b in backends_:
        try:
            cons[b.name] = b.connect(tempfile.mkdtemp(dir=tmp_root))
            cons[b.name].execute("CREATE TABLE t (id INTEGER, v VARCHAR)")
            cons[b.name].execute("CREATE TABLE p (id INTEGER, v VARCHAR)")
            cons[b.name].execute("INSERT INTO t SELECT range, 'x' || range FROM range(50)")
            lat[b.name] = {name: [] for name, _ in MIXED_STATEMENTS}
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            skipped[b.name] = "failed: %s" % str(e).splitlines()[0]
    for i in range(rounds):
        for statement, sql in MIXED_STATEMENTS:
            for name in rotated(list(cons), i):
                try:
                    lat[name][statement].append(timed(lambda: cons[name].execute(sql(i)).fetchall()))
                except Exception as e:  # noqa: BLE001
                    skipped[name] = "failed: %s" % str(e).splitlines()[0]
                    cons.pop(name).close()
                    lat.pop(name)
    for con in cons.values():
        con.close()
    return lat


def mixed_report(lat):
    """Per statement, the median of each part of the run on every back-end, and moraine's ratio to each peer."""
    return parts_report("mixed: ms per statement", lat, [name for name, _ in MIXED_STATEMENTS])


def run_sessions(backends_, scale, tmp_root, skipped):
    """Short sessions on every back-end at once, as scheduled jobs and CLI runs make them: each ATTACHes its lake,
    commits one row (every third session) or reads it, and DETACHes; the back-ends take turns session by session,
    the order rotating. A catalog whose open or close follows the number of sessions before it shows it here.
    Returns ({name: {"session": [ms], "detach": [ms]}}, {name: the catalog's files at the end})."""
    count = scale["growth"] // 2
    cons, attaches, lat, dirs = {}, {}, {}, {}
    for b in backends_:
        try:
            dirs[b.name] = tempfile.mkdtemp(dir=tmp_root)
            attaches[b.name] = b.attach_sql(dirs[b.name])
            cons[b.name] = harness.connect(load=b.extensions)
            cons[b.name].execute("SET threads=1")
            cons[b.name].execute(attaches[b.name])
            cons[b.name].execute("CREATE TABLE lake.s (x INTEGER)")
            cons[b.name].execute("DETACH lake")
            lat[b.name] = {"session": [], "detach": []}
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            skipped[b.name] = "failed: %s" % str(e).splitlines()[0]
            cons.pop(b.name, None)
    for i in range(count):
        for name in rotated(list(cons), i):
            con = cons[name]
            statement = ("INSERT INTO lake.s VALUES (%d)" % i if i % 3 == 0 else "SELECT count(*) FROM lake.s")
            try:
                opened = timed(lambda: (con.execute(attaches[name]), con.execute(statement).fetchall()))
                closed = timed(lambda: con.execute("DETACH lake"))
            except Exception as e:  # noqa: BLE001
                skipped[name] = "failed: %s" % str(e).splitlines()[0]
                cons.pop(name).close()
                lat.pop(name)
                continue
            lat[name]["session"].append(opened + closed)
            lat[name]["detach"].append(closed)
    files = {name: sum(len(f) for _, _, f in os.walk(dirs[name])) for name in cons}
    for con in cons.values():
        con.close()
    return lat, files


def sessions_report(lat, files):
    """The sessions' cost per part of the run on every back-end, and the catalog's files at the end."""
    report = parts_report("sessions: ms per short session (ATTACH, one statement, DETACH) and per DETACH", lat,
                          ["session", "detach"])
    print("catalog files after %d sessions: %s" % (
        len(next(iter(lat.values()))["session"]) if lat else 0,
        ", ".join("%s %d" % (name, n) for name, n in files.items())))
    return {"parts": report, "files": files}


def parts_report(title, lat, measures):
    """Per measure, the median of each part of the run on every back-end, and moraine's ratio to each peer."""
    names = list(lat)
    print("\n%s, median per part of the run (%d parts), and moraine / peer" % (title, RUN_PARTS))
    print("%-18s" % "measure" + "".join("%10s" % ("part %d" % (k + 1)) for k in range(RUN_PARTS)))
    report = {}
    for statement in measures:
        for b in names:
            v = lat[b][statement]
            size = max(1, len(v) // RUN_PARTS)
            report.setdefault(statement, {})[b] = [statistics.median(v[k * size:(k + 1) * size])
                                                   for k in range(RUN_PARTS)]
        for b in names:
            print("%-18s" % ("%s %s" % (statement, b))[:18] + "".join("%10.2f" % x for x in report[statement][b]))
        for b in names:
            if b != "moraine" and "moraine" in names:
                print("%-18s" % ("  moraine/%s" % b)[:18]
                      + "".join("%10.2f" % (m / p) for m, p in zip(report[statement]["moraine"], report[statement][b])))
    return report


def writer_process(argv):
    """One process of the many_writers workload (run as `bench.py --writer ...`): attaches, waits for the start
    signal, commits single-row INSERTs, and prints its commit count and, on moraine, its commit attempts."""
    extensions, attach, start, me, commits = json.loads(argv[0]), argv[1], argv[2], int(argv[3]), int(argv[4])
    con = harness.connect(load=tuple(extensions))
    con.execute("SET threads=1")
    # DuckLake's retry settings raised as its documentation suggests for contention.
    con.execute("SET ducklake_max_retry_count=200")
    con.execute("SET ducklake_retry_wait_ms=10")
    con.execute("SET ducklake_retry_backoff=1.1")
    con.execute(attach)
    print("attached", flush=True)
    while not os.path.exists(start):
        time.sleep(0.001)
    for i in range(commits):
        con.execute("INSERT INTO lake.t VALUES (?, ?)", [me, i])
    attempts = None
    if "moraine" in extensions:
        stats = dict(con.execute("SELECT name, value FROM moraine_stats('lake')").fetchall())
        attempts = int(stats["commits_attempted"])
    print(json.dumps({"commits": commits, "attempts": attempts}), flush=True)
    return 0


def run_many_writers(backend, scale, tmp_root, processes, options=""):
    """`processes` writer processes commit `writer_commits` single-row INSERTs in all into one shared table at
    once: {commits_per_s, attempts_per_commit}. Every commit must land."""
    t = tempfile.mkdtemp(dir=tmp_root)
    con = backend.connect(t)
    con.execute("CREATE TABLE t (w INTEGER, i INTEGER)")
    con.close()
    attach = backend.attach_for(t)
    if options:
        attach = attach[:-1] + options + ")"
    start = os.path.join(t, "start")
    each = max(1, scale["writer_commits"] // processes)
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--writer", json.dumps(backend.extensions),
                               attach, start, str(w), str(each)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for w in range(processes)]
    for p in procs:
        line = p.stdout.readline().strip()
        if line != "attached":
            raise RuntimeError("a writer did not attach: %s" % p.stderr.read()[-500:])
    began = time.perf_counter()
    open(start, "w").close()
    outs = [p.communicate(timeout=600) for p in procs]
    took = time.perf_counter() - began
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError("a writer failed: %s" % err.strip().splitlines()[-1])
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    con = backend.connect(t)
    rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
    con.close()
    if rows != each * processes:
        raise RuntimeError("%d of %d commits landed" % (rows, each * processes))
    out = {"commits_per_s": each * processes / took}
    if all(r["attempts"] is not None for r in reports):
        out["attempts_per_commit"] = sum(r["attempts"] for r in reports) / (each * processes)
    return out


def many_writers_workload(backend, scale, tmp_root):
    """{metric: value} of the many_writers workload on one back-end. On moraine the single process also runs
    with `exclusive_writer`, the path the writer turn replaces."""
    if backend.name not in ("moraine", "postgres"):
        return {}
    out = {}
    for n in MANY_WRITERS:
        for name, value in run_many_writers(backend, scale, tmp_root, n).items():
            out["many_writers.p%d_%s" % (n, name)] = value
    if backend.name == "moraine":
        single = run_many_writers(backend, scale, tmp_root, 1, ", META_EXCLUSIVE_WRITER 1")
        out["many_writers.p1_exclusive_commits_per_s"] = single["commits_per_s"]
    return out


def run_workloads(backend, scale, tmp_root):
    """One repetition of every workload on one back-end: {metric: milliseconds (or bytes)}."""
    out = {}

    def fresh():
        return tempfile.mkdtemp(dir=tmp_root)

    t = fresh()
    con = backend.connect(t)
    con.execute("CREATE TABLE s (id INTEGER)")
    lat = [timed(lambda i=i: con.execute("INSERT INTO s VALUES (%d)" % i)) for i in range(scale["commits"])]
    out["small_commits.median_ms"] = statistics.median(lat)
    out["small_commits.p95_ms"] = sorted(lat)[int(len(lat) * 0.95) - 1]
    con.close()

    t = fresh()
    con = backend.connect(t)
    con.execute("CREATE TABLE p (id INTEGER, v VARCHAR)")
    n = scale["parquet_rows"]
    lat = [timed(lambda i=i: con.execute("INSERT INTO p SELECT i, 'v' || i FROM range(%d, %d) t(i)"
                                         % (i * n, (i + 1) * n))) for i in range(max(10, scale["commits"] // 5))]
    out["parquet_commits.median_ms"] = statistics.median(lat)
    con.close()

    for h in scale["history"]:
        t = fresh()
        con = backend.connect(t)
        make_history(con, h)
        out["store_bytes.after_%d_commits" % h] = catalog_bytes(t)
        con.close()
        start = time.perf_counter()
        con = backend.connect(t)
        con.execute("SELECT count(*) FROM h").fetchall()
        out["history_attach.h%d_ms" % h] = (time.perf_counter() - start) * 1000.0
        out["expire_cleanup.expire_h%d_ms" % h] = timed(
            lambda: con.execute("CALL ducklake_expire_snapshots('lake', older_than => now())").fetchall())
        out["expire_cleanup.cleanup_h%d_ms" % h] = timed(
            lambda: con.execute("CALL ducklake_cleanup_old_files('lake', cleanup_all => true)").fetchall())
        if backend.name == "moraine":
            con.execute("SELECT * FROM moraine_reclaim('lake')").fetchall()
        out["store_bytes.after_expiry_h%d" % h] = catalog_bytes(t)
        con.close()

    for f in scale["files"]:
        t = fresh()
        con = backend.connect(t)
        con.execute("CREATE TABLE w (id INTEGER)")
        for i in range(f):
            con.execute("INSERT INTO w SELECT i FROM range(%d, %d) t(i)" % (i * 20, i * 20 + 20))
        out["wide_read.scan_f%d_ms" % f] = timed(lambda: con.execute("SELECT count(*), sum(id) FROM w").fetchall())
        out["wide_read.snapshots_f%d_ms" % f] = timed(
            lambda: con.execute("SELECT count(*) FROM ducklake_snapshots('lake')").fetchall())
        con.close()
    return out


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="small", choices=sorted(SCALES))
    ap.add_argument("--out", default=os.path.join(harness.ROOT, "target", "bench"))
    ap.add_argument("--workload", default="all",
                    choices=["all", "growth", "classic", "many_writers", "mixed", "sessions"],
                    help="growth: the per-commit latency curve as history grows; many_writers: 1, 2, 4 and 8 "
                    "processes committing at once; mixed (not in all): inserts, updates, deletes and reads "
                    "as history grows; sessions (not in all): short sessions one after another, as their "
                    "number grows; classic: the rest")
    if argv[:1] == ["--writer"]:
        return writer_process(argv[1:])
    args = ap.parse_args(argv)
    scale = SCALES[args.scale]
    skipped = {}
    pg = None
    try:
        pg = Postgres()
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        skipped["postgres"] = "could not start a throwaway PostgreSQL: %s" % e
    tmp_root = tempfile.mkdtemp(prefix="moraine-bench-")
    results = {}
    curves, after, mixed, sessions = {}, {}, {}, None
    try:
        if args.workload == "mixed":
            mixed = run_mixed([b for b in backends(pg) if b.name not in skipped], scale, tmp_root, skipped)
        if args.workload == "sessions":
            sessions = run_sessions([b for b in backends(pg) if b.name not in skipped], scale, tmp_root, skipped)
        if args.workload in ("all", "growth"):
            for kind in ("inlined", "parquet"):
                running = [b for b in backends(pg) if b.name not in skipped]
                for name, (lat, post) in run_growth(running, scale, tmp_root, kind, skipped).items():
                    curves.setdefault(kind, {})[name] = lat
                    after.setdefault(kind, {})[name] = post
                print("growth (%s) done" % kind, flush=True)
        for rep in range(scale["reps"] if args.workload in ("all", "classic", "many_writers") else 0):
            for backend in backends(pg):
                if backend.name in skipped:
                    continue
                try:
                    metrics = {}
                    if args.workload in ("all", "classic"):
                        metrics.update(run_workloads(backend, scale, tmp_root))
                    if args.workload in ("all", "many_writers"):
                        metrics.update(many_writers_workload(backend, scale, tmp_root))
                    for metric, value in metrics.items():
                        results.setdefault(metric, {}).setdefault(backend.name, []).append(value)
                except Exception as e:  # noqa: BLE001
                    skipped[backend.name] = "failed: %s" % str(e).splitlines()[0]
            print("repetition %d/%d done" % (rep + 1, scale["reps"]), flush=True)
    finally:
        if pg:
            pg.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)
    import duckdb
    peers = [b for b in ("duckdb", "sqlite", "postgres") if b not in skipped]
    print("\nDuckDB %s, DuckLake d8a1881e, moraine %s, scale %s, %d repetitions (median [min-max])"
          % (duckdb.__version__, harness_version(), args.scale, scale["reps"]))
    header = "%-34s %26s" % ("metric", "moraine") + "".join("%26s %7s" % (p, "ratio") for p in peers)
    print(header)
    report = {}
    for metric in sorted(results):
        row = results[metric]
        summary = {b: {"median": statistics.median(v), "min": min(v), "max": max(v)} for b, v in row.items()}
        report[metric] = summary
        m = summary.get("moraine")
        line = "%-34s %26s" % (metric, fmt(m))
        for p in peers:
            s = summary.get(p)
            ratio = (m["median"] / s["median"]) if (m and s and s["median"]) else float("nan")
            line += "%26s %7.2f" % (fmt(s), ratio)
        print(line)
    growth = growth_report(curves, after, scale) if curves else {}
    mixed = mixed_report(mixed) if mixed else {}
    sessions = sessions_report(*sessions) if sessions else {}
    for name, why in skipped.items():
        print("skipped %s: %s" % (name, why))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench-%s.json" % args.scale)
    with open(path, "w") as f:
        json.dump({"duckdb": duckdb.__version__, "ducklake": "d8a1881e", "moraine": harness_version(),
                   "scale": args.scale, "skipped": skipped, "results": report, "growth": growth,
                   "mixed": mixed, "sessions": sessions}, f, indent=1)
    print("wrote %s" % path)
    return 0


def harness_version():
    con = harness.connect()
    return con.execute("SELECT moraine_version()").fetchone()[0]


def fmt(s):
    if not s:
        return "-"
    return "%.1f [%.1f-%.1f]" % (s["median"], s["min"], s["max"]) if s["max"] < 10000 else \
        "%d [%d-%d]" % (s["median"], s["min"], s["max"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
