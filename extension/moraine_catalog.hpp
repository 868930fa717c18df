// The catalog DuckDB attaches for `moraine:<uri>`: one schema, `main`, whose
// tables are DuckLake's metadata tables served by the Rust core.
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
	DatabaseSize GetDatabaseSize(ClientContext &context) override;
	bool InMemory() override;
	string GetDBPath() override;

private:
	void DropSchema(ClientContext &context, DropInfo &info) override;

	string uri;
	MoraineDb *handle;
	unique_ptr<MoraineSchemaEntry> main_schema;
};

} // namespace duckdb
