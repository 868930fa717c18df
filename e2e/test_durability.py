"""A commit is on disk before DuckDB hears that it succeeded, as DuckDB's own commit is (it syncs its WAL):
every object moraine publishes in a local catalog has its bytes synced before its name appears, and its folder
synced after, or, for a commit's WAL object, its bytes synced in the WAL folder's journal first (design
0022), its file made later in a batch (design 0027). Checked on the system calls of the real CLI, traced by
strace. The writer lease and the turn's objects are the exception: only processes that a power cut ends with
them read those (design 0020). And what a machine crash takes of the journaled objects, the next attach
restores; what a process that dies leaves unpublished, the next that looks publishes."""

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

from harness import JOURNAL, JOURNALED, require_extension, run_cli, sql_quote

TRACED = "fsync,fdatasync,link,linkat,rename,renameat,renameat2"
# `123 fsync(5</path/x>) = 0`, or its first half when another thread's call interleaves.
SYNC = re.compile(r"^\d+\s+(?:fsync|fdatasync)\(\d+<(?P<path>[^>]*)>")
# `123 linkat(AT_FDCWD, "/a#1", AT_FDCWD, "/a", 0) = 0`, `123 rename("/a#1", "/a") = 0`
PUBLISH = re.compile(r'^\d+\s+(?:link|linkat|rename|renameat2?)\((?:[^,]*, )?"(?P<src>[^"]+)", '
                     r'(?:[^,]*, )?"(?P<dst>[^"]+)"')
DONE = re.compile(r"= 0$")


def trace(tmp, sql):
    """The CLI's file-publishing and sync calls while it runs `sql`, one string per call, in order."""
    assert shutil.which("strace"), "strace is missing: `cargo xtask setup` installs it from Debian's packages"
    log = os.path.join(tmp, "strace.log")
    run_cli(sql, wrap=("strace", "-f", "-y", "-qq", "-o", log, "-e", "trace=" + TRACED)).ok()
    calls = []
    pending = {}
    with open(log) as f:
        for line in f:
            line = line.rstrip("\n")
            pid = line.split(" ", 1)[0]
            if line.endswith("<unfinished ...>"):
                pending[pid] = line[: -len("<unfinished ...>")].rstrip()
                continue
            if "resumed>" in line and pid in pending:
                line = pending.pop(pid) + line.split("resumed>", 1)[1]
            calls.append(line)
    return calls


def unsynced_publishes(calls, under):
    """The objects published under `under` whose bytes were not synced before their name appeared, or whose
    folder was not synced after; every object published there synced; the WAL objects journaled (as many
    syncs of their folder's journal before them as journaled objects up to them); and those unsynced on
    purpose."""
    syncs = [SYNC.match(call) for call in calls]
    synced, published, journaled, missing, unsynced_on_purpose = set(), [], [], [], []
    journal_syncs = {}  # WAL folder: how many times its journal was synced so far
    for i, call in enumerate(calls):
        if syncs[i]:
            path = syncs[i].group("path")
            synced.add(path)
            if os.path.basename(path) == JOURNAL:
                folder = os.path.dirname(path)
                journal_syncs[folder] = journal_syncs.get(folder, 0) + 1
            continue
        publish = PUBLISH.match(call)
        if not publish or not DONE.search(call) or not publish.group("dst").startswith(under):
            continue
        src, dst = publish.group("src"), publish.group("dst")
        folder = os.path.dirname(dst)
        if "#" in os.path.basename(dst) and os.path.basename(dst) != JOURNAL:
            continue  # a spare made ahead (design 0017): no object, listings skip it
        if for_live_processes(dst[len(under):]):
            unsynced_on_purpose.append(dst)
            continue
        earlier = sum(1 for p in journaled if os.path.dirname(p) == folder)
        if os.path.basename(folder) in JOURNALED and journal_syncs.get(folder, 0) > earlier:
            journaled.append(dst)
            continue
        published.append(dst)
        folder_synced_after = any(sync and sync.group("path") == folder for sync in syncs[i + 1:])
        if src not in synced or not folder_synced_after:
            missing.append((dst, src in synced, folder_synced_after))
    return missing, published, journaled, unsynced_on_purpose


def for_live_processes(relative):
    """The lease and the turn's objects (`<schema store>/writer.lease`, `<schema store>/turn/...`)."""
    parts = relative.split(os.sep)
    return parts[-1] == "writer.lease" or "turn" in parts[:-1]


def traced_commits(tmp, commits):
    """A new lake in `tmp`, a table, `commits` single-row inserts and a detach, traced: the lake and the calls."""
    require_extension("moraine")
    lake = os.path.join(tmp, "lake")
    sql = ("ATTACH %s AS lake (DATA_PATH %s);\n" % (sql_quote("ducklake:moraine:" + lake),
                                                     sql_quote(os.path.join(tmp, "data") + "/"))
           + "CREATE TABLE lake.t (id INTEGER);\n"
           + "".join("INSERT INTO lake.t VALUES (%d);\n" % i for i in range(commits))
           + "DETACH lake;\n")
    return lake, trace(tmp, sql)


def test_every_catalog_object_is_synced_before_its_name_appears_and_its_folder_after(tmp):
    lake, calls = traced_commits(tmp, 5)
    missing, published, journaled, unsynced = unsynced_publishes(calls, os.path.realpath(lake) + os.sep)
    # Every commit lands as a WAL object journaled first, and the attach writes manifests, the journal
    # itself (synced and its folder synced, as any object) and the lease.
    assert len(journaled) >= 6, "expected a journaled WAL object per commit, saw %d: %s" % (len(journaled),
                                                                                         journaled)
    assert any(os.path.basename(p) == JOURNAL for p in published), published
    assert len(published) > 1, published
    # The attach took the writer lease, unsynced on purpose: a sync is a disk cache flush.
    assert any(p.endswith(os.sep + "writer.lease") for p in unsynced), unsynced
    assert not missing, "published without a sync (object, bytes synced, folder synced): %s" % missing[:5]


def test_the_lake_folders_a_first_attach_creates_are_synced_in_their_parents(tmp):
    require_extension("moraine")
    lake = os.path.join(tmp, "deep", "er", "lake")
    calls = trace(tmp, "ATTACH %s AS lake (DATA_PATH %s);\nDETACH lake;\n"
                  % (sql_quote("ducklake:moraine:" + lake), sql_quote(os.path.join(tmp, "data") + "/")))
    synced = {SYNC.match(c).group("path") for c in calls if SYNC.match(c)}
    real = os.path.realpath(tmp)
    for folder in (real, os.path.join(real, "deep"), os.path.join(real, "deep", "er")):
        assert folder in synced, "%s gained an entry that was never synced" % folder


def test_every_commit_makes_one_cache_flush(tmp):
    """Once the WAL folder's journal is made, the only sync in that folder is the journal's, one per
    commit: no sync of an object, none of the folder. And the commits' objects get their files in batches
    (design 0027), not one per commit, so no commit leaves the next one's sync an inode to write."""
    lake, calls = traced_commits(tmp, 8)
    wal = os.path.join(os.path.realpath(lake), "catalog", "wal")
    journal_made, syncs, bursts, objects, last = False, [], 0, 0, None
    for call in calls:
        publish = PUBLISH.match(call)
        if publish and DONE.search(call) and os.path.dirname(publish.group("dst")) == wal:
            name = os.path.basename(publish.group("dst"))
            if name == JOURNAL:
                journal_made = True
            elif "#" not in name and journal_made:
                objects += 1
                bursts += last != "publish"
                last = "publish"
            continue
        sync = SYNC.match(call)
        if journal_made and sync and (sync.group("path") == wal or os.path.dirname(sync.group("path")) == wal):
            if not syncs and sync.group("path") == wal:
                continue  # the folder that gained the journal's name
            syncs.append(os.path.basename(sync.group("path")))
            last = "sync"
    assert syncs.count(JOURNAL) >= 8 and set(syncs) == {JOURNAL}, syncs
    assert objects >= 8, "the commits' WAL objects never got their files: %d" % objects
    assert bursts * 3 <= syncs.count(JOURNAL), "%d objects published in %d bursts over %d commits" % (
        objects, bursts, syncs.count(JOURNAL))


def journal_of(lake, folder="wal"):
    return os.path.join(lake, "catalog", folder, JOURNAL)


def read_journal(path):
    """The journal's epoch and the records of that epoch, in order: (kind, name, body). The layout is
    design 0022's: a 4 KiB header block, then records of a 28-byte head, the name and the body, padded to 8."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"MORJRNL2", data[:8]
    epoch = struct.unpack_from("<Q", data, 8)[0]
    offset, records = 4096, []
    while offset + 28 <= len(data):
        magic, their_epoch, kind, name_len, body_len, crc = struct.unpack_from("<IQB3xIII", data, offset)
        if magic != 0x4D4A5231 or their_epoch != epoch:
            break
        rest = data[offset + 28:offset + 28 + name_len + body_len]
        if zlib.crc32(data[offset + 4:offset + 24] + rest) != crc:
            break
        records.append((kind, rest[:name_len].decode(), rest[name_len:]))
        offset += (28 + name_len + body_len + 7) // 8 * 8
    return epoch, records


def as_after_a_reboot(path):
    """The journal under another boot id, as the machine's next boot finds it."""
    with open(path, "r+b") as f:
        header = bytearray(f.read(36))
        header[16:32] = os.urandom(16)
        header[32:36] = struct.pack("<I", zlib.crc32(bytes(header[:32])))
        f.seek(0)
        f.write(header)


def a_writer_that_dies(tmp, commits):
    """A new lake in `tmp` whose writer acknowledges `commits` single-row inserts and then dies without
    detaching: no flush, no image, no close; the commits live in the WAL objects alone. The lake and the
    ATTACH statement."""
    require_extension("moraine")
    lake, data = os.path.join(tmp, "lake"), os.path.join(tmp, "data") + "/"
    attach = "ATTACH %s AS lake (DATA_PATH %s)" % (sql_quote("ducklake:moraine:" + lake), sql_quote(data))
    script = ("import harness, os\n"
              "con = harness.connect()\n"
              "con.execute(%r)\n"
              "con.execute('CREATE TABLE lake.t (id INTEGER)')\n"
              "for i in range(%d):\n"
              "    con.execute('INSERT INTO lake.t VALUES (%%d)' %% i)\n"
              "os._exit(0)\n") % (attach, commits)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__))))
    return lake, attach


def test_what_a_process_that_dies_left_unpublished_the_next_attach_sees(tmp):
    lake, attach = a_writer_that_dies(tmp, 40)
    folder = os.path.dirname(journal_of(lake))
    _, records = read_journal(journal_of(lake))
    unpublished = [name for kind, name, _ in records
                   if kind == 1 and not os.path.exists(os.path.join(folder, name))]
    assert unpublished, "every journaled object already had its file: nothing was left to publish"
    r = run_cli(attach[:-1] + ", READ_ONLY);\nSELECT count(*) AS n, sum(id)::BIGINT AS s FROM lake.t;\n").ok()
    assert r.results()[0] == [{"n": 40, "s": sum(range(40))}], r.results()
    r = run_cli(attach + ";\nINSERT INTO lake.t VALUES (40);\nSELECT count(*) AS n FROM lake.t;\n").ok()
    assert r.results()[-1] == [{"n": 41}], r.results()


def test_a_reader_that_may_not_write_the_lake_is_refused_with_the_cause_and_loses_nothing(tmp):
    """Every process that opens a lake can publish what a writer left journaled, because opening one needs
    write access: SlateDB's reader pins its view with a checkpoint written into the manifest. A user without
    it gets the cause at ATTACH, not a view without the journaled commits (design 0027). The official CLI
    binary runs as the unprivileged user `nobody`."""
    lake, attach = a_writer_that_dies(tmp, 40)
    os.chmod(tmp, 0o755)
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "HOME=/nonexistent")
    r = run_cli(attach[:-1] + ", READ_ONLY);\nSELECT count(*) AS n FROM lake.t;\n", wrap=nobody)
    assert r.rc != 0 and "Permission denied" in r.stderr, (r.rc, r.stdout, r.stderr)
    r = run_cli(attach[:-1] + ", READ_ONLY);\nSELECT count(*) AS n, sum(id)::BIGINT AS s FROM lake.t;\n").ok()
    assert r.results()[0] == [{"n": 40, "s": sum(range(40))}], r.results()


def test_what_a_machine_crash_takes_of_acknowledged_commits_the_next_attach_restores(tmp):
    lake, attach = a_writer_that_dies(tmp, 40)
    journaled = {}  # folder: (epoch, records)
    for folder in JOURNALED:
        journaled[folder] = read_journal(journal_of(lake, folder))
    objects = {folder: [name for kind, name, _ in records if kind == 1]
               for folder, (_, records) in journaled.items()}
    assert len(objects["wal"]) >= 40, objects
    # The attach's manifest, which fenced the writer before it (design 0029).
    assert objects["manifest"], objects
    # What the page cache held and a power cut took: names without bytes, bytes cut short, an older
    # object's block under a new name. The objects nobody looked for since they were journaled have no
    # file yet (design 0027): those a power cut takes whole.
    for folder, names in objects.items():
        for i, name in enumerate(names):
            path = os.path.join(os.path.dirname(journal_of(lake, folder)), name)
            if not os.path.exists(path):
                continue
            if i % 3 == 0:
                os.remove(path)
            elif i % 3 == 1:
                open(path, "wb").close()
            else:
                size = os.path.getsize(path)
                with open(path, "wb") as f:
                    f.write(b"\0" * size)
        as_after_a_reboot(journal_of(lake, folder))
    # A reader's attach restores them, before SlateDB reads the manifest and replays the WAL.
    r = run_cli(attach[:-1] + ", READ_ONLY);\nSELECT count(*) AS n, sum(id)::BIGINT AS s FROM lake.t;\n").ok()
    assert r.results()[0] == [{"n": 40, "s": sum(range(40))}], r.results()
    for folder, (_, records) in journaled.items():
        for kind, name, body in records:
            if kind == 1:
                with open(os.path.join(os.path.dirname(journal_of(lake, folder)), name), "rb") as f:
                    assert f.read() == body, (folder, name)
    r = run_cli(attach + ";\nINSERT INTO lake.t VALUES (40);\nSELECT count(*) AS n FROM lake.t;\n").ok()
    assert r.results()[-1] == [{"n": 41}], r.results()
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = bytes.fromhex(f.read().strip().replace("-", ""))
    for folder, (epoch, _) in journaled.items():
        next_epoch, _ = read_journal(journal_of(lake, folder))
        assert next_epoch == epoch + 1, folder
        with open(journal_of(lake, folder), "rb") as f:
            assert f.read(32)[16:32] == boot, folder


def test_a_journal_damaged_before_its_last_record_is_refused_not_read_as_its_end(tmp):
    """A crash tears only the journal's last record. Bytes flipped in an earlier one, with whole records after it, are
    damage: a reader that took the broken record for the end would open the lake without the commits after it, and
    say nothing. Every attach refuses it instead, naming the journal."""
    lake, attach = a_writer_that_dies(tmp, 40)
    path = journal_of(lake)
    _, records = read_journal(path)
    assert len(records) >= 10, records
    with open(path, "r+b") as f:
        data = f.read()
        # The body of the fifth record: its head, name and body follow the 4 KiB header block and four records.
        offset = 4096
        for _ in range(4):
            name_len, body_len = struct.unpack_from("<II", data, offset + 16)
            offset += (28 + name_len + body_len + 7) // 8 * 8
        f.seek(offset + 28 + 20)
        f.write(b"\xff" * 8)
    for extra in (", READ_ONLY", ""):
        r = run_cli(attach[:-1] + extra + ");\nSELECT count(*) AS n FROM lake.t;\n", bail=False)
        assert r.rc != 0 and "is damaged at byte" in r.stderr, (r.rc, r.stdout, r.stderr)
