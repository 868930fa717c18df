"""A real S3-compatible endpoint for the tests: moto's server mode (from PyPI), started once per test
process on a free loopback port and stopped at exit.

Moto honours the conditional PUTs SlateDB's manifest and fencing rely on (If-None-Match: * and If-Match
both answer 412 when the precondition fails); test_s3.py checks that before anything else.
"""

import atexit
import os
import socket
import subprocess
import sys
import time

import harness

BUCKET = "moraine-e2e"
KEY_ID = "moraine-test-key"
SECRET = "moraine-test-secret"
REGION = "us-east-1"

_server = {}


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def endpoint():
    """host:port of the running server, starting it (and creating the bucket) on first use."""
    if "endpoint" in _server:
        return _server["endpoint"]
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(proc.terminate)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("moto server did not start on port %d" % port)
            time.sleep(0.1)
    _server["endpoint"] = "127.0.0.1:%d" % port
    _server["proc"] = proc
    client().create_bucket(Bucket=BUCKET)
    return _server["endpoint"]


def client():
    import boto3

    return boto3.client("s3", endpoint_url="http://" + endpoint(), aws_access_key_id=KEY_ID,
                        aws_secret_access_key=SECRET, region_name=REGION)


def url(tmp, *parts):
    """A prefix in the test bucket unique to the test's temporary directory."""
    return "/".join(["s3://%s" % BUCKET, os.path.basename(tmp)] + list(parts))


def secret_sql(scope="s3://%s" % BUCKET, name="moraine_e2e"):
    """DuckDB's s3 secret for the server (httpfs registers the secret type)."""
    return ("CREATE OR REPLACE SECRET %s (TYPE s3, KEY_ID '%s', SECRET '%s', REGION '%s', ENDPOINT '%s', "
            "URL_STYLE 'path', USE_SSL false, SCOPE '%s');\n" % (name, KEY_ID, SECRET, REGION, endpoint(), scope))


def aws_env():
    """The AWS_* variables that reach the server without a DuckDB secret."""
    env = dict(os.environ)
    env.update({
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT": "http://" + endpoint(),
        "AWS_ALLOW_HTTP": "true",
    })
    return env


def keys(prefix):
    """Every object key under `s3://BUCKET/<prefix>`."""
    out = []
    for page in client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.extend(o["Key"] for o in page.get("Contents", []))
    return out


LOAD = harness.DEFAULT_LOAD + ("httpfs",)
