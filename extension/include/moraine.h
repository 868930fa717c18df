// The C ABI between the DuckDB shim and the Rust core. Implemented in
// src/ffi/abi.rs; a Rust test checks that both sides declare the same
// functions. Fallible calls return 0 on success, otherwise a status code, and
// write a message the caller frees with moraine_free_string.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MoraineDb MoraineDb;
typedef struct MoraineTxn MoraineTxn;
typedef struct MoraineTableDesc MoraineTableDesc;
typedef struct MoraineStrings MoraineStrings;
typedef struct MoraineScan MoraineScan;

// Status codes (crate::Error::code).
enum {
	MORAINE_OK = 0,
	MORAINE_CONFLICT = 1,
	MORAINE_NOT_FOUND = 2,
	MORAINE_CONSTRAINT = 3,
	MORAINE_INVALID_ARGUMENT = 4,
	MORAINE_CORRUPTION = 5,
	MORAINE_STORE = 6,
	MORAINE_FENCED = 7,
	MORAINE_UNSUPPORTED = 8,
	MORAINE_INTERNAL = 9,
};

// Cell kinds.
enum {
	MORAINE_CELL_NULL = 0,
	MORAINE_CELL_INT = 1,
	MORAINE_CELL_BOOL = 2,
	MORAINE_CELL_TEXT = 3,
	MORAINE_CELL_BLOB = 4
};

// Column transfer classes (crate::catalog::Transfer).
enum {
	MORAINE_TRANSFER_INT64 = 0,
	MORAINE_TRANSFER_BOOL = 1,
	MORAINE_TRANSFER_TEXT = 2,
	MORAINE_TRANSFER_UUID = 3,
	MORAINE_TRANSFER_TIMESTAMPTZ = 4,
	MORAINE_TRANSFER_VALUE = 5,
};

typedef struct MoraineCell {
	uint8_t kind;
	int64_t int_value;
	const char *ptr;
	size_t len;
} MoraineCell;

const char *moraine_version(void);
void moraine_free_string(char *s);

int32_t moraine_open(const char *uri, const char *const *option_names, const char *const *option_values,
                     size_t option_count, bool read_only, MoraineDb **db_out, char **err);
// Opens the store of catalog schema `name` beside the one `db` was opened on, with the same options and access
// mode; without `create`, a schema with no store is MORAINE_NOT_FOUND and nothing is created.
int32_t moraine_open_schema(MoraineDb *db, const char *name, bool create, MoraineDb **db_out, char **err);
void moraine_close(MoraineDb *db);
bool moraine_db_is_read_only(MoraineDb *db);

int32_t moraine_txn_begin(MoraineDb *db, MoraineTxn **txn_out, char **err);
int32_t moraine_txn_commit(MoraineTxn *txn, char **err);
void moraine_txn_free(MoraineTxn *txn);

int32_t moraine_txn_lookup(MoraineTxn *txn, const char *name, MoraineTableDesc **desc_out, char **err);
const char *moraine_table_desc_name(MoraineTableDesc *desc);
size_t moraine_table_desc_column_count(MoraineTableDesc *desc);
bool moraine_table_desc_column(MoraineTableDesc *desc, size_t i, const char **name_out, const char **type_out,
                               uint8_t *transfer_out);
void moraine_table_desc_free(MoraineTableDesc *desc);

int32_t moraine_txn_list_tables(MoraineTxn *txn, MoraineStrings **list_out, char **err);
size_t moraine_strings_len(MoraineStrings *list);
const char *moraine_strings_get(MoraineStrings *list, size_t i);
void moraine_strings_free(MoraineStrings *list);

int32_t moraine_txn_create_table(MoraineTxn *txn, const char *name, size_t column_count,
                                 const char *const *column_names, const char *const *column_types, bool if_not_exists,
                                 char **err);
int32_t moraine_txn_drop_table(MoraineTxn *txn, const char *name, bool if_exists, char **err);

// A filter DuckDB pushed into a scan, as a bound (src/staged/pushdown.rs): rows whose cell in `column` is not an
// integer in [low, high] may be left out. The shim still applies DuckDB's filters to the rows it emits.
typedef struct MoraineScanBound {
	size_t column;
	int64_t low;
	int64_t high;
} MoraineScanBound;

int32_t moraine_txn_scan(MoraineTxn *txn, const char *name, const MoraineScanBound *bounds, size_t bound_count,
                         MoraineScan **scan_out, char **err);
// How many rows a scan of `name` would see now (before any filter), for DuckDB's planner.
int32_t moraine_txn_row_count(MoraineTxn *txn, const char *name, uint64_t *count_out, char **err);
// The exact statistics of integer column `column` of `name` as a scan would see it now (src/catalog/rows.rs), for
// DuckDB's optimizer: min and max hold only when rows > nulls, and nothing holds unless exact.
typedef struct MoraineIntStats {
	uint64_t rows;
	uint64_t nulls;
	int64_t min;
	int64_t max;
	bool exact;
} MoraineIntStats;
int32_t moraine_txn_int_stats(MoraineTxn *txn, const char *name, size_t column, MoraineIntStats *stats_out, char **err);
// The rows the scan emits.
size_t moraine_scan_row_count(MoraineScan *scan);
// Writes the rowids of emitted rows [offset, offset + count); returns how many it wrote.
size_t moraine_scan_rowids(MoraineScan *scan, size_t offset, size_t count, int64_t *rowids);
// Fills emitted rows [offset, offset + count) of one column: valid[i] is 1, or 0 for NULL; integers, booleans (0/1)
// and timestamps go to ints[i], text and bytes to ptrs[i]/lens[i] (valid until the scan is freed). Buffers a
// column never uses may be null. Returns the rows filled.
size_t moraine_scan_fill(MoraineScan *scan, size_t column, size_t offset, size_t count, uint8_t *valid, int64_t *ints,
                         const char **ptrs, size_t *lens);
void moraine_scan_free(MoraineScan *scan);

int32_t moraine_txn_insert(MoraineTxn *txn, const char *name, size_t row_count, size_t column_count,
                           const MoraineCell *row_cells, char **err);
int32_t moraine_txn_delete(MoraineTxn *txn, const char *name, size_t count, const int64_t *rowids, char **err);
int32_t moraine_txn_update(MoraineTxn *txn, const char *name, size_t count, const int64_t *rowids, size_t column_count,
                           const size_t *columns, const MoraineCell *row_cells, char **err);

typedef struct MoraineReclaimReport {
	uint64_t bytes_before;
	uint64_t bytes_after;
	uint64_t objects_deleted;
	uint64_t elapsed_ms;
} MoraineReclaimReport;

// moraine_reclaim runs in the background so the scan can report its progress.
typedef struct MoraineReclaimJob MoraineReclaimJob;
int32_t moraine_reclaim_start(MoraineDb *db, uint64_t deadline_ms, MoraineReclaimJob **job_out, char **err);
// Waits at most wait_ms; *done_out is 1 and *report_out filled once the reclaim has ended.
int32_t moraine_reclaim_wait(MoraineReclaimJob *job, uint64_t wait_ms, int32_t *done_out,
                             MoraineReclaimReport *report_out, char **err);
// Done so far, from 0 to 1.
double moraine_reclaim_progress(const MoraineReclaimJob *job);
void moraine_reclaim_free(MoraineReclaimJob *job);
int32_t moraine_db_audit(MoraineDb *db, MoraineStrings **rows_out, char **err);
// Commit counters of this attach as rows of two strings: name, value.
int32_t moraine_db_stats(MoraineDb *db, MoraineStrings **rows_out, char **err);

#ifdef __cplusplus
}
#endif
