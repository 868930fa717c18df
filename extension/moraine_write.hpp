// The sink behind INSERT, UPDATE and DELETE on a moraine table: each row is
// staged, untranslated, on the transaction's staged transaction in Rust.
#pragma once

#include "duckdb/execution/physical_operator.hpp"

namespace duckdb {
class MoraineTableEntry;

enum class MoraineWriteKind : uint8_t { INSERT, UPDATE, DELETE };

class MoraineWrite : public PhysicalOperator {
public:
	MoraineWrite(PhysicalPlan &physical_plan, MoraineWriteKind kind, MoraineTableEntry &table, vector<idx_t> columns,
	             idx_t rowid_index, vector<unique_ptr<Expression>> expressions, idx_t estimated_cardinality);

	MoraineWriteKind kind;
	MoraineTableEntry &table;
	//! UPDATE: the table columns the expressions set.
	vector<idx_t> columns;
	//! UPDATE and DELETE: the input column holding the rowid.
	idx_t rowid_index;
	//! UPDATE: the new values, evaluated over the input.
	vector<unique_ptr<Expression>> expressions;

	SinkResultType Sink(ExecutionContext &context, DataChunk &chunk, OperatorSinkInput &input) const override;
	unique_ptr<GlobalSinkState> GetGlobalSinkState(ClientContext &context) const override;
	bool IsSink() const override {
		return true;
	}
	bool ParallelSink() const override {
		return false;
	}

	SourceResultType GetDataInternal(ExecutionContext &context, DataChunk &chunk,
	                                 OperatorSourceInput &input) const override;
	unique_ptr<GlobalSourceState> GetGlobalSourceState(ClientContext &context) const override;
	bool IsSource() const override {
		return true;
	}

	string GetName() const override;
};

} // namespace duckdb
