//! The exported `moraine_*` functions.
//!
//! Their only caller is the C++ shim, which passes valid pointers as the
//! header documents; every dereference sits in an `unsafe` block with its
//! justification, and null checks guard the out-pointers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::bridge::block_on;
use crate::catalog::{self, Cell, Row, Rows, TableRef, Transfer};
use crate::error::{panic_text, Error, Result, Status};
use crate::staged::pushdown::IntBound;
use crate::staged::{AttachShared, Scan, StagedTransaction, TableInfo};
use crate::store::value::CellRef;
use crate::store::{Store, StoreSettings, StoreUri};
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// One opened store and what its transactions share. Attaching the same
/// location twice in one process (two DuckDB databases, or two lakes over one
/// catalog) shares it: a second SlateDB writer would fence the first.
pub struct Attached {
    key: String,
    uri: StoreUri,
    settings: StoreSettings,
    store: Arc<Store>,
    /// Committed rows every transaction of this attach reads and carries
    /// forward, and the rows open ones have changed.
    shared: Arc<AttachShared>,
}

/// An attach of one store: the handle the shim's catalog and schemas hold.
pub struct MoraineDb {
    attached: Arc<Attached>,
}

impl std::ops::Deref for MoraineDb {
    type Target = Attached;
    fn deref(&self) -> &Attached {
        &self.attached
    }
}

/// The stores this process has open, by location and access mode.
fn open_stores() -> &'static Mutex<HashMap<String, Weak<Attached>>> {
    static OPEN: OnceLock<Mutex<HashMap<String, Weak<Attached>>>> = OnceLock::new();
    OPEN.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock_open_stores() -> Result<std::sync::MutexGuard<'static, HashMap<String, Weak<Attached>>>> {
    open_stores()
        .lock()
        .map_err(|_| Error::Internal("the open-store registry was poisoned by a panic".into()))
}

/// One DuckDB transaction's staged reads and writes on one store.
pub struct MoraineTxn {
    staged: Mutex<StagedTransaction>,
}

/// A table as the shim binds it, and the handle its scans and writes name it
/// by: the table is resolved once, at lookup, not from its name per call.
pub struct MoraineTableDesc {
    table: TableRef,
    name: CString,
    columns: Vec<(CString, CString, Transfer)>,
}

/// A list of strings handed to the shim: table names, audit and stats rows.
pub struct MoraineStrings {
    items: Vec<CString>,
}

/// The rows one scan emits, lent to the shim until it frees the scan.
pub struct MoraineScan {
    scan: Scan,
}

/// A table's row counts ([`moraine_txn_row_counts`]).
#[repr(C)]
pub struct MoraineRowCounts {
    /// The rows a scan sees.
    pub rows: u64,
    /// The rows DuckDB's own table would count: with those deleted that it
    /// still holds ([`crate::catalog::DeletedRowCounts`]).
    pub estimate: u64,
}

/// What one integer column holds, for DuckDB's optimizer
/// ([`crate::catalog::rows::IntStats`]); `min` and `max` are meaningful only when
/// `rows > nulls`.
#[repr(C)]
pub struct MoraineIntStats {
    pub rows: u64,
    pub nulls: u64,
    pub min: i64,
    pub max: i64,
    /// false when the column holds something other than integers and NULL:
    /// then nothing here may be relied on.
    pub exact: bool,
}

impl From<Option<crate::catalog::rows::IntStats>> for MoraineIntStats {
    fn from(stats: Option<crate::catalog::rows::IntStats>) -> Self {
        let (min, max) = stats.and_then(|s| s.range).unwrap_or((0, 0));
        MoraineIntStats {
            rows: stats.map_or(0, |s| s.rows),
            nulls: stats.map_or(0, |s| s.nulls),
            min,
            max,
            exact: stats.is_some(),
        }
    }
}

/// A filter DuckDB pushed into a scan, as a bound (`staged::pushdown`): rows
/// whose cell in `column` is not an integer in `low..=high` may be left out.
/// The shim still applies DuckDB's filters to the rows it emits.
#[repr(C)]
pub struct MoraineScanBound {
    pub column: usize,
    pub low: i64,
    pub high: i64,
}

/// What a [`MoraineCell`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CellKind {
    Null = 0,
    /// `int_value`
    Int = 1,
    /// `int_value`, 0 or 1
    Bool = 2,
    /// UTF-8 at `ptr`/`len`
    Text = 3,
    /// Opaque bytes at `ptr`/`len`: a DuckDB value the shim serialized.
    Blob = 4,
}

impl CellKind {
    const ALL: [CellKind; 5] = [
        CellKind::Null,
        CellKind::Int,
        CellKind::Bool,
        CellKind::Text,
        CellKind::Blob,
    ];

    fn from_raw(raw: u8) -> Option<CellKind> {
        Self::ALL.into_iter().find(|kind| *kind as u8 == raw)
    }
}

/// One cell crossing the ABI from the shim. `kind` is a [`CellKind`]; it is a
/// byte, not the enum, because the shim writes it and Rust checks it.
#[repr(C)]
pub struct MoraineCell {
    pub kind: u8,
    pub int_value: i64,
    pub ptr: *const c_char,
    pub len: usize,
}

/// How long a closing attach may spend taking the head image.
const IMAGE_AT_CLOSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Wall time spent inside moraine's calls by this process: how much of a
/// statement's time is the catalog's and how much is DuckDB's own.
static CALL_MICROS: AtomicU64 = AtomicU64::new(0);

/// Rows the scans of this process held, and the rows they emitted: what the
/// filters DuckDB pushed into the scans saved it ([`IntBound`]).
static SCAN_ROWS: AtomicU64 = AtomicU64::new(0);
static SCAN_ROWS_EMITTED: AtomicU64 = AtomicU64::new(0);

/// Integer columns whose exact statistics this process gave DuckDB's
/// optimizer ([`crate::catalog::rows::IntStats`]): each an aggregate it may answer
/// without a scan.
static COLUMN_STATS_SERVED: AtomicU64 = AtomicU64::new(0);

/// Runs `body`, turning errors and panics into a status code and a message,
/// and counts its time in [`CALL_MICROS`].
fn guarded(err_out: *mut *mut c_char, body: impl FnOnce() -> Result<()>) -> Status {
    let started = std::time::Instant::now();
    let result = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|panic| Err(Error::Internal(panic_text(&*panic))));
    CALL_MICROS.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            if !err_out.is_null() {
                let text = CString::new(e.message().replace('\0', " ")).unwrap_or_default();
                // SAFETY: the caller passes a valid out-pointer or null.
                unsafe { *err_out = text.into_raw() };
            }
            e.status()
        }
    }
}

fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(Error::Internal(format!("{what} is null")));
    }
    // SAFETY: the shim passes NUL-terminated strings that outlive the call.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| Error::InvalidArgument(format!("{what} is not UTF-8")))
}

fn handle<'a, T>(ptr: *mut T, what: &str) -> Result<&'a T> {
    // SAFETY: handles are boxes this module created and the shim has not freed.
    unsafe { ptr.as_ref() }.ok_or_else(|| Error::Internal(format!("{what} handle is null")))
}

fn out<T>(slot: *mut *mut T, value: T) -> Result<()> {
    if slot.is_null() {
        return Err(Error::Internal("null out-pointer".into()));
    }
    // SAFETY: checked non-null; the shim owns the slot.
    unsafe { *slot = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// Writes one plain value the shim passed a slot for.
fn write<T>(slot: *mut T, value: T, what: &str) -> Result<()> {
    if slot.is_null() {
        return Err(Error::Internal(format!("null {what}")));
    }
    // SAFETY: checked non-null; the shim passes one `T`.
    unsafe { *slot = value };
    Ok(())
}

fn free<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: created by Box::into_raw in this module, freed once by the shim.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(ptr) })));
    }
}

fn lock(txn: &MoraineTxn) -> Result<std::sync::MutexGuard<'_, StagedTransaction>> {
    txn.staged
        .lock()
        .map_err(|_| Error::Internal("transaction state poisoned by an earlier panic".into()))
}

/// Runs one operation of a transaction's staged state to completion.
fn on_staged<R>(
    txn: *mut MoraineTxn,
    op: impl AsyncFnOnce(&mut StagedTransaction) -> Result<R>,
) -> Result<R> {
    let txn = handle(txn, "transaction")?;
    let mut staged = lock(txn)?;
    block_on(op(&mut staged))?
}

/// The rows a scan of `table` would see now; the transaction keeps them for
/// the scan.
fn visible_rows(txn: *mut MoraineTxn, table: *const MoraineTableDesc) -> Result<Arc<Rows>> {
    let table = table_of(table)?;
    on_staged(txn, async |s| s.visible_rows(table).await)
}

/// The table a handle from [`moraine_txn_lookup`] names.
fn table_of(desc: *const MoraineTableDesc) -> Result<TableRef> {
    handle(desc.cast_mut(), "table").map(|desc| desc.table)
}

/// `row_count` rows of `column_count` cells each, row-major: every cell is
/// copied once, straight into the row it belongs to.
fn rows(ptr: *const MoraineCell, row_count: usize, column_count: usize) -> Result<Vec<Row>> {
    if column_count == 0 {
        return Ok(vec![Vec::new(); row_count]);
    }
    let count = row_count
        .checked_mul(column_count)
        .ok_or_else(|| Error::Internal(format!("{row_count} rows of {column_count} cells")))?;
    slice(ptr, count)?
        .chunks(column_count)
        .map(|row| row.iter().map(cell).collect())
        .collect()
}

fn cell(c: &MoraineCell) -> Result<Cell> {
    let bytes = || -> &[u8] {
        if c.ptr.is_null() || c.len == 0 {
            &[]
        } else {
            // SAFETY: ptr/len describe a live buffer for the call.
            unsafe { std::slice::from_raw_parts(c.ptr.cast::<u8>(), c.len) }
        }
    };
    let kind = CellKind::from_raw(c.kind)
        .ok_or_else(|| Error::Internal(format!("unknown cell kind {}", c.kind)))?;
    Ok(match kind {
        CellKind::Null => Cell::Null,
        CellKind::Int => Cell::Int(c.int_value),
        CellKind::Bool => Cell::Bool(c.int_value != 0),
        CellKind::Text => Cell::Text(
            String::from_utf8(bytes().to_vec())
                .map_err(|_| Error::InvalidArgument("text is not UTF-8".into()))?,
        ),
        CellKind::Blob => Cell::Blob(bytes().to_vec()),
    })
}

/// The crate version, NUL-terminated and static.
#[no_mangle]
pub extern "C" fn moraine_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// Frees an error message or other string this library handed out.
#[no_mangle]
pub extern "C" fn moraine_free_string(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: created by CString::into_raw in this module.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Opens (or creates) a store. `read_only` opens a reader that never fences
/// a writer.
#[no_mangle]
pub extern "C" fn moraine_open(
    uri: *const c_char,
    option_names: *const *const c_char,
    option_values: *const *const c_char,
    option_count: usize,
    read_only: bool,
    db_out: *mut *mut MoraineDb,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let uri = StoreUri::parse(text(uri, "store URI")?)?;
        let mut settings = StoreSettings {
            read_only,
            ..StoreSettings::default()
        };
        for i in 0..option_count {
            // SAFETY: the shim passes `option_count` names and values.
            let (name, value) = unsafe { (*option_names.add(i), *option_values.add(i)) };
            settings.apply_option(text(name, "option name")?, text(value, "option value")?)?;
        }
        out(db_out, attach(uri, settings)?)
    })
}

/// Opens the store at `uri`, or shares the one this process has open there.
fn attach(uri: StoreUri, settings: StoreSettings) -> Result<MoraineDb> {
    let key = format!("{uri}\0{}", if settings.read_only { "r" } else { "w" });
    // Held across the open, so two attaches of one location cannot both open it.
    let mut open = lock_open_stores()?;
    if let Some(attached) = open.get(&key).and_then(Weak::upgrade) {
        return Ok(MoraineDb { attached });
    }
    let store = block_on(catalog::open_store(&uri, &settings))??;
    let attached = Arc::new(Attached {
        key: key.clone(),
        uri,
        settings,
        store: Arc::new(store),
        shared: Arc::default(),
    });
    open.insert(key, Arc::downgrade(&attached));
    Ok(MoraineDb { attached })
}

/// Opens the store of catalog schema `name` beside the one `db` was opened
/// on, with the same options and access mode (DuckLake's METADATA_SCHEMA:
/// each schema is a lake of its own). Without `create`, a schema that has no
/// store yet is `NotFound` and nothing is created.
#[no_mangle]
pub extern "C" fn moraine_open_schema(
    db: *mut MoraineDb,
    name: *const c_char,
    create: bool,
    db_out: *mut *mut MoraineDb,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let base = handle(db, "database")?;
        let name = text(name, "schema name")?;
        if name.is_empty() {
            return Err(Error::InvalidArgument("a schema needs a name".into()));
        }
        let uri = base.uri.with_schema(name);
        let settings = base.settings.clone();
        if (!create || settings.read_only) && !block_on(Store::exists(&uri, &settings))?? {
            return Err(Error::NotFound(format!(
                "schema \"{name}\" does not exist in the moraine catalog at {}",
                base.uri
            )));
        }
        out(db_out, attach(uri, settings)?)
    })
}

/// Closes an attach. The last attach of a location in this process finishes
/// its purge, leaves the head image and closes the store.
#[no_mangle]
pub extern "C" fn moraine_close(db: *mut MoraineDb) {
    if db.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: created by moraine_open, closed once.
        let db = unsafe { Box::from_raw(db) };
        // The last attach of a location closes its store.
        let last = match lock_open_stores() {
            Ok(mut open) if Arc::strong_count(&db.attached) == 1 => {
                open.remove(&db.key);
                true
            }
            Ok(_) => false,
            Err(_) => true,
        };
        if last {
            // The next cold attach reads the tables this one holds from a
            // few packed values instead of a record per row. A failure, or
            // an image that takes too long (a huge inlined table), only
            // leaves the image stale: it is one atomic batch.
            // An expiry's records go before the image and the detach, so
            // the next attach finds no entry (design 0015).
            let _ = block_on(db.shared.finish_purge(&db.store));
            let image = crate::staged::take_image(
                &db.store,
                &db.shared,
                crate::catalog::image::MIN_IMAGE_ROWS,
            );
            // The timer is made inside the runtime, which it needs.
            let _ = block_on(async { tokio::time::timeout(IMAGE_AT_CLOSE_LIMIT, image).await });
            let _ = block_on(db.store.close());
        }
    }));
}

/// Whether the store was opened `READ_ONLY`.
#[no_mangle]
pub extern "C" fn moraine_db_is_read_only(db: *mut MoraineDb) -> bool {
    handle(db, "database")
        .map(|db| db.store.is_read_only())
        .unwrap_or(true)
}

/// Begins a transaction on `db`, reading the committed head.
#[no_mangle]
pub extern "C" fn moraine_txn_begin(
    db: *mut MoraineDb,
    txn_out: *mut *mut MoraineTxn,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let db = handle(db, "database")?;
        out(
            txn_out,
            MoraineTxn {
                staged: Mutex::new(StagedTransaction::sharing(
                    db.store.clone(),
                    db.shared.clone(),
                )),
            },
        )
    })
}

/// Commits the transaction's staged operations as one durable batch.
#[no_mangle]
pub extern "C" fn moraine_txn_commit(txn: *mut MoraineTxn, err: *mut *mut c_char) -> Status {
    guarded(err, || {
        on_staged(txn, async |s| {
            let expires = s.expires_snapshots();
            s.commit().await?;
            if expires {
                s.shared().purge_soon(s.store().clone());
            }
            Ok(())
        })
    })
}

/// Frees a transaction; anything staged and not committed is discarded.
#[no_mangle]
pub extern "C" fn moraine_txn_free(txn: *mut MoraineTxn) {
    free(txn)
}

fn describe(info: TableInfo) -> Result<MoraineTableDesc> {
    let c = |s: &str| {
        CString::new(s).map_err(|_| Error::InvalidArgument(format!("name {s:?} contains NUL")))
    };
    Ok(MoraineTableDesc {
        table: info.table,
        name: c(&info.table.name())?,
        columns: info
            .columns
            .iter()
            .map(|col| Ok((c(&col.name)?, c(&col.type_name)?, col.transfer)))
            .collect::<Result<_>>()?,
    })
}

/// A number for a table's columns, the same in every transaction while they are: the shim keeps the entry it
/// built for a table across transactions and rebuilds it only when this changes. Never 0, which says "none".
fn definition_stamp(info: &TableInfo) -> u64 {
    if let TableRef::Fixed(kind) = info.table {
        // A fixed kind's columns never change: stamped once per process.
        static STAMPED: OnceLock<Vec<u64>> = OnceLock::new();
        let stamped = STAMPED.get_or_init(|| {
            catalog::Kind::ALL
                .iter()
                .map(|&k| stamp_columns(&catalog::fixed_columns(k)))
                .collect()
        });
        // In kind order, as `Kind::def` indexes TABLES.
        return stamped[kind as usize];
    }
    stamp_columns(&info.columns)
}

fn stamp_columns(columns: &[catalog::ColumnDesc]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    for column in columns {
        column.name.hash(&mut hasher);
        column.type_name.hash(&mut hasher);
        (column.transfer as u8).hash(&mut hasher);
    }
    hasher.finish() | 1
}

/// Looks a table up. Writes its definition stamp to `stamp_out`, 0 when the table does not exist; writes a new
/// handle to `desc_out` unless the table does not exist or its stamp is `known`, the stamp of the entry the shim
/// already holds for that name (then null).
#[no_mangle]
pub extern "C" fn moraine_txn_lookup(
    txn: *mut MoraineTxn,
    name: *const c_char,
    known: u64,
    stamp_out: *mut u64,
    desc_out: *mut *mut MoraineTableDesc,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let name = text(name, "table name")?;
        let info = on_staged(txn, async |s| s.lookup(name).await)?;
        let stamp = info.as_ref().map_or(0, definition_stamp);
        write(stamp_out, stamp, "stamp out-pointer")?;
        match info {
            Some(info) if stamp != known => out(desc_out, describe(info)?),
            _ => {
                if !desc_out.is_null() {
                    // SAFETY: checked non-null.
                    unsafe { *desc_out = std::ptr::null_mut() };
                }
                Ok(())
            }
        }
    })
}

/// The table's name, valid until the handle is freed.
#[no_mangle]
pub extern "C" fn moraine_table_desc_name(desc: *mut MoraineTableDesc) -> *const c_char {
    handle(desc, "table")
        .map(|d| d.name.as_ptr())
        .unwrap_or(std::ptr::null())
}

/// How many columns the table has.
#[no_mangle]
pub extern "C" fn moraine_table_desc_column_count(desc: *mut MoraineTableDesc) -> usize {
    handle(desc, "table").map(|d| d.columns.len()).unwrap_or(0)
}

/// Column `i`: its name, DuckDB type name and transfer class.
#[no_mangle]
pub extern "C" fn moraine_table_desc_column(
    desc: *mut MoraineTableDesc,
    i: usize,
    name_out: *mut *const c_char,
    type_out: *mut *const c_char,
    transfer_out: *mut Transfer,
) -> bool {
    let Ok(desc) = handle(desc, "table") else {
        return false;
    };
    let Some((name, ty, transfer)) = desc.columns.get(i) else {
        return false;
    };
    if name_out.is_null() || type_out.is_null() || transfer_out.is_null() {
        return false;
    }
    // SAFETY: checked non-null out-pointers.
    unsafe {
        *name_out = name.as_ptr();
        *type_out = ty.as_ptr();
        *transfer_out = *transfer;
    }
    true
}

/// Frees a table handle; no scan or write may name it afterwards.
#[no_mangle]
pub extern "C" fn moraine_table_desc_free(desc: *mut MoraineTableDesc) {
    free(desc)
}

/// The names of the tables the transaction sees.
#[no_mangle]
pub extern "C" fn moraine_txn_list_tables(
    txn: *mut MoraineTxn,
    list_out: *mut *mut MoraineStrings,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let names = on_staged(txn, async |s| s.list_tables().await)?;
        let items = names
            .into_iter()
            .filter_map(|n| CString::new(n).ok())
            .collect();
        out(list_out, MoraineStrings { items })
    })
}

/// How many strings the list holds.
#[no_mangle]
pub extern "C" fn moraine_strings_len(list: *mut MoraineStrings) -> usize {
    handle(list, "list").map(|l| l.items.len()).unwrap_or(0)
}

/// String `i`, valid until the list is freed; null past the end.
#[no_mangle]
pub extern "C" fn moraine_strings_get(list: *mut MoraineStrings, i: usize) -> *const c_char {
    handle(list, "list")
        .ok()
        .and_then(|l| l.items.get(i))
        .map(|s| s.as_ptr())
        .unwrap_or(std::ptr::null())
}

/// Frees a list of strings.
#[no_mangle]
pub extern "C" fn moraine_strings_free(list: *mut MoraineStrings) {
    free(list)
}

/// Creates a table DuckLake asks for, with its columns' names and DuckDB type
/// names: a metadata table at bootstrap (checked against its known shape), or
/// an inlined-data or inlined-delete table.
#[no_mangle]
pub extern "C" fn moraine_txn_create_table(
    txn: *mut MoraineTxn,
    name: *const c_char,
    column_count: usize,
    column_names: *const *const c_char,
    column_types: *const *const c_char,
    if_not_exists: bool,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let name = text(name, "table name")?;
        let mut columns = Vec::with_capacity(column_count);
        for i in 0..column_count {
            // SAFETY: the shim passes `column_count` names and types.
            let (n, t) = unsafe { (*column_names.add(i), *column_types.add(i)) };
            let type_name = text(t, "column type")?.to_string();
            let ty = crate::catalog::ColumnType::parse(&type_name);
            let mut desc = match ty {
                Some(ty) => crate::catalog::ColumnDesc::catalog(text(n, "column name")?, ty),
                None => crate::catalog::ColumnDesc {
                    name: String::new(),
                    type_name: type_name.clone(),
                    transfer: crate::catalog::Transfer::Value,
                },
            };
            desc.name = text(n, "column name")?.to_string();
            desc.type_name = type_name;
            columns.push(desc);
        }
        on_staged(txn, async |s| {
            s.create_table(name, columns, if_not_exists).await
        })
    })
}

/// Drops an inlined-data or inlined-delete table; metadata tables stay.
#[no_mangle]
pub extern "C" fn moraine_txn_drop_table(
    txn: *mut MoraineTxn,
    name: *const c_char,
    if_exists: bool,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let name = text(name, "table name")?;
        on_staged(txn, async |s| s.drop_table(name, if_exists).await)
    })
}

/// Materializes a table for one scan. `bounds` (may be null when
/// `bound_count` is 0) are filters DuckDB pushed into the scan, which the
/// shim still applies itself: the scan may leave out rows outside them.
#[no_mangle]
pub extern "C" fn moraine_txn_scan(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    bounds: *const MoraineScanBound,
    bound_count: usize,
    scan_out: *mut *mut MoraineScan,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let table = table_of(table)?;
        let bounds: Vec<IntBound> = match bound_count {
            0 => Vec::new(),
            _ if bounds.is_null() => return Err(Error::Internal("null scan bounds".into())),
            // SAFETY: the shim passes `bound_count` bounds.
            _ => unsafe { std::slice::from_raw_parts(bounds, bound_count) }
                .iter()
                .map(|b| IntBound {
                    column: b.column,
                    low: b.low,
                    high: b.high,
                })
                .collect(),
        };
        let scan = on_staged(txn, async |s| s.scan_within(table, &bounds).await)?;
        SCAN_ROWS.fetch_add(scan.rows.len() as u64, Ordering::Relaxed);
        SCAN_ROWS_EMITTED.fetch_add(scan.len() as u64, Ordering::Relaxed);
        out(scan_out, MoraineScan { scan })
    })
}

/// Writes how many rows a scan of `table` would see now, exactly, for the
/// statistics DuckDB folds `COUNT(*)` from, and how many DuckDB's own table
/// would count, for the planner's estimates. Reads the table as a scan
/// would, and keeps it for the scan.
#[no_mangle]
pub extern "C" fn moraine_txn_row_counts(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    counts_out: *mut MoraineRowCounts,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let table = table_of(table)?;
        let (rows, estimate) = on_staged(txn, async |s| s.row_counts(table).await)?;
        write(
            counts_out,
            MoraineRowCounts { rows, estimate },
            "row counts",
        )
    })
}

/// Writes the exact statistics of integer column `column` of `table` as a
/// scan would see it now, for DuckDB's optimizer. Reads the table as a scan
/// would, and keeps it for the scan.
#[no_mangle]
pub extern "C" fn moraine_txn_int_stats(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    column: usize,
    stats_out: *mut MoraineIntStats,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let rows = visible_rows(txn, table)?;
        let stats = rows.int_stats(column);
        COLUMN_STATS_SERVED.fetch_add(u64::from(stats.is_some()), Ordering::Relaxed);
        write(stats_out, MoraineIntStats::from(stats), "column statistics")
    })
}

/// How many rows the scan emits.
#[no_mangle]
pub extern "C" fn moraine_scan_row_count(scan: *mut MoraineScan) -> usize {
    handle(scan, "scan").map(|s| s.scan.len()).unwrap_or(0)
}

/// Writes the rowids of emitted rows `[offset, offset + count)`; returns how
/// many it wrote.
#[no_mangle]
pub extern "C" fn moraine_scan_rowids(
    scan: *mut MoraineScan,
    offset: usize,
    count: usize,
    rowids: *mut i64,
) -> usize {
    let written = catch_unwind(AssertUnwindSafe(|| {
        let Ok(scan) = handle(scan, "scan") else {
            return 0;
        };
        if rowids.is_null() {
            return 0;
        }
        let count = count.min(scan.scan.len().saturating_sub(offset));
        // SAFETY: the shim passes a buffer of at least `count` elements.
        let rowids = unsafe { std::slice::from_raw_parts_mut(rowids, count) };
        for (n, slot) in rowids.iter_mut().enumerate() {
            *slot = scan.scan.emitted(offset + n).map_or(0, |(_, rowid)| rowid);
        }
        count
    }));
    written.unwrap_or(0)
}

/// Fills rows `[offset, offset + count)` of one column in one call, so a
/// vector of DuckDB rows costs one crossing per column rather than one per
/// cell. For each row: `valid[i]` 1 or 0 (NULL); integers, booleans (0/1)
/// and timestamps into `ints[i]`; text and bytes as `ptrs[i]`/`lens[i]`,
/// valid until the scan is freed. A buffer the column's cells never use may
/// be null. Returns the number of rows filled.
#[no_mangle]
pub extern "C" fn moraine_scan_fill(
    scan: *mut MoraineScan,
    column: usize,
    offset: usize,
    count: usize,
    valid: *mut u8,
    ints: *mut i64,
    ptrs: *mut *const c_char,
    lens: *mut usize,
) -> usize {
    let filled = catch_unwind(AssertUnwindSafe(|| {
        let Ok(scan) = handle(scan, "scan") else {
            return 0;
        };
        let scan = &scan.scan;
        let count = count.min(scan.len().saturating_sub(offset));
        let column_cells = (offset..offset + count)
            .filter_map(|n| scan.emitted(n))
            .map(|(row, _)| scan.rows.cell(row, column));
        if valid.is_null() {
            return 0;
        }
        // SAFETY: the shim passes buffers of at least `count` elements, or
        // null for kinds of cell the column does not hold.
        let valid = unsafe { std::slice::from_raw_parts_mut(valid, count) };
        let mut ints =
            (!ints.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(ints, count) });
        let mut ptrs =
            (!ptrs.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(ptrs, count) });
        let mut lens =
            (!lens.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(lens, count) });
        for (i, cell) in column_cells.enumerate() {
            let (int, bytes): (Option<i64>, Option<&[u8]>) = match cell {
                CellRef::Null => (None, None),
                CellRef::Int(v) => (Some(v), None),
                CellRef::Bool(b) => (Some(i64::from(b)), None),
                CellRef::Text(t) => (None, Some(t)),
                CellRef::Blob(b) => (None, Some(b)),
            };
            let mut is_valid = false;
            if let (Some(v), Some(ints)) = (int, ints.as_deref_mut()) {
                ints[i] = v;
                is_valid = true;
            }
            if let (Some(b), Some(ptrs), Some(lens)) =
                (bytes, ptrs.as_deref_mut(), lens.as_deref_mut())
            {
                ptrs[i] = b.as_ptr().cast();
                lens[i] = b.len();
                is_valid = true;
            }
            valid[i] = u8::from(is_valid);
        }
        count
    }));
    filled.unwrap_or(0)
}

/// Frees a scan and the cells it lent.
#[no_mangle]
pub extern "C" fn moraine_scan_free(scan: *mut MoraineScan) {
    free(scan)
}

/// Stages INSERTs: `row_cells` holds `row_count × column_count` cells, row-major.
#[no_mangle]
pub extern "C" fn moraine_txn_insert(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    row_count: usize,
    column_count: usize,
    row_cells: *const MoraineCell,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let table = table_of(table)?;
        let rows = rows(row_cells, row_count, column_count)?;
        on_staged(txn, async |s| s.stage_insert(table, rows).await)
    })
}

/// Stages DELETEs of the rows with the given rowids.
#[no_mangle]
pub extern "C" fn moraine_txn_delete(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    count: usize,
    rowids: *const i64,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let table = table_of(table)?;
        let ids = slice(rowids, count)?;
        on_staged(txn, async |s| s.stage_delete(table, ids).await)
    })
}

/// Stages UPDATEs: row `i` sets `columns[j]` to `row_cells[i * column_count + j]`.
#[no_mangle]
pub extern "C" fn moraine_txn_update(
    txn: *mut MoraineTxn,
    table: *const MoraineTableDesc,
    count: usize,
    rowids: *const i64,
    column_count: usize,
    columns: *const usize,
    row_cells: *const MoraineCell,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let table = table_of(table)?;
        let ids = slice(rowids, count)?;
        let cols = slice(columns, column_count)?;
        let values = rows(row_cells, count, column_count)?;
        on_staged(txn, async |s| {
            s.stage_update(table, ids, cols, values).await
        })
    })
}

fn slice<'a, T>(ptr: *const T, count: usize) -> Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::Internal("null array".into()));
    }
    // SAFETY: the shim passes `count` elements.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

#[cfg(feature = "extension")]
extern "C-unwind" {
    /// The shim's registration of the `moraine` storage extension and its
    /// functions with DuckDB's loader.
    fn moraine_shim_init(loader: *mut std::ffi::c_void);
}

/// DuckDB's entry point for a C++-ABI extension named `moraine`. The loader
/// reference arrives as a pointer and goes straight to the C++ shim.
#[cfg(feature = "extension")]
#[no_mangle]
pub extern "C-unwind" fn moraine_duckdb_cpp_init(loader: *mut std::ffi::c_void) {
    // SAFETY: DuckDB passes a live ExtensionLoader. C++ exceptions from
    // registration unwind through this frame back to DuckDB's loader.
    unsafe { moraine_shim_init(loader) }
}

/// What `moraine_reclaim` reports.
#[repr(C)]
pub struct MoraineReclaimReport {
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub objects_deleted: u64,
    pub elapsed_ms: u64,
}

/// A `moraine_reclaim` running on the runtime, so the shim can show its
/// progress while it waits for it.
pub struct MoraineReclaimJob {
    progress: Arc<crate::reclaim::Progress>,
    task: Option<tokio::task::JoinHandle<Result<crate::reclaim::ReclaimReport>>>,
}

/// Starts flushing, fully compacting and garbage-collecting the store, for
/// at most `deadline_ms`.
#[no_mangle]
pub extern "C" fn moraine_reclaim_start(
    db: *mut MoraineDb,
    deadline_ms: u64,
    job_out: *mut *mut MoraineReclaimJob,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let db = handle(db, "database")?;
        let store = db.store.clone();
        let progress = Arc::new(crate::reclaim::Progress::default());
        let published = progress.clone();
        let deadline = std::time::Duration::from_millis(deadline_ms);
        let task = crate::ffi::bridge::spawn(async move {
            crate::reclaim::reclaim(&store, deadline, &published).await
        })?;
        out(
            job_out,
            MoraineReclaimJob {
                progress,
                task: Some(task),
            },
        )
    })
}

/// Waits at most `wait_ms` for the reclaim to end. `*done_out` is 1 and the
/// report is written once it has; a failed reclaim returns its error.
#[no_mangle]
pub extern "C" fn moraine_reclaim_wait(
    job: *mut MoraineReclaimJob,
    wait_ms: u64,
    done_out: *mut i32,
    report_out: *mut MoraineReclaimReport,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        // SAFETY: a box `moraine_reclaim_start` created and the shim has not freed.
        let job = unsafe { job.as_mut() }
            .ok_or_else(|| Error::Internal("reclaim job handle is null".into()))?;
        if done_out.is_null() || report_out.is_null() {
            return Err(Error::Internal("null out-pointer".into()));
        }
        let task = job
            .task
            .as_mut()
            .ok_or_else(|| Error::Internal("the reclaim job has already ended".into()))?;
        let wait = std::time::Duration::from_millis(wait_ms);
        // The timer must be made inside the runtime.
        let Ok(joined) = block_on(async { tokio::time::timeout(wait, task).await })? else {
            // SAFETY: checked non-null.
            unsafe { *done_out = 0 };
            return Ok(());
        };
        job.task = None;
        let report =
            joined.map_err(|e| Error::Internal(format!("the reclaim task failed: {e}")))??;
        // SAFETY: checked non-null.
        unsafe {
            *done_out = 1;
            *report_out = MoraineReclaimReport {
                bytes_before: report.bytes_before,
                bytes_after: report.bytes_after,
                objects_deleted: report.objects_deleted,
                elapsed_ms: report.elapsed.as_millis() as u64,
            };
        }
        Ok(())
    })
}

/// How far the reclaim has come, from 0 to 1.
#[no_mangle]
pub extern "C" fn moraine_reclaim_progress(job: *const MoraineReclaimJob) -> f64 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a box `moraine_reclaim_start` created and the shim has not freed.
        unsafe { job.as_ref() }.map_or(0.0, |job| job.progress.fraction())
    }))
    .unwrap_or(0.0)
}

/// Frees the job. A reclaim still running (the query was interrupted) runs
/// to its end in the background, so the store is never left mid-swap.
#[no_mangle]
pub extern "C" fn moraine_reclaim_free(job: *mut MoraineReclaimJob) {
    free(job)
}

/// The retention audit as rows of four strings: section, item, value, detail.
#[no_mangle]
pub extern "C" fn moraine_db_audit(
    db: *mut MoraineDb,
    rows_out: *mut *mut MoraineStrings,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let db = handle(db, "database")?;
        let audit = block_on(crate::reclaim::audit::audit(&db.store))??;
        let cells = crate::reclaim::audit::rows(&audit).into_iter().flatten();
        string_rows(rows_out, cells)
    })
}

/// Hands rows of strings, flattened cell by cell, to the shim.
fn string_rows(
    rows_out: *mut *mut MoraineStrings,
    cells: impl Iterator<Item = String>,
) -> Result<()> {
    let items = cells
        .map(|s| CString::new(s.replace('\0', " ")).unwrap_or_default())
        .collect();
    out(rows_out, MoraineStrings { items })
}

/// Commit, request, key-read and writer-turn counters of this attach as rows
/// of two strings: name, value.
#[no_mangle]
pub extern "C" fn moraine_db_stats(
    db: *mut MoraineDb,
    rows_out: *mut *mut MoraineStrings,
    err: *mut *mut c_char,
) -> Status {
    guarded(err, || {
        let db = handle(db, "database")?;
        let commits = db.store.commits().snapshot();
        let requests = db.store.requests().snapshot();
        let turns = db.store.turn_counters().map(|c| c.snapshot());
        // What reads cost in keys (a cold attach that reads the head image
        // reads a few, one that reads the records reads one per row), and
        // the time the process spent in moraine's calls.
        let costs = [
            ("keys_read", db.store.keys_read()),
            (
                "tables_read_from_records",
                db.shared.tables_read_from_records.load(Ordering::Relaxed),
            ),
            ("call_micros", CALL_MICROS.load(Ordering::Relaxed)),
            ("scan_rows", SCAN_ROWS.load(Ordering::Relaxed)),
            (
                "scan_rows_emitted",
                SCAN_ROWS_EMITTED.load(Ordering::Relaxed),
            ),
            (
                "column_stats_served",
                COLUMN_STATS_SERVED.load(Ordering::Relaxed),
            ),
        ]
        .into_iter()
        .chain(crate::store::upkeep::close_merge_counts())
        .chain(crate::store::writes::counters());
        let cells = commits
            .into_iter()
            .chain(requests)
            .chain(costs)
            .chain(turns.into_iter().flatten())
            .flat_map(|(name, value)| [name.to_string(), value.to_string()]);
        string_rows(rows_out, cells)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Kind;
    use crate::store::value::{decode_record, encode_record, Record};
    use proptest::prelude::*;

    /// A cell as the shim might hand it over: any kind byte (mostly valid
    /// ones), any integer, any bytes (UTF-8 or not).
    fn raw_cell() -> impl Strategy<Value = (u8, i64, Vec<u8>)> {
        (
            prop_oneof![3 => 0u8..=4, 1 => any::<u8>()],
            any::<i64>(),
            proptest::collection::vec(any::<u8>(), 0..24),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// The staged-row decoder: whatever cells arrive, decoding them and
        /// checking them against every metadata table either fails with an
        /// error or yields a row the store's codec keeps unchanged.
        #[test]
        fn staged_rows_from_arbitrary_cells(raw in proptest::collection::vec(raw_cell(), 0..20)) {
            let cells_in: Vec<MoraineCell> = raw
                .iter()
                .map(|(kind, int_value, bytes)| MoraineCell {
                    kind: *kind,
                    int_value: *int_value,
                    ptr: bytes.as_ptr().cast(),
                    len: bytes.len(),
                })
                .collect();
            let Ok(mut rows) = rows(cells_in.as_ptr(), 1, cells_in.len()) else {
                return Ok(());
            };
            prop_assert_eq!(rows.len(), 1);
            let row = rows.remove(0);
            prop_assert_eq!(row.len(), raw.len());
            for kind in Kind::ALL {
                if catalog::check_row(kind, &row).is_ok() {
                    let bytes = encode_record(0x10, &Record::new(row.clone()));
                    prop_assert_eq!(&decode_record(0x10, &bytes).unwrap().row, &row);
                }
            }
        }

        /// Table names from the shim's lookups: anything parses or is refused.
        #[test]
        fn table_names_never_panic(name in ".{0,60}") {
            let _ = TableRef::parse(&name);
        }
    }
}
