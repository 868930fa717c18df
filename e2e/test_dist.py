"""The distribution `make dist` writes, used as a user would: the extension repository through the official CLI's
INSTALL … FROM (a directory, plain HTTP, HTTP with httpfs loaded, an S3 bucket; FORCE INSTALL over an older build),
then ATTACH and commit; and the wheel installed into a fresh virtual environment next to duckdb==1.5.5, attaching a
lake through the Python module. Nothing reaches the network: servers run on loopback, wheels come from the
wheelhouse `cargo xtask setup` fills."""

import datetime
import functools
import gzip
import http.server
import os
import ssl
import subprocess
import sys
import threading

import harness
import s3server

REPOSITORY = os.path.join(harness.DIST, "repository")
VERSION = "v1.5.5"
GZ = os.path.join(REPOSITORY, VERSION, "linux_amd64", "moraine.duckdb_extension.gz")
HTTPFS = os.path.join(harness.EXT_DIR, VERSION, "linux_amd64", "httpfs.duckdb_extension")
DUCKLAKE = os.path.join(harness.EXT_DIR, VERSION, "linux_amd64", "ducklake.duckdb_extension")


def cli(ext_dir, sql):
    """The official CLI with unsigned extensions allowed and its own, initially empty extension directory: only
    what this test INSTALLs is there (DuckLake comes from the project's copy)."""
    preamble = ("SET extension_directory=%s; SET autoinstall_known_extensions=false;\n"
                "LOAD %s;\n" % (harness.sql_quote(ext_dir), harness.sql_quote(DUCKLAKE)))
    proc = subprocess.run([harness.CLI, "-unsigned", "-bail", "-json", ":memory:"], input=preamble + sql,
                          capture_output=True, text=True, timeout=300)
    return harness.CliResult(proc, "json")


def lake_session(tmp):
    """ATTACH a lake, commit, and read it back."""
    return ("ATTACH 'ducklake:moraine:%s/lake' AS lake (DATA_PATH '%s/data/');\n"
            "CREATE TABLE lake.t AS SELECT range AS x FROM range(20);\n"
            "INSERT INTO lake.t VALUES (100);\n"
            "SELECT count(*) AS n FROM lake.t;\n" % (tmp, tmp))


def installed(ext_dir):
    return ("SELECT extension_version AS version, install_mode AS mode, installed_from AS origin "
            "FROM duckdb_extensions() WHERE extension_name = 'moraine';\n")


def require_repository():
    harness.require_dist()
    assert os.path.isfile(GZ), "%s missing: run `make dist`" % GZ


class Server:
    """A static web server for a directory on a loopback port, optionally over TLS."""

    def __init__(self, directory, tls=None):
        handler = functools.partial(_QuietHandler, directory=directory)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.requests = _QuietHandler.requests = []
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    requests = []

    def log_message(self, fmt, *args):
        _QuietHandler.requests.append(self.path)


def self_signed_certificate(tmp):
    """A certificate for 127.0.0.1 and its key, made with `cryptography` (a dependency of moto in .venv)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def test_repository_has_the_layout_duckdb_reads():
    """<repository>/<DuckDB version>/<platform>/moraine.duckdb_extension.gz, a gzip of the built artifact."""
    require_repository()
    with gzip.open(GZ, "rb") as f:
        packed = f.read()
    with open(os.path.join(harness.ROOT, "build", "moraine.duckdb_extension"), "rb") as f:
        assert packed == f.read(), "the repository holds another build than build/moraine.duckdb_extension"
    assert sorted(os.listdir(REPOSITORY)) == [VERSION], os.listdir(REPOSITORY)


def test_install_from_a_directory_then_attach_and_commit(tmp):
    require_repository()
    ext = os.path.join(tmp, "ext")
    r = cli(ext, "INSTALL moraine FROM %s;\nLOAD moraine;\n" % harness.sql_quote(REPOSITORY) + installed(ext)
            + lake_session(tmp)).ok()
    assert r.results() == [[{"version": "0.1.0", "mode": "REPOSITORY", "origin": REPOSITORY}], [{"n": 21}]], r.stdout
    # A later session finds the installed extension by name, and ATTACH loads it on its own.
    r = cli(ext, "ATTACH 'ducklake:moraine:%s/lake' AS lake;\nSELECT count(*) AS n FROM lake.t;\n" % tmp).ok()
    assert r.results() == [[{"n": 21}]], r.stdout


def test_install_over_http_from_a_loopback_web_server(tmp):
    """Without httpfs, DuckDB fetches an http:// repository with its own client."""
    require_repository()
    ext = os.path.join(tmp, "ext")
    server = Server(REPOSITORY)
    with server as url:
        r = cli(ext, "INSTALL moraine FROM '%s';\nLOAD moraine;\n" % url + installed(ext) + lake_session(tmp)).ok()
    assert r.results() == [[{"version": "0.1.0", "mode": "REPOSITORY", "origin": url}], [{"n": 21}]], r.stdout
    assert server.requests == ["/%s/linux_amd64/moraine.duckdb_extension.gz" % VERSION], server.requests


def test_install_over_http_with_httpfs_loaded(tmp):
    """With httpfs loaded, DuckDB 1.5.5 upgrades an http:// repository URL to https:// (HTTPUtil::
    BumpToSecureProtocol): the same directory, served over TLS, installs; httpfs checks the server's certificate
    against ca_cert_file."""
    require_repository()
    ext = os.path.join(tmp, "ext")
    cert, key = self_signed_certificate(tmp)
    server = Server(REPOSITORY, tls=(cert, key))
    with server as url:
        r = cli(ext, "LOAD %s;\nSET ca_cert_file=%s;\nINSTALL moraine FROM '%s';\nLOAD moraine;\n" % (
            harness.sql_quote(HTTPFS), harness.sql_quote(cert), url) + installed(ext) + lake_session(tmp)).ok()
    assert r.results() == [[{"version": "0.1.0", "mode": "REPOSITORY", "origin": url}], [{"n": 21}]], r.stdout
    assert server.requests == ["/%s/linux_amd64/moraine.duckdb_extension.gz" % VERSION], server.requests


def test_install_from_an_s3_bucket(tmp):
    """The repository copied to a bucket prefix installs through httpfs and DuckDB's s3 secret."""
    require_repository()
    prefix = s3server.url(tmp, "repository").split("/", 3)[3]
    with open(GZ, "rb") as f:
        s3server.client().put_object(Bucket=s3server.BUCKET, Key="%s/%s/linux_amd64/moraine.duckdb_extension.gz" % (
            prefix, VERSION), Body=f.read())
    ext = os.path.join(tmp, "ext")
    r = cli(ext, "LOAD %s;\n%sINSTALL moraine FROM '%s';\nLOAD moraine;\n" % (
        harness.sql_quote(HTTPFS), s3server.secret_sql(), s3server.url(tmp, "repository"))
        + installed(ext) + lake_session(tmp)).ok()
    assert r.results()[1:] == [[{"version": "0.1.0", "mode": "REPOSITORY",
                                 "origin": s3server.url(tmp, "repository")}], [{"n": 21}]], r.stdout


def test_force_install_replaces_an_older_build(tmp):
    """An older build (the same bytes with an older version in the footer) installed from another repository;
    INSTALL from dist/ then refuses to mix origins, and FORCE INSTALL replaces it."""
    require_repository()
    with gzip.open(GZ, "rb") as f:
        data = bytearray(f.read())
    assert data[-384:-352].rstrip(b"\0") == b"0.1.0", data[-384:-352]
    data[-384:-352] = b"0.0.1-old".ljust(32, b"\0")
    old_repository = os.path.join(tmp, "old-repository")
    os.makedirs(os.path.join(old_repository, VERSION, "linux_amd64"))
    with gzip.open(os.path.join(old_repository, VERSION, "linux_amd64", "moraine.duckdb_extension.gz"), "wb") as f:
        f.write(bytes(data))
    ext = os.path.join(tmp, "ext")
    r = cli(ext, "INSTALL moraine FROM %s;\n" % harness.sql_quote(old_repository) + installed(ext)).ok()
    assert r.results() == [[{"version": "0.0.1-old", "mode": "REPOSITORY", "origin": old_repository}]], r.stdout
    r = cli(ext, "INSTALL moraine FROM %s;\n" % harness.sql_quote(REPOSITORY))
    assert r.rc != 0 and "FORCE INSTALL" in r.stderr, (r.rc, r.stderr)
    r = cli(ext, "FORCE INSTALL moraine FROM %s;\nLOAD moraine;\n" % harness.sql_quote(REPOSITORY) + installed(ext)
            + lake_session(tmp)).ok()
    assert r.results() == [[{"version": "0.1.0", "mode": "REPOSITORY", "origin": REPOSITORY}], [{"n": 21}]], r.stdout


def wheel_path():
    harness.require_dist()
    wheels = [f for f in os.listdir(harness.DIST) if f.endswith(".whl")]
    assert wheels == ["duckdb_extension_moraine-0.1.0-py3-none-manylinux2014_x86_64.whl"], wheels
    return os.path.join(harness.DIST, wheels[0])


def test_wheel_has_the_layout_of_duckdbs_extension_wheels():
    """As duckdb-extension-ducklake: the package holds extensions/v1.5.5/<name>.duckdb_extension, the wheel is
    py3-none-manylinux2014_x86_64 and pure (Root-Is-Purelib), and it requires exactly duckdb==1.5.5."""
    import zipfile

    with zipfile.ZipFile(wheel_path()) as whl:
        names = whl.namelist()
        assert "duckdb_extension_moraine/extensions/v1.5.5/moraine.duckdb_extension" in names, names
        info = "duckdb_extension_moraine-0.1.0.dist-info/"
        wheel = whl.read(info + "WHEEL").decode()
        metadata = whl.read(info + "METADATA").decode()
    assert "Tag: py3-none-manylinux2014_x86_64" in wheel and "Root-Is-Purelib: true" in wheel, wheel
    assert "Requires-Dist: duckdb==1.5.5" in metadata.splitlines(), metadata


FRESH_VENV_SCRIPT = r"""
import os, sys, sysconfig
import duckdb, duckdb_extension_moraine

site = sysconfig.get_paths()["purelib"]
expected = os.path.join(site, "duckdb_extension_moraine", "extensions", "v1.5.5", "moraine.duckdb_extension")
assert duckdb_extension_moraine.EXTENSION_PATH == expected, duckdb_extension_moraine.EXTENSION_PATH
assert os.path.isfile(expected), expected
tmp = sys.argv[1]
config = {"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false",
          "extension_directory": os.path.join(tmp, "ext")}
con = duckdb.connect(config=config)
duckdb_extension_moraine.load(con)
con.execute("LOAD '%s'" % os.path.join(site, "duckdb_extension_ducklake", "extensions", "v1.5.5",
                                        "ducklake.duckdb_extension"))
con.execute("ATTACH 'ducklake:moraine:%s/lake' AS lake (DATA_PATH '%s/data/')" % (tmp, tmp))
con.execute("CREATE TABLE lake.t AS SELECT range AS x FROM range(30)")
con.execute("INSERT INTO lake.t VALUES (100)")
print(duckdb.__version__, con.execute("SELECT count(*) FROM lake.t").fetchone()[0], con.execute(
    "SELECT moraine_version()").fetchone()[0])
con.close()
# install(): later sessions LOAD it by name from the extension directory.
con = duckdb.connect(config=config)
duckdb_extension_moraine.install(con)
con = duckdb.connect(config=config)
con.execute("LOAD moraine")
print(con.execute("SELECT moraine_version()").fetchone()[0])
"""


def test_wheel_installs_in_a_fresh_venv_and_attaches_a_lake(tmp):
    wheel = wheel_path()
    assert os.path.isdir(harness.WHEELHOUSE), "%s missing: run `cargo xtask setup`" % harness.WHEELHOUSE
    venv = os.path.join(tmp, "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", venv], check=True, timeout=120)
    python = os.path.join(venv, "bin", "python")
    pip = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                          "--find-links", harness.WHEELHOUSE, wheel, "duckdb-extension-ducklake==1.5.5"],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr
    frozen = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, timeout=60).stdout
    assert "duckdb==1.5.5" in frozen.splitlines(), frozen
    run = subprocess.run([python, "-c", FRESH_VENV_SCRIPT, tmp], capture_output=True, text=True, timeout=300,
                         cwd=tmp)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1.5.5", "31", "0.1.0", "0.1.0"], run.stdout
