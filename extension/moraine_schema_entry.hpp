// A schema of a moraine catalog: `main`, or one DuckLake created for its
// METADATA_SCHEMA, each backed by a store of its own. Table lookups go to the
// Rust core, which answers per transaction (DuckLake creates its tables inside
// the transaction that then uses them).
#pragma once

#include "duckdb/catalog/catalog_entry/schema_catalog_entry.hpp"
#include "moraine.h"
#include "moraine_table_entry.hpp"

namespace duckdb {

class MoraineSchemaEntry : public SchemaCatalogEntry {
public:
	//! `owned`: the entry closes `handle` when it goes (every schema but `main`).
	MoraineSchemaEntry(Catalog &catalog, CreateSchemaInfo &info, MoraineDb *handle, bool owned);
	~MoraineSchemaEntry() override;

	MoraineDb *Handle() {
		return handle;
	}

	optional_ptr<CatalogEntry> CreateTable(CatalogTransaction transaction, BoundCreateTableInfo &info) override;
	optional_ptr<CatalogEntry> CreateFunction(CatalogTransaction transaction, CreateFunctionInfo &info) override;
	optional_ptr<CatalogEntry> CreateIndex(CatalogTransaction transaction, CreateIndexInfo &info,
	                                       TableCatalogEntry &table) override;
	optional_ptr<CatalogEntry> CreateView(CatalogTransaction transaction, CreateViewInfo &info) override;
	optional_ptr<CatalogEntry> CreateSequence(CatalogTransaction transaction, CreateSequenceInfo &info) override;
	optional_ptr<CatalogEntry> CreateTableFunction(CatalogTransaction transaction,
	                                               CreateTableFunctionInfo &info) override;
	optional_ptr<CatalogEntry> CreateCopyFunction(CatalogTransaction transaction,
	                                              CreateCopyFunctionInfo &info) override;
	optional_ptr<CatalogEntry> CreatePragmaFunction(CatalogTransaction transaction,
	                                                CreatePragmaFunctionInfo &info) override;
	optional_ptr<CatalogEntry> CreateCollation(CatalogTransaction transaction, CreateCollationInfo &info) override;
	optional_ptr<CatalogEntry> CreateType(CatalogTransaction transaction, CreateTypeInfo &info) override;
	optional_ptr<CatalogEntry> LookupEntry(CatalogTransaction transaction, const EntryLookupInfo &lookup_info) override;
	void Scan(ClientContext &context, CatalogType type, const std::function<void(CatalogEntry &)> &callback) override;
	void Scan(CatalogType type, const std::function<void(CatalogEntry &)> &callback) override;
	void DropEntry(ClientContext &context, DropInfo &info) override;
	void Alter(CatalogTransaction transaction, AlterInfo &info) override;

	//! The entry a transaction last built for table `name`, or null. Entries are shared across transactions, as
	//! DuckDB's own catalog shares them, so that a commit does not rebuild the entry of every table it touches;
	//! each transaction checks the entry's stamp against what it sees before it uses one.
	shared_ptr<MoraineTableEntry> SharedTable(const string &name);
	void ShareTable(const string &name, shared_ptr<MoraineTableEntry> entry);
	//! Forgets the entry of a table a transaction found gone.
	void ForgetTable(const string &name);

private:
	MoraineDb *handle;
	bool owned;
	mutex shared_tables_lock;
	case_insensitive_map_t<shared_ptr<MoraineTableEntry>> shared_tables;
};

} // namespace duckdb
