"""Locations and objects that are not a healthy moraine store: each gets a clear error at ATTACH, never a crash or a
hang, and nothing is lost (the failed attach writes nothing and leaves no lock behind)."""

import os
import shutil

import harness


def attach(path, extra="", sql="SELECT count(*) AS n FROM lake.t;"):
    harness.require_extension("moraine")
    r = harness.run_cli("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/'%s);\n%s" % (
        path, os.path.dirname(path), extra, sql), bail=False, timeout=90)
    assert r.rc < 128, "the CLI died with signal %d\n%s" % (r.rc - 128, r.stderr)
    return r


def test_a_file_is_not_a_store(tmp):
    path = os.path.join(tmp, "lake.duckdb")
    harness.run_cli("CREATE TABLE x AS SELECT 1 AS a;", database=path, load=()).ok()
    size = os.path.getsize(path)
    r = attach(path)
    assert r.rc != 0 and "is a file, not a moraine store" in r.stderr, r.stderr
    assert os.path.getsize(path) == size


def test_a_location_holding_foreign_objects_is_refused(tmp):
    catalog = os.path.join(tmp, "lake", "catalog")
    os.makedirs(catalog)
    with open(os.path.join(catalog, "notes.txt"), "w") as f:
        f.write("not a moraine store")
    r = attach(os.path.join(tmp, "lake"))
    assert r.rc != 0 and "is not a moraine store" in r.stderr and "notes.txt" in r.stderr, r.stderr
    assert sorted(os.listdir(catalog)) == ["notes.txt"], os.listdir(catalog)


def test_read_only_attach_of_an_empty_location_explains_itself(tmp):
    r = attach(os.path.join(tmp, "nothing"), extra=", READ_ONLY")
    assert r.rc != 0 and "no moraine store at" in r.stderr and "READ_ONLY" in r.stderr, r.stderr
    # A reader makes nothing, not even the folders of the location it was pointed at.
    assert not os.path.exists(os.path.join(tmp, "nothing")), os.listdir(tmp)


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_a_store_whose_manifests_were_lost_is_refused_and_left_as_it_was(tmp):
    """A copy of a lake that left out `catalog/manifest/` (or emptied it): a read-write ATTACH must not open it as a
    new, empty lake, nor write a new store among the old objects. It fails, writes nothing, and once the manifests
    are back the lake is whole."""
    lake = os.path.join(tmp, "lake")
    harness.run_cli("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/');\n"
                    "CREATE TABLE lake.t AS SELECT range AS x FROM range(10);\n" % (lake, tmp)).ok()
    manifests = os.path.join(lake, "catalog", "manifest")
    kept = os.path.join(tmp, "manifests")
    shutil.copytree(manifests, kept)
    for emptied in (False, True):
        shutil.rmtree(manifests, ignore_errors=True)
        if emptied:
            os.mkdir(manifests)
        before = _files(lake)
        for extra in ("", ", READ_ONLY"):
            r = attach(lake, extra=extra)
            assert r.rc != 0 and "no manifest" in r.stderr and "Restore the manifests" in r.stderr, r.stderr
            assert _files(lake) == before, sorted(set(_files(lake)) ^ set(before))
    shutil.rmtree(manifests)
    shutil.copytree(kept, manifests)
    assert attach(lake).ok().results()[-1] == [{"n": 10}]


def _overwrite_middle(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    third = len(data) // 3
    data[third:third + 16] = bytes(b ^ 0xFF for b in data[third:third + 16])
    with open(path, "wb") as f:
        f.write(bytes(data))


def test_damaged_objects_fail_clearly_and_lose_nothing(tmp):
    """Truncated or overwritten manifests and SSTs: the attach fails with an error naming the damage (bounded: SlateDB
    retries a failing read a few times, not forever). Putting the original object back restores every row."""
    lake = os.path.join(tmp, "lake")
    harness.run_cli("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/');\n"
                    "CREATE TABLE lake.t AS SELECT range AS x FROM range(10);\n"
                    "INSERT INTO lake.t VALUES (10);\n" % (lake, tmp)).ok()
    cases = [
        ("manifest", harness.truncate_half, "opening"),
        ("manifest", _overwrite_middle, "damaged"),
        ("compacted", harness.truncate_half, "Requested range was invalid"),
        ("compacted", _overwrite_middle, "checksum mismatch"),
    ]
    for folder, damage, message in cases:
        victim = harness.newest_object(lake, folder)
        keep = victim + ".keep"
        shutil.copyfile(victim, keep)
        damage(victim)
        r = attach(lake)
        assert r.rc != 0, (folder, damage.__name__, r.stdout)
        assert message in r.stderr and "__ducklake_metadata_lake" in r.stderr, (folder, damage.__name__, r.stderr)
        os.replace(keep, victim)
        r = attach(lake)
        assert r.rc == 0, (folder, damage.__name__, r.stderr)
        assert r.results() == [[{"n": 11}]], (folder, damage.__name__, r.stdout)
