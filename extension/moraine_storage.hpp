// The storage extension that makes `ATTACH 'moraine:<uri>'` open a store.
#pragma once

#include "duckdb/storage/storage_extension.hpp"
#include "moraine.h"

namespace duckdb {

struct MoraineStorageExtension {
	static shared_ptr<StorageExtension> Create();
};

} // namespace duckdb
