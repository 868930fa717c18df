// A DuckLake metadata table (fixed or inlined) as DuckDB binds it. Scans read
// the materialization the Rust core pins for the transaction; scans and writes
// name the table by the handle its lookup returned.
#pragma once

#include "duckdb/catalog/catalog_entry/table_catalog_entry.hpp"
#include "moraine_ffi.hpp"

namespace duckdb {

class MoraineTableEntry : public TableCatalogEntry {
public:
	MoraineTableEntry(Catalog &catalog, SchemaCatalogEntry &schema, CreateTableInfo &info, MoraineTableHandle handle,
	                  vector<MoraineTransfer> transfers, uint64_t stamp);

	//! How each column's cells cross the ABI.
	vector<MoraineTransfer> transfers;
	//! The core's stamp of the columns this entry was built from: a later transaction whose lookup of the same
	//! name reports it uses this entry instead of building its own.
	const uint64_t stamp;

	const MoraineTableDesc *Handle() const {
		return handle.get();
	}

	unique_ptr<BaseStatistics> GetStatistics(ClientContext &context, column_t column_id) override;
	TableFunction GetScanFunction(ClientContext &context, unique_ptr<FunctionData> &bind_data) override;
	TableStorageInfo GetStorageInfo(ClientContext &context) override;

private:
	MoraineTableHandle handle;
};

} // namespace duckdb
