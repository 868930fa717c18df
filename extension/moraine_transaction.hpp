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

	MoraineTableEntry *GetTable(ClientContext &context, MoraineSchemaEntry &schema, const string &name);
	vector<string> ListTables(MoraineSchemaEntry &schema);
	void CreateTable(MoraineSchemaEntry &schema, const string &name, const vector<string> &names,
	                 const vector<string> &types, bool if_not_exists);
	void DropTable(MoraineSchemaEntry &schema, const string &name, bool if_exists);
	//! Materializes a table for one scan, which may leave out rows outside `bounds`; the caller frees the result.
	MoraineScan *Scan(MoraineTableEntry &table, const vector<MoraineScanBound> &bounds);
	//! How many rows a scan of the table would see now, before filters.
	idx_t RowCount(MoraineTableEntry &table);
	//! How many rows DuckDB's own table would count: the row count and the deleted rows such a table still counts.
	idx_t RowEstimate(MoraineTableEntry &table);
	//! The exact statistics of integer column `column` as a scan of the table would see it now.
	MoraineIntStats IntStats(MoraineTableEntry &table, idx_t column);
	void Insert(MoraineTableEntry &table, idx_t rows, idx_t columns, const MoraineCell *cells);
	void Delete(MoraineTableEntry &table, const vector<int64_t> &rowids);
	void Update(MoraineTableEntry &table, const vector<int64_t> &rowids, const vector<idx_t> &columns,
	            const MoraineCell *cells);

private:
	//! The Rust transaction on the store behind `schema`, begun at first use.
	MoraineTxn *TxnFor(MoraineSchemaEntry &schema);
	MoraineTxn *TxnFor(MoraineTableEntry &table);
	//! A new entry for table `name` from the core's description of it.
	shared_ptr<MoraineTableEntry> BuildTable(ClientContext &context, MoraineSchemaEntry &schema, const string &name,
	                                         MoraineTableHandle desc, uint64_t stamp);

	MoraineCatalog &catalog;
	//! One Rust transaction per schema store this transaction touched.
	vector<pair<MoraineDb *, MoraineTxn *>> txns;
	mutex txns_lock;
	mutex lock;
	//! Entries bound in this transaction, keyed by schema and table name, most of them shared with other
	//! transactions. Each is held (never let go early) because bound plans hold references to it.
	case_insensitive_map_t<shared_ptr<MoraineTableEntry>> entries;
	vector<shared_ptr<MoraineTableEntry>> retired;
	//! DuckDB's optimizer asks for the same counts and column statistics again and again while it plans one
	//! statement (about five times per column for a plain scan); they are kept here until this transaction next writes,
	//! since only its own writes change what its scans see. Keyed by table handle and column (`ROW_COUNTS` for a
	//! table's counts).
	template <class T>
	struct Known {
		const MoraineTableDesc *table;
		idx_t column;
		T value;
	};
	static constexpr idx_t ROW_COUNTS = DConstants::INVALID_INDEX;
	vector<Known<MoraineIntStats>> known_stats;
	vector<Known<MoraineRowCounts>> known_counts;
	mutex known_stats_lock;
	//! Forgets the statistics above; every write of this transaction calls it.
	void Wrote();
	//! What `known` holds for `table` and `column`, else what `compute` returns, kept there.
	template <class T, class F>
	T KnownOr(vector<Known<T>> &known, MoraineTableEntry &table, idx_t column, F compute);
	//! The exact row count and the planner's estimate of `table`, from one call into the core.
	MoraineRowCounts RowCounts(MoraineTableEntry &table);
};

} // namespace duckdb
