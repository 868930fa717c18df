//! Stores that open as SlateDB databases but must not be used as catalogs:
//! refused at attach with a message that says why, and left as they were.

mod common;

use common::*;
use moraine::catalog::{self, Cell, FORMAT_TAG, FORMAT_VERSION};
use moraine::store::keys;
use moraine::store::value::{encode_record, Record};
use moraine::store::{Store, StoreSettings, StoreUri};

fn fresh_uri(name: &str) -> StoreUri {
    StoreUri::parse(&format!("memory://{name}-{}", uuid::Uuid::new_v4())).unwrap()
}

async fn put_raw(uri: &StoreUri, key: &[u8], value: &[u8]) {
    let store = Store::open(uri, &StoreSettings::default()).await.unwrap();
    let view = store.snapshot().await.unwrap();
    let txn = store.begin(&view).unwrap();
    txn.put(key, value).unwrap();
    store.commit(txn).await.unwrap();
    store.close().await.unwrap();
}

async fn raw_get(uri: &StoreUri, key: &[u8]) -> Option<bytes::Bytes> {
    let store = Store::open(uri, &StoreSettings::default()).await.unwrap();
    let view = store.snapshot().await.unwrap();
    let value = store.get(&view, key).await.unwrap();
    store.close().await.unwrap();
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slatedb_database_that_is_not_a_catalog_is_refused() {
    let uri = fresh_uri("foreign-keys");
    put_raw(&uri, b"someone else's key", b"value").await;
    let err = catalog::open_store(&uri, &StoreSettings::default())
        .await
        .err()
        .expect("a foreign SlateDB database must be refused");
    let text = err.to_string();
    assert!(
        text.contains("holds a SlateDB database that is not a moraine catalog"),
        "{text}"
    );
    assert_eq!(
        raw_get(&uri, b"someone else's key").await.as_deref(),
        Some(&b"value"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_by_a_newer_layout_is_refused_at_attach() {
    let uri = fresh_uri("newer-layout");
    {
        let store =
            std::sync::Arc::new(Store::open(&uri, &StoreSettings::default()).await.unwrap());
        bootstrap(&store).await;
        store.close().await.unwrap();
    }
    let newer = encode_record(
        FORMAT_TAG,
        &Record::new(vec![
            Cell::Int(FORMAT_VERSION + 1),
            Cell::Text("99.0.0".into()),
        ]),
    );
    put_raw(&uri, keys::SYS_FORMAT, &newer).await;
    let err = catalog::open_store(&uri, &StoreSettings::default())
        .await
        .err()
        .expect("a newer layout must be refused");
    let text = err.to_string();
    assert!(
        text.contains(&format!("layout version {}", FORMAT_VERSION + 1))
            && text.contains("written by a newer moraine"),
        "{text}"
    );
    // Refusing wrote nothing: the newer record is still there.
    assert_eq!(
        raw_get(&uri, keys::SYS_FORMAT).await.as_deref(),
        Some(&newer[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_layout_record_is_corruption() {
    let uri = fresh_uri("damaged-format");
    put_raw(&uri, keys::SYS_FORMAT, b"\x00garbage").await;
    let err = catalog::open_store(&uri, &StoreSettings::default())
        .await
        .err()
        .expect("a damaged layout record must be refused");
    assert!(
        err.to_string().starts_with("corrupt moraine store"),
        "{err}"
    );
}
