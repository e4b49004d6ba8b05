//! Opening and losing the database: a schema from a newer Flotilla, a server that refuses
//! or never answers, a server that goes away under a running store; and compaction
//! removing rows in steps.

mod support;

use std::time::{Duration, Instant};

use flotilla_store::{Bytes, Error, OpenFailure, Revision, Store};
use flotilla_store_postgres::{Config, PostgresStore, SCHEMA_VERSION};
use futures_util::StreamExt;
use support::postgres::{PgServer, free_port};

async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

async fn start() -> PgServer {
    tokio::task::spawn_blocking(PgServer::start).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_or_another_applications_tables_are_refused() {
    let server = start().await;
    let store = PostgresStore::open(&server.url()).await.unwrap();
    store.create(b"/k", Bytes::from("v")).await.unwrap();
    drop(store);
    let client = raw(&server.url()).await;
    client
        .execute(
            "UPDATE flotilla_meta SET schema_version = $1",
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let e = PostgresStore::open(&server.url()).await.unwrap_err();
    match &e {
        Error::Open {
            reason: OpenFailure::NewerSchema { found, supported },
            ..
        } => assert_eq!(
            (*found, *supported),
            (i64::from(SCHEMA_VERSION + 1), i64::from(SCHEMA_VERSION))
        ),
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(&format!("schema version {}", SCHEMA_VERSION + 1))
            && text.contains(&format!("supported version {SCHEMA_VERSION}")),
        "{text}"
    );
    // Nothing was changed: the version is still the newer one.
    let version: i32 = client
        .query_one("SELECT schema_version FROM flotilla_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION + 1);

    client
        .batch_execute("CREATE DATABASE other; ")
        .await
        .unwrap();
    let other = server.url_of("other");
    raw(&other)
        .await
        .batch_execute("CREATE TABLE flotilla_log (id int)")
        .await
        .unwrap();
    let e = PostgresStore::open(&other).await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Open {
                reason: OpenFailure::NotAStore,
                ..
            }
        ),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_the_open_in_one_line_within_the_timeout() {
    // Nobody listens: refused at once.
    let port = free_port();
    let mut config = Config::new(format!(
        "postgres://flotilla:secret@127.0.0.1:{port}/db?sslmode=disable"
    ));
    config.connect_timeout = Duration::from_secs(2);
    let e = PostgresStore::open_with(config.clone()).await.unwrap_err();
    let text = e.to_string();
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
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("secret") && !text.contains('\n'), "{text}");

    // A listener that never answers: the open gives up at the timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    config.url = format!("postgres://flotilla@127.0.0.1:{port}/db?sslmode=disable");
    let started = Instant::now();
    let e = PostgresStore::open_with(config).await.unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "took {took:?}");
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
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_while_the_server_is_down_are_unavailable_and_a_watch_resumes() {
    let mut server = start().await;
    let mut config = Config::new(server.url());
    config.connect_timeout = Duration::from_secs(2);
    let store = PostgresStore::open_with(config).await.unwrap();
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
    assert_eq!(r2, r1.next());
    let event = tokio::time::timeout(Duration::from_secs(60), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((event.revision(), &event.kv.key[..]), (r2, &b"/b"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_deletes_superseded_rows_in_steps() {
    let server = start().await;
    let mut config = Config::new(server.url());
    config.compaction_step = 50;
    let store = PostgresStore::open_with(config).await.unwrap();
    for key in 0..5 {
        let k = format!("/live/{key}");
        let mut revision = store.create(k.as_bytes(), Bytes::from("0")).await.unwrap();
        for version in 1..100 {
            revision = store
                .update(k.as_bytes(), Bytes::from(version.to_string()), revision)
                .await
                .unwrap();
        }
    }
    for key in 0..100 {
        let k = format!("/gone/{key}");
        store.create(k.as_bytes(), Bytes::from("x")).await.unwrap();
        store.delete(k.as_bytes(), None).await.unwrap();
    }
    let head = store.current_revision().await.unwrap();
    assert_eq!(head, Revision::new(5 * 100 + 200));
    let client = raw(&server.url()).await;
    let rows = || async {
        let n: i64 = client
            .query_one("SELECT count(*) FROM flotilla_log", &[])
            .await
            .unwrap()
            .get(0);
        n
    };
    assert_eq!(rows().await, 700);
    store.compact(head).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows().await != 5 {
        assert!(Instant::now() < deadline, "{} rows left", rows().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done: i64 = client
        .query_one("SELECT compact_done FROM flotilla_meta", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(done, 700);
    let page = store.list(b"/live/", Default::default()).await.unwrap();
    assert_eq!(page.kvs.len(), 5);
    assert!(page.kvs.iter().all(|kv| kv.value == "99"));
    assert_eq!(store.count(b"/gone/").await.unwrap(), 0);
}

/// A certificate for 127.0.0.1 and its key (PEM), self-signed: its own CA.
fn self_signed() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_as_sslmode_asks() {
    let (cert, key) = self_signed();
    let server = tokio::task::spawn_blocking(move || PgServer::start_tls(&cert, &key))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = server.data_dir();
    let ca = dir.path().join("ca.pem");
    std::fs::copy(data.join("server.crt"), &ca).unwrap();
    let (other, _) = self_signed();
    let wrong = dir.path().join("other-ca.pem");
    std::fs::write(&wrong, other).unwrap();
    let base = format!("postgres://flotilla@127.0.0.1:{}/postgres", server.port());
    let open = |query: String| {
        let mut config = Config::new(format!("{base}?{query}"));
        config.connect_timeout = Duration::from_secs(10);
        PostgresStore::open_with(config)
    };
    // Encrypted, checked against the CA and the host name; then the chain alone; then
    // encrypted unchecked, as libpq's modes do.
    let client = raw(&server.url()).await;
    let encrypted = || async {
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE ssl), count(*) FILTER (WHERE NOT ssl)
                 FROM pg_stat_ssl JOIN pg_stat_activity USING (pid)
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i64>(1))
    };
    assert_eq!(encrypted().await, (0, 0));
    for (n, query) in [
        format!("sslmode=verify-full&sslrootcert={}", ca.display()),
        format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
        "sslmode=require".to_owned(),
    ]
    .into_iter()
    .enumerate()
    {
        let store = open(query.clone())
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        let key = format!("/tls/{n}");
        store
            .create(key.as_bytes(), Bytes::from(query.clone()))
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(
            store
                .get(key.as_bytes(), None)
                .await
                .unwrap()
                .unwrap()
                .value,
            query
        );
        // Every connection the store holds (its writer, its watch feed, its reads) is
        // encrypted, and none is not.
        let (tls, plain) = encrypted().await;
        assert!(
            tls >= 2 && plain == 0,
            "{query}: {tls} encrypted, {plain} plain"
        );
        drop(store);
        let deadline = Instant::now() + Duration::from_secs(30);
        while encrypted().await != (0, 0) {
            assert!(
                Instant::now() < deadline,
                "the store's connections stayed open"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A server whose certificate another CA signed is refused, in one line naming it.
    let e = open(format!(
        "sslmode=verify-full&sslrootcert={}",
        wrong.display()
    ))
    .await
    .unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(&e, Error::Open { .. }) && text.contains(&format!("127.0.0.1:{}", server.port())),
        "{e:?}"
    );
    assert!(!text.contains('\n'), "{text}");
}
