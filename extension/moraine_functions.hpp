// moraine's own SQL functions: moraine_reclaim and moraine_audit.
#pragma once

#include "duckdb/main/extension/extension_loader.hpp"

namespace duckdb {

void RegisterMoraineFunctions(ExtensionLoader &loader);

} // namespace duckdb
