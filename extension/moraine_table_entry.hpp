// A DuckLake metadata table (fixed or inlined) as DuckDB binds it. Scans read
// the materialization the Rust core pins for the transaction.
#pragma once

#include "duckdb/catalog/catalog_entry/table_catalog_entry.hpp"
#include "moraine_ffi.hpp"

namespace duckdb {

class MoraineTableEntry : public TableCatalogEntry {
public:
	MoraineTableEntry(Catalog &catalog, SchemaCatalogEntry &schema, CreateTableInfo &info, vector<uint8_t> transfers);

	//! How each column's cells cross the ABI.
	vector<uint8_t> transfers;

	unique_ptr<BaseStatistics> GetStatistics(ClientContext &context, column_t column_id) override;
	TableFunction GetScanFunction(ClientContext &context, unique_ptr<FunctionData> &bind_data) override;
	TableStorageInfo GetStorageInfo(ClientContext &context) override;
};

} // namespace duckdb
