//! Flotilla's PostgreSQL store: kine's model — an append-only log table — shaped by the
//! [`Store`] trait, for several hub processes on one database.
//!
//! ```text
//!  create/update/delete ──► queue ──► writer task ──► SELECT flotilla_write(batch)
//!                                                      │ lock the meta row (sequencer)
//!                                                      │ per write: newest row of the key,
//!                                                      │ precondition, INSERT at head + 1
//!                                                      │ UPDATE head; NOTIFY; COMMIT
//!  get/list/count ◄── pool of connections (one statement each: one snapshot)
//!  watch ◄── EventBus ◄── tail task ◄── LISTEN / poll: rows after the last published
//!                    ◄── the writer: its own batch, when it follows the last published
//! ```
//!
//! Every write appends a row to `flotilla_log` with its key, create revision, the revision
//! of the row it supersedes (`prev_revision`, 0 for a create: the watch's `prev_kv` and
//! what compaction deletes) and the value (empty for a tombstone). Revision = the row's
//! primary key.
//!
//! **Ordering the watch.** Concurrent transactions commit out of order, so with a
//! sequence a reader could see revision N+1 before N commits, and a watcher that moved on
//! would skip N. Two answers exist: kine's, a sequence plus gap detection (a hole is waited
//! for, then filled with a dummy row), or a single sequencer. This store takes the
//! sequencer: `flotilla_write` locks the one meta row (`SELECT … FOR UPDATE`) before it
//! gives out revisions, and the lock is released only after the transaction's commit is
//! visible. Hence revisions are consecutive (a refused write takes none, a rolled-back
//! batch takes none), every committed set of rows is exactly `1..=head`, and a watcher
//! that reads "after my last revision" can never skip one. The price is that batches
//! commit one at a time; each batch is a whole queue of writes of one process in one
//! statement and one fsync, so the lock is held for one round of the server's work,
//! never across a round trip to the client. Compare-and-swap is checked by the same
//! statement under that lock, against the key's newest row.
//!
//! **Several processes.** Each process runs its own writer, tail and pool; every batch
//! `NOTIFY`s `flotilla_store`, every tail `LISTEN`s and also polls, and reads the rows
//! after what it published, so every process's watches see every process's writes, in
//! revision order.
//!
//! **Compaction** records the compacted revision under the same lock (reads below it
//! are refused at once), then deletes superseded rows and tombstones in steps of
//! `compaction_step` revisions, each its own transaction, recording its progress so that
//! a compaction interrupted by a crash is finished at the next open. The deletes wait
//! (a few seconds at most) for this process's watch feed to have published the revisions
//! they cover; a feed that still reads a deleted row finds a hole, published as such,
//! and the watchers behind it end with `Compacted` (410) rather than skip it.

mod conn;
mod error;
mod read;
mod schema;
mod tail;
pub mod url;
mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use flotilla_store::watch::{self, History};
use flotilla_store::{
    Bytes, Error, KeyValue, ListOptions, ListPage, OpenFailure, Result, Revision, Store,
    WatchEvent, WatchStream,
};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::conn::{Conn, Pool, connect};
pub use crate::schema::SCHEMA_VERSION;
use crate::tail::Tail;
use crate::url::Target;
use crate::write::{Done, Op, Request};

/// How a [`PostgresStore`] is opened.
#[derive(Clone, Debug)]
pub struct Config {
    /// `postgres://user:pass@host:port/db?sslmode=…` (see [`url`]).
    pub url: String,
    /// How long making a connection may take; opening fails after it.
    pub connect_timeout: Duration,
    /// How many connections serve reads at once.
    pub read_connections: usize,
    /// The most writes committed in one transaction.
    pub max_batch: usize,
    /// The most bytes of keys and values committed in one transaction.
    pub max_batch_bytes: usize,
    /// The largest value accepted, in bytes.
    pub max_value_size: usize,
    /// How many revisions one compaction step covers.
    pub compaction_step: u64,
    /// How often the watch feed looks for writes when no notification came.
    pub poll_interval: Duration,
    /// How many committed batches the watch broadcast holds for slow watchers.
    pub watch_buffer: usize,
}

impl Config {
    /// The defaults for the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            connect_timeout: Duration::from_secs(10),
            read_connections: 8,
            max_batch: 512,
            max_batch_bytes: 8 << 20,
            max_value_size: 16 << 20,
            compaction_step: 1000,
            poll_interval: Duration::from_secs(1),
            watch_buffer: 1024,
        }
    }
}

/// What the store's handle, its tasks and its watchers share.
struct Inner {
    target: Target,
    pool: Pool,
    tail: Arc<Tail>,
    /// Wakes the compactor.
    compact: Arc<Notify>,
    compaction_step: u64,
    /// The compacted revision this process last saw (saves a read when nothing changed).
    compacted_seen: AtomicU64,
}

/// A [`Store`] in a PostgreSQL database.
pub struct PostgresStore {
    inner: Arc<Inner>,
    writer: mpsc::UnboundedSender<Request>,
    max_value_size: usize,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .finish_non_exhaustive()
    }
}

/// An error and its causes, as one line (`a: b: c`), each cause once.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(next) = cause {
        let more = next.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = next.source();
    }
    text
}

/// Why opening failed, as the store's open error naming the server.
fn open_failure(location: &str, e: Error) -> Error {
    match e {
        Error::Unavailable { message, source } => {
            let why = match source {
                Some(source) => format!("{message}: {}", chain(&*source)),
                None => message,
            };
            Error::Open {
                path: location.into(),
                reason: OpenFailure::Unreachable(why),
                source: None,
            }
        }
        Error::Backend {
            message,
            source: Some(source),
        } => Error::Open {
            path: location.into(),
            reason: OpenFailure::Refused(format!("{message}: {}", chain(&*source))),
            source: None,
        },
        other => other,
    }
}

impl PostgresStore {
    /// Opens the store at `url` with the defaults.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(Config::new(url)).await
    }

    /// Connects (within `connect_timeout`), creates or checks the schema, and starts the
    /// writer, the watch feed and the compactor.
    pub async fn open_with(config: Config) -> Result<Self> {
        let target = url::parse(&config.url)?.with_connect_timeout(config.connect_timeout);
        let location = format!("postgres://{}", target.describe());
        let client = connect(&target, config.connect_timeout, None)
            .await
            .map_err(|e| open_failure(&location, e))?;
        let mut conn = Conn::new(client, &target.server);
        tokio::time::timeout(
            config.connect_timeout,
            schema::prepare(&mut conn.client, &location),
        )
        .await
        .map_err(|_| Error::Open {
            path: location.clone().into(),
            reason: OpenFailure::Unreachable(format!(
                "no answer within {:?}",
                config.connect_timeout
            )),
            source: None,
        })?
        .map_err(|e| open_failure(&location, e))?;
        let bounds = read::bounds(&mut conn)
            .await
            .map_err(|e| open_failure(&location, e))?;
        info!(store = %location, head = %bounds.head, compacted = %bounds.compacted, "store open");

        let tail = Arc::new(Tail::new(bounds.head, config.watch_buffer));
        let inner = Arc::new(Inner {
            pool: Pool::new(
                target.clone(),
                config.read_connections,
                config.connect_timeout,
            ),
            target: target.clone(),
            tail: tail.clone(),
            compact: Arc::new(Notify::new()),
            compaction_step: config.compaction_step.max(1),
            compacted_seen: AtomicU64::new(bounds.compacted.get()),
        });
        let (writer, queue) = mpsc::unbounded_channel();
        let limits = write::Limits {
            max_batch: config.max_batch.max(1),
            max_batch_bytes: config.max_batch_bytes,
            connect_timeout: config.connect_timeout,
        };
        let tasks = vec![
            tokio::spawn(write::run(target.clone(), limits, queue, tail.clone())),
            tokio::spawn(tail::run(
                target,
                tail,
                config.poll_interval,
                config.connect_timeout,
            )),
            tokio::spawn(compactor(Arc::downgrade(&inner), inner.compact.clone())),
        ];
        // Finish a compaction a crash interrupted.
        inner.compact.notify_one();
        Ok(PostgresStore {
            inner,
            writer,
            max_value_size: config.max_value_size,
            tasks,
        })
    }

    async fn submit(&self, op: Op) -> Result<Done> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(Request { op, reply })
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }

    fn check_key(key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::InvalidArgument("the key is empty".into()));
        }
        Ok(())
    }

    fn check_value(&self, value: &Bytes) -> Result<()> {
        if value.len() > self.max_value_size {
            return Err(Error::InvalidArgument(format!(
                "the value is {} bytes, over the limit of {}",
                value.len(),
                self.max_value_size
            )));
        }
        Ok(())
    }
}

/// The key range a prefix covers.
fn range(prefix: &[u8]) -> (&[u8], Option<Vec<u8>>) {
    (prefix, flotilla_store::prefix_end(prefix))
}

impl Inner {
    async fn conn(&self) -> Result<conn::Pooled<'_>> {
        let conn = self.pool.get().await;
        if matches!(conn, Err(Error::Unavailable { .. })) {
            self.pool.clear();
        }
        conn
    }
}

#[async_trait]
impl History for Inner {
    async fn head(&self) -> Result<Revision> {
        Ok(self.tail.head())
    }

    async fn events(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
        limit: usize,
    ) -> Result<Vec<WatchEvent>> {
        let (start, end) = range(prefix);
        let mut conn = self.conn().await?;
        read::events(
            &mut conn,
            start,
            end.as_deref(),
            after,
            up_to,
            limit,
            read::Compaction::Refuse,
        )
        .await
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>> {
        Self::check_key(key)?;
        let mut conn = self.inner.conn().await?;
        read::get_at(&mut conn, key, revision).await
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let (start, end) = range(prefix);
        let mut conn = self.inner.conn().await?;
        read::list(
            &mut conn,
            start,
            end.as_deref(),
            options.after.as_deref(),
            options.revision,
            options.limit,
        )
        .await
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let (start, end) = range(prefix);
        let mut conn = self.inner.conn().await?;
        read::count(&mut conn, start, end.as_deref()).await
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<Revision> {
        Self::check_key(key)?;
        self.check_value(&value)?;
        let key = Bytes::copy_from_slice(key);
        match self.submit(Op::Create { key, value }).await? {
            Done::Written(revision) | Done::Deleted(revision, _) => Ok(revision),
        }
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision> {
        Self::check_key(key)?;
        self.check_value(&value)?;
        let key = Bytes::copy_from_slice(key);
        match self
            .submit(Op::Update {
                key,
                value,
                expected,
            })
            .await?
        {
            Done::Written(revision) | Done::Deleted(revision, _) => Ok(revision),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        Self::check_key(key)?;
        let key = Bytes::copy_from_slice(key);
        match self.submit(Op::Delete { key, expected }).await? {
            Done::Deleted(revision, kv) => Ok((revision, kv)),
            Done::Written(revision) => Err(Error::Backend {
                message: format!("a delete answered as a write at {revision}"),
                source: None,
            }),
        }
    }

    async fn watch(&self, prefix: &[u8], since: Revision) -> Result<WatchStream> {
        watch::watch(self.inner.clone(), &self.inner.tail.bus, prefix, since).await
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
        let mut conn = self.inner.conn().await?;
        Ok(read::bounds(&mut conn).await?.head)
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        let mut conn = self.inner.conn().await?;
        let compacted = read::bounds(&mut conn).await?.compacted;
        self.inner
            .compacted_seen
            .fetch_max(compacted.get(), Ordering::AcqRel);
        Ok(compacted)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut conn = self.inner.conn().await?;
        let rows = conn
            .query("compact", COMPACT, &[&read::to_sql(revision)])
            .await?;
        let row = rows.first().ok_or(Error::Closed)?;
        let decode = |e| error::decode("compact", e);
        let head = read::from_sql(row.try_get(0).map_err(decode)?);
        let compacted = read::from_sql(row.try_get(1).map_err(decode)?);
        if revision > head {
            return Err(Error::FutureRevision {
                requested: revision,
                current: head,
            });
        }
        if compacted == revision {
            debug!(%revision, "compaction recorded");
            self.inner
                .compacted_seen
                .fetch_max(revision.get(), Ordering::AcqRel);
            self.inner.compact.notify_one();
        }
        Ok(())
    }
}

/// Records a compaction under the sequencer's lock: the head and the compacted revision
/// after it. Moves only forward, and never past the head.
const COMPACT: &str = "
WITH m AS (SELECT head, compacted FROM flotilla_meta WHERE id = 1 FOR UPDATE),
     u AS (UPDATE flotilla_meta SET compacted = $1
           FROM m WHERE id = 1 AND $1 <= m.head AND $1 > m.compacted
           RETURNING flotilla_meta.compacted)
SELECT m.head, coalesce((SELECT compacted FROM u), m.compacted) FROM m";

/// The compaction's progress and target.
const COMPACT_PROGRESS: &str = "SELECT compact_done, compacted FROM flotilla_meta WHERE id = 1";

/// One step: the rows superseded by a row in `($1, $2]`, and the tombstones in it.
const COMPACT_STEP: &str = "
WITH s AS (SELECT revision, prev_revision, deleted FROM flotilla_log
           WHERE revision > $1 AND revision <= $2),
     gone AS (SELECT prev_revision AS revision FROM s WHERE prev_revision <> 0
              UNION ALL SELECT revision FROM s WHERE deleted),
     d AS (DELETE FROM flotilla_log l USING gone WHERE l.revision = gone.revision RETURNING 1)
UPDATE flotilla_meta SET compact_done = greatest(compact_done, $2) WHERE id = 1";

/// Deletes what compactions left, step by step, whenever woken; ends with the store.
async fn compactor(inner: std::sync::Weak<Inner>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        if let Err(e) = compact_steps(&inner).await {
            warn!(error = %e, "compaction step failed; retried on the next compaction");
        }
    }
}

async fn compact_steps(inner: &Inner) -> Result<()> {
    loop {
        let mut conn = inner.conn().await?;
        let rows = conn
            .query("read the compaction", COMPACT_PROGRESS, &[])
            .await?;
        let row = rows.first().ok_or(Error::Closed)?;
        let decode = |e| error::decode("compaction", e);
        let done: i64 = row.try_get(0).map_err(decode)?;
        let target: i64 = row.try_get(1).map_err(decode)?;
        if done >= target {
            return Ok(());
        }
        // Let this process's watch feed publish what is about to go first (a feed
        // behind a delete leaves its watchers a hole, and them a 410).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while inner.tail.head() < read::from_sql(target) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let step = i64::try_from(inner.compaction_step).unwrap_or(i64::MAX);
        let to = done.saturating_add(step).min(target);
        conn.query("compact a step", COMPACT_STEP, &[&done, &to])
            .await?;
        debug!(from = done, to, "compaction step");
    }
}
