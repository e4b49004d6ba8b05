//! The store conformance suite, run against the PostgreSQL backend: each store a
//! database of its own on one server of the test process's own (a server of its own
//! for the cases that kill it).

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use flotilla_store::Store;
use flotilla_store_postgres::PostgresStore;
use support::postgres::PgServer;

/// The server the stores of this test process share (stopped by its watchdog when the
/// process ends).
static SHARED: OnceLock<PgServer> = OnceLock::new();

/// A database of its own, on the shared server or on a server of its own (unless `at`:
/// a child process's view of the parent's).
struct PgHarness {
    url: String,
    server: Option<Mutex<PgServer>>,
}

/// A new, empty database on `server`; its URL.
async fn new_database(server: &PgServer) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("store{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a database");
    server.url_of(&name)
}

#[async_trait::async_trait]
impl flotilla_store_tests::Harness for PgHarness {
    const DURABLE: bool = true;

    async fn new() -> Self {
        let server = match SHARED.get() {
            Some(server) => server,
            None => {
                let started = tokio::task::spawn_blocking(PgServer::start)
                    .await
                    .expect("the server could not be started");
                // A concurrent start loses: its server is dropped (stopped).
                let _ = SHARED.set(started);
                SHARED.get().expect("the shared server")
            }
        };
        PgHarness {
            url: new_database(server).await,
            server: None,
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        match PostgresStore::open(&self.url).await {
            Ok(store) => Arc::new(store),
            Err(e) => panic!("cannot open {}: {e}", self.url),
        }
    }

    fn location(&self) -> String {
        self.url.clone()
    }

    fn at(location: &str) -> Self {
        PgHarness {
            url: location.to_owned(),
            server: None,
        }
    }
}

#[async_trait::async_trait]
impl flotilla_store_tests::ServerHarness for PgHarness {
    async fn new_server() -> Self {
        let server = tokio::task::spawn_blocking(PgServer::start)
            .await
            .expect("the server could not be started");
        PgHarness {
            url: server.url(),
            server: Some(Mutex::new(server)),
        }
    }

    async fn kill_server(&self) {
        let server = self.server.as_ref().expect("a harness of new_server");
        server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kill9();
    }

    async fn restart_server(&self) {
        let server = self.server.as_ref().expect("a harness of new_server");
        let mut server = server.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::task::block_in_place(|| server.restart());
    }
}

flotilla_store_tests::conformance!(PgHarness, durable, server);

/// A writer publishes its own batches to its process's watches without the tail reading
/// them back: those events must be exactly what another process's tail reads from the log
/// (values, create and mod revisions, previous values), in the same order, and a write a
/// conflict refused is in neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_own_events_are_what_another_process_reads_from_the_log() {
    use flotilla_store::{Bytes, Revision};

    let harness = <PgHarness as flotilla_store_tests::Harness>::new().await;
    let (writer, other) = (
        flotilla_store_tests::Harness::open(&harness).await,
        flotilla_store_tests::Harness::open(&harness).await,
    );
    let since = writer.current_revision().await.unwrap();
    let mut mine = writer.watch(b"/k/", since).await.unwrap();
    let mut theirs = other.watch(b"/k/", since).await.unwrap();

    let a1 = writer.create(b"/k/a", Bytes::from("1")).await.unwrap();
    let b1 = writer.create(b"/k/b", Bytes::from("1")).await.unwrap();
    let a2 = writer.update(b"/k/a", Bytes::from("2"), a1).await.unwrap();
    assert!(writer.update(b"/k/a", Bytes::from("x"), a1).await.is_err());
    // Writes from both processes, at once, interleave in one log.
    let (from_writer, from_other) = tokio::join!(
        writer.update(b"/k/b", Bytes::from("2"), b1),
        other.create(b"/k/c", Bytes::from("1")),
    );
    from_writer.unwrap();
    from_other.unwrap();
    writer.delete(b"/k/a", Some(a2)).await.unwrap();
    writer.create(b"/k/a", Bytes::from("3")).await.unwrap();
    let last = writer.current_revision().await.unwrap();

    let seen_here = until(&mut mine, last).await;
    let seen_there = until(&mut theirs, last).await;
    assert_eq!(seen_here.len(), 7, "{seen_here:#?}");
    assert_eq!(seen_here, seen_there);
    let revisions: Vec<Revision> = seen_here.iter().map(|e| e.revision()).collect();
    assert!(
        revisions.windows(2).all(|w| w[1] == w[0].next()),
        "{revisions:?}"
    );
    let update = &seen_here[2];
    assert_eq!(update.kv.value, Bytes::from("2"));
    assert_eq!(
        update.prev_kv.as_ref().map(|p| &p.value[..]),
        Some(&b"1"[..])
    );
}

/// The events of `stream` up to revision `last`.
async fn until(
    stream: &mut flotilla_store::WatchStream,
    last: flotilla_store::Revision,
) -> Vec<flotilla_store::WatchEvent> {
    use futures_util::StreamExt;
    let mut events: Vec<flotilla_store::WatchEvent> = Vec::new();
    while events.last().map(|e| e.revision()) != Some(last) {
        let next = tokio::time::timeout(std::time::Duration::from_secs(20), stream.next())
            .await
            .expect("every write reaches the watch within 20 s");
        events.push(next.expect("the watch goes on").expect("no watch error"));
    }
    events
}
