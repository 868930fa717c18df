"""`cargo xtask audit <uri>` (the operator's audit from a shell, read-only): exit 1 while the lake has findings,
0 once they are addressed, and the report names the finding."""

import os
import subprocess

import harness


def attach(tmp):
    return "ATTACH 'ducklake:moraine:%s/catalog' AS lake (DATA_PATH '%s/data/');\n" % (tmp, tmp)


def audit(tmp):
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/moraine/target"))
    return subprocess.run(["cargo", "xtask", "audit", os.path.join(tmp, "catalog")], cwd=harness.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_audit_exits_1_with_findings_and_0_without(tmp):
    harness.require_extension("moraine")
    harness.run_cli(attach(tmp) + """
        CREATE TABLE lake.t (x INTEGER);
        INSERT INTO lake.t VALUES (1);
        INSERT INTO lake.t VALUES (2);
    """).ok()
    r = audit(tmp)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "UNBOUNDED" in r.stdout, r.stdout
    # Address it: a horizon the young snapshots are within, and history expired down to the head.
    harness.run_cli(attach(tmp) + """
        CALL ducklake_set_option('lake', 'expire_older_than', '1 week');
        CALL ducklake_expire_snapshots('lake', older_than => now());
    """).ok()
    r = audit(tmp)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "UNBOUNDED" not in r.stdout, r.stdout
