//! `moraine verify`: a healthy catalog passes, violations planted through the
//! store API are found with their key and rule, a damaged SST is named, and
//! verifying next to a live writer never fences it.

mod common;

use common::*;
use moraine::catalog::{self, Head, Kind, TableRef};
use moraine::staged::StagedTransaction;
use moraine::store::keys;
use moraine::store::value::{encode_record, Record};
use moraine::store::{Store, StoreSettings, StoreUri};
use moraine::verify::{check_catalog, verify, Rule, Verification};
use std::sync::Arc;

fn uri_of(dir: &std::path::Path) -> StoreUri {
    StoreUri::parse(dir.to_str().unwrap()).unwrap()
}

async fn verified(dir: &std::path::Path) -> Verification {
    verify(&uri_of(dir), &StoreSettings::default())
        .await
        .unwrap()
}

/// Snapshots 0..=4 (`history`), then snapshot 5 inlines two rows into
/// table 1, then snapshots 1 and 2 expire.
async fn healthy_lake(store: &Arc<Store>) {
    history(store).await;
    let mut tx = StagedTransaction::new(store.clone());
    tx.create_table("ducklake_inlined_data_1_1", inline_columns(), true)
        .await
        .unwrap();
    stage(&mut tx, Kind::Snapshot, snapshot_row(5, 1, 3, 13)).await;
    tx.stage_insert(
        TableRef::parse("ducklake_inlined_data_1_1").unwrap(),
        vec![inline_row(0, 5), inline_row(1, 5)],
    )
    .await
    .unwrap();
    stage(
        &mut tx,
        Kind::SnapshotChanges,
        changes_row(5, "inlined_insert:1"),
    )
    .await;
    tx.commit().await.unwrap();
    expire(store, &[1, 2]).await;
}

/// Writes one raw key, as a damaged or hand-edited catalog would hold it.
async fn plant(store: &Arc<Store>, key: &[u8], value: &[u8]) {
    let view = store.snapshot().await.unwrap();
    let txn = store.begin(&view).unwrap();
    txn.put(key, value).unwrap();
    store.commit(txn).await.unwrap();
}

fn rules(check: &[moraine::verify::Violation]) -> Vec<Rule> {
    check.iter().map(|v| v.rule).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_catalog_verifies_clean_next_to_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path()).await;
    healthy_lake(&store).await;
    store.flush_to_l0().await.unwrap();
    let report = verified(dir.path()).await;
    assert_eq!(report.violations, [], "{report:#?}");
    assert_eq!(report.head.map(|h| h.snapshot_id), Some(5));
    assert_eq!(report.snapshots, 4, "0, 3, 4 and 5 survive expiry");
    assert!(
        report.objects.manifests > 0 && report.objects.ssts > 0,
        "{report:#?}"
    );
    // The writer was not fenced: it still commits.
    create_table(&store, 6, 7, "after_verify").await;
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_file_of_a_missing_table_is_a_violation() {
    let store = memory_store("verify-orphan-file").await;
    history(&store).await;
    let row = data_file_row(20, 99, 4);
    let key = catalog::location(Kind::DataFile, &row).unwrap();
    plant(
        &store,
        &key,
        &encode_record(Kind::DataFile.tag(), &Record::new(row)),
    )
    .await;
    let check = check_catalog(&store).await.unwrap();
    assert_eq!(
        rules(&check.violations),
        [Rule::BelongsToTable],
        "{check:#?}"
    );
    let violation = &check.violations[0];
    assert_eq!(violation.at, "current/ducklake_data_file(99, 20)");
    assert!(
        violation.message.contains("table 99") && violation.message.contains("snapshot 4"),
        "{violation:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_behind_the_newest_snapshot_is_a_violation() {
    let store = memory_store("verify-head").await;
    history(&store).await;
    let stale = Head {
        snapshot_id: 2,
        batch_count: 9,
    };
    plant(
        &store,
        keys::SYS_HEAD,
        &encode_record(
            moraine::catalog::HEAD_TAG,
            &stale.record(&Default::default()),
        ),
    )
    .await;
    let check = check_catalog(&store).await.unwrap();
    assert_eq!(rules(&check.violations), [Rule::HeadIsNewest], "{check:#?}");
    assert!(check.violations[0].message.contains("newest snapshot is 4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_records_misfiled_rows_and_stray_inline_chunks_are_violations() {
    let store = memory_store("verify-records").await;
    history(&store).await;
    let table_key = catalog::location(Kind::Table, &table_row(5, 1, "t5")).unwrap();
    plant(&store, &table_key, b"not a record").await;
    // A column row stored under another column's key.
    let misfiled = column_row(40, 1, 1, "y");
    let other_key = catalog::location(Kind::Column, &column_row(41, 1, 1, "z")).unwrap();
    plant(
        &store,
        &other_key,
        &encode_record(Kind::Column.tag(), &Record::new(misfiled)),
    )
    .await;
    plant(
        &store,
        &moraine::inline::chunk_key(1, 3, 4, 0),
        &encode_record(
            moraine::inline::CHUNK,
            &moraine::inline::chunk_record(&[vec![int(0), moraine::catalog::Cell::Blob(vec![1])]]),
        ),
    )
    .await;
    let check = check_catalog(&store).await.unwrap();
    let mut found = rules(&check.violations);
    found.sort();
    assert_eq!(
        found,
        [
            Rule::RecordDecodes,
            Rule::KeyMatchesRow,
            Rule::BelongsToInlineTable
        ],
        "{check:#?}"
    );
    let decodes = check
        .violations
        .iter()
        .find(|v| v.rule == Rule::RecordDecodes)
        .unwrap();
    assert_eq!(decodes.at, "current/ducklake_table(5)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_sst_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = local_store(dir.path()).await;
    history(&store).await;
    store.flush_to_l0().await.unwrap();
    store.close().await.unwrap();
    let compacted = dir.path().join("catalog/compacted");
    let sst = std::fs::read_dir(&compacted)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max()
        .unwrap();
    let bytes = std::fs::read(&sst).unwrap();
    std::fs::write(&sst, &bytes[..bytes.len() / 2]).unwrap();
    let report = verify(&uri_of(dir.path()), &StoreSettings::default())
        .await
        .map(|r| r.violations);
    let name = sst.file_name().unwrap().to_str().unwrap().to_string();
    match report {
        Ok(violations) => {
            let damaged = violations
                .iter()
                .find(|v| v.rule == Rule::ObjectReadable)
                .unwrap_or_else(|| panic!("no damaged object in {violations:#?}"));
            assert!(damaged.at.ends_with(&name), "{damaged:?}");
        }
        Err(e) => panic!("verify failed instead of naming {name}: {e}"),
    }
}
