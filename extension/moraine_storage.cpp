#include "moraine_storage.hpp"

#include "duckdb/main/attached_database.hpp"
#include "duckdb/parser/parsed_data/attach_info.hpp"
#include "moraine_catalog.hpp"
#include "moraine_ffi.hpp"
#include "moraine_transaction_manager.hpp"

namespace duckdb {

static unique_ptr<Catalog> MoraineAttach(optional_ptr<StorageExtensionInfo> storage_info, ClientContext &context,
                                         AttachedDatabase &db, const string &name, AttachInfo &info,
                                         AttachOptions &options) {
	vector<string> keys;
	vector<string> values;
	for (auto &entry : options.options) {
		keys.push_back(entry.first);
		values.push_back(entry.second.ToString());
	}
	vector<const char *> key_ptrs;
	vector<const char *> value_ptrs;
	for (idx_t i = 0; i < keys.size(); i++) {
		key_ptrs.push_back(keys[i].c_str());
		value_ptrs.push_back(values[i].c_str());
	}
	bool read_only = options.access_mode == AccessMode::READ_ONLY;
	MoraineDb *handle = nullptr;
	MoraineCall([&](char **err) {
		return moraine_open(info.path.c_str(), key_ptrs.data(), value_ptrs.data(), keys.size(), read_only, &handle,
		                    err);
	});
	options.options.clear();
	return make_uniq<MoraineCatalog>(db, info.path, handle);
}

static unique_ptr<TransactionManager> MoraineCreateTransactionManager(optional_ptr<StorageExtensionInfo> storage_info,
                                                                      AttachedDatabase &db, Catalog &catalog) {
	return make_uniq<MoraineTransactionManager>(db, catalog.Cast<MoraineCatalog>());
}

shared_ptr<StorageExtension> MoraineStorageExtension::Create() {
	auto extension = make_shared_ptr<StorageExtension>();
	extension->attach = MoraineAttach;
	extension->create_transaction_manager = MoraineCreateTransactionManager;
	return extension;
}

} // namespace duckdb
