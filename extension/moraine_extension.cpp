// Registration: the storage extension `moraine`, the scalar
// `moraine_version()`, and a file system that refuses `moraine://` paths. Called from the Rust entry point
// `moraine_duckdb_cpp_init`.
#include "duckdb.hpp"
#include "duckdb/common/file_system.hpp"
#include "duckdb/common/string_util.hpp"
#include "duckdb/main/extension/extension_loader.hpp"
#include "duckdb/storage/storage_extension.hpp"
#include "moraine_functions.hpp"
#include "moraine_storage.hpp"

namespace duckdb {

static void MoraineVersionFunction(DataChunk &args, ExpressionState &state, Vector &result) {
	result.SetVectorType(VectorType::CONSTANT_VECTOR);
	ConstantVector::GetData<string_t>(result)[0] = StringVector::AddString(result, moraine_version());
}

//! DuckDB reads `moraine://…` as a file path, not as the `moraine:` prefix: a URL scheme is never an extension's
//! prefix. So `ATTACH 'ducklake:moraine://lake'` would quietly make a DuckDB file named `moraine:` (the path with its
//! slashes folded) and no moraine store at all. A path that reaches a file system with moraine's prefix is always
//! such a misspelling, since DuckDB hands every `moraine:` store to the storage extension. This file system claims
//! those paths only to refuse them with the spelling that was meant.
class MoraineMisspelledUriFileSystem : public FileSystem {
public:
	static constexpr const char *PREFIX = "moraine:";

	bool CanHandleFile(const string &path) override {
		return StringUtil::StartsWith(StringUtil::Lower(path), PREFIX);
	}
	std::string GetName() const override {
		return "MoraineMisspelledUriFileSystem";
	}
	unique_ptr<FileHandle> OpenFile(const string &path, FileOpenFlags flags,
	                                optional_ptr<FileOpener> opener = nullptr) override {
		throw Refusal(path);
	}
	bool FileExists(const string &path, optional_ptr<FileOpener> opener = nullptr) override {
		throw Refusal(path);
	}
	bool DirectoryExists(const string &path, optional_ptr<FileOpener> opener = nullptr) override {
		throw Refusal(path);
	}

private:
	static InvalidInputException Refusal(const string &path) {
		return InvalidInputException(
		    "DuckDB read a moraine URI as the file path '%s': a URI written 'moraine://…' is not moraine's prefix. "
		    "Write 'moraine:' followed by the location, with no '//' of its own: 'moraine:/absolute/path', "
		    "'moraine:relative/path', 'moraine:memory://name' or 'moraine:s3://bucket/prefix' (after 'ducklake:' for "
		    "a lake)",
		    path);
	}
};

static void LoadMoraine(ExtensionLoader &loader) {
	auto &db = loader.GetDatabaseInstance();
	StorageExtension::Register(DBConfig::GetConfig(db), "moraine", MoraineStorageExtension::Create());
	db.GetFileSystem().RegisterSubSystem(make_uniq<MoraineMisspelledUriFileSystem>());
	ScalarFunction version("moraine_version", {}, LogicalType::VARCHAR, MoraineVersionFunction);
	loader.RegisterFunction(version);
	RegisterMoraineFunctions(loader);
}

} // namespace duckdb

extern "C" void moraine_shim_init(void *loader) {
	duckdb::LoadMoraine(*static_cast<duckdb::ExtensionLoader *>(loader));
}
