"""The DuckLake end-to-end workload of test_ducklake_basic.py, with the moraine catalog in a bucket of a real
S3-compatible server (moto, started on loopback by s3server.py) instead of a local directory.

The module is loaded a second time under another name with BACKEND = "s3", so each of its tests runs here
unchanged; DATA_PATH stays local so the tests' file-level assertions still hold (test_s3.py puts a whole lake,
Parquet included, in the bucket).
"""

import importlib.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("ducklake_basic_on_s3", os.path.join(_HERE, "test_ducklake_basic.py"))
_basic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_basic)
_basic.BACKEND = "s3"

for _name, _value in list(vars(_basic).items()):
    if _name.startswith("test_") and callable(_value):
        globals()[_name] = _value
