#include "moraine_scan.hpp"

#include "duckdb/execution/expression_executor.hpp"
#include "duckdb/function/partition_stats.hpp"
#include "duckdb/planner/expression/bound_conjunction_expression.hpp"
#include "duckdb/planner/expression/bound_reference_expression.hpp"
#include "duckdb/planner/filter/conjunction_filter.hpp"
#include "duckdb/planner/filter/constant_filter.hpp"
#include "duckdb/planner/filter/dynamic_filter.hpp"
#include "duckdb/planner/filter/in_filter.hpp"
#include "duckdb/planner/filter/optional_filter.hpp"
#include "duckdb/planner/table_filter.hpp"
#include "duckdb/storage/statistics/numeric_stats.hpp"
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
	vector<column_t> column_ids;
	//! The filters DuckDB pushed into the scan, keyed by output column.
	optional_ptr<TableFilterSet> filters;
	//! Those filters as one predicate over the output chunk, made at the first chunk; the executor refers to it.
	unique_ptr<Expression> predicate;
	unique_ptr<ExpressionExecutor> filter;
	bool filter_made = false;
	//! When DuckDB prunes the columns only the filters read (`filter_prune`): where each output column is among
	//! `column_ids`. The scan then fills `scanned` with every column, filters it and hands on these.
	vector<idx_t> projection_ids;
	DataChunk scanned;

	idx_t MaxThreads() const override {
		return 1;
	}
};

static bool AsBigint(const Value &value, int64_t &out) {
	Value cast;
	if (value.IsNull() || !value.type().IsIntegral() || !value.DefaultTryCastAs(LogicalType::BIGINT, cast, nullptr)) {
		return false;
	}
	out = cast.GetValue<int64_t>();
	return true;
}

//! Narrows [low, high] to the integers `filter` can keep. A filter this does not read leaves the bound as it is:
//! the bound only has to hold every row the filter keeps, because the scan applies the filter itself.
static void Narrow(const TableFilter &filter, int64_t &low, int64_t &high) {
	switch (filter.filter_type) {
	case TableFilterType::CONSTANT_COMPARISON: {
		auto &constant = filter.Cast<ConstantFilter>();
		int64_t value;
		if (!AsBigint(constant.constant, value)) {
			return;
		}
		switch (constant.comparison_type) {
		case ExpressionType::COMPARE_EQUAL:
			low = MaxValue(low, value);
			high = MinValue(high, value);
			break;
		case ExpressionType::COMPARE_GREATERTHAN:
			if (value == NumericLimits<int64_t>::Maximum()) {
				low = value, high = value - 1; // nothing is greater
			} else {
				low = MaxValue(low, value + 1);
			}
			break;
		case ExpressionType::COMPARE_GREATERTHANOREQUALTO:
			low = MaxValue(low, value);
			break;
		case ExpressionType::COMPARE_LESSTHAN:
			if (value == NumericLimits<int64_t>::Minimum()) {
				low = value + 1, high = value; // nothing is less
			} else {
				high = MinValue(high, value - 1);
			}
			break;
		case ExpressionType::COMPARE_LESSTHANOREQUALTO:
			high = MinValue(high, value);
			break;
		default:
			break;
		}
		return;
	}
	case TableFilterType::CONJUNCTION_AND:
		for (auto &child : filter.Cast<ConjunctionAndFilter>().child_filters) {
			Narrow(*child, low, high);
		}
		return;
	case TableFilterType::OPTIONAL_FILTER: {
		auto &optional = filter.Cast<OptionalFilter>();
		if (optional.child_filter) {
			Narrow(*optional.child_filter, low, high);
		}
		return;
	}
	case TableFilterType::DYNAMIC_FILTER: {
		auto &data = filter.Cast<DynamicFilter>().filter_data;
		if (data && data->initialized) {
			lock_guard<mutex> guard(data->lock);
			if (data->filter) {
				Narrow(*data->filter, low, high);
			}
		}
		return;
	}
	case TableFilterType::IN_FILTER: {
		auto &values = filter.Cast<InFilter>().values;
		if (values.empty()) {
			return;
		}
		int64_t least = NumericLimits<int64_t>::Maximum(), greatest = NumericLimits<int64_t>::Minimum();
		for (auto &value : values) {
			int64_t v;
			if (!AsBigint(value, v)) {
				return;
			}
			least = MinValue(least, v);
			greatest = MaxValue(greatest, v);
		}
		low = MaxValue(low, least);
		high = MinValue(high, greatest);
		return;
	}
	default:
		return;
	}
}

//! The pushed filters on BIGINT columns, as bounds the core may leave rows out by.
static vector<MoraineScanBound> Bounds(const MoraineTableEntry &table, const vector<column_t> &column_ids,
                                       optional_ptr<TableFilterSet> filters) {
	vector<MoraineScanBound> bounds;
	if (!filters) {
		return bounds;
	}
	for (auto &entry : filters->filters) {
		auto column = column_ids[entry.first];
		if (IsVirtualColumn(column) || table.transfers[column] != MORAINE_TRANSFER_INT64) {
			continue;
		}
		int64_t low = NumericLimits<int64_t>::Minimum(), high = NumericLimits<int64_t>::Maximum();
		Narrow(*entry.second, low, high);
		if (low != NumericLimits<int64_t>::Minimum() || high != NumericLimits<int64_t>::Maximum()) {
			bounds.push_back(MoraineScanBound {column, low, high});
		}
	}
	return bounds;
}

//! The pushed filters as one predicate over the output chunk. Optional filters are left out, as DuckDB's own scan
//! leaves them: another operator of the plan applies what they imply.
static unique_ptr<Expression> MakePredicate(const TableFilterSet &filters, const DataChunk &output) {
	vector<unique_ptr<Expression>> predicates;
	for (auto &entry : filters.filters) {
		if (entry.second->filter_type == TableFilterType::OPTIONAL_FILTER) {
			continue;
		}
		BoundReferenceExpression column(output.data[entry.first].GetType(), entry.first);
		predicates.push_back(entry.second->ToExpression(column));
	}
	if (predicates.empty()) {
		return nullptr;
	}
	unique_ptr<Expression> predicate = std::move(predicates[0]);
	for (idx_t i = 1; i < predicates.size(); i++) {
		predicate = make_uniq<BoundConjunctionExpression>(ExpressionType::CONJUNCTION_AND, std::move(predicate),
		                                                  std::move(predicates[i]));
	}
	return predicate;
}

static unique_ptr<GlobalTableFunctionState> MoraineScanInit(ClientContext &context, TableFunctionInitInput &input) {
	auto &bind = input.bind_data->Cast<MoraineScanBindData>();
	auto state = make_uniq<MoraineScanState>();
	auto &txn = MoraineTransaction::Get(context, bind.table.catalog);
	state->column_ids = input.column_ids;
	state->filters = input.filters;
	auto bounds = Bounds(bind.table, state->column_ids, input.filters);
	state->scan = txn.Scan(bind.table, bounds);
	state->row_count = moraine_scan_row_count(state->scan);
	if (input.CanRemoveFilterColumns()) {
		state->projection_ids = input.projection_ids;
		vector<LogicalType> types;
		auto virtual_columns = bind.table.GetVirtualColumns();
		for (auto column : state->column_ids) {
			if (!IsVirtualColumn(column)) {
				types.push_back(bind.table.GetColumn(LogicalIndex(column)).Type());
				continue;
			}
			auto known = virtual_columns.find(column);
			types.push_back(known == virtual_columns.end() ? LogicalType::ROW_TYPE : known->second.type);
		}
		state->scanned.Initialize(context, types);
	}
	return std::move(state);
}

static void FillChunk(const MoraineScanBindData &bind, MoraineScanState &state, DataChunk &output) {
	auto count = MinValue<idx_t>(STANDARD_VECTOR_SIZE, state.row_count - state.offset);
	for (idx_t i = 0; i < state.column_ids.size(); i++) {
		auto column = state.column_ids[i];
		auto &out = output.data[i];
		if (column == COLUMN_IDENTIFIER_ROW_ID) {
			auto written = moraine_scan_rowids(state.scan, state.offset, count, FlatVector::GetData<int64_t>(out));
			if (written != count) {
				throw IOException("moraine: a scan returned %llu of %llu rowids", (unsigned long long)written,
				                  (unsigned long long)count);
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

//! Hands the `count` rows of `scanned` that `kept` selects (all of them when it is null) on as `output`, with only
//! the columns DuckDB asked for when it pruned the filters' own.
static void Emit(MoraineScanState &state, DataChunk &scanned, DataChunk &output, const SelectionVector *kept,
                 idx_t count) {
	if (&scanned != &output) {
		for (idx_t i = 0; i < state.projection_ids.size(); i++) {
			output.data[i].Reference(scanned.data[state.projection_ids[i]]);
		}
		output.SetCardinality(scanned.size());
	}
	if (kept) {
		output.Slice(*kept, count);
	}
}

static void MoraineScanExecute(ClientContext &context, TableFunctionInput &input, DataChunk &output) {
	auto &bind = input.bind_data->Cast<MoraineScanBindData>();
	auto &state = input.global_state->Cast<MoraineScanState>();
	auto &scanned = state.projection_ids.empty() ? output : state.scanned;
	// An empty chunk ends the scan, so a chunk the filters empty is followed by the next.
	while (state.offset < state.row_count) {
		output.Reset();
		scanned.Reset();
		FillChunk(bind, state, scanned);
		if (!state.filter_made) {
			state.predicate = state.filters ? MakePredicate(*state.filters, scanned) : nullptr;
			if (state.predicate) {
				state.filter = make_uniq<ExpressionExecutor>(context, *state.predicate);
			}
			state.filter_made = true;
		}
		if (!state.filter) {
			Emit(state, scanned, output, nullptr, scanned.size());
			return;
		}
		SelectionVector kept(STANDARD_VECTOR_SIZE);
		auto kept_count = state.filter->SelectExpression(scanned, kept);
		if (kept_count == scanned.size()) {
			Emit(state, scanned, output, nullptr, kept_count);
			return;
		}
		if (kept_count > 0) {
			Emit(state, scanned, output, &kept, kept_count);
			return;
		}
	}
	output.SetCardinality(0);
}

//! The planner orders joins and picks each hash join's build side by these estimates. Without them every scan
//! counted as one row, and DuckLake's join of `ducklake_delete_file` with `ducklake_data_file` built its hash table
//! from every data file instead of from the (usually empty) delete files. They are the counts DuckDB's own table
//! would give, deleted rows it still holds included, so the planner picks the file catalog's plans, and DuckLake's
//! unordered queries return rows in its order.
static unique_ptr<NodeStatistics> MoraineScanCardinality(ClientContext &context, const FunctionData *bind_data) {
	auto &bind = bind_data->Cast<MoraineScanBindData>();
	try {
		auto &txn = MoraineTransaction::Get(context, bind.table.catalog);
		auto rows = txn.RowEstimate(bind.table);
		return make_uniq<NodeStatistics>(rows, rows);
	} catch (std::exception &) {
		// No estimate: the scan itself reports what went wrong.
		return nullptr;
	}
}

//! The exact statistics of integer column `column` of `table` as this transaction's scan would see it, or null
//! when the column holds something else. Exactness matters: DuckDB drops a pushed filter the statistics prove
//! always true, and empties a scan whose filter they prove always false.
static unique_ptr<BaseStatistics> IntColumnStatistics(ClientContext &context, MoraineTableEntry &table,
                                                      column_t column) {
	if (IsVirtualColumn(column) || column >= table.transfers.size() ||
	    table.transfers[column] != MORAINE_TRANSFER_INT64) {
		return nullptr;
	}
	auto &txn = MoraineTransaction::Get(context, table.catalog);
	auto counted = txn.IntStats(table, column);
	if (!counted.exact) {
		return nullptr;
	}
	auto stats = NumericStats::CreateEmpty(LogicalType::BIGINT);
	if (counted.nulls > 0) {
		stats.SetHasNull();
	}
	if (counted.rows > counted.nulls) {
		stats.SetHasNoNull();
		NumericStats::SetMin(stats, Value::BIGINT(counted.min));
		NumericStats::SetMax(stats, Value::BIGINT(counted.max));
	}
	return stats.ToUnique();
}

//! DuckLake's metadata queries filter by snapshot (`5001 >= begin_snapshot AND (5001 < end_snapshot OR end_snapshot
//! IS NULL)`). DuckDB's own tables skip such a filter when their zone maps prove it keeps every row; with these
//! statistics DuckDB's optimizer removes it before the scan, instead of the scan evaluating it row by row.
static unique_ptr<BaseStatistics> MoraineScanStatistics(ClientContext &context, const FunctionData *bind_data,
                                                        column_t column) {
	if (!bind_data) {
		return nullptr;
	}
	return IntColumnStatistics(context, bind_data->Cast<MoraineScanBindData>().table, column);
}

//! A moraine table as one partition whose integer columns have exact statistics, read when the optimizer asks.
struct MorainePartition : public PartitionRowGroup {
	MorainePartition(ClientContext &context, MoraineTableEntry &table) : context(context), table(table) {
	}
	ClientContext &context;
	MoraineTableEntry &table;

	unique_ptr<BaseStatistics> GetColumnStatistics(const StorageIndex &storage_index) override {
		if (storage_index.HasChildren()) {
			return nullptr;
		}
		return IntColumnStatistics(context, table, storage_index.GetPrimaryIndex());
	}

	bool MinMaxIsExact(const BaseStatistics &stats, const StorageIndex &) override {
		return stats.GetStatsType() == StatisticsType::NUMERIC_STATS;
	}
};

//! DuckLake asks for `MAX(snapshot_id)` in every commit. With exact statistics DuckDB's optimizer folds an ungrouped
//! MIN, MAX or COUNT(*) into a constant, instead of every row of the table crossing into DuckDB to be aggregated:
//! the cost then stays flat however long the history. An empty table offers nothing to fold.
static vector<PartitionStatistics> MoraineScanPartitionStats(ClientContext &context, GetPartitionStatsInput &input) {
	vector<PartitionStatistics> partitions;
	if (!input.bind_data) {
		return partitions;
	}
	auto &table = input.bind_data->Cast<MoraineScanBindData>().table;
	auto &txn = MoraineTransaction::Get(context, table.catalog);
	auto rows = txn.RowCount(table);
	if (rows == 0) {
		return partitions;
	}
	PartitionStatistics partition;
	partition.count = rows;
	partition.count_type = CountType::COUNT_EXACT;
	partition.partition_row_group = make_shared_ptr<MorainePartition>(context, table);
	partitions.push_back(std::move(partition));
	return partitions;
}

//! Any filter on one column comes into the scan, as into DuckDB's own: DuckLake's `(12 < end_snapshot OR end_snapshot
//! IS NULL)` then counts among the scan's filters when the join planner estimates its rows, as on the file catalog,
//! and its column is pruned with the others. The scan evaluates it like every other filter ([`MakePredicate`]).
static bool MorainePushdownExpression(ClientContext &, const LogicalGet &, Expression &) {
	return true;
}

//! Names the table behind a scan, which DuckDB needs to bind UPDATE and DELETE.
static BindInfo MoraineScanBindInfo(const optional_ptr<FunctionData> bind_data) {
	return BindInfo(bind_data->Cast<MoraineScanBindData>().table);
}

TableFunction MoraineScanFunction() {
	TableFunction function("moraine_scan", {}, MoraineScanExecute, nullptr, MoraineScanInit);
	function.projection_pushdown = true;
	// DuckDB hands the scan its filters, including the values a hash join's build side pushes into its probe side
	// (DuckLake's `snapshot_id = (SELECT MAX(snapshot_id) ...)`); the scan applies them and lets the core leave
	// out what they cannot keep.
	function.filter_pushdown = true;
	// The columns only those filters read are the scan's to drop, as DuckDB's own scan does; without this, DuckDB
	// puts a projection above the scan, whose estimate the join planner does not update, so a hash join's build
	// side was chosen from stale estimates and DuckLake's unordered file lists came back in another order.
	function.filter_prune = true;
	function.pushdown_expression = MorainePushdownExpression;
	function.get_bind_info = MoraineScanBindInfo;
	function.cardinality = MoraineScanCardinality;
	function.get_partition_stats = MoraineScanPartitionStats;
	function.statistics = MoraineScanStatistics;
	return function;
}

} // namespace duckdb
