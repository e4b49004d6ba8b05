//! What the apiserver's integration tests share: an [`Api`] over a fresh SQLite store.

#![allow(dead_code)] // Each test file uses a different part of it.

use std::sync::Arc;

use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::client::Client;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;

/// An [`Api`] with the built-in resources, bootstrapped, over a SQLite store in a
/// temporary directory (removed on drop), and a client of it.
pub struct Server {
    pub api: Api,
    pub client: Client,
    pub store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

impl Server {
    pub async fn new() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("hub.db")).await.unwrap());
        let api = Api::new(
            store.clone(),
            Arc::new(Registry::builtin()),
            "127.0.0.1:6443",
        );
        api.bootstrap().await.unwrap();
        Server {
            client: Client::new(api.clone()),
            api,
            store,
            _dir: dir,
        }
    }
}
