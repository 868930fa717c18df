"""DuckDB's moraine extension, packaged as DuckDB's duckdb-extension-* wheels are: the binary is
extensions/<DuckDB version>/moraine.duckdb_extension inside this package. It loads only into DuckDB
@DUCKDB_VERSION@, opened with allow_unsigned_extensions."""

import os

DUCKDB_VERSION = "@DUCKDB_VERSION@"
EXTENSION_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extensions", DUCKDB_VERSION,
                              "moraine.duckdb_extension")


def load(connection):
    """LOADs moraine into a duckdb connection (opened with allow_unsigned_extensions)."""
    connection.execute("LOAD '%s'" % EXTENSION_PATH.replace("'", "''"))


def install(connection):
    """INSTALLs moraine into the connection's extension directory, so `LOAD moraine` (and an ATTACH
    'ducklake:moraine:…') finds it in later sessions."""
    connection.execute("FORCE INSTALL '%s'" % EXTENSION_PATH.replace("'", "''"))
