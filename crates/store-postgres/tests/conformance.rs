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
