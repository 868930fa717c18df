#include "moraine_ffi.hpp"

#include "duckdb/common/serializer/binary_deserializer.hpp"
#include "duckdb/common/serializer/binary_serializer.hpp"
#include "duckdb/common/serializer/memory_stream.hpp"
#include "duckdb/common/types/uuid.hpp"

namespace duckdb {

void ThrowMoraineError(MoraineStatus status, char *err) {
	string message = err ? string(err) : string("unknown moraine error");
	moraine_free_string(err);
	switch (status) {
	case MORAINE_STATUS_CONFLICT:
		throw TransactionException(message);
	case MORAINE_STATUS_NOT_FOUND:
		throw CatalogException(message);
	case MORAINE_STATUS_CONSTRAINT:
		throw ConstraintException(message);
	case MORAINE_STATUS_INVALID_ARGUMENT:
		throw InvalidInputException(message);
	case MORAINE_STATUS_UNSUPPORTED:
		throw NotImplementedException(message);
	case MORAINE_STATUS_CORRUPTION:
	case MORAINE_STATUS_STORE:
	case MORAINE_STATUS_FENCED:
		throw IOException(message);
	default:
		// Not InternalException: that would invalidate the whole database.
		throw InvalidInputException(message);
	}
}

void MoraineCellBuffer::Reserve(idx_t rows, idx_t stride) {
	cells.assign(rows * stride, MoraineCell {MORAINE_CELL_KIND_NULL, 0, nullptr, 0});
	owned.clear();
	owned.reserve(rows * stride);
}

void MoraineCellBuffer::SetColumn(Vector &vector, idx_t count, idx_t column, idx_t stride, MoraineTransfer transfer) {
	for (idx_t row = 0; row < count; row++) {
		auto &cell = cells[row * stride + column];
		auto value = vector.GetValue(row);
		if (value.IsNull()) {
			continue;
		}
		switch (transfer) {
		case MORAINE_TRANSFER_INT64:
			cell.kind = MORAINE_CELL_KIND_INT;
			cell.int_value = value.DefaultCastAs(LogicalType::BIGINT).GetValue<int64_t>();
			break;
		case MORAINE_TRANSFER_TIMESTAMP_TZ:
			cell.kind = MORAINE_CELL_KIND_INT;
			cell.int_value = value.DefaultCastAs(LogicalType::TIMESTAMP_TZ).GetValue<timestamp_tz_t>().value;
			break;
		case MORAINE_TRANSFER_BOOL:
			cell.kind = MORAINE_CELL_KIND_BOOL;
			cell.int_value = value.DefaultCastAs(LogicalType::BOOLEAN).GetValue<bool>() ? 1 : 0;
			break;
		case MORAINE_TRANSFER_TEXT:
		case MORAINE_TRANSFER_UUID:
			owned.push_back(value.ToString());
			cell.kind = MORAINE_CELL_KIND_TEXT;
			cell.ptr = owned.back().data();
			cell.len = owned.back().size();
			break;
		default: {
			MemoryStream stream;
			BinarySerializer::Serialize(value, stream);
			owned.emplace_back(const_char_ptr_cast(stream.GetData()), stream.GetPosition());
			cell.kind = MORAINE_CELL_KIND_BLOB;
			cell.ptr = owned.back().data();
			cell.len = owned.back().size();
			break;
		}
		}
	}
}

static Value DeserializeValue(const char *ptr, size_t len) {
	MemoryStream stream(data_ptr_cast(const_cast<char *>(ptr)), len);
	BinaryDeserializer deserializer(stream);
	deserializer.Begin();
	auto value = Value::Deserialize(deserializer);
	deserializer.End();
	return value;
}

void FillVector(MoraineScan *scan, idx_t column, MoraineTransfer transfer, idx_t offset, idx_t count, Vector &out) {
	D_ASSERT(count <= STANDARD_VECTOR_SIZE);
	uint8_t valid[STANDARD_VECTOR_SIZE];
	int64_t ints[STANDARD_VECTOR_SIZE];
	const char *ptrs[STANDARD_VECTOR_SIZE];
	size_t lens[STANDARD_VECTOR_SIZE];
	bool integral = transfer == MORAINE_TRANSFER_INT64 || transfer == MORAINE_TRANSFER_TIMESTAMP_TZ ||
	                transfer == MORAINE_TRANSFER_BOOL;
	// BIGINT and TIMESTAMP WITH TIME ZONE are 64-bit integers in DuckDB's vectors: filled in place.
	int64_t *int_target = integral && transfer != MORAINE_TRANSFER_BOOL ? FlatVector::GetData<int64_t>(out) : ints;
	auto filled = moraine_scan_fill(scan, column, offset, count, valid, integral ? int_target : nullptr,
	                                integral ? nullptr : ptrs, integral ? nullptr : lens);
	if (filled != count) {
		throw IOException("moraine: a scan returned %llu of %llu rows", (unsigned long long)filled,
		                  (unsigned long long)count);
	}
	auto &validity = FlatVector::Validity(out);
	for (idx_t i = 0; i < count; i++) {
		if (!valid[i]) {
			if (transfer == MORAINE_TRANSFER_VALUE) {
				// A typed NULL also invalidates the children of nested types.
				out.SetValue(i, Value(out.GetType()));
			} else {
				validity.SetInvalid(i);
			}
			continue;
		}
		switch (transfer) {
		case MORAINE_TRANSFER_INT64:
		case MORAINE_TRANSFER_TIMESTAMP_TZ:
			break;
		case MORAINE_TRANSFER_BOOL:
			FlatVector::GetData<bool>(out)[i] = ints[i] != 0;
			break;
		case MORAINE_TRANSFER_TEXT:
			FlatVector::GetData<string_t>(out)[i] = StringVector::AddString(out, ptrs[i], lens[i]);
			break;
		case MORAINE_TRANSFER_UUID: {
			hugeint_t uuid;
			if (!UUID::FromString(string(ptrs[i], lens[i]), uuid)) {
				throw IOException("moraine: stored UUID '%s' is malformed", string(ptrs[i], lens[i]));
			}
			FlatVector::GetData<hugeint_t>(out)[i] = uuid;
			break;
		}
		default:
			out.SetValue(i, DeserializeValue(ptrs[i], lens[i]));
			break;
		}
	}
}

} // namespace duckdb
