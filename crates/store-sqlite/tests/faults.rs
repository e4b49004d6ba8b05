//! Bad input and faults: files that are not ours, locked, newer, corrupt, or on a full disk.

use std::path::Path;
use std::process::Command;

use flotilla_store::{Bytes, Error, OpenFailure, Store};
use flotilla_store_sqlite::{Config, SqliteStore, lock_path};

fn open_failure(result: Result<SqliteStore, Error>) -> (String, OpenFailure) {
    match result {
        Err(e @ Error::Open { .. }) => {
            let message = e.to_string();
            let Error::Open { reason, .. } = e else {
                unreachable!()
            };
            (message, reason)
        }
        Err(e) => panic!("expected an open error, got {e}"),
        Ok(store) => panic!("expected an open error, opened {store:?}"),
    }
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    std::fs::write(&path, vec![0x5a; 16 * 1024]).unwrap();
    let (message, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::Corrupt);
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("corrupt"), "{message}");
    // The file was not touched.
    assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 16 * 1024]);
}

#[tokio::test]
async fn a_damaged_header_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.create(b"k", Bytes::from_static(b"v")).await.unwrap();
    }
    checkpoint(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..16].copy_from_slice(b"not a db header!");
    std::fs::write(&path, bytes).unwrap();
    let (_, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::Corrupt);
}

#[tokio::test]
async fn a_store_open_elsewhere_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    let first = SqliteStore::open(&path).await.unwrap();
    let (message, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::Locked);
    assert!(message.contains("locked by another process"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    // The holder is unaffected, and the file opens once it is closed.
    first.create(b"k", Bytes::from_static(b"v")).await.unwrap();
    drop(first);
    let again = SqliteStore::open(&path)
        .await
        .unwrap_or_else(|e| panic!("reopen after close: {e}"));
    assert!(again.get(b"k", None).await.unwrap().is_some());
}

#[tokio::test]
async fn a_store_locked_by_another_process_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    drop(SqliteStore::open(&path).await.unwrap());
    // flock(1) holds the store's lock while it sleeps.
    let mut holder = Command::new("flock")
        .args(["--exclusive", "--no-fork"])
        .arg(lock_path(&path))
        .args(["sleep", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("flock(1) from util-linux");
    let mut reason = None;
    for _ in 0..200 {
        match SqliteStore::open(&path).await {
            Ok(store) => drop(store),
            Err(Error::Open { reason: r, .. }) => {
                reason = Some(r);
                break;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(reason, Some(OpenFailure::Locked));
}

#[tokio::test]
async fn a_store_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    drop(SqliteStore::open(&path).await.unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99")
        .unwrap();
    let (message, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(
        reason,
        OpenFailure::NewerSchema {
            found: 99,
            supported: 1
        }
    );
    assert!(message.contains("upgrade Flotilla"), "{message}");
}

#[tokio::test]
async fn a_database_of_another_application_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (7);",
        )
        .unwrap();
    let (_, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::NotAStore);
    let id: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT id FROM invoices", [], |r| r.get(0))
        .unwrap();
    assert_eq!(id, 7);
}

#[tokio::test]
async fn a_missing_directory_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("hub.db");
    let (message, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::Io);
    assert!(message.contains("missing/hub.db"), "{message}");
}

#[tokio::test]
async fn a_value_over_the_limit_is_refused_without_a_revision() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path().join("hub.db"));
    config.max_value_size = 1024;
    let store = SqliteStore::open_with(config).await.unwrap();
    let err = store
        .create(b"big", Bytes::from(vec![1u8; 1025]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("1025")),
        "{err}"
    );
    assert_eq!(store.current_revision().await.unwrap().get(), 0);
    store
        .create(b"big", Bytes::from(vec![1u8; 1024]))
        .await
        .unwrap();
}

/// Writes until the store reports [`Error::NoSpace`], then checks that the store is intact.
async fn fill_until_full(store: &SqliteStore) -> Vec<(Vec<u8>, u64)> {
    let mut acknowledged = Vec::new();
    let value = Bytes::from(vec![0xa5u8; 4096]);
    for i in 0u32.. {
        let key = format!("/fill/{i:08}").into_bytes();
        match store.create(&key, value.clone()).await {
            Ok(revision) => acknowledged.push((key, revision.get())),
            Err(Error::NoSpace { .. }) => break,
            Err(e) => panic!("expected NoSpace when full, got {e}"),
        }
        assert!(i < 100_000, "the store never filled up");
    }
    assert!(
        !acknowledged.is_empty(),
        "nothing fit before the store was full"
    );
    let head = store.current_revision().await.unwrap().get();
    assert_eq!(
        head,
        acknowledged.last().unwrap().1,
        "a failed write moved the head"
    );
    // Every acknowledged write reads back, and a list sees exactly them.
    for (key, revision) in &acknowledged {
        let kv = store
            .get(key, None)
            .await
            .unwrap()
            .expect("acknowledged key");
        assert_eq!(kv.mod_revision.get(), *revision);
    }
    let page = store.list(b"/fill/", Default::default()).await.unwrap();
    assert_eq!(page.kvs.len(), acknowledged.len());
    acknowledged
}

#[tokio::test]
async fn a_full_database_fails_writes_and_stays_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    let mut config = Config::new(&path);
    config.max_page_count = Some(64);
    let store = SqliteStore::open_with(config.clone()).await.unwrap();
    let acknowledged = fill_until_full(&store).await;
    drop(store);
    // Reopened (with room to grow): everything acknowledged is there and writes resume.
    config.max_page_count = None;
    let store = SqliteStore::open_with(config).await.unwrap();
    let head = store.current_revision().await.unwrap().get();
    assert_eq!(head, acknowledged.last().unwrap().1);
    for (key, revision) in &acknowledged {
        assert_eq!(
            store
                .get(key, None)
                .await
                .unwrap()
                .unwrap()
                .mod_revision
                .get(),
            *revision
        );
    }
    assert_eq!(
        store.create(b"/after", Bytes::new()).await.unwrap().get(),
        head + 1
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A real full disk: a 2 MiB tmpfs (needs root to mount; skipped, loudly, otherwise).
#[tokio::test]
async fn a_full_disk_fails_writes_and_stays_consistent() {
    if !is_root() {
        eprintln!("SKIPPED: mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "flotilla-full-disk"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(mount.success(), "cannot mount a tmpfs as root");
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let path = dir.path().join("hub.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let acknowledged = fill_until_full(&store).await;
    drop(store);
    // Still full: the store opens cleanly and holds exactly what was acknowledged.
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.current_revision().await.unwrap().get(),
        acknowledged.last().unwrap().1
    );
    let page = store.list(b"/fill/", Default::default()).await.unwrap();
    let keys: Vec<Vec<u8>> = page.kvs.iter().map(|kv| kv.key.to_vec()).collect();
    let expected: Vec<Vec<u8>> = acknowledged.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, expected);
}

/// Moves the WAL into the main file so that the header can be damaged on disk.
fn checkpoint(path: &Path) {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

/// Overwrites the root page of the `data` table (the values, which opening does not read)
/// with garbage; returns the page's number.
fn damage_values(path: &Path) -> i64 {
    checkpoint(path);
    let (page, size): (i64, i64) = {
        let conn = rusqlite::Connection::open(path).unwrap();
        let page = conn
            .query_row(
                "SELECT rootpage FROM sqlite_schema WHERE name = 'data'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let size = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        (page, size)
    };
    let mut bytes = std::fs::read(path).unwrap();
    let start = usize::try_from((page - 1) * size).unwrap();
    let end = start + usize::try_from(size).unwrap();
    assert!(end <= bytes.len(), "page {page} is past the end");
    bytes[start..end].fill(0xa5);
    std::fs::write(path, bytes).unwrap();
    page
}

#[tokio::test]
async fn damaged_pages_are_found_at_open_unless_the_check_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hub.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        for i in 0..300 {
            let key = format!("/k/{i:04}");
            store
                .create(key.as_bytes(), Bytes::from(vec![b'v'; 2000]))
                .await
                .unwrap();
        }
    }
    let page = damage_values(&path);
    let (message, reason) = open_failure(SqliteStore::open(&path).await);
    assert_eq!(reason, OpenFailure::Corrupt);
    assert!(message.contains(&path.display().to_string()), "{message}");
    let full = match SqliteStore::open(&path).await {
        Err(e) => format!("{e}: {}", std::error::Error::source(&e).unwrap()),
        Ok(_) => unreachable!(),
    };
    assert!(
        full.contains("quick_check") && full.contains(&format!("{page}")),
        "{full}"
    );
    assert!(!full.contains('\n'), "one line: {full}");
    // Without the check it opens (the index is in the log, which is intact) and the
    // damage shows only when a value is read.
    let config = Config {
        check_pages: false,
        ..Config::new(&path)
    };
    let store = SqliteStore::open_with(config).await.unwrap();
    assert!(store.get(b"/k/0001", None).await.is_err());
}
