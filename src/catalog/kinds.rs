//! The one description of every record kind DuckLake keeps in its catalog.
//!
//! Each of DuckLake 1.5.5's 28 `ducklake_*` tables is a [`Kind`]. Its
//! [`TableDef`] carries the columns in DuckLake's declared order (DuckLake's
//! INSERTs are positional), the identity columns that form its store key, its
//! lifecycle and its reclamation path. The shim's table schemas, the scans, the
//! staged overlay, the commit translation, the keyspace document and the
//! coverage guard all derive from this list.

use super::types::ColumnType::{self, *};

#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColumnType,
}

const fn col(name: &'static str, ty: ColumnType) -> Column {
    Column { name, ty }
}

/// How rows of a kind live and die in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `[begin_snapshot, end_snapshot)` versions: the live version sits under
    /// `current`, ended versions under `history`.
    Versioned { begin: usize, end: usize },
    /// Overwritten or removed by key; no history.
    Unversioned,
    /// Rows that ride inside their parent's record and die with it. `link`
    /// pairs (child column, parent column) that must be equal.
    Embedded {
        parent: Kind,
        link: &'static [(usize, usize)],
    },
    /// `ducklake_snapshot`: one record per snapshot in its own subspace.
    Snapshot,
    /// `ducklake_snapshot_changes`: merged into the snapshot record.
    SnapshotChanges,
}

/// How the bytes of a kind are given back. Declared once per kind in
/// [`Kind::reclaim`], an exhaustive match, so a new kind cannot compile
/// without choosing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// Removed by `ducklake_expire_snapshots` once no surviving snapshot sees it.
    SnapshotExpiry,
    /// Removed by expiry's dead-table cascade (`DELETE … WHERE table_id IN`).
    DeadTableCascade,
    /// Removed when its data file is expired or compacted away.
    WithDataFile,
    /// Removed by `ducklake_cleanup_old_files` draining the schedule.
    ScheduleCleanup,
    /// Removed with the parent record that embeds it.
    WithParent,
    /// Overwritten in place; the number of records is bounded by live tables.
    OverwrittenInPlace,
    /// Removed by `ducklake_flush_inlined_data` or the expiry of its versions.
    InlineFlush,
    /// A fixed number of records (`sys/head`, `sys/format`, options).
    BoundedByDesign,
    /// A derived copy of live records (the head image): each image a writer
    /// takes deletes every part of the one before.
    ReplacedByNextImage,
    /// Deleted by the purge that follows an expiry's commit: the expiring
    /// entry and the snapshot records it names go in one batch.
    PurgedAfterExpiry,
}

impl Reclaim {
    pub const ALL: [Reclaim; 10] = [
        Reclaim::SnapshotExpiry,
        Reclaim::DeadTableCascade,
        Reclaim::WithDataFile,
        Reclaim::ScheduleCleanup,
        Reclaim::WithParent,
        Reclaim::OverwrittenInPlace,
        Reclaim::InlineFlush,
        Reclaim::BoundedByDesign,
        Reclaim::ReplacedByNextImage,
        Reclaim::PurgedAfterExpiry,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reclaim::SnapshotExpiry => "SnapshotExpiry",
            Reclaim::DeadTableCascade => "DeadTableCascade",
            Reclaim::WithDataFile => "WithDataFile",
            Reclaim::ScheduleCleanup => "ScheduleCleanup",
            Reclaim::WithParent => "WithParent",
            Reclaim::OverwrittenInPlace => "OverwrittenInPlace",
            Reclaim::InlineFlush => "InlineFlush",
            Reclaim::BoundedByDesign => "BoundedByDesign",
            Reclaim::ReplacedByNextImage => "ReplacedByNextImage",
            Reclaim::PurgedAfterExpiry => "PurgedAfterExpiry",
        }
    }
}

/// The singleton records of the `sys` subspace, each with its reclamation
/// path: the counterpart of [`Kind::reclaim`] for records that are no table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysRecord {
    /// `sys/head`: the newest snapshot and the batch count.
    Head,
    /// `sys/format`: the layout version.
    Format,
    /// `sys/reclaim`: the marker reclaim and the idle upkeep flush into a
    /// fresh L0.
    UpkeepMarker,
}

impl SysRecord {
    pub const ALL: [SysRecord; 3] = [SysRecord::Head, SysRecord::Format, SysRecord::UpkeepMarker];

    pub fn key(self) -> &'static [u8] {
        match self {
            SysRecord::Head => crate::store::keys::SYS_HEAD,
            SysRecord::Format => crate::store::keys::SYS_FORMAT,
            SysRecord::UpkeepMarker => crate::store::keys::SYS_RECLAIM,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SysRecord::Head => "head",
            SysRecord::Format => "format",
            SysRecord::UpkeepMarker => "reclaim",
        }
    }

    /// Exhaustive on purpose: a new singleton must choose a path.
    pub fn reclaim(self) -> Reclaim {
        match self {
            SysRecord::Head | SysRecord::Format | SysRecord::UpkeepMarker => {
                Reclaim::BoundedByDesign
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Metadata,
    Snapshot,
    SnapshotChanges,
    Schema,
    Table,
    View,
    Tag,
    ColumnTag,
    DataFile,
    FileColumnStats,
    FileVariantStats,
    DeleteFile,
    Column,
    TableStats,
    TableColumnStats,
    PartitionInfo,
    PartitionColumn,
    FilePartitionValue,
    FilesScheduledForDeletion,
    InlinedDataTables,
    ColumnMapping,
    NameMapping,
    SchemaVersions,
    Macro,
    MacroImpl,
    MacroParameters,
    SortInfo,
    SortExpression,
}

#[derive(Debug)]
pub struct TableDef {
    pub kind: Kind,
    pub name: &'static str,
    pub columns: &'static [Column],
    /// Identity columns, in key order (begin/end excluded).
    pub key: &'static [usize],
    pub lifecycle: Lifecycle,
    /// The column DuckLake declares PRIMARY KEY, if any.
    pub primary_key: Option<usize>,
    /// Columns DuckLake declares NOT NULL.
    pub not_null: &'static [usize],
}

const fn versioned(begin: usize, end: usize) -> Lifecycle {
    Lifecycle::Versioned { begin, end }
}

/// The table descriptions, as a constant so that [`Kind::column`] can look
/// columns up at compile time; [`TABLES`] is the one runtime copy.
const DEFS: [TableDef; 28] = [
    TableDef {
        kind: Kind::Metadata,
        name: "ducklake_metadata",
        columns: &[
            col("key", Varchar),
            col("value", Varchar),
            col("scope", Varchar),
            col("scope_id", BigInt),
        ],
        key: &[2, 3, 0],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[0, 1],
    },
    TableDef {
        kind: Kind::Snapshot,
        name: "ducklake_snapshot",
        columns: &[
            col("snapshot_id", BigInt),
            col("snapshot_time", TimestampTz),
            col("schema_version", BigInt),
            col("next_catalog_id", BigInt),
            col("next_file_id", BigInt),
        ],
        key: &[0],
        lifecycle: Lifecycle::Snapshot,
        primary_key: Some(0),
        not_null: &[],
    },
    TableDef {
        kind: Kind::SnapshotChanges,
        name: "ducklake_snapshot_changes",
        columns: &[
            col("snapshot_id", BigInt),
            col("changes_made", Varchar),
            col("author", Varchar),
            col("commit_message", Varchar),
            col("commit_extra_info", Varchar),
        ],
        key: &[0],
        lifecycle: Lifecycle::SnapshotChanges,
        primary_key: Some(0),
        not_null: &[],
    },
    TableDef {
        kind: Kind::Schema,
        name: "ducklake_schema",
        columns: &[
            col("schema_id", BigInt),
            col("schema_uuid", Uuid),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("schema_name", Varchar),
            col("path", Varchar),
            col("path_is_relative", Boolean),
        ],
        key: &[0],
        lifecycle: versioned(2, 3),
        primary_key: Some(0),
        not_null: &[],
    },
    TableDef {
        kind: Kind::Table,
        name: "ducklake_table",
        columns: &[
            col("table_id", BigInt),
            col("table_uuid", Uuid),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("schema_id", BigInt),
            col("table_name", Varchar),
            col("path", Varchar),
            col("path_is_relative", Boolean),
        ],
        key: &[0],
        lifecycle: versioned(2, 3),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::View,
        name: "ducklake_view",
        columns: &[
            col("view_id", BigInt),
            col("view_uuid", Uuid),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("schema_id", BigInt),
            col("view_name", Varchar),
            col("dialect", Varchar),
            col("sql", Varchar),
            col("column_aliases", Varchar),
        ],
        key: &[0],
        lifecycle: versioned(2, 3),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::Tag,
        name: "ducklake_tag",
        columns: &[
            col("object_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("key", Varchar),
            col("value", Varchar),
        ],
        key: &[0, 3],
        lifecycle: versioned(1, 2),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::ColumnTag,
        name: "ducklake_column_tag",
        columns: &[
            col("table_id", BigInt),
            col("column_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("key", Varchar),
            col("value", Varchar),
        ],
        key: &[0, 1, 4],
        lifecycle: versioned(2, 3),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::DataFile,
        name: "ducklake_data_file",
        columns: &[
            col("data_file_id", BigInt),
            col("table_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("file_order", BigInt),
            col("path", Varchar),
            col("path_is_relative", Boolean),
            col("file_format", Varchar),
            col("record_count", BigInt),
            col("file_size_bytes", BigInt),
            col("footer_size", BigInt),
            col("row_id_start", BigInt),
            col("partition_id", BigInt),
            col("encryption_key", Varchar),
            col("mapping_id", BigInt),
            col("partial_max", BigInt),
        ],
        key: &[1, 0],
        lifecycle: versioned(2, 3),
        primary_key: Some(0),
        not_null: &[],
    },
    TableDef {
        kind: Kind::FileColumnStats,
        name: "ducklake_file_column_stats",
        columns: &[
            col("data_file_id", BigInt),
            col("table_id", BigInt),
            col("column_id", BigInt),
            col("column_size_bytes", BigInt),
            col("value_count", BigInt),
            col("null_count", BigInt),
            col("min_value", Varchar),
            col("max_value", Varchar),
            col("contains_nan", Boolean),
            col("extra_stats", Varchar),
        ],
        key: &[1, 0, 2],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::FileVariantStats,
        name: "ducklake_file_variant_stats",
        columns: &[
            col("data_file_id", BigInt),
            col("table_id", BigInt),
            col("column_id", BigInt),
            col("variant_path", Varchar),
            col("shredded_type", Varchar),
            col("column_size_bytes", BigInt),
            col("value_count", BigInt),
            col("null_count", BigInt),
            col("min_value", Varchar),
            col("max_value", Varchar),
            col("contains_nan", Boolean),
            col("extra_stats", Varchar),
        ],
        key: &[1, 0, 2, 3],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::DeleteFile,
        name: "ducklake_delete_file",
        columns: &[
            col("delete_file_id", BigInt),
            col("table_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("data_file_id", BigInt),
            col("path", Varchar),
            col("path_is_relative", Boolean),
            col("format", Varchar),
            col("delete_count", BigInt),
            col("file_size_bytes", BigInt),
            col("footer_size", BigInt),
            col("encryption_key", Varchar),
            col("partial_max", BigInt),
        ],
        key: &[1, 0],
        lifecycle: versioned(2, 3),
        primary_key: Some(0),
        not_null: &[],
    },
    TableDef {
        kind: Kind::Column,
        name: "ducklake_column",
        columns: &[
            col("column_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
            col("table_id", BigInt),
            col("column_order", BigInt),
            col("column_name", Varchar),
            col("column_type", Varchar),
            col("initial_default", Varchar),
            col("default_value", Varchar),
            col("nulls_allowed", Boolean),
            col("parent_column", BigInt),
            col("default_value_type", Varchar),
            col("default_value_dialect", Varchar),
        ],
        key: &[3, 0],
        lifecycle: versioned(1, 2),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::TableStats,
        name: "ducklake_table_stats",
        columns: &[
            col("table_id", BigInt),
            col("record_count", BigInt),
            col("next_row_id", BigInt),
            col("file_size_bytes", BigInt),
        ],
        key: &[0],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::TableColumnStats,
        name: "ducklake_table_column_stats",
        columns: &[
            col("table_id", BigInt),
            col("column_id", BigInt),
            col("contains_null", Boolean),
            col("contains_nan", Boolean),
            col("min_value", Varchar),
            col("max_value", Varchar),
            col("extra_stats", Varchar),
        ],
        key: &[0, 1],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::PartitionInfo,
        name: "ducklake_partition_info",
        columns: &[
            col("partition_id", BigInt),
            col("table_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
        ],
        key: &[1, 0],
        lifecycle: versioned(2, 3),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::PartitionColumn,
        name: "ducklake_partition_column",
        columns: &[
            col("partition_id", BigInt),
            col("table_id", BigInt),
            col("partition_key_index", BigInt),
            col("column_id", BigInt),
            col("transform", Varchar),
        ],
        key: &[1, 0, 2],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::PartitionInfo,
            link: &[(0, 0), (1, 1)],
        },
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::FilePartitionValue,
        name: "ducklake_file_partition_value",
        columns: &[
            col("data_file_id", BigInt),
            col("table_id", BigInt),
            col("partition_key_index", BigInt),
            col("partition_value", Varchar),
        ],
        key: &[1, 0, 2],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::DataFile,
            link: &[(0, 0), (1, 1)],
        },
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::FilesScheduledForDeletion,
        name: "ducklake_files_scheduled_for_deletion",
        columns: &[
            col("data_file_id", BigInt),
            col("path", Varchar),
            col("path_is_relative", Boolean),
            col("schedule_start", TimestampTz),
        ],
        key: &[0],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::InlinedDataTables,
        name: "ducklake_inlined_data_tables",
        columns: &[
            col("table_id", BigInt),
            col("table_name", Varchar),
            col("schema_version", BigInt),
        ],
        key: &[0, 2],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::ColumnMapping,
        name: "ducklake_column_mapping",
        columns: &[
            col("mapping_id", BigInt),
            col("table_id", BigInt),
            col("type", Varchar),
        ],
        key: &[1, 0],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::NameMapping,
        name: "ducklake_name_mapping",
        columns: &[
            col("mapping_id", BigInt),
            col("column_id", BigInt),
            col("source_name", Varchar),
            col("target_field_id", BigInt),
            col("parent_column", BigInt),
            col("is_partition", Boolean),
        ],
        key: &[0, 1],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::ColumnMapping,
            link: &[(0, 0)],
        },
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::SchemaVersions,
        name: "ducklake_schema_versions",
        columns: &[
            col("begin_snapshot", BigInt),
            col("schema_version", BigInt),
            col("table_id", BigInt),
        ],
        key: &[2, 0, 1],
        lifecycle: Lifecycle::Unversioned,
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::Macro,
        name: "ducklake_macro",
        columns: &[
            col("schema_id", BigInt),
            col("macro_id", BigInt),
            col("macro_name", Varchar),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
        ],
        key: &[1],
        lifecycle: versioned(3, 4),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::MacroImpl,
        name: "ducklake_macro_impl",
        columns: &[
            col("macro_id", BigInt),
            col("impl_id", BigInt),
            col("dialect", Varchar),
            col("sql", Varchar),
            col("type", Varchar),
        ],
        key: &[0, 1],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::Macro,
            link: &[(0, 1)],
        },
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::MacroParameters,
        name: "ducklake_macro_parameters",
        columns: &[
            col("macro_id", BigInt),
            col("impl_id", BigInt),
            col("column_id", BigInt),
            col("parameter_name", Varchar),
            col("parameter_type", Varchar),
            col("default_value", Varchar),
            col("default_value_type", Varchar),
        ],
        key: &[0, 1, 2],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::Macro,
            link: &[(0, 1)],
        },
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::SortInfo,
        name: "ducklake_sort_info",
        columns: &[
            col("sort_id", BigInt),
            col("table_id", BigInt),
            col("begin_snapshot", BigInt),
            col("end_snapshot", BigInt),
        ],
        key: &[1, 0],
        lifecycle: versioned(2, 3),
        primary_key: None,
        not_null: &[],
    },
    TableDef {
        kind: Kind::SortExpression,
        name: "ducklake_sort_expression",
        columns: &[
            col("sort_id", BigInt),
            col("table_id", BigInt),
            col("sort_key_index", BigInt),
            col("expression", Varchar),
            col("dialect", Varchar),
            col("sort_direction", Varchar),
            col("null_order", Varchar),
        ],
        key: &[1, 0, 2],
        lifecycle: Lifecycle::Embedded {
            parent: Kind::SortInfo,
            link: &[(0, 0), (1, 1)],
        },
        primary_key: None,
        not_null: &[],
    },
];

pub static TABLES: [TableDef; 28] = DEFS;

impl Kind {
    pub const ALL: [Kind; 28] = [
        Kind::Metadata,
        Kind::Snapshot,
        Kind::SnapshotChanges,
        Kind::Schema,
        Kind::Table,
        Kind::View,
        Kind::Tag,
        Kind::ColumnTag,
        Kind::DataFile,
        Kind::FileColumnStats,
        Kind::FileVariantStats,
        Kind::DeleteFile,
        Kind::Column,
        Kind::TableStats,
        Kind::TableColumnStats,
        Kind::PartitionInfo,
        Kind::PartitionColumn,
        Kind::FilePartitionValue,
        Kind::FilesScheduledForDeletion,
        Kind::InlinedDataTables,
        Kind::ColumnMapping,
        Kind::NameMapping,
        Kind::SchemaVersions,
        Kind::Macro,
        Kind::MacroImpl,
        Kind::MacroParameters,
        Kind::SortInfo,
        Kind::SortExpression,
    ];

    pub fn def(self) -> &'static TableDef {
        // TABLES is declared in the same order as Kind; the test below pins it.
        &TABLES[self as usize]
    }

    /// The position of DuckLake's column `name` in this kind's rows. Meant
    /// for constants (`const X: usize = Kind::Snapshot.column("snapshot_id")`),
    /// where a name the table does not declare fails to compile; the
    /// [`column!`](crate::column) macro writes that for an expression.
    pub const fn column(self, name: &str) -> usize {
        let columns = DEFS[self as usize].columns;
        let mut at = 0;
        while at < columns.len() {
            if same_name(columns[at].name, name) {
                return at;
            }
            at += 1;
        }
        panic!("the table does not declare this column")
    }

    pub fn by_name(name: &str) -> Option<Kind> {
        TABLES
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
            .map(|t| t.kind)
    }

    /// The stable byte that tags this kind in keys and values. Never reorder.
    pub fn tag(self) -> u8 {
        self as u8 + 1
    }

    pub fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.get(usize::from(tag).checked_sub(1)?).copied()
    }

    /// How this kind's bytes are reclaimed. Exhaustive on purpose: adding a
    /// kind without declaring its path does not compile.
    pub fn reclaim(self) -> Reclaim {
        match self {
            Kind::Metadata => Reclaim::BoundedByDesign,
            Kind::Snapshot | Kind::SnapshotChanges => Reclaim::SnapshotExpiry,
            Kind::Schema | Kind::View | Kind::Tag | Kind::Macro => Reclaim::SnapshotExpiry,
            Kind::Table | Kind::Column | Kind::ColumnTag | Kind::PartitionInfo | Kind::SortInfo => {
                Reclaim::DeadTableCascade
            }
            Kind::DataFile | Kind::DeleteFile => Reclaim::SnapshotExpiry,
            Kind::FileColumnStats | Kind::FileVariantStats => Reclaim::WithDataFile,
            Kind::TableStats | Kind::TableColumnStats => Reclaim::OverwrittenInPlace,
            Kind::PartitionColumn
            | Kind::FilePartitionValue
            | Kind::NameMapping
            | Kind::MacroImpl
            | Kind::MacroParameters
            | Kind::SortExpression => Reclaim::WithParent,
            Kind::FilesScheduledForDeletion => Reclaim::ScheduleCleanup,
            Kind::InlinedDataTables | Kind::ColumnMapping | Kind::SchemaVersions => {
                Reclaim::DeadTableCascade
            }
        }
    }
}

impl TableDef {
    /// The position of column `name`, for a kind known only at run time:
    /// `None` when the table does not declare it.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| same_name(c.name, name))
    }

    pub fn begin_end(&self) -> Option<(usize, usize)> {
        match self.lifecycle {
            Lifecycle::Versioned { begin, end } => Some((begin, end)),
            _ => None,
        }
    }
}

const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut at = 0;
    while at < a.len() {
        if a[at] != b[at] {
            return false;
        }
        at += 1;
    }
    true
}

/// The position of a kind's named column, resolved at compile time:
/// `column!(Snapshot, snapshot_id)`.
#[macro_export]
macro_rules! column {
    ($kind:ident, $name:ident) => {
        const { $crate::catalog::Kind::$kind.column(stringify!($name)) }
    };
}

/// A row of a kind with the named columns set and every other column NULL:
/// `catalog_row!(Schema { schema_id: Cell::Int(0), schema_name: name })`.
#[macro_export]
macro_rules! catalog_row {
    ($kind:ident { $($name:ident: $value:expr),* $(,)? }) => {{
        let mut row = vec![
            $crate::catalog::Cell::Null;
            $crate::catalog::Kind::$kind.def().columns.len()
        ];
        $( row[$crate::column!($kind, $name)] = $value; )*
        row
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_list_follows_kind_order() {
        for (i, kind) in Kind::ALL.iter().enumerate() {
            assert_eq!(TABLES[i].kind, *kind);
            assert_eq!(Kind::from_tag(kind.tag()), Some(*kind));
        }
    }

    #[test]
    fn keys_and_lifecycles_reference_real_columns() {
        for def in &TABLES {
            for &k in def.key {
                assert!(k < def.columns.len(), "{}", def.name);
            }
            if let Some((b, e)) = def.begin_end() {
                assert_eq!(def.columns[b].name, "begin_snapshot");
                assert_eq!(def.columns[e].name, "end_snapshot");
                assert!(!def.key.contains(&b) && !def.key.contains(&e));
            }
            if let Lifecycle::Embedded { parent, link } = def.lifecycle {
                for &(c, p) in link {
                    assert_eq!(
                        def.columns[c].name,
                        parent.def().columns[p].name,
                        "{}",
                        def.name
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod doc_tests {
    use super::*;

    /// docs/keyspace.md maps every table to its home; a new kind must be
    /// documented there too.
    #[test]
    fn keyspace_doc_lists_every_table() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keyspace.md"))
            .unwrap();
        for def in &TABLES {
            assert!(
                doc.contains(&format!("`{}`", def.name)),
                "docs/keyspace.md does not list {}",
                def.name
            );
        }
    }
}
