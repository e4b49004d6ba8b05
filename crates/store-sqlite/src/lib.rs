//! Flotilla's embedded store: an append-only revision log in one SQLite file.
//!
//! ```text
//!  create/update/delete ──► queue ──► writer thread (owns the only write connection)
//!                                      │ drain the queue: one BEGIN IMMEDIATE … COMMIT,
//!                                      │ one fsync for every writer waiting (group commit);
//!                                      │ check each precondition, give the next revision
//!                                      ▼
//!                  log + data (revision = row id) ─► key index ─► head ─► EventBus
//!  get/list/count/catch-up ◄── pool of read-only connections (WAL: never block the writer)
//! ```
//!
//! Every write appends one row to `log` (kine-style) with the key, its create revision and
//! the revision of the row it supersedes, and its value to `data`: both in revision order,
//! so writes append whatever their keys. The order by key is an in-memory index (as in
//! etcd), rebuilt from `log` at open. Reads at revision `R` take, per key, the newest
//! version at or below `R`, so a paginated list at one revision is a consistent snapshot and
//! past revisions stay readable until they are compacted. Revisions are allocated by the one writer thread, only for writes whose
//! precondition holds, and become visible (head, then the watch broadcast) only after
//! their transaction is durable: a watcher never sees a gap or a later commit before an
//! earlier one. Compaction deletes superseded rows in bounded steps between write batches.
//!
//! The file is opened in WAL mode with `synchronous=FULL`; an acknowledged write has been
//! fsynced. While the store is open it holds an `flock` on `<file>.lock`, so a second
//! process cannot open it.

mod checkpoint;
mod index;
mod read;
mod schema;

pub use schema::lock_path;
mod write;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;

use async_trait::async_trait;
use flotilla_store::watch::{self, EventBus, History};
use flotilla_store::{
    Bytes, Error, KeyValue, ListOptions, ListPage, Result, Revision, Store, WatchEvent, WatchStream,
};
use tokio::sync::oneshot;

use crate::index::KeyIndex;
use crate::read::Readers;
use crate::write::{Command, WriteOp};

/// How a [`SqliteStore`] is opened.
#[derive(Clone, Debug)]
pub struct Config {
    /// The database file; its directory must exist.
    pub path: PathBuf,
    /// The largest value accepted, in bytes.
    pub max_value_size: usize,
    /// The most writes committed in one transaction.
    pub max_batch: usize,
    /// How many idle read connections are kept.
    pub read_connections: usize,
    /// How many revisions one compaction step covers.
    pub compaction_step: u64,
    /// The longest a write batch waits for more of the writers that are known to be
    /// active, as a share of the previous commit's duration (0 disables the wait). A lone
    /// writer never waits.
    pub linger: f64,
    /// How many committed batches the watch broadcast holds for slow watchers.
    pub watch_buffer: usize,
    /// An upper bound on the database size in pages of 4 KiB (unbounded if `None`).
    pub max_page_count: Option<u64>,
    /// Whether an existing file is checked for damaged pages at open (SQLite's
    /// `PRAGMA quick_check`: reads every page once, about a second per GiB). A damaged
    /// file is refused as [`flotilla_store::OpenFailure::Corrupt`] instead of failing
    /// later, on the reads and writes that reach the damage.
    pub check_pages: bool,
}

impl Config {
    /// The defaults for a database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Config {
            path: path.into(),
            max_value_size: 16 << 20,
            max_batch: 1024,
            read_connections: 8,
            compaction_step: 1000,
            linger: 0.5,
            watch_buffer: 1024,
            max_page_count: None,
            check_pages: true,
        }
    }
}

/// The revisions the writer publishes to readers.
#[derive(Debug, Default)]
struct Progress {
    /// Every revision up to this one is committed and readable.
    head: AtomicU64,
    /// Reads below this revision are refused.
    compacted: AtomicU64,
    /// Write transactions committed since open.
    transactions: AtomicU64,
    /// Writes committed since open.
    writes: AtomicU64,
    /// Writes submitted and not yet answered: the writer's measure of concurrency.
    in_flight: AtomicU64,
}

/// Counters of an open store, for metrics and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Write transactions committed since the store was opened.
    pub transactions: u64,
    /// Writes committed since the store was opened (their mean per transaction is the
    /// group-commit batch size).
    pub writes: u64,
    /// Keys in the index: live ones and deleted ones not yet compacted away.
    pub keys: u64,
}

impl Progress {
    fn head(&self) -> Revision {
        Revision::new(self.head.load(Ordering::Acquire))
    }

    fn compacted(&self) -> Revision {
        Revision::new(self.compacted.load(Ordering::Acquire))
    }

    /// Refuses a read at `revision` that is compacted or ahead of the head.
    fn check_readable(&self, revision: Revision) -> Result<()> {
        let compacted = self.compacted();
        if revision < compacted {
            return Err(Error::Compacted {
                requested: revision,
                compacted,
            });
        }
        let current = self.head();
        if revision > current {
            return Err(Error::FutureRevision {
                requested: revision,
                current,
            });
        }
        Ok(())
    }

    /// After a read at `revision`: a compaction that began meanwhile may have removed rows
    /// the read needed, so its result cannot be trusted.
    fn recheck_compacted(&self, revision: Revision) -> Result<()> {
        let compacted = self.compacted();
        if revision < compacted {
            return Err(Error::Compacted {
                requested: revision,
                compacted,
            });
        }
        Ok(())
    }
}

/// The state shared by the handles of one open store.
struct Inner {
    config: Config,
    progress: Arc<Progress>,
    bus: EventBus,
    commands: std::sync::mpsc::Sender<Command>,
    readers: Readers,
    index: Arc<RwLock<KeyIndex>>,
    writer: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// Stops when the writer (holding its side) is gone; joined after it.
    checkpointer: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// Holds the exclusive `flock` on the database file while the store is open.
    _lock: File,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(writer) = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = writer.join();
        }
        if let Some(checkpointer) = self
            .checkpointer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = checkpointer.join();
        }
    }
}

/// A [`Store`] in one SQLite file. Cloning gives another handle to the same open store.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.config.path)
            .field("head", &self.inner.progress.head())
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the store at `path` with the default [`Config`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(Config::new(path.as_ref())).await
    }

    /// Opens (creating if missing) the store described by `config`.
    ///
    /// Fails with [`Error::Open`], naming the file, if it is corrupt, not a Flotilla store,
    /// from a newer schema, or held by another process.
    pub async fn open_with(config: Config) -> Result<Self> {
        tokio::task::spawn_blocking(move || Self::open_blocking(config))
            .await
            .map_err(|e| Error::backend("the open task failed", e))?
    }

    fn open_blocking(config: Config) -> Result<Self> {
        let lock = schema::lock(&config.path)?;
        let (mut conn, mut state) = schema::open_writer(&config)?;
        let index = Arc::new(RwLock::new(std::mem::take(&mut state.index)));
        let progress = Arc::new(Progress::default());
        progress.head.store(state.head.get(), Ordering::Release);
        progress
            .compacted
            .store(state.compacted.get(), Ordering::Release);
        let bus = EventBus::new(config.watch_buffer);
        let (commands, queue) = std::sync::mpsc::channel();
        let (checkpoints, checkpointer) = checkpoint::install(&mut conn, &config.path)?;
        let outputs = write::Outputs {
            progress: progress.clone(),
            bus: bus.clone(),
            index: index.clone(),
        };
        let writer = write::Writer::new(conn, queue, checkpoints, outputs, &config, &state);
        let writer = std::thread::Builder::new()
            .name("flotilla-sqlite-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::backend("cannot start the writer thread", e))?;
        let readers = Readers::new(config.path.clone(), config.read_connections);
        // Fail now, not on the first read, if a read connection cannot be opened.
        readers.with(|_| Ok(()))?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                config,
                progress,
                bus,
                commands,
                readers,
                index,
                writer: std::sync::Mutex::new(Some(writer)),
                checkpointer: std::sync::Mutex::new(Some(checkpointer)),
                _lock: lock,
            }),
        })
    }

    /// Counters since the store was opened.
    pub fn stats(&self) -> Stats {
        Stats {
            transactions: self.inner.progress.transactions.load(Ordering::Relaxed),
            writes: self.inner.progress.writes.load(Ordering::Relaxed),
            keys: read::read_index(&self.inner.index).len() as u64,
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.config.path
    }

    async fn write(&self, op: WriteOp) -> Result<WatchEvent> {
        check_key(op.key())?;
        if let Some(value) = op.value()
            && value.len() > self.inner.config.max_value_size
        {
            return Err(Error::InvalidArgument(format!(
                "the value is {} bytes, over the limit of {} bytes",
                value.len(),
                self.inner.config.max_value_size
            )));
        }
        let (reply, answer) = oneshot::channel();
        let in_flight = &self.inner.progress.in_flight;
        in_flight.fetch_add(1, Ordering::Relaxed);
        if self
            .inner
            .commands
            .send(Command::Write { op, reply })
            .is_err()
        {
            in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(Error::Closed);
        }
        answer.await.map_err(|_| Error::Closed)?
    }

    /// The key's `mod_revision` at the head, from the index alone: no value is read, no
    /// reader is waited for.
    fn indexed_revision(&self, key: &[u8]) -> Result<Option<Revision>> {
        check_key(key)?;
        let at = self.inner.progress.head();
        let version = read::read_index(&self.inner.index).live_at(key, at);
        Ok(version.map(|v| v.revision))
    }
}

/// The empty key is not a key (as a prefix, it covers every key).
fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("the key is empty".into()));
    }
    Ok(())
}

impl Inner {
    /// The revision to read at: the given one if readable, else the head.
    fn read_revision(&self, revision: Option<Revision>) -> Result<Revision> {
        match revision {
            Some(revision) => {
                self.progress.check_readable(revision)?;
                Ok(revision)
            }
            None => Ok(self.progress.head()),
        }
    }
}

#[async_trait]
impl History for Inner {
    async fn head(&self) -> Result<Revision> {
        Ok(self.progress.head())
    }

    async fn events(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
        limit: usize,
    ) -> Result<Vec<WatchEvent>> {
        self.progress.recheck_compacted(after)?;
        let prefix = prefix.to_vec();
        let progress = self.progress.clone();
        let events = self
            .readers
            .run(move |conn| read::events(conn, &prefix, after, up_to, limit))
            .await?;
        progress.recheck_compacted(after)?;
        Ok(events)
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let at = self.inner.read_revision(revision)?;
        let key = key.to_vec();
        let index = self.inner.index.clone();
        let kv = self
            .inner
            .readers
            .run(move |conn| read::get(conn, &index, &key, at))
            .await;
        // A compaction that overtook the read explains whatever it found missing.
        self.inner.progress.recheck_compacted(at)?;
        kv
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let at = self.inner.read_revision(options.revision)?;
        let prefix = prefix.to_vec();
        let index = self.inner.index.clone();
        let page = self
            .inner
            .readers
            .run(move |conn| read::list(conn, &index, &prefix, at, options.limit, options.after))
            .await;
        self.inner.progress.recheck_compacted(at)?;
        page
    }

    async fn mod_revision(&self, key: &[u8]) -> Result<Option<Revision>> {
        self.indexed_revision(key)
    }

    fn mod_revision_now(&self, key: &[u8]) -> Option<Result<Option<Revision>>> {
        Some(self.indexed_revision(key))
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let at = self.inner.progress.head();
        Ok(read::read_index(&self.inner.index).count(prefix, at))
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<Revision> {
        let key = Bytes::copy_from_slice(key);
        Ok(self.write(WriteOp::Create { key, value }).await?.revision())
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision> {
        let key = Bytes::copy_from_slice(key);
        let op = WriteOp::Update {
            key,
            value,
            expected,
        };
        Ok(self.write(op).await?.revision())
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let key = Bytes::copy_from_slice(key);
        let event = self.write(WriteOp::Delete { key, expected }).await?;
        let revision = event.revision();
        let prev = event.prev_kv.ok_or_else(|| Error::Backend {
            message: "a delete event without the deleted value".into(),
            source: None,
        })?;
        Ok((revision, prev))
    }

    async fn watch(&self, prefix: &[u8], since: Revision) -> Result<WatchStream> {
        watch::watch(self.inner.clone(), &self.inner.bus, prefix, since).await
    }

    async fn changes(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
    ) -> Result<WatchStream> {
        watch::range(self.inner.clone(), prefix, after, up_to).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.inner.progress.head())
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.inner.progress.compacted())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Compact { revision, reply })
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }
}
