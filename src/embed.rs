//! The embedding API ("the verb path"): DuckLake-shaped catalog changes for
//! hosts other than DuckDB, such as tools and tests.
//!
//! Unlike the staged-row path, where DuckLake authors every id, here moraine
//! allocates ids and the snapshot id itself, from the head snapshot's
//! counters, and writes `changes_made` in DuckLake's own grammar so DuckLake
//! reads these commits like its own. A lost race is retried internally, with
//! bounded back-off, when the commits that landed in between touched other
//! tables; an overlapping race returns [`Error::Conflict`], and so does one
//! whose commits in between were expired before their changes could be read.

use crate::catalog::{self, Cell, Dump, Kind, Row, TableRef};
use crate::error::{Error, Result};
use crate::staged::{CommitOutcome, StagedTransaction};
use crate::store::{Store, StoreSettings, StoreUri};
use crate::{catalog_row, column};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const MAX_ATTEMPTS: u32 = 10;

pub struct Catalog {
    store: Arc<Store>,
}

/// What one verb commit does, recorded as DuckLake's change tokens.
pub struct Mutation {
    snapshot_id: i64,
    schema_version: i64,
    schema_changed: bool,
    next_catalog_id: i64,
    next_file_id: i64,
    now_micros: i64,
    inserts: Vec<(Kind, Row)>,
    /// Tables whose live version this mutation ends.
    dropped_tables: Vec<i64>,
    changes: Vec<String>,
    /// Table ids and new table names this mutation touches.
    touched_ids: BTreeSet<i64>,
    touched_names: BTreeSet<String>,
}

impl Mutation {
    fn new(head_row: &Row) -> Result<Mutation> {
        let int = |at: usize| {
            head_row
                .get(at)
                .and_then(Cell::as_int)
                .ok_or_else(|| Error::corruption("head snapshot row is incomplete"))
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or_default();
        Ok(Mutation {
            snapshot_id: int(column!(Snapshot, snapshot_id))? + 1,
            schema_version: int(column!(Snapshot, schema_version))?,
            schema_changed: false,
            next_catalog_id: int(column!(Snapshot, next_catalog_id))?,
            next_file_id: int(column!(Snapshot, next_file_id))?,
            now_micros: now,
            inserts: Vec::new(),
            dropped_tables: Vec::new(),
            changes: Vec::new(),
            touched_ids: BTreeSet::new(),
            touched_names: BTreeSet::new(),
        })
    }

    fn catalog_id(&mut self) -> i64 {
        self.next_catalog_id += 1;
        self.next_catalog_id - 1
    }

    pub fn create_schema(&mut self, name: &str) -> i64 {
        let id = self.catalog_id();
        let uuid = uuid::Uuid::new_v4().to_string();
        self.inserts.push((
            Kind::Schema,
            catalog_row!(Schema {
                schema_id: Cell::Int(id),
                schema_uuid: Cell::Text(uuid),
                begin_snapshot: Cell::Int(self.snapshot_id),
                schema_name: Cell::Text(name.into()),
                path: Cell::Text(format!("{name}/")),
                path_is_relative: Cell::Bool(true),
            }),
        ));
        self.schema_changed = true;
        self.changes.push(format!("created_schema:\"{name}\""));
        id
    }

    /// Creates a table with `(name, DuckLake type)` columns, e.g. `("id", "int64")`.
    pub fn create_table(
        &mut self,
        schema_id: i64,
        schema_name: &str,
        name: &str,
        columns: &[(&str, &str)],
    ) -> i64 {
        let id = self.catalog_id();
        let uuid = uuid::Uuid::new_v4().to_string();
        self.inserts.push((
            Kind::Table,
            catalog_row!(Table {
                table_id: Cell::Int(id),
                table_uuid: Cell::Text(uuid),
                begin_snapshot: Cell::Int(self.snapshot_id),
                schema_id: Cell::Int(schema_id),
                table_name: Cell::Text(name.into()),
                path: Cell::Text(format!("{name}/")),
                path_is_relative: Cell::Bool(true),
            }),
        ));
        for (order, (column, ty)) in columns.iter().enumerate() {
            let column_id = self.catalog_id();
            self.inserts.push((
                Kind::Column,
                catalog_row!(Column {
                    column_id: Cell::Int(column_id),
                    begin_snapshot: Cell::Int(self.snapshot_id),
                    table_id: Cell::Int(id),
                    column_order: Cell::Int(order as i64),
                    column_name: Cell::Text((*column).into()),
                    column_type: Cell::Text((*ty).into()),
                    nulls_allowed: Cell::Bool(true),
                }),
            ));
        }
        self.schema_changed = true;
        self.touched_ids.insert(id);
        self.touched_names.insert(format!("{schema_name}.{name}"));
        self.changes
            .push(format!("created_table:\"{schema_name}\".\"{name}\""));
        id
    }

    /// Registers a Parquet file DuckLake-style (relative to the table path).
    pub fn add_data_file(
        &mut self,
        table_id: i64,
        path: &str,
        record_count: i64,
        file_size_bytes: i64,
        row_id_start: i64,
    ) -> i64 {
        let id = self.next_file_id;
        self.next_file_id += 1;
        self.inserts.push((
            Kind::DataFile,
            catalog_row!(DataFile {
                data_file_id: Cell::Int(id),
                table_id: Cell::Int(table_id),
                begin_snapshot: Cell::Int(self.snapshot_id),
                path: Cell::Text(path.into()),
                path_is_relative: Cell::Bool(true),
                file_format: Cell::Text("parquet".into()),
                record_count: Cell::Int(record_count),
                file_size_bytes: Cell::Int(file_size_bytes),
                footer_size: Cell::Int(0),
                row_id_start: Cell::Int(row_id_start),
            }),
        ));
        self.touched_ids.insert(table_id);
        self.changes.push(format!("inserted_into_table:{table_id}"));
        id
    }

    /// Ends the live version of a table (DROP TABLE).
    pub fn drop_table(&mut self, table_id: i64) {
        self.dropped_tables.push(table_id);
        self.schema_changed = true;
        self.touched_ids.insert(table_id);
        self.changes.push(format!("dropped_table:{table_id}"));
    }
}

impl Catalog {
    /// Opens a catalog, initialising an empty store with DuckLake's seed rows.
    pub async fn open(uri: &str, data_path: &str) -> Result<Catalog> {
        let uri = StoreUri::parse(uri)?;
        let store = Arc::new(catalog::open_store(&uri, &StoreSettings::default()).await?);
        let catalog = Catalog { store };
        catalog.initialise(data_path).await?;
        Ok(catalog)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    async fn initialise(&self, data_path: &str) -> Result<()> {
        let mut tx = StagedTransaction::new(self.store.clone());
        if tx.premise().await?.is_some() {
            return Ok(());
        }
        for kind in Kind::ALL {
            tx.create_table(kind.def().name, catalog::fixed_columns(kind).to_vec(), true)
                .await?;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or_default();
        let t = |s: &str| Cell::Text(s.to_string());
        tx.stage_insert(
            TableRef::Fixed(Kind::Snapshot),
            vec![catalog_row!(Snapshot {
                snapshot_id: Cell::Int(0),
                snapshot_time: Cell::Int(now),
                schema_version: Cell::Int(0),
                next_catalog_id: Cell::Int(1),
                next_file_id: Cell::Int(0),
            })],
        )
        .await?;
        tx.stage_insert(
            TableRef::Fixed(Kind::SnapshotChanges),
            vec![catalog_row!(SnapshotChanges {
                snapshot_id: Cell::Int(0),
                changes_made: t("created_schema:\"main\""),
            })],
        )
        .await?;
        let meta = |k: &str, v: &str| {
            catalog_row!(Metadata {
                key: t(k),
                value: t(v)
            })
        };
        tx.stage_insert(
            TableRef::Fixed(Kind::Metadata),
            vec![
                meta("version", "1.0"),
                meta("created_by", &format!("moraine {}", crate::VERSION)),
                meta("data_path", data_path),
                meta("encrypted", "false"),
            ],
        )
        .await?;
        tx.stage_insert(
            TableRef::Fixed(Kind::Schema),
            vec![catalog_row!(Schema {
                schema_id: Cell::Int(0),
                schema_uuid: t(&uuid::Uuid::new_v4().to_string()),
                begin_snapshot: Cell::Int(0),
                schema_name: t("main"),
                path: t("main/"),
                path_is_relative: Cell::Bool(true),
            })],
        )
        .await?;
        match tx.commit().await {
            Ok(_) => Ok(()),
            // Another opener initialised it first: adopt theirs.
            Err(Error::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn head(&self) -> Result<Dump> {
        catalog::dump_head(&self.store).await
    }

    pub async fn at(&self, snapshot_id: i64) -> Result<Dump> {
        catalog::dump_at(&self.store, snapshot_id).await
    }

    /// Runs `change` against the head and commits it as one snapshot;
    /// returns the snapshot id.
    pub async fn commit<F>(&self, change: F) -> Result<i64>
    where
        F: Fn(&mut Mutation, &Dump) -> Result<()>,
    {
        let mut backoff = Duration::from_millis(2);
        for attempt in 1..=MAX_ATTEMPTS {
            let mut tx = StagedTransaction::new(self.store.clone());
            let premise = tx
                .premise()
                .await?
                .ok_or_else(|| Error::NotFound("the catalog is not initialised".into()))?;
            let base = catalog::dump_head(&self.store).await?;
            if base.head != premise {
                continue; // the head moved between two reads: take a fresh look
            }
            let head_row = base.tables[&Kind::Snapshot]
                .first()
                .cloned()
                .ok_or_else(|| Error::corruption("head snapshot row missing"))?;
            let mut mutation = Mutation::new(&head_row)?;
            change(&mut mutation, &base)?;
            stage(&mut tx, &base, &mutation).await?;
            match tx.commit().await {
                Ok(CommitOutcome::Snapshot(id)) => return Ok(id),
                Ok(other) => {
                    return Err(Error::Internal(format!(
                        "a verb commit landed as {other:?}"
                    )))
                }
                Err(Error::Conflict(why)) => {
                    if let Some(overlap) =
                        self.overlap_since(premise.snapshot_id, &mutation).await?
                    {
                        return Err(Error::Conflict(format!("{overlap}: {why}")));
                    }
                    if attempt == MAX_ATTEMPTS {
                        break;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
        Err(Error::Store(format!(
            "gave up after {MAX_ATTEMPTS} attempts against a busy catalog"
        )))
    }

    /// Why the commits after `base` may have touched what `mutation`
    /// touches, or `None` when every one of them touched only other tables.
    ///
    /// Like DuckLake's own conflict check, this reads the `changes_made` of
    /// every snapshot after the base. A snapshot in between that an expiry
    /// removed took its changes with it, so whether it overlapped cannot be
    /// known: that is reported as a conflict for the caller to re-read and
    /// retry, never as corruption and never retried blind.
    async fn overlap_since(&self, base: i64, mutation: &Mutation) -> Result<Option<String>> {
        let mut tx = StagedTransaction::new(self.store.clone());
        let head = tx
            .premise()
            .await?
            .ok_or_else(|| Error::NotFound("the catalog is not initialised".into()))?;
        let changes = tx
            .visible_rows(TableRef::Fixed(Kind::SnapshotChanges))
            .await?;
        let mut seen = BTreeSet::new();
        for row in changes.iter() {
            let Some(snapshot_id) = row[column!(SnapshotChanges, snapshot_id)]
                .as_int()
                .filter(|s| *s > base)
            else {
                continue;
            };
            seen.insert(snapshot_id);
            for token in row[column!(SnapshotChanges, changes_made)]
                .as_text()
                .unwrap_or_default()
                .split(',')
            {
                let Some((what, arg)) = token.split_once(':') else {
                    continue;
                };
                if what.starts_with("created_table") {
                    if mutation.touched_names.contains(&arg.replace('"', "")) {
                        return Ok(Some(format!(
                            "snapshot {snapshot_id} created a table of the same name"
                        )));
                    }
                } else if let Ok(id) = arg.parse::<i64>() {
                    if what.contains("table") && mutation.touched_ids.contains(&id) {
                        return Ok(Some(format!(
                            "snapshot {snapshot_id} touched table {id} too ({what})"
                        )));
                    }
                }
            }
        }
        let expired: Vec<i64> = (base + 1..=head.snapshot_id)
            .filter(|s| !seen.contains(s))
            .collect();
        if !expired.is_empty() {
            return Ok(Some(format!(
                "snapshots {expired:?}, committed after this commit's base snapshot {base}, were \
                 expired before their changes could be checked against this commit; re-read the \
                 catalog and commit again"
            )));
        }
        Ok(None)
    }
}

async fn stage(tx: &mut StagedTransaction, base: &Dump, m: &Mutation) -> Result<()> {
    let schema_version = m.schema_version + i64::from(m.schema_changed);
    tx.stage_insert(
        TableRef::Fixed(Kind::Snapshot),
        vec![catalog_row!(Snapshot {
            snapshot_id: Cell::Int(m.snapshot_id),
            snapshot_time: Cell::Int(m.now_micros),
            schema_version: Cell::Int(schema_version),
            next_catalog_id: Cell::Int(m.next_catalog_id),
            next_file_id: Cell::Int(m.next_file_id),
        })],
    )
    .await?;
    for id in &m.dropped_tables {
        const TABLE_ID: usize = column!(Table, table_id);
        const END_SNAPSHOT: usize = column!(Table, end_snapshot);
        let (base_id, rows) = tx.scan(TableRef::Fixed(Kind::Table)).await?;
        let at = rows
            .iter()
            .position(|r| r[TABLE_ID] == Cell::Int(*id) && r[END_SNAPSHOT].is_null())
            .ok_or_else(|| Error::NotFound(format!("table {id} is not live")))?;
        tx.stage_update(
            TableRef::Fixed(Kind::Table),
            &[base_id + at as i64],
            &[END_SNAPSHOT],
            vec![vec![Cell::Int(m.snapshot_id)]],
        )
        .await?;
    }
    for (kind, row) in &m.inserts {
        tx.stage_insert(TableRef::Fixed(*kind), vec![row.clone()])
            .await?;
    }
    if m.schema_changed {
        let mut tables: BTreeSet<i64> = m.touched_ids.clone();
        const TABLE_ID: usize = column!(Table, table_id);
        tables.retain(|t| {
            base.tables[&Kind::Table]
                .iter()
                .any(|r| r[TABLE_ID] == Cell::Int(*t))
                || m.inserts
                    .iter()
                    .any(|(k, r)| *k == Kind::Table && r[TABLE_ID] == Cell::Int(*t))
        });
        let rows = tables
            .into_iter()
            .map(|t| {
                catalog_row!(SchemaVersions {
                    begin_snapshot: Cell::Int(m.snapshot_id),
                    schema_version: Cell::Int(schema_version),
                    table_id: Cell::Int(t),
                })
            })
            .collect();
        tx.stage_insert(TableRef::Fixed(Kind::SchemaVersions), rows)
            .await?;
    }
    tx.stage_insert(
        TableRef::Fixed(Kind::SnapshotChanges),
        vec![catalog_row!(SnapshotChanges {
            snapshot_id: Cell::Int(m.snapshot_id),
            changes_made: Cell::Text(m.changes.join(",")),
        })],
    )
    .await
}
