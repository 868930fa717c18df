// Registration: the storage extension `moraine` and the scalar
// `moraine_version()`. Called from the Rust entry point
// `moraine_duckdb_cpp_init`.
#include "duckdb.hpp"
#include "duckdb/main/extension/extension_loader.hpp"
#include "duckdb/storage/storage_extension.hpp"
#include "moraine_functions.hpp"
#include "moraine_storage.hpp"

namespace duckdb {

static void MoraineVersionFunction(DataChunk &args, ExpressionState &state, Vector &result) {
	result.SetVectorType(VectorType::CONSTANT_VECTOR);
	ConstantVector::GetData<string_t>(result)[0] = StringVector::AddString(result, moraine_version());
}

static void LoadMoraine(ExtensionLoader &loader) {
	auto &db = loader.GetDatabaseInstance();
	StorageExtension::Register(DBConfig::GetConfig(db), "moraine", MoraineStorageExtension::Create());
	ScalarFunction version("moraine_version", {}, LogicalType::VARCHAR, MoraineVersionFunction);
	loader.RegisterFunction(version);
	RegisterMoraineFunctions(loader);
}

} // namespace duckdb

extern "C" void moraine_shim_init(void *loader) {
	duckdb::LoadMoraine(*static_cast<duckdb::ExtensionLoader *>(loader));
}
