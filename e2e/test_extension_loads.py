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
