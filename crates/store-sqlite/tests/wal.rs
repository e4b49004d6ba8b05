//! Checkpoints keep the WAL small under sustained writes, alone or concurrent.
//!
//! Without checkpoints (or with only background ones, which never copy the frames committed
//! while they run) the WAL would hold every byte written.

use std::path::Path;

use flotilla_store::{Bytes, Store};
use flotilla_store_sqlite::SqliteStore;

/// Bytes written by each test: ten times the WAL's checkpoint threshold (1,000 pages).
const TOTAL: usize = 40 << 20;
const VALUE: usize = 4096;

fn wal_size(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0)
}

async fn write_with(writers: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let per_writer = TOTAL / VALUE / writers;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let value = Bytes::from(vec![w as u8; VALUE]);
            let mut largest = 0;
            for i in 0..per_writer {
                let key = format!("/wal/{w:02}/{i:06}");
                store.create(key.as_bytes(), value.clone()).await.unwrap();
                if i % 64 == 0 {
                    largest = largest.max(wal_size(store.path()));
                }
            }
            largest
        }));
    }
    let mut largest = 0;
    for task in tasks {
        largest = largest.max(task.await.unwrap());
    }
    let stats = store.stats();
    assert_eq!(stats.writes as usize, per_writer * writers);
    // Twice the threshold (the inline catch-up point) plus the batches committed meanwhile.
    let bound = 12 << 20;
    assert!(
        largest < bound,
        "the WAL grew to {largest} bytes after {TOTAL} bytes written by {writers} writers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_keeps_the_wal_small() {
    write_with(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_keep_the_wal_small() {
    write_with(16).await;
}
