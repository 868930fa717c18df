"""Profiles small commits on a moraine lake (run under `perf record`): 300 single-row INSERT commits."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import harness  # noqa: E402

tmp = tempfile.mkdtemp(prefix="moraine-profile-")
con = harness.connect()
con.execute("SET threads=1")
con.execute("ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp))
con.execute("USE lake")
con.execute("CREATE TABLE s (id INTEGER)")
for i in range(300):
    con.execute("INSERT INTO s VALUES (%d)" % i)
