//! Committed rows shared by the transactions of one attach.
//!
//! Consecutive transactions of a process read the same committed state, and
//! DuckLake reads whole tables (every snapshot, every file version) in each
//! of them. Decoding those tables again per transaction makes every commit
//! cost more as history grows. Instead the decoded tables are kept here,
//! stamped with the head they were read at; a transaction whose pinned head
//! is that head reads them from memory, and this process's own commits carry
//! them forward by applying their staged operations — the same overlay the
//! committing transaction read through, so the cache holds exactly what the
//! store now serves, in the same order.
//!
//! The head identifies a committed state: every batch rewrites `sys/head`
//! with a higher batch count. A transaction pinned at another head never
//! sees these rows; one pinned at a newer head (another process wrote)
//! replaces them.

use super::overlay;
use super::StagedOp;
use crate::catalog::image::{Images, TableRows};
use crate::catalog::{ColumnDesc, DeletedRowCounts, Head, Rows, TableRef};
use foldhash::fast::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// The inline tables that exist at a head.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InlineTables {
    pub schemas: BTreeMap<(i64, i64), Vec<ColumnDesc>>,
    pub delete_tables: Vec<i64>,
}

#[derive(Default)]
struct State {
    /// The head the entries below were read at; `None` while nothing is kept.
    head: Option<Option<Head>>,
    tables: HashMap<TableRef, Arc<Rows>>,
    inline: Option<Arc<InlineTables>>,
    /// The store's image of the kept head, read once; empty when the store
    /// holds none for this head.
    images: Option<Arc<Images>>,
    deleted_rows: Option<Arc<DeletedRowCounts>>,
}

/// Whether a commit whose operations name the tables `operated` changes
/// `table`'s committed rows: an operation on it, on the parent whose rows
/// decide which of its rows survive, or on a child that rides inside its
/// records.
fn changes(operated: &HashSet<TableRef, RandomState>, table: TableRef) -> bool {
    operated.contains(&table)
        || overlay::parent_table(table).is_some_and(|parent| operated.contains(&parent))
        || operated
            .iter()
            .any(|&child| overlay::parent_table(child) == Some(table))
}

/// A committing transaction's overlay of one table that holds every staged
/// operation on it, and the committed rows it was built on.
pub struct Finished {
    pub base: Arc<Rows>,
    pub rows: Arc<Rows>,
}

impl Finished {
    /// Whether the overlay was built on `kept`, the rows this attach keeps:
    /// then it is exactly `kept` carried across the commit.
    fn built_on(&self, kept: &Arc<Rows>) -> bool {
        Arc::ptr_eq(&self.base, kept)
    }
}

#[derive(Default)]
pub struct SharedRows {
    state: Mutex<State>,
}

impl State {
    /// Whether rows read at `head` may be kept: they are at the kept head,
    /// or newer, which then replaces everything kept.
    fn keeps(&mut self, head: Option<Head>) -> bool {
        if self.head == Some(head) {
            return true;
        }
        if !newer(head, self.head) {
            return false;
        }
        *self = State {
            head: Some(head),
            ..State::default()
        };
        true
    }
}

/// Whether a state at `candidate` is newer than one at `kept`.
fn newer(candidate: Option<Head>, kept: Option<Option<Head>>) -> bool {
    match kept {
        None => true,
        Some(kept) => candidate.map_or(0, |h| h.batch_count) > kept.map_or(0, |h| h.batch_count),
    }
}

impl SharedRows {
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> Option<R> {
        // A poisoned lock only means a panic elsewhere; the cache is then
        // simply not used.
        self.state.lock().ok().map(|mut s| f(&mut s))
    }

    pub fn rows(&self, head: Option<Head>, table: TableRef) -> Option<Arc<Rows>> {
        self.with_state(|s| {
            (s.head == Some(head))
                .then(|| s.tables.get(&table).cloned())
                .flatten()
        })
        .flatten()
    }

    /// Keeps rows a transaction read from the store at `head`.
    pub fn offer(&self, head: Option<Head>, table: TableRef, rows: &Arc<Rows>) {
        self.with_state(|s| {
            if s.keeps(head) {
                s.tables.insert(table, rows.clone());
            }
        });
    }

    pub fn inline_tables(&self, head: Option<Head>) -> Option<Arc<InlineTables>> {
        self.with_state(|s| (s.head == Some(head)).then(|| s.inline.clone()).flatten())
            .flatten()
    }

    pub fn offer_inline_tables(&self, head: Option<Head>, tables: &Arc<InlineTables>) {
        self.with_state(|s| {
            if s.keeps(head) {
                s.inline = Some(tables.clone());
            }
        });
    }

    pub fn deleted_rows(&self, head: Option<Head>) -> Option<Arc<DeletedRowCounts>> {
        self.with_state(|s| {
            (s.head == Some(head))
                .then(|| s.deleted_rows.clone())
                .flatten()
        })
        .flatten()
    }

    pub fn offer_deleted_rows(&self, head: Option<Head>, counts: &Arc<DeletedRowCounts>) {
        self.with_state(|s| {
            if s.keeps(head) {
                s.deleted_rows = Some(counts.clone());
            }
        });
    }

    pub fn images(&self, head: Head) -> Option<Arc<Images>> {
        self.with_state(|s| {
            (s.head == Some(Some(head)))
                .then(|| s.images.clone())
                .flatten()
        })
        .flatten()
    }

    pub fn offer_images(&self, head: Head, images: &Arc<Images>) {
        self.with_state(|s| {
            if s.keeps(Some(head)) {
                s.images = Some(images.clone());
            }
        });
    }

    /// The tables kept, and the head they were read at: what an image of
    /// this attach's committed state holds.
    pub fn kept(&self) -> Option<(Head, Vec<TableRows>)> {
        self.with_state(|s| match s.head {
            Some(Some(head)) => {
                let mut tables: Vec<_> = s.tables.iter().map(|(t, r)| (*t, r.clone())).collect();
                tables.sort_by_key(|(t, _)| *t);
                Some((head, tables))
            }
            _ => None,
        })
        .flatten()
    }

    /// Carries the kept tables from `premise` to `head` across a commit of
    /// this process that applied `ops`. A table the committing transaction
    /// already overlaid with all of them takes that overlay (`finished`),
    /// which is what applying them again would compute. Anything that cannot
    /// be carried exactly is dropped, to be read from the store again. The
    /// commit wrote `deleted_rows` into the new head.
    pub fn committed(
        &self,
        premise: Option<Head>,
        head: Head,
        ops: &[StagedOp],
        finished: HashMap<TableRef, Finished>,
        deleted_rows: Arc<DeletedRowCounts>,
    ) {
        self.with_state(|s| {
            if s.head != Some(premise) {
                *s = State::default();
                return;
            }
            s.head = Some(Some(head));
            s.deleted_rows = Some(deleted_rows);
            // The tables the operations name, once: an expiry stages
            // thousands of operations on a handful of tables.
            let operated: HashSet<TableRef, RandomState> =
                ops.iter().map(StagedOp::table).collect();
            let ddl = ops.iter().any(|op| {
                matches!(
                    op,
                    StagedOp::CreateTable { .. } | StagedOp::DropTable { .. }
                )
            });
            // The image still holds, at the new head, every table the
            // commit changed nothing of or only appended to (with the rows
            // appended): a table first read after this commit decodes it
            // instead of reading a record per row, and the next image keeps
            // its parts.
            s.images = match (s.images.take(), premise) {
                (Some(images), Some(_)) if !ddl => {
                    Some(Arc::new(Images::carried(images, |name| {
                        let table = TableRef::parse(name)?;
                        if !changes(&operated, table) {
                            return Some(Vec::new());
                        }
                        // Inserts into its parent or its children leave its
                        // rows as they were; anything else there may not.
                        let kin = |other: TableRef| {
                            overlay::parent_table(table) == Some(other)
                                || overlay::parent_table(other) == Some(table)
                        };
                        let kin_only_insert = ops
                            .iter()
                            .filter(|op| kin(op.table()))
                            .all(|op| matches!(op, StagedOp::Insert { .. }));
                        let added =
                            overlay::inserted_only(table, ops).filter(|_| kin_only_insert)?;
                        Some(added.into_iter().cloned().collect())
                    })))
                }
                _ => None,
            };
            if ddl {
                s.inline = None;
            }
            let touched: Vec<TableRef> = s
                .tables
                .keys()
                .copied()
                .filter(|t| operated.contains(t))
                .collect();
            let mut carried = finished;
            carried
                .retain(|table, done| s.tables.get(table).is_some_and(|kept| done.built_on(kept)));
            for table in touched.iter().filter(|t| !carried.contains_key(t)) {
                if let Some(rows) = s.tables.get_mut(table) {
                    let rows = Arc::make_mut(rows);
                    let last = || rows.len().checked_sub(1).and_then(|at| rows.row(at));
                    if let Some(added) = overlay::only_appended(*table, ops, last) {
                        rows.extend(added);
                    } else {
                        *rows = overlay::applied(*table, rows, ops);
                        rows.repack();
                    }
                }
            }
            let orphaned: Vec<TableRef> = s
                .tables
                .keys()
                .copied()
                .filter(|t| !carried.contains_key(t))
                .filter(|t| {
                    overlay::parent_table(*t).is_some_and(|p| {
                        ops.iter()
                            .any(|op| op.table() == p && overlay::can_hide_children(op))
                    })
                })
                .collect();
            for child in orphaned {
                let parent = overlay::parent_table(child).and_then(|p| s.tables.get(&p).cloned());
                match parent {
                    Some(parents) => {
                        if let Some(rows) = s.tables.get_mut(&child) {
                            *rows = Arc::new(overlay::linked(child, rows, &[], &parents));
                        }
                    }
                    None => {
                        s.tables.remove(&child);
                    }
                }
            }
            for (table, done) in carried {
                let mut rows = done.rows;
                Arc::make_mut(&mut rows).repack();
                s.tables.insert(table, rows);
            }
        });
    }

    /// Forgets everything: after a commit whose outcome is unknown.
    pub fn clear(&self) {
        self.with_state(|s| *s = State::default());
    }
}
