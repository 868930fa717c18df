"""s3:// lakes on a real S3-compatible server (moto's server mode on loopback, see s3server.py): the catalog and the
Parquet files in one bucket, credentials from DuckDB's secret manager or the AWS_* environment, readers, the writer
lease and maintenance on object storage, and the errors a user meets first."""

import subprocess

import harness
import s3server


def lake_sql(tmp, sql, read_only=False, secret=True):
    mode = "READ_ONLY" if read_only else "READ_WRITE"
    attach = "ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s', %s);\n" % (
        s3server.url(tmp, "lake"), s3server.url(tmp, "lake", "data/"), mode)
    return (s3server.secret_sql() if secret else "") + attach + sql


def cli(tmp, sql, **kw):
    harness.require_extension("moraine")
    r = harness.run_cli(lake_sql(tmp, sql, **kw), load=s3server.LOAD, bail=False)
    return r


def results(r):
    """Result sets after CREATE SECRET's own."""
    assert r.rc == 0, "duckdb CLI failed (rc=%d)\n%s\n%s" % (r.rc, r.stdout, r.stderr)
    return r.results()[1:]


def test_the_server_honours_conditional_puts():
    """SlateDB's manifest and fencing stand on If-None-Match and If-Match; a server that ignored them would let two
    writers both win. Moto answers 412 to both failed preconditions."""
    import botocore

    c = s3server.client()
    first = c.put_object(Bucket=s3server.BUCKET, Key="cond/k", Body=b"1", IfNoneMatch="*")
    for kwargs in ({"IfNoneMatch": "*"}, {"IfMatch": '"0123"'}):
        try:
            c.put_object(Bucket=s3server.BUCKET, Key="cond/k", Body=b"2", **kwargs)
            raise AssertionError("conditional put %s was not refused" % kwargs)
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 412, e.response
    c.put_object(Bucket=s3server.BUCKET, Key="cond/k", Body=b"3", IfMatch=first["ETag"])


def test_whole_lake_in_the_bucket(tmp):
    """Catalog and Parquet side by side under one prefix; a second process sees everything, time travel included."""
    r = cli(tmp, """
        CREATE TABLE lake.items AS SELECT i AS id, 'item ' || i AS name FROM range(100) t(i);
        INSERT INTO lake.items VALUES (1000, 'inlined');
        UPDATE lake.items SET name = 'changed' WHERE id = 5;
        DELETE FROM lake.items WHERE id BETWEEN 10 AND 19;
    """)
    results(r)
    r = cli(tmp, """
        SELECT count(*) AS n, max(id) AS hi FROM lake.items;
        SELECT name FROM lake.items WHERE id = 5;
        SELECT count(*) AS n FROM lake.items AT (VERSION => 1);
        SELECT count(*) AS files FROM ducklake_list_files('lake', 'items');
    """)
    assert results(r) == [[{"n": 91, "hi": 1000}], [{"name": "changed"}], [{"n": 100}], [{"files": 1}]], r.stdout
    prefix = s3server.url(tmp).split("/", 3)[3] + "/lake/"
    keys = s3server.keys(prefix)
    assert any(k.startswith(prefix + "catalog/manifest/") for k in keys), keys
    assert any(k.startswith(prefix + "data/main/items/") and k.endswith(".parquet") for k in keys), keys


def test_credentials_from_the_aws_environment(tmp):
    """Without a DuckDB secret, the AWS_* variables reach the server (for the catalog; Parquet then needs a secret
    or httpfs's own credential chain, so this lake keeps its rows inlined)."""
    harness.require_extension("moraine")
    sql = ("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s/data/', READ_WRITE);\n"
           "CREATE TABLE lake.t (x INTEGER); INSERT INTO lake.t VALUES (1), (2);\n"
           "SELECT count(*) AS n FROM lake.t;\n" % (s3server.url(tmp, "env"), tmp))
    proc = subprocess.run([harness.CLI, "-unsigned", "-bail", "-json", ":memory:"], input=harness.preamble() + sql,
                          capture_output=True, text=True, env=s3server.aws_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert harness.parse_json_stream(proc.stdout) == [[{"n": 2}]], proc.stdout
    prefix = s3server.url(tmp).split("/", 3)[3] + "/env/catalog/manifest/"
    assert s3server.keys(prefix), "no manifest under " + prefix


def test_remote_attach_without_read_write_explains_itself(tmp):
    """DuckDB attaches remote paths READ_ONLY unless told otherwise; a new lake then cannot be created, and the
    error says what to add."""
    r = cli(tmp, "SELECT 1;", read_only=True)
    assert r.rc != 0
    assert "no moraine store at" in r.stderr and "READ_WRITE" in r.stderr, r.stderr


def test_missing_bucket_is_a_clear_error(tmp):
    harness.require_extension("moraine")
    sql = s3server.secret_sql(scope="s3://") + (
        "ATTACH 'ducklake:moraine:s3://no-such-bucket-here/lake' AS lake (DATA_PATH '%s/data/', READ_WRITE);\n" % tmp)
    r = harness.run_cli(sql, load=s3server.LOAD, bail=False)
    assert r.rc != 0 and r.rc < 128, (r.rc, r.stderr)
    assert "no-such-bucket-here" in r.stderr, r.stderr
    assert "NoSuchBucket" in r.stderr or "does not exist" in r.stderr or "not found" in r.stderr.lower(), r.stderr


def test_reader_writer_and_lease_on_s3(tmp):
    """One exclusive writer process, READ_ONLY readers in other processes that see its commits, and a second
    read-write attach that fails fast while the writer keeps committing."""
    harness.require_extension("moraine")
    con = harness.connect(load=s3server.LOAD)
    con.execute("SET threads=1")
    con.execute(s3server.secret_sql())
    con.execute("ATTACH 'ducklake:moraine:%s' AS lake (DATA_PATH '%s', READ_WRITE, META_EXCLUSIVE_WRITER 1)" % (
        s3server.url(tmp, "lake"), s3server.url(tmp, "lake", "data/")))
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("INSERT INTO lake.t VALUES (1), (2)")
    readers = [subprocess.Popen([harness.CLI, "-unsigned", "-json", ":memory:"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    sql = harness.preamble(s3server.LOAD) + lake_sql(tmp, "SELECT count(*) AS n FROM lake.t;", read_only=True)
    outs = [p.communicate(sql, timeout=120) for p in readers]
    for p, (out, err) in zip(readers, outs):
        assert p.returncode == 0, err
        assert harness.parse_json_stream(out)[1:] == [[{"n": 2}]], out
    r = cli(tmp, "INSERT INTO lake.t VALUES (9);")
    assert r.rc != 0
    assert "in use by another writer" in r.stderr and "READ_ONLY" in r.stderr, r.stderr
    r = cli(tmp, "INSERT INTO lake.t VALUES (9);", read_only=True)
    assert r.rc != 0 and "read" in r.stderr.lower() and "only" in r.stderr.lower(), r.stderr
    con.execute("INSERT INTO lake.t VALUES (3)")
    assert con.execute("SELECT count(*) FROM lake.t").fetchone()[0] == 3
    r = cli(tmp, "SELECT count(*) AS n FROM lake.t;", read_only=True)
    assert results(r) == [[{"n": 3}]], r.stdout
    con.close()


def test_maintenance_on_s3(tmp):
    """Expire, clean up and delete orphans with the Parquet files in the bucket: the rewritten file goes, the rows
    stay, and a stray object is removed."""
    results(cli(tmp, """
        CREATE TABLE lake.t AS SELECT i AS x FROM range(50) t(i);
        DELETE FROM lake.t WHERE x < 10;
        CALL ducklake_rewrite_data_files('lake');
        CALL ducklake_merge_adjacent_files('lake');
    """))
    prefix = s3server.url(tmp).split("/", 3)[3] + "/lake/data/"
    s3server.client().put_object(Bucket=s3server.BUCKET, Key=prefix + "main/t/stray.parquet", Body=b"x")
    before = set(s3server.keys(prefix))
    r = cli(tmp, """
        CALL ducklake_expire_snapshots('lake', older_than => now() + INTERVAL 1 DAY);
        CALL ducklake_cleanup_old_files('lake', cleanup_all => true);
        CALL ducklake_delete_orphaned_files('lake', cleanup_all => true);
        SELECT count(*) AS n, min(x) AS lo FROM lake.t;
        SELECT count(*) AS scheduled FROM __ducklake_metadata_lake.main.ducklake_files_scheduled_for_deletion;
    """)
    rs = results(r)
    assert rs[-2:] == [[{"n": 40, "lo": 10}], [{"scheduled": 0}]], rs
    after = set(s3server.keys(prefix))
    assert prefix + "main/t/stray.parquet" not in after, after
    assert len(after) < len(before), (before, after)
    live = results(cli(tmp, "SELECT data_file FROM ducklake_list_files('lake', 't');"))
    for row in live[0]:
        assert row["data_file"].split("/")[-1] in {k.split("/")[-1] for k in after}, (row, after)
