#include "moraine_catalog.hpp"

#include "duckdb/parser/parsed_data/create_schema_info.hpp"
#include "duckdb/planner/expression/bound_reference_expression.hpp"
#include "duckdb/planner/operator/logical_delete.hpp"
#include "duckdb/planner/operator/logical_insert.hpp"
#include "duckdb/planner/operator/logical_update.hpp"
#include "duckdb/execution/physical_plan_generator.hpp"
#include "duckdb/storage/database_size.hpp"
#include "moraine_ffi.hpp"
#include "moraine_schema_entry.hpp"
#include "moraine_table_entry.hpp"
#include "moraine_write.hpp"

namespace duckdb {

MoraineCatalog::MoraineCatalog(AttachedDatabase &db, string uri_p, MoraineDb *handle_p)
    : Catalog(db), uri(std::move(uri_p)), handle(handle_p) {
}

MoraineCatalog::~MoraineCatalog() {
	other_schemas.clear();
	main_schema.reset();
	moraine_close(handle);
}

void MoraineCatalog::Initialize(bool load_builtin) {
	CreateSchemaInfo info;
	info.schema = DEFAULT_SCHEMA;
	main_schema = make_uniq<MoraineSchemaEntry>(*this, info, handle, false);
}

optional_ptr<MoraineSchemaEntry> MoraineCatalog::OpenSchema(const string &name, bool create) {
	auto found = other_schemas.find(name);
	if (found != other_schemas.end()) {
		return found->second.get();
	}
	MoraineDb *schema_handle = nullptr;
	char *err = nullptr;
	auto status = moraine_open_schema(handle, name.c_str(), create, &schema_handle, &err);
	if (status == MORAINE_STATUS_NOT_FOUND) {
		moraine_free_string(err);
		return nullptr;
	}
	if (status != MORAINE_STATUS_OK) {
		ThrowMoraineError(status, err);
	}
	CreateSchemaInfo info;
	info.schema = name;
	auto entry = make_uniq<MoraineSchemaEntry>(*this, info, schema_handle, true);
	auto result = entry.get();
	other_schemas[name] = std::move(entry);
	return result;
}

optional_ptr<CatalogEntry> MoraineCatalog::CreateSchema(CatalogTransaction transaction, CreateSchemaInfo &info) {
	bool exists;
	if (StringUtil::CIEquals(info.schema, DEFAULT_SCHEMA)) {
		exists = true;
	} else {
		lock_guard<mutex> guard(schemas_lock);
		exists = OpenSchema(info.schema, false) != nullptr;
		if (!exists) {
			return OpenSchema(info.schema, true).get();
		}
	}
	if (info.on_conflict == OnCreateConflict::ERROR_ON_CONFLICT) {
		throw CatalogException("schema \"%s\" already exists", info.schema);
	}
	return nullptr;
}

optional_ptr<SchemaCatalogEntry> MoraineCatalog::LookupSchema(CatalogTransaction transaction,
                                                              const EntryLookupInfo &schema_lookup,
                                                              OnEntryNotFound if_not_found) {
	auto &name = schema_lookup.GetEntryName();
	if (name.empty() || StringUtil::CIEquals(name, DEFAULT_SCHEMA)) {
		return main_schema.get();
	}
	lock_guard<mutex> guard(schemas_lock);
	auto schema = OpenSchema(name, false);
	if (!schema && if_not_found == OnEntryNotFound::THROW_EXCEPTION) {
		throw CatalogException("schema \"%s\" does not exist in the moraine catalog %s", name, uri);
	}
	return schema.get();
}

void MoraineCatalog::ScanSchemas(ClientContext &context, std::function<void(SchemaCatalogEntry &)> callback) {
	callback(*main_schema);
	lock_guard<mutex> guard(schemas_lock);
	for (auto &entry : other_schemas) {
		callback(*entry.second);
	}
}

MoraineDb *MoraineCatalog::LakeHandle() {
	lock_guard<mutex> guard(schemas_lock);
	return other_schemas.size() == 1 ? other_schemas.begin()->second->Handle() : handle;
}

PhysicalOperator &MoraineCatalog::PlanCreateTableAs(ClientContext &context, PhysicalPlanGenerator &planner,
                                                    LogicalCreateTable &op, PhysicalOperator &plan) {
	throw NotImplementedException("CREATE TABLE AS is not supported in a moraine catalog");
}

PhysicalOperator &MoraineCatalog::PlanInsert(ClientContext &context, PhysicalPlanGenerator &planner, LogicalInsert &op,
                                             optional_ptr<PhysicalOperator> plan) {
	if (op.return_chunk) {
		throw NotImplementedException("RETURNING is not supported in a moraine catalog");
	}
	if (op.on_conflict_info.action_type != OnConflictAction::THROW) {
		throw NotImplementedException("ON CONFLICT is not supported in a moraine catalog");
	}
	if (!plan) {
		throw NotImplementedException("INSERT without a source is not supported in a moraine catalog");
	}
	if (!op.column_index_map.empty()) {
		plan = planner.ResolveDefaultsProjection(op, *plan);
	}
	auto &table = op.table.Cast<MoraineTableEntry>();
	auto &insert = planner.Make<MoraineWrite>(MoraineWriteKind::INSERT, table, vector<idx_t>(), 0,
	                                          vector<unique_ptr<Expression>>(), op.estimated_cardinality);
	insert.children.push_back(*plan);
	return insert;
}

PhysicalOperator &MoraineCatalog::PlanDelete(ClientContext &context, PhysicalPlanGenerator &planner, LogicalDelete &op,
                                             PhysicalOperator &plan) {
	if (op.return_chunk) {
		throw NotImplementedException("RETURNING is not supported in a moraine catalog");
	}
	auto &rowid = op.expressions[0]->Cast<BoundReferenceExpression>();
	auto &table = op.table.Cast<MoraineTableEntry>();
	auto &del = planner.Make<MoraineWrite>(MoraineWriteKind::DELETE, table, vector<idx_t>(), rowid.index,
	                                       vector<unique_ptr<Expression>>(), op.estimated_cardinality);
	del.children.push_back(plan);
	return del;
}

PhysicalOperator &MoraineCatalog::PlanUpdate(ClientContext &context, PhysicalPlanGenerator &planner, LogicalUpdate &op,
                                             PhysicalOperator &plan) {
	if (op.return_chunk) {
		throw NotImplementedException("RETURNING is not supported in a moraine catalog");
	}
	vector<idx_t> columns;
	for (auto &col : op.columns) {
		columns.push_back(col.index);
	}
	auto &table = op.table.Cast<MoraineTableEntry>();
	// DuckDB puts the rowid in the last column of the UPDATE's input.
	auto rowid_index = plan.types.size() - 1;
	auto &update = planner.Make<MoraineWrite>(MoraineWriteKind::UPDATE, table, std::move(columns), rowid_index,
	                                          std::move(op.expressions), op.estimated_cardinality);
	update.children.push_back(plan);
	return update;
}

LogicalType MoraineCatalog::ColumnType(const string &type_string, ClientContext &context) {
	// Only built-in types are kept, so a kept one needs no check; the check
	// searches DuckDB's type names and ran for every column of every entry.
	{
		lock_guard<mutex> guard(column_types_lock);
		auto known = column_types.find(type_string);
		if (known != column_types.end()) {
			return known->second;
		}
	}
	auto built_in = TransformStringToLogicalTypeId(type_string) != LogicalTypeId::UNBOUND;
	auto type = TransformStringToLogicalType(type_string, context);
	if (built_in) {
		lock_guard<mutex> guard(column_types_lock);
		column_types.emplace(type_string, type);
	}
	return type;
}

DatabaseSize MoraineCatalog::GetDatabaseSize(ClientContext &context) {
	return DatabaseSize();
}

bool MoraineCatalog::InMemory() {
	return StringUtil::StartsWith(uri, "memory://");
}

string MoraineCatalog::GetDBPath() {
	return uri;
}

void MoraineCatalog::DropSchema(ClientContext &context, DropInfo &info) {
	throw NotImplementedException("the schema of a moraine catalog cannot be dropped");
}

} // namespace duckdb
