// Calls into the Rust core: error mapping and cell conversion. Nothing here
// decides anything about DuckLake; it moves values between DuckDB vectors and
// the C ABI.
#pragma once

#include "duckdb.hpp"
#include "moraine.h"

namespace duckdb {

//! Throws the DuckDB exception matching a moraine status code, freeing `err`.
[[noreturn]] void ThrowMoraineError(MoraineStatus status, char *err);

//! Runs one fallible ABI call and throws on failure.
template <class F>
void MoraineCall(F &&call) {
	char *err = nullptr;
	MoraineStatus status = call(&err);
	if (status != MORAINE_STATUS_OK) {
		ThrowMoraineError(status, err);
	}
}

//! A table handle from moraine_txn_lookup, freed with its owner.
struct MoraineTableDescFree {
	void operator()(MoraineTableDesc *desc) const {
		moraine_table_desc_free(desc);
	}
};
using MoraineTableHandle = unique_ptr<MoraineTableDesc, MoraineTableDescFree>;

//! Cells for one batch of rows, plus the buffers their text and bytes point into.
class MoraineCellBuffer {
public:
	//! Appends `count` cells of `vector` converted by `transfer`, row-major
	//! positions `row * stride + column`.
	void Reserve(idx_t rows, idx_t stride);
	void SetColumn(Vector &vector, idx_t count, idx_t column, idx_t stride, MoraineTransfer transfer);
	const MoraineCell *Data() const {
		return cells.data();
	}

private:
	vector<MoraineCell> cells;
	vector<string> owned;
};

//! Writes rows [offset, offset + count) of a scan's column into `out`.
void FillVector(MoraineScan *scan, idx_t column, MoraineTransfer transfer, idx_t offset, idx_t count, Vector &out);

} // namespace duckdb
