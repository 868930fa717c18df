#!/usr/bin/env python3
"""moraine's sqllogictest runner (DuckDB dialect) on the official duckdb 1.5.5 Python module.

Usage:
    sqllogictest.py [--filter SUBSTR] [--ext-dir DIR] PATH...       # files or directories
    sqllogictest.py --selftest xtask/runner_selftest

Supported records and directives:
    statement ok [CONN]             SQL until a blank line must succeed
    statement error [CONN]          SQL must fail; optional `----` then the expected message
                                    (substring; `<REGEX>:pat` regex search; `<!REGEX>:pat` must not match)
    statement maybe                 SQL may fail
    query TYPES [SORT] [CONN]       TYPES one letter per column (I, T, R, ...); SORT nosort|rowsort|valuesort;
                                    `----` then rows, columns separated by a TAB (or one value per line)
    require NAME                    LOAD NAME; the file fails if that is impossible
    loop VAR A B / foreach VAR V... / concurrentloop ... / endloop  (loops run sequentially, ${VAR})
    mode skip / mode unskip         skip records in between
    skipif duckdb / onlyif X        apply to the next record
    load PATH                       reopen the database as the file PATH; restart: reopen it
    halt                            stop the file here (it passes if nothing failed before)
    # comment

Every file starts on a fresh in-memory database opened with unsigned extensions allowed, the project-local
extension directory, autoinstall off and autoload on, and runs `LOAD ducklake; LOAD moraine;` for those that are
installed. `__TEST_DIR__` is a fresh directory per file, removed afterwards. Named connections (`con2`) are
lazily created cursors of the same database. Values: NULL -> `NULL`, '' -> `(empty)`, booleans `true`/`false`.

The run ends with the line `N passed, M failed` (files); the exit code is 1 if any file failed.
"""

import argparse
import datetime
import decimal
import os
import re
import shutil
import sys
import tempfile
import traceback
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_EXT_DIR = os.environ.get("MORAINE_EXTENSION_DIR", os.path.join(ROOT, ".duckdb_extensions"))
AUTO_LOAD = ("ducklake", "moraine")
SORT_MODES = ("nosort", "rowsort", "valuesort")
IGNORED_REQUIRES = ("skip_reload", "notwindows", "64bit", "notmingw", "no_extension_autoloading")


class ParseError(Exception):
    pass


class RecordFailure(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# parsing


class Record:
    def __init__(self, kind, line, **kw):
        self.kind = kind  # statement | query | require | mode | halt | load | restart | loop
        self.line = line
        self.conn = None
        self.skipif = False
        self.__dict__.update(kw)

    def substituted(self, var, value):
        rec = Record(self.kind, self.line)
        for k, v in self.__dict__.items():
            if k in ("kind", "line"):
                continue
            setattr(rec, k, _subst(v, var, value))
        return rec


def _subst(v, var, value):
    if isinstance(v, str):
        return v.replace("${%s}" % var, value)
    if isinstance(v, list):
        return [_subst(x, var, value) for x in v]
    return v


def _read_block(lines, i):
    """Lines from i until a blank line (or EOF). Returns (block, next_index)."""
    block = []
    while i < len(lines) and lines[i].strip() != "":
        block.append(lines[i])
        i += 1
    return block, i


def parse(text):
    """Parses a file into a flat list of records with loops already expanded."""
    lines = text.split("\n")
    records, i = _parse_until(lines, 0, None)
    return records


def _parse_until(lines, i, end_token):
    records = []
    pending_skip = False
    while i < len(lines):
        raw = lines[i]
        stripped = raw.strip()
        lineno = i + 1
        if stripped == "" or stripped.startswith("#"):
            i += 1
            continue
        tokens = stripped.split()
        head = tokens[0]
        if head == end_token:
            return records, i + 1
        if head in ("skipif", "onlyif"):
            if len(tokens) < 2:
                raise ParseError("line %d: %s needs an engine name" % (lineno, head))
            engine = tokens[1]
            if (head == "skipif" and engine == "duckdb") or (head == "onlyif" and engine != "duckdb"):
                pending_skip = True
            i += 1
            continue
        if head == "statement":
            if len(tokens) < 2 or tokens[1] not in ("ok", "error", "maybe"):
                raise ParseError("line %d: expected `statement ok|error|maybe`" % lineno)
            block, i = _read_block(lines, i + 1)
            sql, expected = _split_dashes(block)
            if tokens[1] != "error" and expected is not None:
                raise ParseError("line %d: `----` is only allowed after `statement error`" % lineno)
            if not sql:
                raise ParseError("line %d: statement without SQL" % lineno)
            rec = Record("statement", lineno, expect=tokens[1], sql="\n".join(sql),
                         error="\n".join(expected).strip() if expected else None)
            rec.conn = tokens[2] if len(tokens) > 2 else None
        elif head == "query":
            if len(tokens) < 2:
                raise ParseError("line %d: `query` needs column types" % lineno)
            types = tokens[1]
            sort, conn = "nosort", None
            for t in tokens[2:]:
                if t in SORT_MODES:
                    sort = t
                else:
                    conn = t
            block, i = _read_block(lines, i + 1)
            sql, expected = _split_dashes(block)
            if expected is None:
                raise ParseError("line %d: query without `----` and expected results" % lineno)
            if not sql:
                raise ParseError("line %d: query without SQL" % lineno)
            rec = Record("query", lineno, types=types, sort=sort, sql="\n".join(sql), expected=expected)
            rec.conn = conn
        elif head == "require":
            if len(tokens) < 2:
                raise ParseError("line %d: `require` needs a name" % lineno)
            rec = Record("require", lineno, name=tokens[1])
            i += 1
        elif head == "mode":
            if len(tokens) < 2:
                raise ParseError("line %d: `mode` needs a value" % lineno)
            rec = Record("mode", lineno, mode=tokens[1])
            i += 1
        elif head == "halt":
            rec = Record("halt", lineno)
            i += 1
        elif head == "load":
            if len(tokens) < 2:
                raise ParseError("line %d: `load` needs a path" % lineno)
            rec = Record("load", lineno, path=tokens[1], readonly="readonly" in tokens[2:])
            i += 1
        elif head in ("restart", "reconnect"):
            rec = Record("restart", lineno)
            i += 1
        elif head in ("loop", "concurrentloop"):
            if len(tokens) != 4:
                raise ParseError("line %d: expected `loop VAR START END`" % lineno)
            try:
                start, end = int(tokens[2]), int(tokens[3])
            except ValueError:
                raise ParseError("line %d: loop bounds must be integers" % lineno)
            body, i = _parse_until(lines, i + 1, "endloop")
            values = [str(v) for v in range(start, end)]
            records.extend(_expand(body, tokens[1], values))
            pending_skip = False
            continue
        elif head in ("foreach", "concurrentforeach"):
            if len(tokens) < 3:
                raise ParseError("line %d: expected `foreach VAR VALUE...`" % lineno)
            body, i = _parse_until(lines, i + 1, "endloop")
            records.extend(_expand(body, tokens[1], tokens[2:]))
            pending_skip = False
            continue
        elif head == "endloop":
            raise ParseError("line %d: `endloop` without a loop" % lineno)
        else:
            raise ParseError("line %d: unknown directive %r" % (lineno, head))
        rec.skipif = pending_skip
        pending_skip = False
        records.append(rec)
    if end_token is not None:
        raise ParseError("missing `%s` before end of file" % end_token)
    return records, i


def _expand(body, var, values):
    out = []
    for v in values:
        out.extend(r.substituted(var, v) for r in body)
    return out


def _split_dashes(block):
    for idx, line in enumerate(block):
        if line.strip() == "----":
            return block[:idx], block[idx + 1:]
    return block, None


# ------------------------------------------------------------------------------------------------
# values


def render(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return "(empty)" if v == "" else v
    return _render_inner(v)


def _render_inner(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time, uuid.UUID)):
        return str(v)
    if isinstance(v, datetime.timedelta):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "".join(chr(b) if 32 <= b < 127 and b != 92 else "\\x%02X" % b for b in bytes(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_render_nested(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join("%s: %s" % (_render_nested(k), _render_nested(x)) for k, x in v.items()) + "}"
    return str(v)


def _render_nested(v):
    if isinstance(v, str):
        return "'" + v + "'"
    return _render_inner(v)


# ------------------------------------------------------------------------------------------------
# execution


def db_config(ext_dir):
    return {
        "allow_unsigned_extensions": "true",
        "extension_directory": ext_dir,
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "true",
    }


def installed(ext_dir, name):
    import duckdb

    d = os.path.join(ext_dir, "v" + duckdb.__version__)
    if not os.path.isdir(d):
        return False
    return any(os.path.isfile(os.path.join(d, plat, name + ".duckdb_extension")) for plat in os.listdir(d))


class FileRun:
    def __init__(self, path, ext_dir, out, auto_load=AUTO_LOAD):
        self.auto_load = auto_load
        self.path = path
        self.ext_dir = ext_dir
        self.out = out
        self.failures = 0
        self.test_dir = None
        self.db_path = ":memory:"
        self.db = None
        self.conns = {}
        self.loaded = []

    # connections
    def open(self):
        import duckdb

        self.close()
        self.db = duckdb.connect(self.db_path, config=db_config(self.ext_dir))
        for name in self.loaded:
            self.db.execute("LOAD " + name)

    def close(self):
        for c in self.conns.values():
            try:
                c.close()
            except Exception:
                pass
        self.conns = {}
        if self.db is not None:
            try:
                self.db.close()
            except Exception:
                pass
        self.db = None

    def conn(self, name):
        if name is None:
            return self.db
        if name not in self.conns:
            c = self.db.cursor()
            for ext in self.loaded:
                c.execute("LOAD " + ext)
            self.conns[name] = c
        return self.conns[name]

    def subst(self, s):
        return s.replace("__TEST_DIR__", self.test_dir)

    # reporting
    def fail(self, rec, message, sql=None):
        self.failures += 1
        w = self.out.write
        w("FAIL %s:%d\n" % (self.path, rec.line))
        if sql is not None:
            w("  SQL:\n")
            for line in sql.split("\n"):
                w("    %s\n" % line)
        for line in message.rstrip("\n").split("\n"):
            w("  %s\n" % line)

    def run(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
            records = parse(text)
        except (ParseError, OSError, UnicodeDecodeError) as e:
            self.failures += 1
            self.out.write("FAIL %s: parse error: %s\n" % (self.path, e))
            return False
        self.test_dir = tempfile.mkdtemp(prefix="moraine-slt-")
        try:
            self.open()
            for ext in self.auto_load:
                if installed(self.ext_dir, ext):
                    self.db.execute("LOAD " + ext)
                    self.loaded.append(ext)
            skipping = False
            for rec in records:
                if rec.kind == "mode":
                    if rec.mode == "skip":
                        skipping = True
                    elif rec.mode == "unskip":
                        skipping = False
                    continue
                if skipping or rec.skipif:
                    continue
                if rec.kind == "halt":
                    break
                try:
                    self.execute(rec)
                except RecordFailure:
                    break  # like DuckDB's runner: the first failure ends the file
        except Exception as e:  # setup problems (LOAD failed, ...) fail the file
            self.failures += 1
            self.out.write("FAIL %s: %s: %s\n" % (self.path, type(e).__name__, e))
        finally:
            self.close()
            shutil.rmtree(self.test_dir, ignore_errors=True)
        return self.failures == 0

    def execute(self, rec):
        if rec.kind == "require":
            if rec.name in IGNORED_REQUIRES or rec.name in self.loaded:
                return
            if rec.name == "moraine" or rec.name == "ducklake":
                if not installed(self.ext_dir, rec.name):
                    self.fail(rec, "require %s: extension not installed in %s (run `cargo xtask build`/`setup`)"
                              % (rec.name, self.ext_dir))
                    raise RecordFailure()
            try:
                self.db.execute("LOAD " + rec.name)
            except Exception as e:
                self.fail(rec, "require %s: %s" % (rec.name, e))
                raise RecordFailure()
            self.loaded.append(rec.name)
            for c in self.conns.values():
                c.execute("LOAD " + rec.name)
            return
        if rec.kind == "load":
            self.db_path = self.subst(rec.path)
            self.open()
            return
        if rec.kind == "restart":
            self.open()
            return
        sql = self.subst(rec.sql)
        con = self.conn(rec.conn)
        if rec.kind == "statement":
            self.statement(rec, con, sql)
        elif rec.kind == "query":
            self.query(rec, con, sql)
        else:
            raise AssertionError(rec.kind)

    def statement(self, rec, con, sql):
        error = None
        try:
            cur = con.execute(sql)
            if cur is not None and cur.description is not None:
                cur.fetchall()
        except Exception as e:
            error = "%s: %s" % (type(e).__name__, e)
        if rec.expect == "ok":
            if error is not None:
                self.fail(rec, "expected success, got error:\n%s" % error, sql)
                raise RecordFailure()
        elif rec.expect == "error":
            if error is None:
                self.fail(rec, "expected an error, statement succeeded", sql)
                raise RecordFailure()
            if rec.error:
                expected = self.subst(rec.error)
                if not error_matches(expected, error):
                    self.fail(rec, "error message mismatch\nexpected: %s\nactual:   %s" % (expected, error), sql)
                    raise RecordFailure()

    def query(self, rec, con, sql):
        try:
            cur = con.execute(sql)
            rows = cur.fetchall() if cur.description is not None else []
            ncols = len(cur.description) if cur.description is not None else 0
        except Exception as e:
            self.fail(rec, "query failed:\n%s: %s" % (type(e).__name__, e), sql)
            raise RecordFailure()
        if ncols != len(rec.types):
            self.fail(rec, "wrong column count: query returned %d columns, types %r declare %d"
                      % (ncols, rec.types, len(rec.types)), sql)
            raise RecordFailure()
        actual = [[render(v) for v in row] for row in rows]
        expected_lines = [self.subst(line) for line in rec.expected]
        expected = [line.split("\t") for line in expected_lines]
        if ncols > 1 and expected and all(len(r) == 1 for r in expected) and len(expected) == len(actual) * ncols:
            # value-per-line form
            flat = [r[0] for r in expected]
            expected = [flat[k:k + ncols] for k in range(0, len(flat), ncols)]
        if rec.sort == "rowsort":
            actual = sorted(actual)
            expected = sorted(expected)
        elif rec.sort == "valuesort":
            actual = [[v] for v in sorted(v for r in actual for v in r)]
            expected = [[v] for v in sorted(v for r in expected for v in r)]
        if actual != expected:
            self.fail(rec, describe_mismatch(expected, actual), sql)
            raise RecordFailure()


def error_matches(expected, actual):
    if expected.startswith("<REGEX>:"):
        return re.search(expected[len("<REGEX>:"):], actual, re.S) is not None
    if expected.startswith("<!REGEX>:"):
        return re.search(expected[len("<!REGEX>:"):], actual, re.S) is None
    return expected in actual


def describe_mismatch(expected, actual):
    out = []
    if len(expected) != len(actual):
        out.append("row count mismatch: expected %d rows, got %d" % (len(expected), len(actual)))
    for n, (e, a) in enumerate(zip(expected, actual)):
        if e != a:
            out.append("first mismatch on row %d (expected <> actual): %s <> %s" % (n + 1, "\t".join(e), "\t".join(a)))
            break
    out.append("expected:")
    out.extend("    " + "\t".join(r) for r in expected)
    out.append("actual:")
    out.extend("    " + "\t".join(r) for r in actual)
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# driver


def collect(paths, filt):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                for fn in sorted(filenames):
                    if fn.endswith(".test"):
                        files.append(os.path.join(dirpath, fn))
        else:
            files.append(p)
    if filt:
        files = [f for f in files if filt in f]
    return files


def run_files(files, ext_dir, out):
    passed = failed = 0
    for f in files:
        ok = FileRun(f, ext_dir, out).run()
        out.write("%s %s\n" % ("ok  " if ok else "FAIL", f))
        out.flush()
        if ok:
            passed += 1
        else:
            failed += 1
    return passed, failed


def selftest(directory, ext_dir):
    """Files named pass_*.test must pass, fail_*.test must fail. A fail file may pin what its failure
    report says with header lines `# expect-report: TEXT` (each TEXT must appear in the report)."""
    import io

    passed = failed = 0
    files = collect([directory], None)
    if not files:
        print("no selftest files in %s" % directory)
        failed += 1
    for f in files:
        name = os.path.basename(f)
        buf = io.StringIO()
        ok = FileRun(f, ext_dir, buf, auto_load=()).run()  # tests the runner, not the extensions
        report = buf.getvalue()
        problems = []
        if name.startswith("pass_"):
            if not ok:
                problems.append("expected to pass, but failed")
        elif name.startswith("fail_"):
            if ok:
                problems.append("expected to fail, but passed")
            with open(f, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("# expect-report:"):
                        want = line[len("# expect-report:"):].strip()
                        if want not in report:
                            problems.append("report lacks %r" % want)
        else:
            problems.append("selftest files must be named pass_*.test or fail_*.test")
        if problems:
            failed += 1
            print("FAIL %s: %s" % (f, "; ".join(problems)))
            for line in report.rstrip("\n").split("\n"):
                print("  | " + line)
        else:
            passed += 1
            print("ok   %s" % f)
    return passed, failed


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=[os.path.join(ROOT, "sql_tests")])
    ap.add_argument("--filter", default=None, help="only files whose path contains this substring")
    ap.add_argument("--ext-dir", default=DEFAULT_EXT_DIR)
    ap.add_argument("--selftest", default=None, metavar="DIR")
    args = ap.parse_args(argv)
    ext_dir = os.path.abspath(args.ext_dir)
    try:
        if args.selftest:
            passed, failed = selftest(args.selftest, ext_dir)
        else:
            files = collect(args.paths, args.filter)
            if not files:
                print("no .test files matched")
            passed, failed = run_files(files, ext_dir, sys.stdout)
            if not files:
                failed += 1 if args.filter is None else 0
    except Exception:
        traceback.print_exc()
        passed, failed = 0, 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
