//! One etcd, several stores: each under its own prefix, with revisions that skip the
//! others' writes; what is not a Flotilla store's is refused; an unreachable etcd fails
//! the open in one line, in time.

mod support;

use std::time::{Duration, Instant};

use etcd_client::Client;
use flotilla_store::{Bytes, Error, OpenFailure, Revision, Store};
use flotilla_store_etcd::{Config, EtcdStore, SCHEMA_VERSION};
use futures_util::StreamExt;
use support::etcd::EtcdServer;

async fn raw(server: &EtcdServer) -> Client {
    Client::connect([format!("http://{}", server.endpoint())], None)
        .await
        .expect("connect to etcd")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hubs_share_one_etcd_each_under_its_prefix() {
    let server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap();
    let a = EtcdStore::open(&server.url("/hub-a")).await.unwrap();
    let b = EtcdStore::open(&server.url("/hub-b")).await.unwrap();
    assert_eq!(b.current_revision().await.unwrap(), Revision::ZERO);
    let mut watch_b = b.watch(b"", Revision::ZERO).await.unwrap();

    // Interleaved writes: b's revisions skip a's.
    let mut b_revisions = Vec::new();
    for i in 0..5 {
        a.create(format!("/k/{i}").as_bytes(), Bytes::from("a"))
            .await
            .unwrap();
        b_revisions.push(
            b.create(format!("/k/{i}").as_bytes(), Bytes::from("b"))
                .await
                .unwrap(),
        );
    }
    assert!(b_revisions.windows(2).all(|w| w[1].get() == w[0].get() + 2));
    // Each sees its own keys only.
    let page = b.list(b"", Default::default()).await.unwrap();
    assert_eq!(page.kvs.len(), 5);
    assert!(page.kvs.iter().all(|kv| kv.value == "b"));
    assert_eq!(a.count(b"").await.unwrap(), 5);
    // b's watch yields its 5 writes with their revisions, nothing of a's.
    for expected in &b_revisions {
        let event = tokio::time::timeout(Duration::from_secs(30), watch_b.next())
            .await
            .expect("an event")
            .expect("the watch is open")
            .unwrap();
        assert_eq!(event.revision(), *expected);
        assert_eq!(event.kv.value, "b");
    }
    // A write of a's in between does not reach b's watch: the next one is b's.
    a.create(b"/other", Bytes::from("a")).await.unwrap();
    let last = b.create(b"/last", Bytes::from("b")).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(30), watch_b.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((event.revision(), &event.kv.key[..]), (last, &b"/last"[..]));
    // Reopening keeps b's numbering.
    drop(b);
    let b = EtcdStore::open(&server.url("/hub-b")).await.unwrap();
    assert_eq!(
        b.get(b"/last", None).await.unwrap().unwrap().mod_revision,
        last
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_holding_other_keys_or_a_newer_schema_is_refused() {
    let server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap();
    let mut client = raw(&server).await;
    client
        .put("/registry/pods/default/web", "{}", None)
        .await
        .unwrap();
    let e = EtcdStore::open(&server.url("/registry")).await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Open {
                reason: OpenFailure::Foreign,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("/registry"), "{e}");
    // Nothing was written there.
    let inside = client
        .get(
            "/registry/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(inside.kvs().len(), 1);

    client
        .put(
            "/newer/",
            format!("flotilla-store schema={}", SCHEMA_VERSION + 1),
            None,
        )
        .await
        .unwrap();
    let e = EtcdStore::open(&server.url("/newer")).await.unwrap_err();
    match &e {
        Error::Open {
            reason: OpenFailure::NewerSchema { found, supported },
            ..
        } => assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION)),
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&format!("{}", SCHEMA_VERSION + 1)) && text.contains("1"),
        "{text}"
    );
    // A prefix of its own opens.
    EtcdStore::open(&server.url("/flotilla")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_fails_the_open_in_one_line_within_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = Config::from_url(&format!("etcd://127.0.0.1:{port}/hub")).unwrap();
    config.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let e = EtcdStore::open_with(config).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            &e,
            Error::Open {
                reason: OpenFailure::Unreachable(_),
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains('\n'), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_while_etcd_is_down_are_unavailable_and_a_watch_resumes() {
    let mut server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap();
    let url = server.url("/hub");
    let mut config = Config::from_url(&url).unwrap();
    config.timeout = Duration::from_secs(2);
    let store = EtcdStore::open_with(config).await.unwrap();
    let r1 = store.create(b"/a", Bytes::from("1")).await.unwrap();
    let mut watch = store.watch(b"", r1).await.unwrap();
    tokio::task::block_in_place(|| server.kill9());
    let e = store.create(b"/b", Bytes::from("2")).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    let e = store.get(b"/a", None).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    tokio::task::block_in_place(|| server.restart());
    let deadline = Instant::now() + Duration::from_secs(60);
    let r2 = loop {
        match store.create(b"/b", Bytes::from("2")).await {
            Ok(r) => break r,
            Err(Error::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let event = tokio::time::timeout(Duration::from_secs(60), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((event.revision(), &event.kv.key[..]), (r2, &b"/b"[..]));
}
