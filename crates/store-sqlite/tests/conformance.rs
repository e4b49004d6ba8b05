//! The store conformance suite, run against the SQLite backend on real files.

use std::path::PathBuf;
use std::sync::Arc;

use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;

/// A database file in a temporary directory (owned, so removed at the end, unless `at`).
struct SqliteHarness {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

#[async_trait::async_trait]
impl flotilla_store_tests::Harness for SqliteHarness {
    const DURABLE: bool = true;

    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        SqliteHarness {
            path: dir.path().join("store.db"),
            _dir: Some(dir),
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        // A previous handle's writer may still be closing the file after its last drop.
        let mut attempts = 0;
        loop {
            match SqliteStore::open(&self.path).await {
                Ok(store) => return Arc::new(store),
                Err(flotilla_store::Error::Open {
                    reason: flotilla_store::OpenFailure::Locked,
                    ..
                }) if attempts < 100 => {
                    attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot open {}: {e}", self.path.display()),
            }
        }
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn at(location: &str) -> Self {
        SqliteHarness {
            path: PathBuf::from(location),
            _dir: None,
        }
    }
}

flotilla_store_tests::conformance!(SqliteHarness, durable);
