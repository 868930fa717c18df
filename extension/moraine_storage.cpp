#include "moraine_storage.hpp"

#include "duckdb/catalog/catalog_transaction.hpp"
#include "duckdb/common/string_util.hpp"
#include "duckdb/main/attached_database.hpp"
#include "duckdb/main/secret/secret_manager.hpp"
#include "duckdb/parser/parsed_data/attach_info.hpp"
#include "moraine_catalog.hpp"
#include "moraine_ffi.hpp"
#include "moraine_transaction_manager.hpp"

namespace duckdb {

// An s3:// store takes its endpoint and credentials from DuckDB's s3 secret
// for the path, passed to the core as s3_* options. Without a secret (or
// without httpfs, which registers the secret type) the core falls back to
// the AWS_* environment variables.
static void AddS3SecretOptions(ClientContext &context, const string &path, vector<string> &keys,
                               vector<string> &values) {
	if (!StringUtil::StartsWith(path, "s3://")) {
		return;
	}
	SecretMatch match;
	try {
		auto transaction = CatalogTransaction::GetSystemCatalogTransaction(context);
		match = SecretManager::Get(context).LookupSecret(transaction, path, "s3");
	} catch (std::exception &) {
		return;
	}
	if (!match.HasMatch()) {
		return;
	}
	auto secret = dynamic_cast<const KeyValueSecret *>(&match.GetSecret());
	if (!secret) {
		return;
	}
	static const pair<const char *, const char *> fields[] = {{"endpoint", "s3_endpoint"},
	                                                          {"region", "s3_region"},
	                                                          {"key_id", "s3_key_id"},
	                                                          {"secret", "s3_secret"},
	                                                          {"session_token", "s3_session_token"},
	                                                          {"url_style", "s3_url_style"},
	                                                          {"use_ssl", "s3_use_ssl"}};
	for (auto &field : fields) {
		Value value;
		if (secret->TryGetValue(field.first, value) && !value.IsNull()) {
			keys.push_back(field.second);
			values.push_back(value.ToString());
		}
	}
}

static unique_ptr<Catalog> MoraineAttach(optional_ptr<StorageExtensionInfo> storage_info, ClientContext &context,
                                         AttachedDatabase &db, const string &name, AttachInfo &info,
                                         AttachOptions &options) {
	vector<string> keys;
	vector<string> values;
	// Secret first, so explicit attach options win.
	AddS3SecretOptions(context, info.path, keys, values);
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
