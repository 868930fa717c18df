"""The built moraine artifact loads into the official CLI and Python module (needs `cargo xtask build`)."""

import harness


def test_moraine_loads_in_official_cli():
    harness.require_extension("moraine")
    r = harness.run_cli("SELECT moraine_version() AS v;").ok()
    assert r.results() == [[{"v": "0.1.0"}]], r.stdout


def test_moraine_loads_in_python_module():
    harness.require_extension("moraine")
    con = harness.connect()
    assert con.execute("SELECT moraine_version()").fetchone() == ("0.1.0",)
    rows = con.execute(
        "SELECT loaded, install_mode FROM duckdb_extensions() WHERE extension_name = 'moraine'").fetchall()
    assert rows and rows[0][0] is True, rows


def test_moraine_refused_without_unsigned():
    harness.require_extension("moraine")
    r = harness.run_cli("SELECT 1;", unsigned=False)
    assert r.rc != 0, r.stdout
    assert "moraine" in r.stderr, r.stderr


def test_another_duckdb_release_refuses_the_extension():
    """A real DuckDB 1.5.4 CLI (installed apart from the pinned runtime by `cargo xtask setup`) refuses the
    artifact with DuckDB's own message naming both versions, rather than loading it and crashing."""
    import os
    import subprocess
    harness.require_extension("moraine")
    cli = os.path.join(harness.ROOT, ".venv", "other-duckdb-1.5.4", "duckdb_cli", "duckdb")
    assert os.path.isfile(cli), "DuckDB 1.5.4 CLI missing: run `cargo xtask setup`"
    artifact = os.path.join(harness.ROOT, "build", "moraine.duckdb_extension")
    proc = subprocess.run([cli, "-unsigned", "-c", "SELECT version(); LOAD '%s';" % artifact],
                          capture_output=True, text=True, timeout=60)
    assert "v1.5.4" in proc.stdout, proc.stdout
    assert proc.returncode != 0 and proc.returncode < 128, (proc.returncode, proc.stderr)
    assert "v1.5.5" in proc.stderr and "v1.5.4" in proc.stderr, proc.stderr


def test_footer_names_a_version_duckdb_checks(tmp):
    """DuckDB 1.5.5 loads the artifact because its footer says CPP / v1.5.5 / linux_amd64; the same bytes with the
    footer's DuckDB version changed are refused with DuckDB's own version-mismatch error, which is what any other
    DuckDB version does with the real artifact."""
    import os
    harness.require_extension("moraine")
    artifact = os.path.join(harness.ROOT, "build", "moraine.duckdb_extension")
    with open(artifact, "rb") as f:
        data = bytearray(f.read())
    field = data[-352:-320]
    assert field.rstrip(b"\0") == b"v1.5.5", field
    data[-352:-320] = b"v1.5.4".ljust(32, b"\0")
    other = os.path.join(tmp, "moraine.duckdb_extension")
    with open(other, "wb") as f:
        f.write(bytes(data))
    r = harness.run_cli("LOAD '%s';" % other, load=("ducklake",))
    assert r.rc != 0, r.stdout
    assert "v1.5.4" in r.stderr and "v1.5.5" in r.stderr, r.stderr
