// The table function behind every moraine table scan.
#pragma once

#include "duckdb/function/table_function.hpp"

namespace duckdb {
class MoraineTableEntry;

struct MoraineScanBindData : public TableFunctionData {
	explicit MoraineScanBindData(MoraineTableEntry &table) : table(table) {
	}
	MoraineTableEntry &table;
};

TableFunction MoraineScanFunction();

} // namespace duckdb
