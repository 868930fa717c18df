#include "moraine_functions.hpp"

#include "duckdb/function/table_function.hpp"
#include "duckdb/main/attached_database.hpp"
#include "duckdb/main/database_manager.hpp"
#include "moraine_catalog.hpp"
#include "moraine_ffi.hpp"

namespace duckdb {

//! The moraine catalog behind a name: the moraine attach itself, or the
//! hidden metadata catalog DuckLake attached for lake `name`.
static MoraineCatalog &ResolveMoraine(ClientContext &context, const string &name) {
	auto &manager = DatabaseManager::Get(context);
	for (auto &candidate : {name, "__ducklake_metadata_" + name}) {
		auto db = manager.GetDatabase(context, candidate);
		if (db && db->GetCatalog().GetCatalogType() == "moraine") {
			return db->GetCatalog().Cast<MoraineCatalog>();
		}
	}
	throw BinderException("\"%s\" is not a moraine catalog or a DuckLake lake on one", name);
}

struct MoraineCatalogBindData : public TableFunctionData {
	explicit MoraineCatalogBindData(MoraineCatalog &catalog) : catalog(catalog) {
	}
	MoraineCatalog &catalog;
};

struct MoraineOnceState : public GlobalTableFunctionState {
	bool done = false;
	idx_t offset = 0;
	vector<string> cells;
};

static unique_ptr<GlobalTableFunctionState> InitOnce(ClientContext &context, TableFunctionInitInput &input) {
	return make_uniq<MoraineOnceState>();
}

static unique_ptr<FunctionData> ReclaimBind(ClientContext &context, TableFunctionBindInput &input,
                                            vector<LogicalType> &return_types, vector<string> &names) {
	auto &catalog = ResolveMoraine(context, input.inputs[0].GetValue<string>());
	names = {"physical_bytes_before", "physical_bytes_after", "objects_deleted", "elapsed_ms"};
	return_types = {LogicalType::UBIGINT, LogicalType::UBIGINT, LogicalType::UBIGINT, LogicalType::UBIGINT};
	return make_uniq<MoraineCatalogBindData>(catalog);
}

//! The reclaim runs on moraine's runtime; the scan waits for it in short
//! slices so DuckDB's progress bar can ask how far it has come.
struct MoraineReclaimState : public GlobalTableFunctionState {
	~MoraineReclaimState() override {
		moraine_reclaim_free(job);
	}
	MoraineReclaimJob *job = nullptr;
	bool done = false;
};

static unique_ptr<GlobalTableFunctionState> ReclaimInit(ClientContext &context, TableFunctionInitInput &input) {
	return make_uniq<MoraineReclaimState>();
}

static constexpr uint64_t RECLAIM_DEADLINE_MS = 120000;
static constexpr uint64_t RECLAIM_WAIT_SLICE_MS = 20;

static void ReclaimExecute(ClientContext &context, TableFunctionInput &input, DataChunk &output) {
	auto &state = input.global_state->Cast<MoraineReclaimState>();
	if (state.done) {
		return;
	}
	auto &catalog = input.bind_data->Cast<MoraineCatalogBindData>().catalog;
	if (!state.job) {
		if (!context.transaction.IsAutoCommit()) {
			throw InvalidInputException("moraine_reclaim cannot run inside BEGIN … COMMIT: it compacts and collects "
			                            "the whole store, so run it as a statement of its own");
		}
		if (moraine_db_is_read_only(catalog.LakeHandle())) {
			throw InvalidInputException("moraine_reclaim needs a read-write attach; this lake is attached READ_ONLY");
		}
		MoraineCall([&](char **err) {
			return moraine_reclaim_start(catalog.LakeHandle(), RECLAIM_DEADLINE_MS, &state.job, err);
		});
	}
	// Where DuckDB allows it, an empty chunk marked HAVE_MORE_OUTPUT hands
	// control back between slices; otherwise wait here until the end.
	bool can_yield = input.results_execution_mode == AsyncResultsExecutionMode::TASK_EXECUTOR;
	int32_t finished = 0;
	MoraineReclaimReport report;
	do {
		MoraineCall([&](char **err) {
			return moraine_reclaim_wait(state.job, RECLAIM_WAIT_SLICE_MS, &finished, &report, err);
		});
	} while (!finished && !can_yield);
	if (!finished) {
		input.async_result = AsyncResultType::HAVE_MORE_OUTPUT;
		return;
	}
	state.done = true;
	output.SetCardinality(1);
	output.SetValue(0, 0, Value::UBIGINT(report.bytes_before));
	output.SetValue(1, 0, Value::UBIGINT(report.bytes_after));
	output.SetValue(2, 0, Value::UBIGINT(report.objects_deleted));
	output.SetValue(3, 0, Value::UBIGINT(report.elapsed_ms));
}

static double ReclaimProgress(ClientContext &context, const FunctionData *bind_data,
                              const GlobalTableFunctionState *global_state) {
	if (!global_state) {
		return 0;
	}
	auto &state = global_state->Cast<MoraineReclaimState>();
	return state.done ? 100.0 : 100.0 * moraine_reclaim_progress(state.job);
}

static unique_ptr<FunctionData> AuditBind(ClientContext &context, TableFunctionBindInput &input,
                                          vector<LogicalType> &return_types, vector<string> &names) {
	auto &catalog = ResolveMoraine(context, input.inputs[0].GetValue<string>());
	names = {"section", "item", "value", "detail"};
	return_types = {LogicalType::VARCHAR, LogicalType::VARCHAR, LogicalType::VARCHAR, LogicalType::VARCHAR};
	return make_uniq<MoraineCatalogBindData>(catalog);
}

static void AuditExecute(ClientContext &context, TableFunctionInput &input, DataChunk &output) {
	auto &state = input.global_state->Cast<MoraineOnceState>();
	if (!state.done) {
		state.done = true;
		auto &catalog = input.bind_data->Cast<MoraineCatalogBindData>().catalog;
		MoraineStrings *rows = nullptr;
		MoraineCall([&](char **err) { return moraine_db_audit(catalog.LakeHandle(), &rows, err); });
		for (idx_t i = 0; i < moraine_strings_len(rows); i++) {
			state.cells.emplace_back(moraine_strings_get(rows, i));
		}
		moraine_strings_free(rows);
	}
	idx_t count = 0;
	while (state.offset + 4 <= state.cells.size() && count < STANDARD_VECTOR_SIZE) {
		for (idx_t c = 0; c < 4; c++) {
			output.SetValue(c, count, Value(state.cells[state.offset + c]));
		}
		state.offset += 4;
		count++;
	}
	output.SetCardinality(count);
}

static unique_ptr<FunctionData> StatsBind(ClientContext &context, TableFunctionBindInput &input,
                                          vector<LogicalType> &return_types, vector<string> &names) {
	auto &catalog = ResolveMoraine(context, input.inputs[0].GetValue<string>());
	names = {"name", "value"};
	return_types = {LogicalType::VARCHAR, LogicalType::UBIGINT};
	return make_uniq<MoraineCatalogBindData>(catalog);
}

static void StatsExecute(ClientContext &context, TableFunctionInput &input, DataChunk &output) {
	auto &state = input.global_state->Cast<MoraineOnceState>();
	if (state.done) {
		return;
	}
	state.done = true;
	auto &catalog = input.bind_data->Cast<MoraineCatalogBindData>().catalog;
	MoraineStrings *rows = nullptr;
	MoraineCall([&](char **err) { return moraine_db_stats(catalog.LakeHandle(), &rows, err); });
	idx_t count = 0;
	for (idx_t i = 0; i + 1 < moraine_strings_len(rows); i += 2) {
		output.SetValue(0, count, Value(moraine_strings_get(rows, i)));
		output.SetValue(1, count, Value::UBIGINT(std::stoull(moraine_strings_get(rows, i + 1))));
		count++;
	}
	moraine_strings_free(rows);
	output.SetCardinality(count);
}

void RegisterMoraineFunctions(ExtensionLoader &loader) {
	TableFunction reclaim("moraine_reclaim", {LogicalType::VARCHAR}, ReclaimExecute, ReclaimBind, ReclaimInit);
	reclaim.table_scan_progress = ReclaimProgress;
	loader.RegisterFunction(reclaim);
	loader.RegisterFunction(TableFunction("moraine_audit", {LogicalType::VARCHAR}, AuditExecute, AuditBind, InitOnce));
	loader.RegisterFunction(TableFunction("moraine_stats", {LogicalType::VARCHAR}, StatsExecute, StatsBind, InitOnce));
}

} // namespace duckdb
