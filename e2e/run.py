#!/usr/bin/env python3
"""Tiny test runner for e2e/test_*.py: runs every module-level function named test_* in file order.

A test function may take one argument (any name): a fresh temporary directory (str), removed afterwards.
Usage: run.py [FILTER]   (FILTER: substring of "file::function"). Ends with `N passed, M failed`.
"""

import importlib.util
import inspect
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def discover(filt):
    sys.path.insert(0, HERE)
    for fn in sorted(os.listdir(HERE)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        spec = importlib.util.spec_from_file_location(fn[:-3], os.path.join(HERE, fn))
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception:
            yield fn + "::<import>", None, traceback.format_exc()
            continue
        funcs = [f for name, f in vars(mod).items() if name.startswith("test_") and inspect.isfunction(f)]
        funcs.sort(key=lambda f: f.__code__.co_firstlineno)
        for f in funcs:
            name = "%s::%s" % (fn, f.__name__)
            if filt is None or filt in name:
                yield name, f, None


def run_one(f):
    tmp = tempfile.mkdtemp(prefix="moraine-e2e-")
    try:
        if len(inspect.signature(f).parameters) >= 1:
            f(tmp)
        else:
            f()
        return None
    except Exception:
        return traceback.format_exc()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    filt = argv[0] if argv else None
    passed = failed = 0
    failures = []
    for name, f, err in discover(filt):
        start = time.time()
        if err is None:
            err = run_one(f)
        took = time.time() - start
        if err is None:
            passed += 1
            print("ok   %s (%.2fs)" % (name, took))
        else:
            failed += 1
            failures.append((name, err.rstrip().split("\n")[-1]))
            print("FAIL %s (%.2fs)" % (name, took))
            for line in err.rstrip().split("\n"):
                print("  | " + line)
        sys.stdout.flush()
    # A long run's log is often seen only by its tail: name what failed there too.
    for name, last_line in failures:
        print("FAIL %s: %s" % (name, last_line[:300]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
