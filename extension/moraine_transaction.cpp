#include "moraine_transaction.hpp"

#include "duckdb/parser/parsed_data/create_table_info.hpp"
#include "duckdb/common/types/type_manager.hpp"
#include "moraine_catalog.hpp"
#include "moraine_schema_entry.hpp"

namespace duckdb {

MoraineTransaction::MoraineTransaction(MoraineCatalog &catalog_p, TransactionManager &manager, ClientContext &context)
    : Transaction(manager, context), catalog(catalog_p) {
}

MoraineTransaction::~MoraineTransaction() {
	for (auto &entry : txns) {
		moraine_txn_free(entry.second);
	}
}

MoraineTxn *MoraineTransaction::TxnFor(MoraineSchemaEntry &schema) {
	lock_guard<mutex> guard(txns_lock);
	for (auto &entry : txns) {
		if (entry.first == schema.Handle()) {
			return entry.second;
		}
	}
	MoraineTxn *txn = nullptr;
	MoraineCall([&](char **err) { return moraine_txn_begin(schema.Handle(), &txn, err); });
	txns.emplace_back(schema.Handle(), txn);
	return txn;
}

static string EntryKey(MoraineSchemaEntry &schema, const string &name) {
	return schema.name + "." + name;
}

MoraineTransaction &MoraineTransaction::Get(ClientContext &context, Catalog &catalog) {
	return Transaction::Get(context, catalog).Cast<MoraineTransaction>();
}

//! Each schema is a store of its own, so a transaction that wrote to two
//! schemas commits them one after the other; DuckLake writes one.
void MoraineTransaction::Commit() {
	for (auto &entry : txns) {
		MoraineCall([&](char **err) { return moraine_txn_commit(entry.second, err); });
	}
}

MoraineTableEntry *MoraineTransaction::GetTable(ClientContext &context, MoraineSchemaEntry &schema,
                                                const string &name) {
	auto txn = TxnFor(schema);
	lock_guard<mutex> guard(lock);
	auto key = EntryKey(schema, name);
	auto cached = entries.find(key);
	if (cached != entries.end()) {
		return cached->second.get();
	}
	auto shared = schema.SharedTable(name);
	uint64_t stamp = 0;
	MoraineTableDesc *found = nullptr;
	MoraineCall([&](char **err) {
		return moraine_txn_lookup(txn, name.c_str(), shared ? shared->stamp : 0, &stamp, &found, err);
	});
	if (stamp == 0) {
		if (shared) {
			schema.ForgetTable(name);
		}
		return nullptr;
	}
	if (!found) {
		if (!shared || shared->stamp != stamp) {
			throw IOException("moraine: the lookup of table %s described no table", name);
		}
		entries[key] = shared;
		return shared.get();
	}
	auto entry = BuildTable(context, schema, name, MoraineTableHandle(found), stamp);
	schema.ShareTable(name, entry);
	entries[key] = entry;
	return entry.get();
}

shared_ptr<MoraineTableEntry> MoraineTransaction::BuildTable(ClientContext &context, MoraineSchemaEntry &schema,
                                                             const string &name, MoraineTableHandle desc,
                                                             uint64_t stamp) {
	CreateTableInfo info(schema, moraine_table_desc_name(desc.get()));
	vector<MoraineTransfer> transfers;
	auto count = moraine_table_desc_column_count(desc.get());
	for (idx_t i = 0; i < count; i++) {
		const char *col_name = nullptr;
		const char *col_type = nullptr;
		MoraineTransfer transfer = MORAINE_TRANSFER_VALUE;
		if (!moraine_table_desc_column(desc.get(), i, &col_name, &col_type, &transfer)) {
			throw IOException("moraine: table %s describes no column %llu", name, (unsigned long long)i);
		}
		LogicalType type;
		try {
			type = catalog.ColumnType(col_type, context);
		} catch (std::exception &ex) {
			throw IOException("moraine: column %s of %s has a type DuckDB cannot parse: %s", col_name, name, col_type);
		}
		info.columns.AddColumn(ColumnDefinition(col_name, std::move(type)));
		transfers.push_back(transfer);
	}
	return make_shared_ptr<MoraineTableEntry>(catalog, schema, info, std::move(desc), std::move(transfers), stamp);
}

vector<string> MoraineTransaction::ListTables(MoraineSchemaEntry &schema) {
	auto txn = TxnFor(schema);
	MoraineStrings *list = nullptr;
	MoraineCall([&](char **err) { return moraine_txn_list_tables(txn, &list, err); });
	vector<string> names;
	for (idx_t i = 0; i < moraine_strings_len(list); i++) {
		names.emplace_back(moraine_strings_get(list, i));
	}
	moraine_strings_free(list);
	return names;
}

void MoraineTransaction::CreateTable(MoraineSchemaEntry &schema, const string &name, const vector<string> &names,
                                     const vector<string> &types, bool if_not_exists) {
	Wrote();
	auto txn = TxnFor(schema);
	lock_guard<mutex> guard(lock);
	vector<const char *> name_ptrs;
	vector<const char *> type_ptrs;
	for (idx_t i = 0; i < names.size(); i++) {
		name_ptrs.push_back(names[i].c_str());
		type_ptrs.push_back(types[i].c_str());
	}
	MoraineCall([&](char **err) {
		return moraine_txn_create_table(txn, name.c_str(), names.size(), name_ptrs.data(), type_ptrs.data(),
		                                if_not_exists, err);
	});
	auto cached = entries.find(EntryKey(schema, name));
	if (cached != entries.end()) {
		retired.push_back(std::move(cached->second));
		entries.erase(cached);
	}
}

void MoraineTransaction::DropTable(MoraineSchemaEntry &schema, const string &name, bool if_exists) {
	Wrote();
	auto txn = TxnFor(schema);
	lock_guard<mutex> guard(lock);
	MoraineCall([&](char **err) { return moraine_txn_drop_table(txn, name.c_str(), if_exists, err); });
	auto cached = entries.find(EntryKey(schema, name));
	if (cached != entries.end()) {
		retired.push_back(std::move(cached->second));
		entries.erase(cached);
	}
}

MoraineTxn *MoraineTransaction::TxnFor(MoraineTableEntry &table) {
	return TxnFor(table.schema.Cast<MoraineSchemaEntry>());
}

MoraineScan *MoraineTransaction::Scan(MoraineTableEntry &table, const vector<MoraineScanBound> &bounds) {
	auto txn = TxnFor(table);
	MoraineScan *scan = nullptr;
	MoraineCall(
	    [&](char **err) { return moraine_txn_scan(txn, table.Handle(), bounds.data(), bounds.size(), &scan, err); });
	return scan;
}

void MoraineTransaction::Wrote() {
	lock_guard<mutex> guard(known_stats_lock);
	known_stats.clear();
	known_counts.clear();
}

template <class T, class F>
T MoraineTransaction::KnownOr(vector<Known<T>> &known, MoraineTableEntry &table, idx_t column, F compute) {
	{
		lock_guard<mutex> guard(known_stats_lock);
		for (auto &entry : known) {
			if (entry.table == table.Handle() && entry.column == column) {
				return entry.value;
			}
		}
	}
	auto value = compute();
	lock_guard<mutex> guard(known_stats_lock);
	known.push_back(Known<T> {table.Handle(), column, value});
	return value;
}

MoraineRowCounts MoraineTransaction::RowCounts(MoraineTableEntry &table) {
	return KnownOr(known_counts, table, ROW_COUNTS, [&]() {
		auto txn = TxnFor(table);
		MoraineRowCounts counts {};
		MoraineCall([&](char **err) { return moraine_txn_row_counts(txn, table.Handle(), &counts, err); });
		return counts;
	});
}

idx_t MoraineTransaction::RowCount(MoraineTableEntry &table) {
	return RowCounts(table).rows;
}

idx_t MoraineTransaction::RowEstimate(MoraineTableEntry &table) {
	return RowCounts(table).estimate;
}

MoraineIntStats MoraineTransaction::IntStats(MoraineTableEntry &table, idx_t column) {
	return KnownOr(known_stats, table, column, [&]() {
		auto txn = TxnFor(table);
		MoraineIntStats stats {};
		MoraineCall([&](char **err) { return moraine_txn_int_stats(txn, table.Handle(), column, &stats, err); });
		return stats;
	});
}

void MoraineTransaction::Insert(MoraineTableEntry &table, idx_t rows, idx_t columns, const MoraineCell *cells) {
	Wrote();
	auto txn = TxnFor(table);
	MoraineCall([&](char **err) { return moraine_txn_insert(txn, table.Handle(), rows, columns, cells, err); });
}

void MoraineTransaction::Delete(MoraineTableEntry &table, const vector<int64_t> &rowids) {
	Wrote();
	auto txn = TxnFor(table);
	MoraineCall([&](char **err) { return moraine_txn_delete(txn, table.Handle(), rowids.size(), rowids.data(), err); });
}

void MoraineTransaction::Update(MoraineTableEntry &table, const vector<int64_t> &rowids, const vector<idx_t> &columns,
                                const MoraineCell *cells) {
	Wrote();
	auto txn = TxnFor(table);
	vector<size_t> cols(columns.begin(), columns.end());
	MoraineCall([&](char **err) {
		return moraine_txn_update(txn, table.Handle(), rowids.size(), rowids.data(), cols.size(), cols.data(), cells,
		                          err);
	});
}

} // namespace duckdb
