//! The store conformance suite, run against the etcd backend: each store on an etcd
//! server of its own (so that its revisions are its alone, hence consecutive).

mod support;

use std::sync::{Arc, Mutex, PoisonError};

use flotilla_store::Store;
use flotilla_store_etcd::EtcdStore;
use support::etcd::EtcdServer;

/// An etcd of its own (unless `at`: a child process's view of the parent's).
struct EtcdHarness {
    url: String,
    server: Option<Mutex<EtcdServer>>,
}

#[async_trait::async_trait]
impl flotilla_store_tests::Harness for EtcdHarness {
    const DURABLE: bool = true;

    async fn new() -> Self {
        let server = tokio::task::spawn_blocking(EtcdServer::start)
            .await
            .expect("the server could not be started");
        EtcdHarness {
            url: server.url("/conformance"),
            server: Some(Mutex::new(server)),
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        match EtcdStore::open(&self.url).await {
            Ok(store) => Arc::new(store),
            Err(e) => panic!("cannot open {}: {e}", self.url),
        }
    }

    fn location(&self) -> String {
        self.url.clone()
    }

    fn at(location: &str) -> Self {
        EtcdHarness {
            url: location.to_owned(),
            server: None,
        }
    }
}

#[async_trait::async_trait]
impl flotilla_store_tests::ServerHarness for EtcdHarness {
    async fn new_server() -> Self {
        <Self as flotilla_store_tests::Harness>::new().await
    }

    async fn kill_server(&self) {
        let server = self.server.as_ref().expect("the harness owns its server");
        server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kill9();
    }

    async fn restart_server(&self) {
        let server = self.server.as_ref().expect("the harness owns its server");
        let mut server = server.lock().unwrap_or_else(PoisonError::into_inner);
        tokio::task::block_in_place(|| server.restart());
    }
}

flotilla_store_tests::conformance!(EtcdHarness, durable, server);
