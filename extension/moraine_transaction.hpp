// One DuckDB transaction on a moraine catalog: owns the Rust staged
// transaction and the table entries bound in it.
#pragma once

#include "duckdb/transaction/transaction.hpp"
#include "moraine_table_entry.hpp"

namespace duckdb {
class MoraineCatalog;
class MoraineSchemaEntry;

class MoraineTransaction : public Transaction {
public:
	MoraineTransaction(MoraineCatalog &catalog, TransactionManager &manager, ClientContext &context);
	~MoraineTransaction() override;

	static MoraineTransaction &Get(ClientContext &context, Catalog &catalog);

	void Commit();

	MoraineTableEntry *GetTable(ClientContext &context, SchemaCatalogEntry &schema, const string &name);
	vector<string> ListTables();
	void CreateTable(const string &name, const vector<string> &names, const vector<string> &types, bool if_not_exists);
	void DropTable(const string &name, bool if_exists);
	//! Materializes a table for one scan; the caller frees the result.
	MoraineScan *Scan(const string &name);
	void Insert(const string &name, idx_t rows, idx_t columns, const MoraineCell *cells);
	void Delete(const string &name, const vector<int64_t> &rowids);
	void Update(const string &name, const vector<int64_t> &rowids, const vector<idx_t> &columns,
	            const MoraineCell *cells);

private:
	MoraineCatalog &catalog;
	MoraineTxn *txn = nullptr;
	mutex lock;
	//! Entries bound in this transaction, keyed by lower-case name. Entries are
	//! kept (never freed early) because bound plans hold references to them.
	case_insensitive_map_t<unique_ptr<MoraineTableEntry>> entries;
	vector<unique_ptr<MoraineTableEntry>> retired;
};

} // namespace duckdb
