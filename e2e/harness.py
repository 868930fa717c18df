"""Helpers for moraine's end-to-end tests: the official DuckDB 1.5.5 CLI and Python module from .venv,
both pointed at the project-local extension directory with autoinstall off and unsigned loading on."""

import json
import os
import subprocess
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXT_DIR = os.environ.get("MORAINE_EXTENSION_DIR", os.path.join(ROOT, ".duckdb_extensions"))
SITE = sysconfig.get_paths()["purelib"]  # run.py runs under the venv python
CLI = os.path.join(SITE, "duckdb_cli", "duckdb")  # the real CLI binary, not .venv/bin/duckdb
DEFAULT_LOAD = ("ducklake", "moraine")
DIST = os.path.join(ROOT, "dist")  # written by `cargo xtask dist`
MORAINE = os.path.join(DIST, "moraine")
WHEELHOUSE = os.environ.get("MORAINE_WHEELHOUSE", os.path.join(ROOT, ".venv", "wheelhouse"))
# A local store's journals (designs 0022 and 0029): `journal#0` in each of these folders, a file of a fixed size
# that no listing shows (`layout::JOURNALED`, `journal::JOURNAL_BYTES`).
JOURNAL = "journal#0"
JOURNAL_BYTES = 256 << 10
JOURNALED = ("wal", "manifest")


def sql_quote(s):
    return "'" + str(s).replace("'", "''") + "'"


def preamble(load=DEFAULT_LOAD):
    sql = "SET extension_directory=%s; SET autoinstall_known_extensions=false;\n" % sql_quote(EXT_DIR)
    for ext in load:
        sql += "LOAD %s;\n" % ext
    return sql


def duckdb_version():
    import duckdb

    return "v" + duckdb.__version__


def installed(name):
    d = os.path.join(EXT_DIR, duckdb_version())
    if not os.path.isdir(d):
        return False
    return any(os.path.isfile(os.path.join(d, p, name + ".duckdb_extension")) for p in os.listdir(d))


def require_extension(name):
    """Fails the test (it is not skipped) when an extension is not installed."""
    assert installed(name), "extension %s not installed in %s: run `cargo xtask build`" % (name, EXT_DIR)


def newest_object(lake, folder):
    """The newest object in a folder of a local lake's catalog (manifest, compacted, wal). Names with `#<n>`
    are staged writes and spares, which are no objects."""
    import glob

    objects = [p for p in glob.glob(os.path.join(lake, "catalog", folder, "*")) if "#" not in os.path.basename(p)]
    return sorted(objects)[-1]


def truncate_half(path):
    """Cuts a file to its first half, as an interrupted copy would leave it."""
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def require_dist():
    """Fails the test (it is not skipped) when `cargo xtask dist` has not run."""
    assert os.path.isfile(MORAINE), "%s missing: run `make dist`" % MORAINE


def moraine(*args, env=None, timeout=300):
    """Runs the operator's command `dist/moraine ARGS…`; returns the CompletedProcess (text)."""
    require_dist()
    return subprocess.run([MORAINE] + [str(a) for a in args], capture_output=True, text=True, env=env,
                          timeout=timeout)


class CliResult:
    def __init__(self, proc, fmt):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.fmt = fmt

    def ok(self):
        assert self.rc == 0, "duckdb CLI failed (rc=%d)\nstdout:\n%s\nstderr:\n%s" % (
            self.rc, self.stdout, self.stderr)
        return self

    def results(self):
        """Result sets of the statements that produced output, each a list of row dicts (json) or a
        list of row lists (csv, header row first)."""
        if self.fmt == "json":
            return parse_json_stream(self.stdout)
        if self.fmt == "csv":
            import csv
            import io

            blocks = [b for b in self.stdout.split("\n\n") if b.strip()]
            return [list(csv.reader(io.StringIO(b))) for b in blocks]
        raise ValueError("results() needs fmt json or csv")


def parse_json_stream(text):
    dec = json.JSONDecoder()
    out, i = [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        value, i = dec.raw_decode(text, i)
        out.append(value)


def run_cli(sql, database=None, load=DEFAULT_LOAD, fmt="json", cwd=None, unsigned=True, bail=True, timeout=120,
            wrap=()):
    """Runs SQL in a fresh official CLI process (stdin), after the preamble that sets the extension
    directory, turns autoinstall off and LOADs `load`; `wrap` is a command the CLI runs under (strace).
    Returns a CliResult (rc, stdout, stderr)."""
    args = list(wrap) + [CLI]
    if unsigned:
        args.append("-unsigned")
    if bail:
        args.append("-bail")
    if fmt:
        args.append("-" + fmt)
    args.append(database if database is not None else ":memory:")
    proc = subprocess.run(args, input=preamble(load) + sql, capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)
    return CliResult(proc, fmt)


def connect(database=":memory:", load=DEFAULT_LOAD, read_only=False):
    """A duckdb Python-module connection with the same configuration as the CLI helper."""
    import duckdb

    con = duckdb.connect(database, read_only=read_only, config={
        "allow_unsigned_extensions": "true",
        "extension_directory": EXT_DIR,
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "true",
    })
    for ext in load:
        con.execute("LOAD " + ext)
    return con
