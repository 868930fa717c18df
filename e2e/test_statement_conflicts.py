"""Write-write conflicts on the same catalog rows surface at the statement, as on DuckDB's own tables: two
connections of one process both flush the same inlined rows inside BEGIN (immediate transaction mode, so
DuckLake writes its metadata at the statement). On DuckLake's DuckDB-file catalog the second flush fails with
"Conflict on tuple deletion" and the first commits; moraine must do the same."""

import differential


def scenario(side):
    con = side.con
    con.execute("USE lake")
    con.execute("CREATE TABLE t (i INTEGER)")
    con.execute("INSERT INTO t VALUES (1), (2), (3)")
    first, second = con.cursor(), con.cursor()
    for cur in (first, second):
        cur.execute("SET immediate_transaction_mode = true")
        cur.execute("BEGIN")
    first.execute("CALL ducklake_flush_inlined_data('lake')")
    message = None
    try:
        second.execute("CALL ducklake_flush_inlined_data('lake')")
    except Exception as e:  # the conflict under test
        message = str(e)
    second.execute("ROLLBACK")
    first.execute("COMMIT")
    rows = con.execute("SELECT i FROM lake.t ORDER BY i").fetchall()
    files = con.execute("SELECT count(*) FROM ducklake_list_files('lake', 't')").fetchone()[0]
    return message, rows, files


def check(side):
    try:
        message, rows, files = scenario(side)
    finally:
        side.close()
    assert message is not None and "Conflict on tuple deletion" in message, message
    assert rows == [(1,), (2,), (3,)]
    assert files == 1


def test_the_file_catalog_conflicts_at_the_second_flush(tmp):
    check(differential.reference_side(tmp))


def test_moraine_conflicts_at_the_second_flush_as_the_file_catalog_does(tmp):
    check(differential.moraine_side(tmp))
