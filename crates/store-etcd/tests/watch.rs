//! The etcd store's watches and compaction: a watch returned by `watch` is established in
//! etcd before `watch` returns, so that a compaction after it does not end it, however
//! late the stream is first polled.

mod support;

use std::time::Duration;

use flotilla_store::{Bytes, EventKind, Revision, Store};
use flotilla_store_etcd::EtcdStore;
use futures_util::StreamExt;
use support::etcd::EtcdServer;

/// How long an event that is due may take to come.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_polled_only_after_a_compaction_delivers_every_change() {
    let server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap();
    let store = EtcdStore::open(&server.url("/hub")).await.unwrap();
    let since = store.current_revision().await.unwrap();
    assert_eq!(since, Revision::ZERO);
    // Not polled until every write and the compaction are done.
    let mut watch = store.watch(b"", since).await.unwrap();
    let r1 = store.create(b"a", Bytes::from("1")).await.unwrap();
    let r2 = store.update(b"a", Bytes::from("2"), r1).await.unwrap();
    let (r3, _) = store.delete(b"a", None).await.unwrap();
    store.compact(r3).await.unwrap();
    let r4 = store.create(b"b", Bytes::from("1")).await.unwrap();

    let mut got = Vec::new();
    for _ in 0..4 {
        match tokio::time::timeout(WAIT, watch.next()).await {
            Ok(Some(Ok(event))) => got.push((event.revision(), event.kind, event.kv.key)),
            other => panic!("the watch stopped after {got:?}: {other:?}"),
        }
    }
    let (a, b) = (Bytes::from("a"), Bytes::from("b"));
    assert_eq!(
        got,
        [
            (r1, EventKind::Put, a.clone()),
            (r2, EventKind::Put, a.clone()),
            (r3, EventKind::Delete, a),
            (r4, EventKind::Put, b),
        ]
    );
}
