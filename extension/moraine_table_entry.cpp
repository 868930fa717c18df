#include "moraine_table_entry.hpp"

#include "duckdb/storage/table_storage_info.hpp"
#include "moraine_scan.hpp"

namespace duckdb {

MoraineTableEntry::MoraineTableEntry(Catalog &catalog, SchemaCatalogEntry &schema, CreateTableInfo &info,
                                     MoraineTableHandle handle_p, vector<MoraineTransfer> transfers_p, uint64_t stamp_p)
    : TableCatalogEntry(catalog, schema, info), transfers(std::move(transfers_p)), stamp(stamp_p),
      handle(std::move(handle_p)) {
}

unique_ptr<BaseStatistics> MoraineTableEntry::GetStatistics(ClientContext &context, column_t column_id) {
	return nullptr;
}

TableFunction MoraineTableEntry::GetScanFunction(ClientContext &context, unique_ptr<FunctionData> &bind_data) {
	bind_data = make_uniq<MoraineScanBindData>(*this);
	return MoraineScanFunction();
}

TableStorageInfo MoraineTableEntry::GetStorageInfo(ClientContext &context) {
	return TableStorageInfo();
}

} // namespace duckdb
