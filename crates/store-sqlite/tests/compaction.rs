//! Compaction removes superseded rows from the file, in steps, while writes go on.

use std::path::Path;
use std::time::Duration;

use flotilla_store::{Bytes, ListOptions, Revision, Store};
use flotilla_store_sqlite::{Config, SqliteStore};

fn rows(path: &Path) -> (i64, i64) {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    (count("log"), count("data"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_deletes_superseded_rows_in_steps_while_writes_continue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    let mut config = Config::new(&path);
    config.compaction_step = 100;
    let store = SqliteStore::open_with(config.clone()).await.unwrap();

    // 10 live keys with 300 versions each, and 200 keys created and deleted.
    let mut revisions = std::collections::BTreeMap::new();
    for key in 0..10 {
        let k = format!("/live/{key}");
        let mut revision = store.create(k.as_bytes(), Bytes::from("0")).await.unwrap();
        for version in 1..300 {
            revision = store
                .update(k.as_bytes(), Bytes::from(version.to_string()), revision)
                .await
                .unwrap();
        }
        revisions.insert(k, revision);
    }
    for key in 0..200 {
        let k = format!("/gone/{key}");
        store.create(k.as_bytes(), Bytes::from("x")).await.unwrap();
        store.delete(k.as_bytes(), None).await.unwrap();
    }
    let head = store.current_revision().await.unwrap();
    assert_eq!(head.get(), 10 * 300 + 200 * 2);
    assert_eq!(rows(&path), (3400, 3200));

    store.compact(head).await.unwrap();
    // Writes are served between the compaction's steps.
    for i in 0..50 {
        store
            .create(format!("/during/{i}").as_bytes(), Bytes::from("d"))
            .await
            .unwrap();
    }
    let mut left = rows(&path);
    for _ in 0..500 {
        if left == (60, 60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = rows(&path);
    }
    assert_eq!(
        left,
        (60, 60),
        "10 live keys and the 50 written during compaction"
    );

    // Reads at the compacted revision and after are unchanged.
    let page = store.list(b"/live/", ListOptions::default()).await.unwrap();
    let found: Vec<(String, Revision, Bytes)> = page
        .kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8(kv.key.to_vec()).unwrap(),
                kv.mod_revision,
                kv.value.clone(),
            )
        })
        .collect();
    let expected: Vec<(String, Revision, Bytes)> = revisions
        .iter()
        .map(|(k, r)| (k.clone(), *r, Bytes::from("299")))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(store.count(b"/gone/").await.unwrap(), 0);
    assert_eq!(store.stats().keys, 60, "deleted keys left the index");

    // Reopened: the index is rebuilt from what is left, and writes continue.
    drop(store);
    let store = SqliteStore::open_with(config).await.unwrap();
    assert_eq!(store.compacted_revision().await.unwrap(), head);
    assert_eq!(store.stats().keys, 60);
    let kv = store.get(b"/live/3", None).await.unwrap().unwrap();
    assert_eq!(
        (kv.mod_revision, kv.value),
        (revisions["/live/3"], Bytes::from("299"))
    );
    let next = store.create(b"/after", Bytes::new()).await.unwrap();
    assert_eq!(next.get(), head.get() + 51);
}
