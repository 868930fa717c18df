//! `moraine verify`: reads every object and every key of a store and checks
//! the catalog's invariants. Read-only: safe on a live store, never fences
//! the writer.
//!
//! Two passes. The object pass ([`check_objects`]) reads each manifest, SST
//! and WAL object on its own, so a damaged object is named. The key pass
//! ([`check_catalog`]) decodes every record and checks what DuckLake's
//! catalog promises: the head names the newest snapshot, snapshot counters
//! never go back, every row belongs to a table, schema, file or parent that
//! exists while the row is visible, and every inlined row belongs to an
//! inline table that exists.
//!
//! Snapshot ids may have gaps: expiry deletes snapshots. A gap cannot be told
//! from a lost snapshot, so the rules ask of each row only that its owners
//! exist at the first *retained* snapshot of its lifetime (owners that
//! surviving snapshots see are never expired).

use crate::catalog::expiring::Expiring;
use crate::catalog::{self, image, Cell, Head, Kind, Lifecycle, Row};
use crate::error::{Error, Result};
use crate::inline;
use crate::store::keys::{self, Subspace};
use crate::store::objects::{check_objects, ObjectReport};
use crate::store::value::decode_record;
use crate::store::{Store, StoreSettings, StoreUri};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rule {
    /// A manifest, SST or WAL object SlateDB cannot read back.
    ObjectReadable,
    /// A key or value that does not decode, or a row of the wrong shape.
    RecordDecodes,
    /// A record stored under a key its own cells do not produce.
    KeyMatchesRow,
    /// `sys/head` names the newest snapshot, and that snapshot exists.
    HeadIsNewest,
    /// Schema versions, catalog ids and file ids never decrease.
    SnapshotsAdvance,
    /// A version begins no later than it ends, and neither is past the head.
    VersionWithinHead,
    /// A row belongs to a table that exists while the row is visible.
    BelongsToTable,
    /// A table, view or macro belongs to a schema that exists while it is visible.
    BelongsToSchema,
    /// Statistics and delete files belong to a data file that exists.
    BelongsToFile,
    /// An embedded row carries its parent record's identity.
    BelongsToParent,
    /// Inlined rows belong to an inline table that exists, of a table that exists.
    BelongsToInlineTable,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::ObjectReadable => "object-readable",
            Rule::RecordDecodes => "record-decodes",
            Rule::KeyMatchesRow => "key-matches-row",
            Rule::HeadIsNewest => "head-is-newest",
            Rule::SnapshotsAdvance => "snapshots-advance",
            Rule::VersionWithinHead => "version-within-head",
            Rule::BelongsToTable => "belongs-to-table",
            Rule::BelongsToSchema => "belongs-to-schema",
            Rule::BelongsToFile => "belongs-to-file",
            Rule::BelongsToParent => "belongs-to-parent",
            Rule::BelongsToInlineTable => "belongs-to-inline-table",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    /// The key (as [`describe_key`] renders it) or the object path.
    pub at: String,
    pub message: String,
}

/// What a verification read and what it found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verification {
    pub objects: ObjectReport,
    pub keys: u64,
    pub snapshots: u64,
    pub head: Option<Head>,
    pub violations: Vec<Violation>,
}

/// Verifies the store at `uri`, opened read-only.
pub async fn verify(uri: &StoreUri, settings: &StoreSettings) -> Result<Verification> {
    let settings = StoreSettings {
        read_only: true,
        ..settings.clone()
    };
    let objects = check_objects(&uri.object_store(&settings.s3)?, &uri.root_path()).await?;
    let mut report = Verification {
        violations: objects
            .damaged
            .iter()
            .map(|d| Violation {
                rule: Rule::ObjectReadable,
                at: d.path.clone(),
                message: d.problem.clone(),
            })
            .collect(),
        objects,
        ..Verification::default()
    };
    let store = match Store::open(uri, &settings).await {
        Ok(store) => store,
        // The damaged object that stops the open is already named.
        Err(_) if !report.violations.is_empty() => return Ok(report),
        Err(e) => return Err(e),
    };
    let checked = check_catalog(&store).await;
    let _ = store.close().await;
    let catalog = match checked {
        Ok(catalog) => catalog,
        // Reading the keys failed on an object the first pass already named.
        Err(_) if !report.violations.is_empty() => return Ok(report),
        Err(e) => return Err(e),
    };
    report.keys = catalog.keys;
    report.snapshots = catalog.snapshots;
    report.head = catalog.head;
    report.violations.extend(catalog.violations);
    Ok(report)
}

/// "subspace/kind" for a key: where it lives and what it holds.
pub fn key_label(key: &[u8]) -> String {
    crate::reclaim::audit::declared(key).0
}

/// A key as a person reads it: its label, then its cells, e.g.
/// `current/ducklake_data_file(1, 10)`; undecodable cells show as bytes.
pub fn describe_key(key: &[u8]) -> String {
    let label = key_label(key);
    let skip = match key.first().and_then(|b| Subspace::from_byte(*b)) {
        Some(Subspace::Sys) => return label,
        None => return format!("unknown {key:02x?}"),
        Some(Subspace::Snapshot | Subspace::SchemaVersion) => 1,
        Some(_) => 2,
    };
    match keys::decode_cells(key, skip) {
        Ok(cells) => {
            let cells: Vec<String> = cells.iter().map(cell_text).collect();
            format!("{label}({})", cells.join(", "))
        }
        Err(_) => format!("{label} {key:02x?}"),
    }
}

fn cell_text(cell: &Cell) -> String {
    match cell {
        Cell::Null => "NULL".into(),
        Cell::Int(v) => v.to_string(),
        Cell::Bool(b) => b.to_string(),
        Cell::Text(t) => format!("'{t}'"),
        Cell::Blob(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// A versioned row's `[begin, end)`; `None` for kinds without versions.
fn span(kind: Kind, row: &[Cell]) -> Option<(i64, Option<i64>)> {
    let (begin, end) = kind.def().begin_end()?;
    Some((
        row.get(begin)?.as_int()?,
        row.get(end).and_then(Cell::as_int),
    ))
}

fn column(kind: Kind, row: &[Cell], name: &str) -> Option<i64> {
    let at = kind.def().position(name)?;
    row.get(at).and_then(Cell::as_int)
}

/// Every record the key pass decoded, indexed for the ownership rules.
#[derive(Default)]
struct Catalog {
    head: Option<Head>,
    snapshots: BTreeMap<i64, (Vec<u8>, Row)>,
    /// Snapshots expired whose records await the purge: not retained.
    expiring: Expiring,
    /// Rows of the fixed kinds that have keys of their own, with their keys.
    rows: BTreeMap<Kind, Vec<(Vec<u8>, Row)>>,
    inline_tables: BTreeSet<(i64, i64)>,
    inline_delete_tables: BTreeSet<i64>,
    /// (key, table_id, schema_version, snapshot it names) of chunks and end marks.
    inline_rows: Vec<(Vec<u8>, i64, i64, i64)>,
    /// (key, table_id, begin_snapshot) of inlined deletions.
    inline_deletions: Vec<(Vec<u8>, i64, i64)>,
    violations: Vec<Violation>,
}

impl Catalog {
    fn violation(&mut self, rule: Rule, key: &[u8], message: impl Into<String>) {
        self.violations.push(Violation {
            rule,
            at: describe_key(key),
            message: message.into(),
        });
    }

    /// Whether a version of `kind` matching `is_owner` is visible at `at`,
    /// or, with `at` None, whether any version exists.
    fn exists(&self, kind: Kind, at: Option<i64>, is_owner: impl Fn(&Row) -> bool) -> bool {
        self.rows.get(&kind).is_some_and(|rows| {
            rows.iter().any(|(_, row)| {
                is_owner(row)
                    && match (at, span(kind, row)) {
                        (Some(at), Some((begin, end))) => begin <= at && end.is_none_or(|e| at < e),
                        _ => true,
                    }
            })
        })
    }

    /// The first retained snapshot in `[begin, end)`.
    fn first_retained(&self, begin: i64, end: Option<i64>) -> Option<i64> {
        self.snapshots
            .range(begin..end.unwrap_or(i64::MAX))
            .next()
            .map(|(id, _)| *id)
    }

    fn table_exists(&self, table_id: i64, at: Option<i64>) -> bool {
        self.exists(Kind::Table, at, |r| r[0].as_int() == Some(table_id))
    }
}

/// What the key pass found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogCheck {
    pub keys: u64,
    pub snapshots: u64,
    pub head: Option<Head>,
    pub violations: Vec<Violation>,
}

/// Reads every key of an open store and checks the catalog's invariants.
pub async fn check_catalog(store: &Store) -> Result<CatalogCheck> {
    let view = store.snapshot().await?;
    let all = store.scan_prefix(&view, b"").await?;
    let mut catalog = Catalog::default();
    for (key, value) in &all {
        decode_entry(&mut catalog, key, value);
    }
    let expiring = std::mem::take(&mut catalog.expiring);
    catalog.snapshots.retain(|id, _| !expiring.contains(*id));
    check_head(&mut catalog);
    check_versions(&mut catalog);
    check_ownership(&mut catalog);
    check_inline(&mut catalog);
    Ok(CatalogCheck {
        keys: all.len() as u64,
        snapshots: catalog.snapshots.len() as u64,
        head: catalog.head,
        violations: catalog.violations,
    })
}

fn decode_entry(catalog: &mut Catalog, key: &[u8], value: &[u8]) {
    let outcome = match key.first().and_then(|b| Subspace::from_byte(*b)) {
        None => Err(Error::corruption("a key outside every subspace")),
        Some(Subspace::Sys) => decode_sys(catalog, key, value),
        Some(Subspace::Snapshot) => decode_snapshot(catalog, key, value),
        Some(Subspace::Current | Subspace::History) => {
            match key.get(1).and_then(|t| Kind::from_tag(*t)) {
                Some(kind) => decode_fixed(catalog, kind, key, value),
                None => Err(Error::corruption("a kind tag no kind has")),
            }
        }
        Some(Subspace::SchemaVersion) => decode_fixed(catalog, Kind::SchemaVersions, key, value),
        Some(Subspace::Inline) => decode_inline(catalog, key, value),
        // Derived and checked against its head where it is read; here only
        // that it decodes.
        Some(Subspace::Image) => image::check_part(key, value),
        Some(Subspace::Expiring) => Expiring::decode(value).map(|named| {
            catalog.expiring = std::mem::take(&mut catalog.expiring).union(named);
        }),
    };
    if let Err(e) = outcome {
        catalog.violation(Rule::RecordDecodes, key, e.to_string());
    }
}

fn decode_sys(catalog: &mut Catalog, key: &[u8], value: &[u8]) -> Result<()> {
    match key {
        keys::SYS_HEAD => catalog.head = Some(Head::decode(value)?),
        keys::SYS_FORMAT => catalog::check_format(value)?,
        // A marker moraine_reclaim writes to force a flush; its value is free text.
        keys::SYS_RECLAIM => {}
        _ => return Err(Error::corruption("an unknown sys key")),
    }
    Ok(())
}

fn decode_snapshot(catalog: &mut Catalog, key: &[u8], value: &[u8]) -> Result<()> {
    let record = decode_record(Kind::Snapshot.tag(), value)?;
    catalog::check_row(Kind::Snapshot, &record.row)?;
    let id = record.row[0].as_int();
    if keys::decode_cells(key, 1)? != [record.row[0].clone()] {
        catalog.violation(
            Rule::KeyMatchesRow,
            key,
            format!("holds the record of snapshot {}", cell_text(&record.row[0])),
        );
    }
    for (tag, children) in &record.children {
        if *tag != Kind::SnapshotChanges.tag() {
            return Err(Error::corruption(format!(
                "a snapshot record carries rows of tag {tag}"
            )));
        }
        for child in children {
            catalog::check_row(Kind::SnapshotChanges, child)?;
            if child[0].as_int() != id {
                catalog.violation(
                    Rule::BelongsToParent,
                    key,
                    format!("carries the changes of snapshot {}", cell_text(&child[0])),
                );
            }
        }
    }
    if let Some(id) = id {
        catalog.snapshots.insert(id, (key.to_vec(), record.row));
    }
    Ok(())
}

fn decode_fixed(catalog: &mut Catalog, kind: Kind, key: &[u8], value: &[u8]) -> Result<()> {
    let def = kind.def();
    if matches!(
        def.lifecycle,
        Lifecycle::Embedded { .. } | Lifecycle::Snapshot | Lifecycle::SnapshotChanges
    ) {
        return Err(Error::corruption(format!(
            "{} rows have no key of their own",
            def.name
        )));
    }
    let record = decode_record(kind.tag(), value)?;
    catalog::check_row(kind, &record.row)?;
    if catalog::location(kind, &record.row)? != key {
        catalog.violation(
            Rule::KeyMatchesRow,
            key,
            format!(
                "holds a {} row whose own key is {}",
                def.name,
                describe_key(&catalog::location(kind, &record.row)?)
            ),
        );
    }
    for (tag, children) in &record.children {
        let embedded = Kind::from_tag(*tag).and_then(|child| match child.def().lifecycle {
            Lifecycle::Embedded { parent, link } if parent == kind => Some((child, link)),
            _ => None,
        });
        let Some((child_kind, link)) = embedded else {
            return Err(Error::corruption(format!(
                "a {} record carries rows of tag {tag}, which it cannot hold",
                def.name
            )));
        };
        for child in children {
            catalog::check_row(child_kind, child)?;
            for &(c, p) in link {
                if child.get(c) != record.row.get(p) {
                    catalog.violation(
                        Rule::BelongsToParent,
                        key,
                        format!(
                            "carries a {} row whose {} is {}, not its parent's {}",
                            child_kind.def().name,
                            child_kind.def().columns[c].name,
                            child.get(c).map_or("nothing".into(), cell_text),
                            record.row.get(p).map_or("nothing".into(), cell_text)
                        ),
                    );
                }
            }
        }
    }
    catalog
        .rows
        .entry(kind)
        .or_default()
        .push((key.to_vec(), record.row));
    Ok(())
}

fn decode_inline(catalog: &mut Catalog, key: &[u8], value: &[u8]) -> Result<()> {
    let cells = keys::decode_cells(key, 2)?;
    let ints: Vec<i64> = cells.iter().filter_map(Cell::as_int).collect();
    let shape = |n: usize| {
        if ints.len() == n && cells.len() == n {
            Ok(())
        } else {
            Err(Error::corruption("an inline key of the wrong shape"))
        }
    };
    match key.get(1) {
        Some(&inline::SCHEMA) => {
            shape(2)?;
            inline::decode_schema(value)?;
            catalog.inline_tables.insert((ints[0], ints[1]));
        }
        Some(&inline::CHUNK) => {
            shape(4)?;
            inline::decode_chunk(value)?;
            catalog
                .inline_rows
                .push((key.to_vec(), ints[0], ints[1], ints[2]));
        }
        Some(&inline::ENDED) => {
            shape(4)?;
            let end = inline::decode_int(inline::ENDED, value)?;
            catalog
                .inline_rows
                .push((key.to_vec(), ints[0], ints[1], end));
        }
        Some(&inline::DELETE_TABLE) => {
            shape(1)?;
            decode_record(inline::DELETE_TABLE, value)?;
            catalog.inline_delete_tables.insert(ints[0]);
        }
        Some(&inline::DELETED_ROW) => {
            shape(3)?;
            let begin = inline::decode_int(inline::DELETED_ROW, value)?;
            catalog
                .inline_deletions
                .push((key.to_vec(), ints[0], begin));
        }
        _ => return Err(Error::corruption("an unknown inline record type")),
    }
    Ok(())
}

fn check_head(catalog: &mut Catalog) {
    let newest = catalog.snapshots.keys().next_back().copied();
    match (catalog.head, newest) {
        (None, None) => {}
        (None, Some(newest)) => catalog.violation(
            Rule::HeadIsNewest,
            keys::SYS_HEAD,
            format!("missing, yet snapshots up to {newest} exist"),
        ),
        (Some(head), newest) if newest != Some(head.snapshot_id) => catalog.violation(
            Rule::HeadIsNewest,
            keys::SYS_HEAD,
            format!(
                "names snapshot {}, but the newest snapshot is {}",
                head.snapshot_id,
                newest.map_or("none".into(), |n| n.to_string())
            ),
        ),
        _ => {}
    }
    let mut previous: Option<(i64, Row)> = None;
    let mut found = Vec::new();
    for (id, (key, row)) in &catalog.snapshots {
        if let Some((before, earlier)) = &previous {
            for column in ["schema_version", "next_catalog_id", "next_file_id"] {
                let now = column_of_snapshot(row, column);
                let then = column_of_snapshot(earlier, column);
                if let (Some(now), Some(then)) = (now, then) {
                    if now < then {
                        found.push((
                            key.clone(),
                            format!("{column} {now} of snapshot {id} is below {then} of snapshot {before}"),
                        ));
                    }
                }
            }
        }
        previous = Some((*id, row.clone()));
    }
    for (key, message) in found {
        catalog.violation(Rule::SnapshotsAdvance, &key, message);
    }
}

fn column_of_snapshot(row: &[Cell], name: &str) -> Option<i64> {
    column(Kind::Snapshot, row, name)
}

fn check_versions(catalog: &mut Catalog) {
    // The newest snapshot that exists or is named: a head that lags its
    // snapshots is one violation (head-is-newest), not one per version.
    let newest = catalog.snapshots.keys().next_back().copied();
    let head = match (catalog.head.map(|h| h.snapshot_id), newest) {
        (Some(h), Some(n)) => Some(h.max(n)),
        (h, n) => h.or(n),
    };
    let mut found = Vec::new();
    for (kind, rows) in &catalog.rows {
        for (key, row) in rows {
            let Some((begin, end)) = span(*kind, row) else {
                continue;
            };
            let past_head = |s: i64| head.is_some_and(|h| s > h);
            if end.is_some_and(|e| e < begin) {
                found.push((
                    key.clone(),
                    format!(
                        "ends at snapshot {} before it begins at {begin}",
                        end.unwrap_or_default()
                    ),
                ));
            } else if past_head(begin) || end.is_some_and(past_head) {
                found.push((
                    key.clone(),
                    format!(
                        "spans snapshots past the newest, {}",
                        head.unwrap_or_default()
                    ),
                ));
            }
        }
    }
    for (key, _, _, snapshot) in &catalog.inline_rows {
        if head.is_some_and(|h| *snapshot > h) {
            found.push((
                key.clone(),
                format!("names snapshot {snapshot}, past the newest"),
            ));
        }
    }
    for (key, message) in found {
        catalog.violation(Rule::VersionWithinHead, &key, message);
    }
}

/// The kinds owned by a schema (through `schema_id`) rather than a table.
const SCHEMA_OWNED: [Kind; 3] = [Kind::Table, Kind::View, Kind::Macro];

fn check_ownership(catalog: &mut Catalog) {
    let mut found = Vec::new();
    for (kind, rows) in &catalog.rows {
        for (key, row) in rows {
            // Where to look for the owner: the first retained snapshot of a
            // version's life, or any version for kinds without versions.
            let at = match span(*kind, row) {
                Some((begin, end)) => match catalog.first_retained(begin, end) {
                    Some(at) => Some(at),
                    // No retained snapshot sees it: expiry's to remove.
                    None => continue,
                },
                None => None,
            };
            let when = at.map_or(String::new(), |at| format!(" at snapshot {at}"));
            if SCHEMA_OWNED.contains(kind) {
                if let Some(schema) = column(*kind, row, "schema_id") {
                    if !catalog.exists(Kind::Schema, at, |r| r[0].as_int() == Some(schema)) {
                        found.push((
                            Rule::BelongsToSchema,
                            key.clone(),
                            format!("belongs to schema {schema}, which does not exist{when}"),
                        ));
                    }
                }
                continue;
            }
            if let Some(table) = column(*kind, row, "table_id") {
                if !catalog.table_exists(table, at) {
                    found.push((
                        Rule::BelongsToTable,
                        key.clone(),
                        format!("belongs to table {table}, which does not exist{when}"),
                    ));
                    continue;
                }
            }
            let file_owned = matches!(
                kind,
                Kind::FileColumnStats | Kind::FileVariantStats | Kind::DeleteFile
            );
            if let (true, Some(file), Some(table)) = (
                file_owned,
                column(*kind, row, "data_file_id"),
                column(*kind, row, "table_id"),
            ) {
                let exists = catalog.exists(Kind::DataFile, None, |r| {
                    r[0].as_int() == Some(file) && r[1].as_int() == Some(table)
                });
                if !exists {
                    found.push((
                        Rule::BelongsToFile,
                        key.clone(),
                        format!(
                            "belongs to data file {file} of table {table}, which does not exist"
                        ),
                    ));
                }
            }
        }
    }
    for (rule, key, message) in found {
        catalog.violation(rule, &key, message);
    }
}

fn check_inline(catalog: &mut Catalog) {
    let mut found = Vec::new();
    for &(table, version) in &catalog.inline_tables {
        if !catalog.table_exists(table, None) {
            let key = inline::schema_key(table, version);
            found.push((key, format!("inline table ducklake_inlined_data_{table}_{version} belongs to table {table}, which does not exist")));
        }
    }
    for &table in &catalog.inline_delete_tables {
        if !catalog.table_exists(table, None) {
            found.push((inline::delete_table_key(table), format!("inline table ducklake_inlined_delete_{table} belongs to table {table}, which does not exist")));
        }
    }
    for (key, table, version, _) in &catalog.inline_rows {
        if !catalog.inline_tables.contains(&(*table, *version)) {
            found.push((key.clone(), format!("belongs to inline table ducklake_inlined_data_{table}_{version}, which does not exist")));
        }
    }
    for (key, table, _) in &catalog.inline_deletions {
        if !catalog.inline_delete_tables.contains(table) {
            found.push((
                key.clone(),
                format!(
                    "belongs to inline table ducklake_inlined_delete_{table}, which does not exist"
                ),
            ));
        }
    }
    for (key, message) in found {
        catalog.violation(Rule::BelongsToInlineTable, &key, message);
    }
}
