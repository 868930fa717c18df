"""The operator's command `dist/moraine` (no DuckDB inside) on lakes the official CLI wrote: `audit` exits 1 with
findings and 0 once they are addressed; `verify` passes a healthy lake (local and S3, next to a live writer it
never fences) and names the object of a truncated SST or manifest; `snapshots` and `dump` give the catalog as CSV
and JSON; every command has --help with examples."""

import csv
import io
import json
import os
import shutil
import subprocess

import harness
import s3server


def attach(tmp):
    return "ATTACH 'ducklake:moraine:%s/lake' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)


def make_lake(tmp):
    harness.require_extension("moraine")
    harness.run_cli(attach(tmp) + """
        CREATE TABLE lake.items (id INTEGER, name VARCHAR);
        INSERT INTO lake.items VALUES (1, 'a,b'), (2, 'say "hi"');
        INSERT INTO lake.items SELECT range + 10, 'row' FROM range(20);
        DELETE FROM lake.items WHERE id = 2;
    """).ok()
    return os.path.join(tmp, "lake")


def test_the_command_links_no_duckdb():
    harness.require_dist()
    ldd = subprocess.run(["ldd", harness.MORAINE], capture_output=True, text=True, timeout=60)
    assert "duckdb" not in ldd.stdout.lower(), ldd.stdout
    with open(harness.MORAINE, "rb") as f:
        binary = f.read()
    # DuckDB's C API entry points are in any binary that links DuckDB.
    assert b"duckdb_open_ext" not in binary and b"duckdb_extension" not in binary.lower()
    assert len(binary) < 40 << 20, len(binary)


def test_every_command_has_help_with_examples():
    r = harness.moraine("--help")
    assert r.returncode == 0 and "examples:" in r.stdout, r.stdout
    for command in ("audit", "verify", "snapshots", "dump"):
        for args in ((command, "--help"), ("help", command)):
            r = harness.moraine(*args)
            assert r.returncode == 0, (args, r.stderr)
            assert r.stdout.startswith("usage: moraine %s" % command) and "examples:" in r.stdout, r.stdout
    r = harness.moraine("frobnicate", "/x")
    assert r.returncode == 2 and "unknown command" in r.stderr, r.stderr
    r = harness.moraine("dump", "/x", "--format", "xml")
    assert r.returncode == 2 and "csv or json" in r.stderr, r.stderr


def test_audit_exits_1_with_findings_and_0_once_addressed(tmp):
    lake = make_lake(tmp)
    r = harness.moraine("audit", lake)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "UNBOUNDED" in r.stdout, r.stdout
    harness.run_cli(attach(tmp) + """
        CALL ducklake_set_option('lake', 'expire_older_than', '1 week');
        CALL ducklake_expire_snapshots('lake', older_than => now());
    """).ok()
    r = harness.moraine("audit", lake)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "finding" not in r.stdout, r.stdout


def test_audit_of_a_missing_store_exits_2(tmp):
    r = harness.moraine("audit", os.path.join(tmp, "nothing"))
    assert r.returncode == 2 and "no moraine store at" in r.stderr, (r.returncode, r.stderr)


def test_verify_passes_a_healthy_lake_next_to_its_writer(tmp):
    """A lake with Parquet files, inlined rows and deletions, expired snapshots and a dropped table verifies clean,
    also while a writer holds it; the writer commits afterwards, so it was not fenced."""
    lake = make_lake(tmp)
    harness.require_extension("moraine")
    con = harness.connect()
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/')" % (lake, tmp))
    con.execute("CREATE TABLE lake.gone AS SELECT 1 AS x")
    con.execute("DROP TABLE lake.gone")
    con.execute("UPDATE lake.items SET name = 'changed' WHERE id = 11")
    con.execute("CALL ducklake_flush_inlined_data('lake')")
    con.execute("CALL ducklake_expire_snapshots('lake', versions => [2, 3])")
    r = harness.moraine("verify", lake)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip().endswith(": 0 violations"), r.stdout
    con.execute("INSERT INTO lake.items VALUES (99, 'after verify')")
    assert con.execute("SELECT count(*) FROM lake.items").fetchone()[0] == 22
    con.close()


def test_verify_names_a_truncated_sst_or_manifest(tmp):
    lake = make_lake(tmp)
    for folder in ("compacted", "manifest"):
        victim = harness.newest_object(lake, folder)
        keep = victim + ".keep"
        shutil.copyfile(victim, keep)
        harness.truncate_half(victim)
        r = harness.moraine("verify", lake)
        assert r.returncode == 1, (folder, r.returncode, r.stdout, r.stderr)
        relative = os.path.relpath(victim, lake)
        assert "VIOLATION object-readable %s:" % relative in r.stdout, (folder, r.stdout, r.stderr)
        os.replace(keep, victim)
        r = harness.moraine("verify", lake)
        assert r.returncode == 0, (folder, r.stdout, r.stderr)


def test_verify_on_s3(tmp):
    """Credentials and endpoint from AWS_*, as a cron job on another machine would run it."""
    harness.require_extension("moraine")
    url = s3server.url(tmp, "lake")
    r = harness.run_cli(s3server.secret_sql() + "ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s', READ_WRITE);\n"
                        "CREATE TABLE lake.t AS SELECT range AS x FROM range(50);\n"
                        "INSERT INTO lake.t VALUES (1000);\n" % (url, s3server.url(tmp, "lake", "data/")),
                        load=s3server.LOAD).ok()
    r = harness.moraine("verify", url, env=s3server.aws_env())
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.strip().endswith(": 0 violations") and "head 2" in r.stdout, r.stdout
    r = harness.moraine("audit", url, env=s3server.aws_env())
    assert r.returncode == 1 and "UNBOUNDED" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_snapshots_and_dump_as_csv_and_json(tmp):
    lake = make_lake(tmp)
    r = harness.moraine("snapshots", lake)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["snapshot_id"] for row in rows] == ["0", "1", "2", "3", "4"], r.stdout
    assert rows[1]["changes_made"] == 'created_table:"main"."items"', rows[1]
    assert rows[4]["snapshot_time"].endswith("+00"), rows[4]
    snapshots = json.loads(harness.moraine("snapshots", lake, "--format", "json").stdout)
    assert [s["snapshot_id"] for s in snapshots] == [0, 1, 2, 3, 4] and snapshots[0]["author"] is None

    # One table as CSV, at the head and at an older snapshot.
    r = harness.moraine("dump", lake, "--table", "ducklake_data_file")
    assert r.returncode == 0, r.stderr
    files = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(files) == 1 and files[0]["record_count"] == "20" and files[0]["end_snapshot"] == "", files
    r = harness.moraine("dump", lake, "--at", "2", "--table", "ducklake_data_file")
    assert list(csv.DictReader(io.StringIO(r.stdout))) == [], r.stdout
    # The inlined rows visible at snapshot 2, as DuckLake stores them: the delete at 4 ended row 1.
    inlined = json.loads(harness.moraine("dump", lake, "--at", "2", "--format=json",
                                         "--table", "ducklake_inlined_data_1_1").stdout)
    assert [(r["row_id"], r["end_snapshot"]) for r in inlined] == [(0, None), (1, 4)], inlined
    # Every table as JSON.
    everything = json.loads(harness.moraine("dump", lake, "--format", "json").stdout)
    assert everything["snapshot_id"] == 4 and everything["head"] == 4
    assert [t["table_name"] for t in everything["tables"]["ducklake_table"]] == ["items"]
    assert len(everything["tables"]["ducklake_snapshot"]) == 5
    assert "ducklake_inlined_delete_1" in everything["tables"] or "ducklake_inlined_data_1_1" in everything["tables"]
    r = harness.moraine("dump", lake, "--at", "99")
    assert r.returncode == 2 and "snapshot 99" in r.stderr, r.stderr
    r = harness.moraine("dump", lake, "--table", "no_such_table")
    assert r.returncode == 2 and "no catalog table" in r.stderr, r.stderr
