#include "moraine_transaction_manager.hpp"

#include "moraine_catalog.hpp"

namespace duckdb {

MoraineTransactionManager::MoraineTransactionManager(AttachedDatabase &db, MoraineCatalog &catalog)
    : TransactionManager(db), catalog(catalog) {
}

Transaction &MoraineTransactionManager::StartTransaction(ClientContext &context) {
	auto transaction = make_uniq<MoraineTransaction>(catalog, *this, context);
	auto &result = *transaction;
	lock_guard<mutex> guard(transaction_lock);
	transactions[result] = std::move(transaction);
	return result;
}

ErrorData MoraineTransactionManager::CommitTransaction(ClientContext &context, Transaction &transaction) {
	ErrorData error;
	try {
		transaction.Cast<MoraineTransaction>().Commit();
	} catch (std::exception &ex) {
		error = ErrorData(ex);
	}
	lock_guard<mutex> guard(transaction_lock);
	transactions.erase(transaction);
	return error;
}

void MoraineTransactionManager::RollbackTransaction(Transaction &transaction) {
	lock_guard<mutex> guard(transaction_lock);
	transactions.erase(transaction);
}

void MoraineTransactionManager::Checkpoint(ClientContext &context, bool force) {
	// Every commit is already durable in the store; there is nothing to fold.
}

} // namespace duckdb
