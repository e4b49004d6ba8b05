//! The store conformance suite, run on the in-memory store.

use std::sync::Arc;

use flotilla_store::Store;
use flotilla_store_memory::MemoryStore;

/// Each location is a fresh store; nothing survives the process.
struct MemoryHarness {
    store: MemoryStore,
}

#[async_trait::async_trait]
impl flotilla_store_tests::Harness for MemoryHarness {
    const DURABLE: bool = false;

    async fn new() -> Self {
        MemoryHarness {
            store: MemoryStore::new(),
        }
    }

    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    fn location(&self) -> String {
        "memory".to_owned()
    }

    fn at(_location: &str) -> Self {
        unreachable!("an in-memory store cannot be opened by another process")
    }
}

flotilla_store_tests::conformance!(MemoryHarness);
