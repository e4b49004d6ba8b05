//! `mod_revision` answers from the key index what `get` reports, through every kind of
//! write and a compaction.

use flotilla_store::{Bytes, Revision, Store};
use flotilla_store_sqlite::SqliteStore;

async fn agree(store: &SqliteStore, key: &[u8]) -> Option<Revision> {
    let from_index = store.mod_revision(key).await.unwrap();
    let at_once = store
        .mod_revision_now(key)
        .expect("the index answers at once");
    assert_eq!(at_once.unwrap(), from_index);
    let from_get = store
        .get(key, None)
        .await
        .unwrap()
        .map(|kv| kv.mod_revision);
    assert_eq!(from_index, from_get, "{}", String::from_utf8_lossy(key));
    from_index
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mod_revision_is_what_get_reports() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("hub.db")).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, None);
    assert!(store.mod_revision(b"").await.is_err());
    assert!(store.mod_revision_now(b"").unwrap().is_err());
    let created = store.create(b"/a", Bytes::from("1")).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, Some(created));
    assert_eq!(agree(&store, b"/a/b").await, None);
    let updated = store
        .update(b"/a", Bytes::from("2"), created)
        .await
        .unwrap();
    assert_eq!(agree(&store, b"/a").await, Some(updated));
    store.create(b"/b", Bytes::from("x")).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, Some(updated));
    store.delete(b"/a", None).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, None);
    let recreated = store.create(b"/a", Bytes::from("3")).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, Some(recreated));
    let head = store.current_revision().await.unwrap();
    store.compact(head).await.unwrap();
    assert_eq!(agree(&store, b"/a").await, Some(recreated));
    assert!(agree(&store, b"/b").await.is_some());
    // Concurrent writers: the index never reports a revision `get` would not.
    let store = std::sync::Arc::new(store);
    let mut tasks = Vec::new();
    for t in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("/c/{t}");
            let mut revision = store
                .create(key.as_bytes(), Bytes::from("0"))
                .await
                .unwrap();
            for n in 1..50 {
                revision = store
                    .update(key.as_bytes(), Bytes::from(n.to_string()), revision)
                    .await
                    .unwrap();
                assert_eq!(
                    store.mod_revision(key.as_bytes()).await.unwrap(),
                    Some(revision)
                );
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}
