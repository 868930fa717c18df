"""The DuckLake end-to-end workload on a moraine catalog in a bucket of a real S3-compatible server (moto, started on
loopback by s3server.py) instead of a local directory: every test of test_ducklake_basic.py, and the differential
tests of test_differential.py against DuckLake's DuckDB-file catalog.

Each module is loaded a second time under another name and pointed at S3, so its tests run here unchanged;
DATA_PATH stays local so their file-level assertions still hold (test_s3.py puts a whole lake, Parquet included,
in the bucket).
"""

import importlib.util
import os

import differential

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(filename, alias):
    spec = importlib.util.spec_from_file_location(alias, os.path.join(_HERE, filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_basic = _load("test_ducklake_basic.py", "ducklake_basic_on_s3")
_basic.BACKEND = "s3"
_differential = _load("test_differential.py", "differential_on_s3")
_differential.SIDES = (differential.reference_side, differential.moraine_s3_side)

for _module, _prefix in ((_basic, ""), (_differential, "differential_")):
    for _name, _value in list(vars(_module).items()):
        if _name.startswith("test_") and callable(_value):
            globals()["test_" + _prefix + _name[len("test_"):]] = _value
