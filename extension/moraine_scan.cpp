#include "moraine_scan.hpp"

#include "moraine_schema_entry.hpp"
#include "moraine_table_entry.hpp"
#include "moraine_transaction.hpp"

namespace duckdb {

struct MoraineScanState : public GlobalTableFunctionState {
	~MoraineScanState() override {
		moraine_scan_free(scan);
	}
	MoraineScan *scan = nullptr;
	idx_t offset = 0;
	idx_t row_count = 0;
	int64_t base = 0;
	vector<column_t> column_ids;

	idx_t MaxThreads() const override {
		return 1;
	}
};

static unique_ptr<GlobalTableFunctionState> MoraineScanInit(ClientContext &context, TableFunctionInitInput &input) {
	auto &bind = input.bind_data->Cast<MoraineScanBindData>();
	auto state = make_uniq<MoraineScanState>();
	auto &txn = MoraineTransaction::Get(context, bind.table.catalog);
	state->scan = txn.Scan(bind.table.schema.Cast<MoraineSchemaEntry>(), bind.table.name);
	state->row_count = moraine_scan_row_count(state->scan);
	state->base = moraine_scan_base(state->scan);
	state->column_ids = input.column_ids;
	return std::move(state);
}

static void MoraineScanExecute(ClientContext &context, TableFunctionInput &input, DataChunk &output) {
	auto &bind = input.bind_data->Cast<MoraineScanBindData>();
	auto &state = input.global_state->Cast<MoraineScanState>();
	auto count = MinValue<idx_t>(STANDARD_VECTOR_SIZE, state.row_count - state.offset);
	for (idx_t i = 0; i < state.column_ids.size(); i++) {
		auto column = state.column_ids[i];
		auto &out = output.data[i];
		if (column == COLUMN_IDENTIFIER_ROW_ID) {
			auto data = FlatVector::GetData<int64_t>(out);
			for (idx_t r = 0; r < count; r++) {
				data[r] = state.base + int64_t(state.offset + r);
			}
		} else if (IsVirtualColumn(column)) {
			out.SetVectorType(VectorType::CONSTANT_VECTOR);
			ConstantVector::SetNull(out, true);
		} else {
			FillVector(state.scan, column, bind.table.transfers[column], state.offset, count, out);
		}
	}
	state.offset += count;
	output.SetCardinality(count);
}

//! Names the table behind a scan, which DuckDB needs to bind UPDATE and DELETE.
static BindInfo MoraineScanBindInfo(const optional_ptr<FunctionData> bind_data) {
	return BindInfo(bind_data->Cast<MoraineScanBindData>().table);
}

TableFunction MoraineScanFunction() {
	TableFunction function("moraine_scan", {}, MoraineScanExecute, nullptr, MoraineScanInit);
	function.projection_pushdown = true;
	function.get_bind_info = MoraineScanBindInfo;
	return function;
}

} // namespace duckdb
