//! A member of a three-member cluster dies: the store's requests go to the other two.
//! (The client's balancer kept picking the dead member's endpoint, whose requests fail at
//! once, so most requests failed for as long as the member stayed down.)

mod support;

use std::time::{Duration, Instant};

use flotilla_store::{Bytes, ListOptions, Store};
use flotilla_store_etcd::EtcdStore;
use support::etcd::EtcdCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_member_down_every_request_goes_to_the_others() {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(3))
        .await
        .unwrap();
    let store = EtcdStore::open(&cluster.url("/members")).await.unwrap();
    store.create(b"before", Bytes::from("1")).await.unwrap();
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.kill9(0);
        cluster
    })
    .await
    .unwrap();
    // Should the dead member have led, the others elect a leader first.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.get(b"before", None).await {
            Ok(Some(_)) => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the store did not serve again: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // From then on, not one request fails.
    for i in 0..100 {
        let key = format!("after-{i}");
        let written = store
            .create(key.as_bytes(), Bytes::from("x"))
            .await
            .unwrap_or_else(|e| panic!("create {i}: {e:?}"));
        let read = store
            .get(key.as_bytes(), None)
            .await
            .unwrap_or_else(|e| panic!("get {i}: {e:?}"))
            .expect("what was written");
        assert_eq!(read.mod_revision, written);
    }
    let page = store.list(b"after-", ListOptions::default()).await.unwrap();
    assert_eq!(page.kvs.len(), 100);
    drop(cluster);
}
