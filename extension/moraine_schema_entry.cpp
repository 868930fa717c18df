#include "moraine_schema_entry.hpp"

#include "duckdb/parser/parsed_data/drop_info.hpp"
#include "duckdb/planner/parsed_data/bound_create_table_info.hpp"
#include "moraine_transaction.hpp"

namespace duckdb {

MoraineSchemaEntry::MoraineSchemaEntry(Catalog &catalog, CreateSchemaInfo &info, MoraineDb *handle_p, bool owned_p)
    : SchemaCatalogEntry(catalog, info), handle(handle_p), owned(owned_p) {
}

MoraineSchemaEntry::~MoraineSchemaEntry() {
	if (owned) {
		moraine_close(handle);
	}
}

shared_ptr<MoraineTableEntry> MoraineSchemaEntry::SharedTable(const string &name) {
	lock_guard<mutex> guard(shared_tables_lock);
	auto found = shared_tables.find(name);
	return found == shared_tables.end() ? nullptr : found->second;
}

void MoraineSchemaEntry::ShareTable(const string &name, shared_ptr<MoraineTableEntry> entry) {
	lock_guard<mutex> guard(shared_tables_lock);
	shared_tables[name] = std::move(entry);
}

void MoraineSchemaEntry::ForgetTable(const string &name) {
	lock_guard<mutex> guard(shared_tables_lock);
	shared_tables.erase(name);
}

static MoraineTransaction &TransactionOf(CatalogTransaction transaction, Catalog &catalog) {
	if (!transaction.HasContext()) {
		throw NotImplementedException("a moraine catalog needs a client context");
	}
	return MoraineTransaction::Get(transaction.GetContext(), catalog);
}

optional_ptr<CatalogEntry> MoraineSchemaEntry::CreateTable(CatalogTransaction transaction, BoundCreateTableInfo &info) {
	auto &base = info.Base();
	auto &txn = TransactionOf(transaction, catalog);
	vector<string> names;
	vector<string> types;
	for (auto &col : base.columns.Logical()) {
		names.push_back(col.Name());
		types.push_back(col.Type().ToString());
	}
	if (base.on_conflict == OnCreateConflict::REPLACE_ON_CONFLICT) {
		throw NotImplementedException("CREATE OR REPLACE TABLE is not supported in a moraine catalog");
	}
	txn.CreateTable(*this, base.table, names, types, base.on_conflict == OnCreateConflict::IGNORE_ON_CONFLICT);
	return txn.GetTable(transaction.GetContext(), *this, base.table);
}

optional_ptr<CatalogEntry> MoraineSchemaEntry::LookupEntry(CatalogTransaction transaction,
                                                           const EntryLookupInfo &lookup_info) {
	auto type = lookup_info.GetCatalogType();
	if (type != CatalogType::TABLE_ENTRY) {
		return nullptr;
	}
	if (!transaction.HasContext()) {
		return nullptr;
	}
	auto &txn = TransactionOf(transaction, catalog);
	return txn.GetTable(transaction.GetContext(), *this, lookup_info.GetEntryName());
}

void MoraineSchemaEntry::Scan(ClientContext &context, CatalogType type,
                              const std::function<void(CatalogEntry &)> &callback) {
	if (type != CatalogType::TABLE_ENTRY) {
		return;
	}
	auto &txn = MoraineTransaction::Get(context, catalog);
	for (auto &name : txn.ListTables(*this)) {
		auto entry = txn.GetTable(context, *this, name);
		if (entry) {
			callback(*entry);
		}
	}
}

void MoraineSchemaEntry::Scan(CatalogType type, const std::function<void(CatalogEntry &)> &callback) {
	// Listing needs a transaction; without a context there is nothing to list.
}

void MoraineSchemaEntry::DropEntry(ClientContext &context, DropInfo &info) {
	if (info.type != CatalogType::TABLE_ENTRY) {
		throw NotImplementedException("a moraine catalog can only drop DuckLake's inlined tables");
	}
	auto &txn = MoraineTransaction::Get(context, catalog);
	txn.DropTable(*this, info.name, info.if_not_found != OnEntryNotFound::THROW_EXCEPTION);
}

void MoraineSchemaEntry::Alter(CatalogTransaction transaction, AlterInfo &info) {
	throw NotImplementedException("ALTER is not supported in a moraine catalog");
}

#define MORAINE_UNSUPPORTED_CREATE(METHOD, INFO, WHAT)                                                                 \
	optional_ptr<CatalogEntry> MoraineSchemaEntry::METHOD(CatalogTransaction transaction, INFO &info) {                \
		throw NotImplementedException("CREATE " WHAT " is not supported in a moraine catalog");                        \
	}

MORAINE_UNSUPPORTED_CREATE(CreateFunction, CreateFunctionInfo, "FUNCTION")
MORAINE_UNSUPPORTED_CREATE(CreateView, CreateViewInfo, "VIEW")
MORAINE_UNSUPPORTED_CREATE(CreateSequence, CreateSequenceInfo, "SEQUENCE")
MORAINE_UNSUPPORTED_CREATE(CreateTableFunction, CreateTableFunctionInfo, "TABLE FUNCTION")
MORAINE_UNSUPPORTED_CREATE(CreateCopyFunction, CreateCopyFunctionInfo, "COPY FUNCTION")
MORAINE_UNSUPPORTED_CREATE(CreatePragmaFunction, CreatePragmaFunctionInfo, "PRAGMA FUNCTION")
MORAINE_UNSUPPORTED_CREATE(CreateCollation, CreateCollationInfo, "COLLATION")
MORAINE_UNSUPPORTED_CREATE(CreateType, CreateTypeInfo, "TYPE")

optional_ptr<CatalogEntry> MoraineSchemaEntry::CreateIndex(CatalogTransaction transaction, CreateIndexInfo &info,
                                                           TableCatalogEntry &table) {
	throw NotImplementedException("CREATE INDEX is not supported in a moraine catalog");
}

} // namespace duckdb
