// The catalog DuckDB attaches for `moraine:<uri>`. Schema `main` is the store
// at the attach's location; every other schema (DuckLake's METADATA_SCHEMA) is
// a store of its own beside it, opened when first named. Their tables are
// DuckLake's metadata tables served by the Rust core.
#pragma once

#include "duckdb/catalog/catalog.hpp"
#include "moraine.h"

namespace duckdb {
class MoraineSchemaEntry;

class MoraineCatalog : public Catalog {
public:
	MoraineCatalog(AttachedDatabase &db, string uri, MoraineDb *handle);
	~MoraineCatalog() override;

	MoraineDb *Handle() {
		return handle;
	}
	//! The store a DuckLake lake on this catalog uses: the one schema other
	//! than `main` that is open, else `main`'s.
	MoraineDb *LakeHandle();

	void Initialize(bool load_builtin) override;
	string GetCatalogType() override {
		return "moraine";
	}
	optional_ptr<CatalogEntry> CreateSchema(CatalogTransaction transaction, CreateSchemaInfo &info) override;
	optional_ptr<SchemaCatalogEntry> LookupSchema(CatalogTransaction transaction, const EntryLookupInfo &schema_lookup,
	                                              OnEntryNotFound if_not_found) override;
	void ScanSchemas(ClientContext &context, std::function<void(SchemaCatalogEntry &)> callback) override;
	PhysicalOperator &PlanCreateTableAs(ClientContext &context, PhysicalPlanGenerator &planner, LogicalCreateTable &op,
	                                    PhysicalOperator &plan) override;
	PhysicalOperator &PlanInsert(ClientContext &context, PhysicalPlanGenerator &planner, LogicalInsert &op,
	                             optional_ptr<PhysicalOperator> plan) override;
	PhysicalOperator &PlanDelete(ClientContext &context, PhysicalPlanGenerator &planner, LogicalDelete &op,
	                             PhysicalOperator &plan) override;
	PhysicalOperator &PlanUpdate(ClientContext &context, PhysicalPlanGenerator &planner, LogicalUpdate &op,
	                             PhysicalOperator &plan) override;
	//! The DuckDB type a column type string of the core names. Parsing costs
	//! tens of microseconds and every transaction describes the tables it
	//! reads anew, so built-in type names are parsed once per catalog; any
	//! other name (a user type could change) is parsed every time.
	LogicalType ColumnType(const string &type_string, ClientContext &context);

	DatabaseSize GetDatabaseSize(ClientContext &context) override;
	bool InMemory() override;
	string GetDBPath() override;

private:
	void DropSchema(ClientContext &context, DropInfo &info) override;

	//! The entry of schema `name` other than `main`, opening (or with `create`,
	//! creating) its store; null when it does not exist. Call with schemas_lock held.
	optional_ptr<MoraineSchemaEntry> OpenSchema(const string &name, bool create);

	string uri;
	MoraineDb *handle;
	unique_ptr<MoraineSchemaEntry> main_schema;
	mutex schemas_lock;
	mutex column_types_lock;
	unordered_map<string, LogicalType> column_types;
	case_insensitive_map_t<unique_ptr<MoraineSchemaEntry>> other_schemas;
};

} // namespace duckdb
