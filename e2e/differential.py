"""Differential testing: one list of SQL statements run against two DuckLake lakes in fresh directories,

* `ref`: DuckLake's default DuckDB-file catalog
  (`ATTACH 'ducklake:<tmp>/ref/meta.ducklake' AS lake (DATA_PATH '<tmp>/ref/data/')`), and
* `mor`: a moraine catalog (`ATTACH 'ducklake:moraine:<tmp>/mor/catalog' AS lake (DATA_PATH '<tmp>/mor/data/')`),

each through the official Python module (unsigned extensions allowed, project extension directory, autoinstall off,
`SET threads=1` because of a known DuckLake catalog-cache race). Every statement's result is collected, then every
`ducklake_*` metadata table is dumped through `__ducklake_metadata_lake.main.<table>` (the name DuckLake gives the
metadata catalog for both backends), together with every inlined data table listed in
`ducklake_inlined_data_tables` and every `ducklake_inlined_delete_<table_id>` table. Volatile values are masked:
UUID columns, `snapshot_time` / `schedule_start`, the `data_path` and `created_by` metadata values, and UUIDs inside
the `path` of data files, delete files and files scheduled for deletion. The lake's own directory is replaced by
`<LAKE>` in every string (and UUIDs in such path strings by `<uuid>`). Then the two sides are compared and the
first difference is reported. `python e2e/differential.py` self-tests the masking (file catalog vs itself).

Usage:
    from differential import assert_same
    assert_same(tmp, ["CREATE TABLE lake.t (i INTEGER)", "INSERT INTO lake.t VALUES (1)", "FROM lake.t"])

`ATTACH` is done by the helper (alias `lake`); statements may use `USE lake` and `{lake}` is not needed.
Results of statements whose text contains `ORDER BY` are compared in order, others as sorted multisets.
A failing statement is recorded as `ERROR: <message>` and the stream continues; `assert_same` additionally fails if
the reference side had an error that was not expected (`allow_errors=True` turns that check off).
"""

import datetime
import os
import re
import uuid

import harness

ALIAS = "lake"
META = "__ducklake_metadata_%s" % ALIAS

# ducklake-catalog-protocol.md §2.1, in declared order.
FIXED_TABLES = (
    "ducklake_metadata", "ducklake_snapshot", "ducklake_snapshot_changes", "ducklake_schema", "ducklake_table",
    "ducklake_view", "ducklake_tag", "ducklake_column_tag", "ducklake_data_file", "ducklake_file_column_stats",
    "ducklake_file_variant_stats", "ducklake_delete_file", "ducklake_column", "ducklake_table_stats",
    "ducklake_table_column_stats", "ducklake_partition_info", "ducklake_partition_column",
    "ducklake_file_partition_value", "ducklake_files_scheduled_for_deletion", "ducklake_inlined_data_tables",
    "ducklake_column_mapping", "ducklake_name_mapping", "ducklake_schema_versions", "ducklake_macro",
    "ducklake_macro_impl", "ducklake_macro_parameters", "ducklake_sort_info", "ducklake_sort_expression",
)
TIMESTAMP_COLUMNS = ("snapshot_time", "schedule_start")
PATH_TABLES = ("ducklake_data_file", "ducklake_delete_file", "ducklake_files_scheduled_for_deletion")
MASKED_METADATA_KEYS = ("data_path", "created_by")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class Side:
    """One lake: a connection with the lake attached as `lake`."""

    def __init__(self, name, base, attach_sql, load, setup=()):
        self.name = name
        self.base = base
        os.makedirs(base, exist_ok=True)
        self.con = harness.connect(load=load)
        self.con.execute("SET threads=1")
        for sql in setup:
            self.con.execute(sql)
        self.con.execute(attach_sql)

    def close(self):
        try:
            self.con.close()
        except Exception:
            pass


def reference_side(tmp, sub="ref"):
    base = os.path.join(tmp, sub)
    return Side("ref (DuckDB-file catalog)", base,
                "ATTACH 'ducklake:%s/meta.ducklake' AS %s (DATA_PATH '%s/data/')" % (base, ALIAS, base),
                ("ducklake",))


def moraine_side(tmp):
    harness.require_extension("moraine")
    base = os.path.join(tmp, "mor")
    return Side("moraine", base,
                "ATTACH 'ducklake:moraine:%s/catalog' AS %s (DATA_PATH '%s/data/')" % (base, ALIAS, base),
                ("ducklake", "moraine"))


def moraine_s3_side(tmp):
    """moraine with the catalog in the local S3 server's bucket (Parquet stays local, as on the other sides)."""
    import s3server

    harness.require_extension("moraine")
    base = os.path.join(tmp, "mor")
    return Side("moraine on S3", base,
                "ATTACH 'ducklake:moraine:%s' AS %s (DATA_PATH '%s/data/', READ_WRITE)" % (
                    s3server.url(tmp, "catalog"), ALIAS, base),
                s3server.LOAD, setup=[s3server.secret_sql()])


# ------------------------------------------------------------------------------------------------
# normalisation


def _norm_value(v, side):
    if isinstance(v, str):
        if side.base in v:  # a path inside the lake: file names carry fresh UUIDs
            return UUID_RE.sub("<uuid>", v.replace(side.base, "<LAKE>"))
        return v
    if isinstance(v, list):
        return [_norm_value(x, side) for x in v]
    if isinstance(v, tuple):
        return tuple(_norm_value(x, side) for x in v)
    if isinstance(v, dict):
        return {_norm_value(k, side): _norm_value(x, side) for k, x in v.items()}
    return v


def _sort_key(row):
    return tuple((0, "") if v is None else (1, type(v).__name__ + ":" + repr(v)) for v in row)


def _error_text(e, side):
    msg = str(e).replace(side.base, "<LAKE>")
    return "ERROR: " + msg


# ------------------------------------------------------------------------------------------------
# running


def run_statements(side, statements):
    """[(statement, result)] where result is a list of row tuples, None (no result set) or 'ERROR: ...'."""
    out = []
    for sql in statements:
        try:
            cur = side.con.execute(sql)
            if cur.description is None:
                res = None
            else:
                rows = [tuple(_norm_value(v, side) for v in r) for r in cur.fetchall()]
                if "order by" not in sql.lower():
                    rows.sort(key=_sort_key)
                res = rows
        except Exception as e:  # recorded, the stream goes on
            res = _error_text(e, side)
        out.append((sql, res))
    return out


def _columns(side, table):
    cur = side.con.execute("SELECT * FROM %s.main.%s LIMIT 0" % (META, table))
    return [d[0] for d in cur.description], [str(d[1]) for d in cur.description]


def _mask_row(table, names, types, row, side):
    out = []
    key = None
    if table == "ducklake_metadata":
        key = row[names.index("key")]
    for name, typ, v in zip(names, types, row):
        if v is None:
            out.append(None)
            continue
        if table in FIXED_TABLES and (name.endswith("_uuid") or typ.upper() == "UUID"):
            out.append("<uuid>")
        elif name in TIMESTAMP_COLUMNS:
            out.append("<timestamp>")
        elif table == "ducklake_metadata" and name == "value" and key in MASKED_METADATA_KEYS:
            out.append("<%s>" % key)
        elif table == "ducklake_delete_file" and name == "file_size_bytes":
            # A delete file stores its data file's path, whose random UUID compresses differently on each
            # side: DuckLake's Parquet bytes, not a catalog value.
            out.append("<bytes>")
        elif table in PATH_TABLES and name == "path":
            out.append(UUID_RE.sub("<uuid>", _norm_value(v, side)))
        else:
            out.append(_norm_value(v, side))
    return tuple(out)


def dump_table(side, table):
    """(column names, masked rows in the scan's natural order) or 'ERROR: ...' when the table cannot be read."""
    try:
        names, types = _columns(side, table)
        rows = side.con.execute("SELECT * FROM %s.main.%s" % (META, table)).fetchall()
    except Exception as e:
        return _error_text(e, side)
    # No ORDER BY and no sorting: a catalog serves its rows in insertion order, with updated rows in place,
    # and users and DuckLake's own tests see that order.
    masked = [_mask_row(table, names, types, r, side) for r in rows]
    return names, masked


def dump_metadata(side):
    """{table: dump} for the 28 fixed tables, the inlined data tables and the inlined delete tables."""
    dumps = {t: dump_table(side, t) for t in FIXED_TABLES}
    return dumps


def extra_tables(ref, mor):
    """Runtime-created tables to compare: the union of both sides' inlined data tables (from
    ducklake_inlined_data_tables) and inlined delete tables (ducklake_inlined_delete_<table_id>)."""
    names = set()
    for side in (ref, mor):
        try:
            for (name,) in side.con.execute(
                    "SELECT table_name FROM %s.main.ducklake_inlined_data_tables" % META).fetchall():
                names.add(name)
        except Exception:
            pass
        try:
            for (tid,) in side.con.execute("SELECT DISTINCT table_id FROM %s.main.ducklake_table" % META).fetchall():
                names.add("ducklake_inlined_delete_%d" % tid)
        except Exception:
            pass
    return sorted(names)


def _is_missing(dump):
    return isinstance(dump, str) and ("does not exist" in dump or "not found" in dump.lower())


# ------------------------------------------------------------------------------------------------
# comparing


class Difference(AssertionError):
    pass


def _fmt_rows(rows, limit=40):
    if not isinstance(rows, list):
        return "    " + repr(rows)
    lines = ["    " + repr(r) for r in rows[:limit]]
    if len(rows) > limit:
        lines.append("    ... (%d rows)" % len(rows))
    return "\n".join(lines) if lines else "    (no rows)"


def _first_row_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i, x, y
    if len(a) != len(b):
        i = min(len(a), len(b))
        return i, a[i] if i < len(a) else "<missing>", b[i] if i < len(b) else "<missing>"
    return None


def compare_results(ref_res, mor_res):
    for i, ((sql, a), (_, b)) in enumerate(zip(ref_res, mor_res)):
        if a != b:
            msg = ["statement #%d differs:\n  %s" % (i + 1, sql.strip())]
            if isinstance(a, list) and isinstance(b, list):
                d = _first_row_diff(a, b)
                msg.append("first differing row #%d:\n  ref: %r\n  mor: %r" % d)
            msg.append("ref result:\n" + _fmt_rows(a))
            msg.append("moraine result:\n" + _fmt_rows(b))
            return "\n".join(msg)
    return None


def compare_table(table, a, b):
    if a == b:
        return None
    if _is_missing(a) and _is_missing(b):
        return None
    msg = ["metadata table %s differs" % table]
    if isinstance(a, tuple) and isinstance(b, tuple):
        (na, ra), (nb, rb) = a, b
        if na != nb:
            msg.append("columns:\n  ref: %s\n  mor: %s" % (na, nb))
        else:
            msg.append("columns: %s" % (na,))
            d = _first_row_diff(ra, rb)
            msg.append("row counts: ref %d, moraine %d" % (len(ra), len(rb)))
            if d:
                msg.append("first differing row #%d (natural order, masked):\n  ref: %r\n  mor: %r" % d)
        msg.append("ref rows:\n" + _fmt_rows(ra))
        msg.append("moraine rows:\n" + _fmt_rows(rb))
    else:
        msg.append("ref:     %s" % (a if isinstance(a, str) else "%d rows" % len(a[1])))
        msg.append("moraine: %s" % (b if isinstance(b, str) else "%d rows" % len(b[1])))
    return "\n".join(msg)


class Outcome:
    def __init__(self, ref_results, mor_results, ref_meta, mor_meta):
        self.ref_results = ref_results
        self.mor_results = mor_results
        self.ref_meta = ref_meta
        self.mor_meta = mor_meta

    def ref_errors(self):
        return [(sql, r) for sql, r in self.ref_results if isinstance(r, str)]

    def first_difference(self):
        d = compare_results(self.ref_results, self.mor_results)
        if d:
            return d
        for table in list(FIXED_TABLES) + sorted(set(self.ref_meta) - set(FIXED_TABLES)):
            d = compare_table(table, self.ref_meta.get(table), self.mor_meta.get(table))
            if d:
                return d
        return None


def run(tmp, statements, sides=None):
    """Runs `statements` on both lakes and returns an Outcome (results and metadata dumps of both sides).
    `sides` = (make_a, make_b) overrides the two lake factories (used to self-test with ref vs ref).
    Both lake directories, `<tmp>/ref` and `<tmp>/mor`, have paths of the same length: delete files store the
    paths of data files, so their sizes depend on it."""
    make_a, make_b = sides or (reference_side, moraine_side)
    ref = make_a(tmp)
    try:
        # ref vs ref: a second directory whose path has the same length (delete files store data file paths)
        mor = make_b(tmp, "rf2") if make_b is make_a else make_b(tmp)
    except Exception:
        ref.close()
        raise
    try:
        ref_results = run_statements(ref, statements)
        mor_results = run_statements(mor, statements)
        ref_meta = dump_metadata(ref)
        mor_meta = dump_metadata(mor)
        for t in extra_tables(ref, mor):
            ref_meta[t] = dump_table(ref, t)
            mor_meta[t] = dump_table(mor, t)
        return Outcome(ref_results, mor_results, ref_meta, mor_meta)
    finally:
        ref.close()
        mor.close()


def assert_same(tmp, statements, allow_errors=False, sides=None):
    """Runs `statements` on both lakes; fails with the first difference (results first, then metadata)."""
    out = run(tmp, statements, sides=sides)
    if not allow_errors:
        errs = out.ref_errors()
        assert not errs, "statement failed on the reference catalog (fix the stream): %s\n  %s" % errs[0]
    d = out.first_difference()
    if d:
        raise Difference(d)
    return out


def _selftest(tmp):
    """ref vs ref must agree (checks the masking), run: python e2e/differential.py"""
    stmts = ["USE lake", "CREATE TABLE t (i INTEGER, s VARCHAR)", "INSERT INTO t VALUES (1, 'a')",
             "INSERT INTO t SELECT i, 'x' FROM range(20) r(i)", "DELETE FROM t WHERE i = 3",
             "SELECT count(*) FROM t"]
    assert_same(tmp, stmts, sides=(reference_side, reference_side))


if __name__ == "__main__":
    import shutil
    import tempfile

    d = tempfile.mkdtemp()
    try:
        _selftest(d)
        print("differential self-test (ref vs ref): ok")
    finally:
        shutil.rmtree(d, ignore_errors=True)
