#include "moraine_write.hpp"

#include "duckdb/execution/expression_executor.hpp"
#include "moraine_schema_entry.hpp"
#include "moraine_table_entry.hpp"
#include "moraine_transaction.hpp"

namespace duckdb {

MoraineWrite::MoraineWrite(PhysicalPlan &physical_plan, MoraineWriteKind kind, MoraineTableEntry &table,
                           vector<idx_t> columns, idx_t rowid_index, vector<unique_ptr<Expression>> expressions,
                           idx_t estimated_cardinality)
    : PhysicalOperator(physical_plan, PhysicalOperatorType::EXTENSION, {LogicalType::BIGINT}, estimated_cardinality),
      kind(kind), table(table), columns(std::move(columns)), rowid_index(rowid_index),
      expressions(std::move(expressions)) {
}

struct MoraineWriteState : public GlobalSinkState {
	idx_t rows = 0;
};

struct MoraineWriteSource : public GlobalSourceState {
	bool done = false;
};

unique_ptr<GlobalSinkState> MoraineWrite::GetGlobalSinkState(ClientContext &context) const {
	return make_uniq<MoraineWriteState>();
}

unique_ptr<GlobalSourceState> MoraineWrite::GetGlobalSourceState(ClientContext &context) const {
	return make_uniq<MoraineWriteSource>();
}

static vector<int64_t> RowIds(Vector &rowid_vector, idx_t count) {
	vector<int64_t> rowids;
	rowids.reserve(count);
	for (idx_t i = 0; i < count; i++) {
		rowids.push_back(rowid_vector.GetValue(i).GetValue<int64_t>());
	}
	return rowids;
}

SinkResultType MoraineWrite::Sink(ExecutionContext &context, DataChunk &chunk, OperatorSinkInput &input) const {
	auto &state = input.global_state.Cast<MoraineWriteState>();
	auto &txn = MoraineTransaction::Get(context.client, table.catalog);
	auto count = chunk.size();
	MoraineCellBuffer cells;
	switch (kind) {
	case MoraineWriteKind::INSERT: {
		auto width = table.transfers.size();
		if (chunk.ColumnCount() != width) {
			throw InternalException("moraine insert into %s: %d input columns for %d table columns", table.name,
			                        chunk.ColumnCount(), width);
		}
		cells.Reserve(count, width);
		for (idx_t c = 0; c < width; c++) {
			cells.SetColumn(chunk.data[c], count, c, width, table.transfers[c]);
		}
		txn.Insert(table, count, width, cells.Data());
		break;
	}
	case MoraineWriteKind::DELETE:
		txn.Delete(table, RowIds(chunk.data[rowid_index], count));
		break;
	case MoraineWriteKind::UPDATE: {
		DataChunk values;
		vector<LogicalType> types;
		for (auto &expr : expressions) {
			if (expr->GetExpressionClass() == ExpressionClass::BOUND_DEFAULT) {
				throw NotImplementedException("UPDATE … SET DEFAULT is not supported in a moraine catalog");
			}
			types.push_back(expr->return_type);
		}
		values.Initialize(context.client, types);
		ExpressionExecutor executor(context.client, expressions);
		executor.Execute(chunk, values);
		auto width = columns.size();
		cells.Reserve(count, width);
		for (idx_t c = 0; c < width; c++) {
			cells.SetColumn(values.data[c], count, c, width, table.transfers[columns[c]]);
		}
		txn.Update(table, RowIds(chunk.data[rowid_index], count), columns, cells.Data());
		break;
	}
	}
	state.rows += count;
	return SinkResultType::NEED_MORE_INPUT;
}

SourceResultType MoraineWrite::GetDataInternal(ExecutionContext &context, DataChunk &chunk,
                                               OperatorSourceInput &input) const {
	auto &source = input.global_state.Cast<MoraineWriteSource>();
	if (!source.done) {
		auto &state = sink_state->Cast<MoraineWriteState>();
		chunk.SetCardinality(1);
		chunk.SetValue(0, 0, Value::BIGINT(NumericCast<int64_t>(state.rows)));
		source.done = true;
	}
	return SourceResultType::FINISHED;
}

string MoraineWrite::GetName() const {
	switch (kind) {
	case MoraineWriteKind::INSERT:
		return "MORAINE_INSERT";
	case MoraineWriteKind::UPDATE:
		return "MORAINE_UPDATE";
	default:
		return "MORAINE_DELETE";
	}
}

} // namespace duckdb
