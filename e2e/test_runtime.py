"""The pinned DuckDB runtime itself: what every other test relies on (no moraine needed)."""

import os

import harness


def test_cli_is_the_pinned_official_binary():
    r = harness.run_cli("SELECT version() AS v, (SELECT platform FROM pragma_platform()) AS p;", load=()).ok()
    assert r.results() == [[{"v": "v1.5.5", "p": "linux_amd64"}]], r.stdout


def test_cli_loads_ducklake_offline_on_duckdb_file_catalog(tmp):
    sql = """
        ATTACH 'ducklake:{t}/meta.ducklake' AS lake (DATA_PATH '{t}/data/');
        CREATE TABLE lake.items AS SELECT i AS id FROM range(30) t(i);
        SELECT count(*) AS n FROM lake.items;
    """.format(t=tmp)
    r = harness.run_cli(sql, load=("ducklake",)).ok()
    assert r.results() == [[{"n": 30}]], r.stdout
    assert os.path.isdir(os.path.join(tmp, "data"))


def test_cli_reports_errors_with_nonzero_exit():
    r = harness.run_cli("SELECT * FROM no_such_table;", load=())
    assert r.rc != 0
    assert "no_such_table" in r.stderr


def test_python_module_fetches_timestamptz_with_pytz():
    con = harness.connect(load=("ducklake",))
    (ts,) = con.execute("SELECT TIMESTAMPTZ '2024-01-02 03:04:05+00'").fetchone()
    assert ts.year == 2024 and ts.tzinfo is not None
