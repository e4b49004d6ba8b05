//! The writer thread: the only connection that writes, the sequencer of revisions, and
//! group commit.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use flotilla_store::watch::EventBus;
use flotilla_store::{Bytes, Error, EventKind, KeyValue, Result, Revision, WatchEvent};
use rusqlite::{Connection, ErrorCode, TransactionBehavior, params};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::checkpoint::Checkpoints;
use crate::index::{KeyIndex, Version};
use crate::read::read_index;
use crate::schema::{State, revision, sql, sql_error};
use crate::{Config, Progress};

/// One write asked of the writer.
pub(crate) enum WriteOp {
    Create {
        key: Bytes,
        value: Bytes,
    },
    Update {
        key: Bytes,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: Bytes,
        expected: Option<Revision>,
    },
}

impl WriteOp {
    pub(crate) fn key(&self) -> &Bytes {
        match self {
            WriteOp::Create { key, .. }
            | WriteOp::Update { key, .. }
            | WriteOp::Delete { key, .. } => key,
        }
    }

    pub(crate) fn value(&self) -> Option<&Bytes> {
        match self {
            WriteOp::Create { value, .. } | WriteOp::Update { value, .. } => Some(value),
            WriteOp::Delete { .. } => None,
        }
    }
}

/// What the writer's queue carries.
pub(crate) enum Command {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<Result<WatchEvent>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<Result<()>>,
    },
    Shutdown,
}

/// A write whose precondition failed (answered on its own) or an SQLite failure (which
/// fails the whole batch).
enum Refusal {
    Precondition(Error),
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for Refusal {
    fn from(e: rusqlite::Error) -> Self {
        Refusal::Sql(e)
    }
}

pub(crate) struct Writer {
    conn: Connection,
    queue: Receiver<Command>,
    progress: Arc<Progress>,
    bus: EventBus,
    max_batch: usize,
    compaction_step: u64,
    /// Every key's versions; readers share it.
    index: Arc<RwLock<KeyIndex>>,
    /// When to checkpoint, and the checkpoint thread.
    checkpoints: Checkpoints,
    /// The newest committed revision (the writer's own copy of the head).
    head: u64,
    /// Superseded rows up to this revision have been deleted …
    compaction_done: u64,
    /// … and must be, up to this one.
    compaction_target: u64,
    /// How long a batch may wait for more writers, as a share of `last_commit`.
    linger: f64,
    /// How long the last write batch took.
    last_commit: Duration,
    /// Writers in flight at the last few commits.
    concurrency: [u64; 8],
}

/// What the writer makes visible to readers and watchers after each commit.
pub(crate) struct Outputs {
    pub progress: Arc<Progress>,
    pub bus: EventBus,
    pub index: Arc<RwLock<KeyIndex>>,
}

/// The commands taken from the queue for one round of the writer.
#[derive(Default)]
struct Batch {
    writes: Vec<(WriteOp, oneshot::Sender<Result<WatchEvent>>)>,
    compactions: Vec<(Revision, oneshot::Sender<Result<()>>)>,
    shutdown: bool,
}

impl Batch {
    fn add(&mut self, command: Command) {
        match command {
            Command::Write { op, reply } => self.writes.push((op, reply)),
            Command::Compact { revision, reply } => self.compactions.push((revision, reply)),
            Command::Shutdown => self.shutdown = true,
        }
    }

    /// Whether the batch takes more commands.
    fn open(&self, max: usize) -> bool {
        !self.shutdown && self.writes.len() < max
    }
}

impl Writer {
    pub(crate) fn new(
        conn: Connection,
        queue: Receiver<Command>,
        checkpoints: Checkpoints,
        outputs: Outputs,
        config: &Config,
        state: &State,
    ) -> Self {
        let Outputs {
            progress,
            bus,
            index,
        } = outputs;
        Writer {
            conn,
            queue,
            progress,
            bus,
            max_batch: config.max_batch.max(1),
            compaction_step: config.compaction_step.max(1),
            index,
            checkpoints,
            head: state.head.get(),
            compaction_done: state.compaction_done.get(),
            compaction_target: state.compacted.get(),
            linger: config.linger,
            last_commit: Duration::ZERO,
            concurrency: [1; 8],
        }
    }

    /// Serves the queue until shutdown or until every handle is gone.
    pub(crate) fn run(mut self) {
        loop {
            let first = if self.compaction_done < self.compaction_target {
                match self.queue.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Empty) => {
                        self.compaction_step();
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => return,
                }
            } else {
                match self.queue.recv() {
                    Ok(command) => command,
                    Err(_) => return,
                }
            };
            let mut batch = Batch::default();
            batch.add(first);
            while batch.open(self.max_batch) {
                match self.queue.try_recv() {
                    Ok(command) => batch.add(command),
                    Err(_) => break,
                }
            }
            self.linger(&mut batch);
            let Batch {
                writes,
                compactions,
                shutdown,
            } = batch;
            if !writes.is_empty() {
                self.commit(writes);
                // Alone means nobody queues behind an inline checkpoint. (An empty queue
                // would not tell: right after a batch is answered, its writers are all
                // between two writes.)
                let alone = self.concurrency.iter().all(|&writers| writers <= 1);
                self.checkpoints.after_commit(&self.conn, alone);
            }
            for (revision, reply) in compactions {
                let _ = reply.send(self.start_compaction(revision));
            }
            if shutdown {
                return;
            }
            // Between batches, one bounded step: compaction always progresses, and never
            // holds writers up for more than one step.
            if self.compaction_done < self.compaction_target {
                self.compaction_step();
            }
        }
    }

    /// Waits a little for more writes when fewer are queued than writers were recently
    /// active: with many concurrent writers, one transaction then carries all of them
    /// instead of alternating half-size groups each paying an fsync.
    fn linger(&mut self, batch: &mut Batch) {
        let expected = self.concurrency.iter().copied().max().unwrap_or(1);
        if self.linger <= 0.0 || batch.writes.is_empty() || batch.writes.len() as u64 >= expected {
            return;
        }
        let wait = self
            .last_commit
            .mul_f64(self.linger)
            .min(Duration::from_millis(2));
        let deadline = Instant::now() + wait;
        while batch.open(self.max_batch) && (batch.writes.len() as u64) < expected {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.queue.recv_timeout(left) {
                Ok(command) => batch.add(command),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    batch.shutdown = true;
                    break;
                }
            }
        }
    }

    /// Applies a batch of writes in one transaction and one fsync, then publishes and answers.
    fn commit(&mut self, writes: Vec<(WriteOp, oneshot::Sender<Result<WatchEvent>>)>) {
        let started = Instant::now();
        let mut outcomes: Vec<Result<WatchEvent>> = Vec::with_capacity(writes.len());
        let mut next = self.head;
        let index = self.index.clone();
        let committed = (|| -> rusqlite::Result<()> {
            let index = read_index(&index);
            let mut view = BatchView {
                index: &index,
                pending: HashMap::new(),
            };
            self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            for (op, _) in &writes {
                match apply(&self.conn, &mut view, op, Revision::new(next + 1)) {
                    Ok(event) => {
                        next += 1;
                        outcomes.push(Ok(event));
                    }
                    Err(Refusal::Precondition(e)) => outcomes.push(Err(e)),
                    Err(Refusal::Sql(e)) => return Err(e),
                }
            }
            // Writers that arrived during this batch count as active ones.
            self.record_concurrency();
            self.conn.prepare_cached("COMMIT")?.execute([])?;
            Ok(())
        })();
        if committed.is_err()
            && !self.conn.is_autocommit()
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            warn!(error = %e, "cannot roll back a failed write batch");
        }
        self.last_commit = started.elapsed();
        // Before answering: a writer that writes again at once must not count twice.
        self.progress
            .in_flight
            .fetch_sub(writes.len() as u64, Ordering::Relaxed);
        match committed {
            Ok(()) => {
                self.progress.transactions.fetch_add(1, Ordering::Relaxed);
                self.progress
                    .writes
                    .fetch_add(next - self.head, Ordering::Relaxed);
                // The index first, then the head: a read at the new head finds every key.
                {
                    let mut index = write_index(&self.index);
                    for event in outcomes.iter().flatten() {
                        index.push(
                            event.kv.key.clone(),
                            Version {
                                revision: event.kv.mod_revision,
                                create_revision: event.kv.create_revision,
                                deleted: event.kind == EventKind::Delete,
                            },
                        );
                    }
                }
                self.head = next;
                self.progress.head.store(next, Ordering::Release);

                let events: Vec<WatchEvent> = outcomes
                    .iter()
                    .filter_map(|outcome| outcome.as_ref().ok().cloned())
                    .collect();
                self.bus.publish(events);
                for ((_, reply), outcome) in writes.into_iter().zip(outcomes) {
                    let _ = reply.send(outcome);
                }
            }
            Err(e) => {
                // Nothing of the batch was applied; the head stays where it was.
                warn!(error = %e, writes = writes.len(), "a write batch failed and was rolled back");
                let full = e.sqlite_error_code() == Some(ErrorCode::DiskFull);
                let message = e.to_string();
                for (_, reply) in writes {
                    let _ = reply.send(Err(batch_error(full, &message)));
                }
            }
        }
    }

    /// Makes reads below `target` fail at once; the rows go in later, bounded steps.
    fn start_compaction(&mut self, target: Revision) -> Result<()> {
        if target.get() > self.head {
            return Err(Error::FutureRevision {
                requested: target,
                current: Revision::new(self.head),
            });
        }
        if target.get() <= self.compaction_target {
            return Ok(());
        }
        self.conn
            .execute(
                "UPDATE meta SET value = ?1 WHERE name = 'compact_revision'",
                [sql(target)],
            )
            .map_err(|e| sql_error("cannot record the compaction", e))?;
        self.compaction_target = target.get();
        self.progress
            .compacted
            .store(target.get(), Ordering::Release);
        debug!(revision = %target, "compaction started");
        Ok(())
    }

    /// Records how many writes are in flight now.
    fn record_concurrency(&mut self) {
        let now = self.progress.in_flight.load(Ordering::Relaxed).max(1);
        self.concurrency.rotate_left(1);
        if let Some(last) = self.concurrency.last_mut() {
            *last = now;
        }
    }

    /// Deletes the rows superseded within the next window of revisions, in one transaction,
    /// then forgets them in the index.
    fn compaction_step(&mut self) {
        let from = self.compaction_done + 1;
        let to = self
            .compaction_target
            .min(self.compaction_done.saturating_add(self.compaction_step));
        let (from_sql, to_sql) = (sql(Revision::new(from)), sql(Revision::new(to)));
        let step = (|| -> rusqlite::Result<Vec<(i64, Vec<u8>)>> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // The rows superseded by a change in the window, and the window's tombstones.
            let removed = tx
                .prepare(
                    "SELECT revision, key FROM log WHERE revision IN (SELECT prev_revision
                         FROM log WHERE revision BETWEEN ?1 AND ?2 AND prev_revision > 0)
                     UNION
                     SELECT revision, key FROM log WHERE deleted = 1 AND revision BETWEEN ?1 AND ?2",
                )?
                .query_map(params![from_sql, to_sql], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(i64, Vec<u8>)>>>()?;
            {
                let mut log = tx.prepare("DELETE FROM log WHERE revision = ?1")?;
                let mut data = tx.prepare("DELETE FROM data WHERE revision = ?1")?;
                for (revision, _) in &removed {
                    log.execute([revision])?;
                    data.execute([revision])?;
                }
            }
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE name = 'compact_done'",
                [to_sql],
            )?;
            tx.commit()?;
            Ok(removed)
        })();
        match step {
            Ok(removed) => {
                let mut index = write_index(&self.index);
                for (rev, key) in &removed {
                    index.remove(key, revision(*rev));
                }
                drop(index);
                debug!(from, to, removed = removed.len(), "compaction step");
                self.compaction_done = to;
            }
            Err(e) => {
                // Retried at the next step; reads below the target are refused meanwhile.
                warn!(error = %e, from, to, "a compaction step failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The index for writing (see [`read_index`] on poisoning).
fn write_index(index: &RwLock<KeyIndex>) -> std::sync::RwLockWriteGuard<'_, KeyIndex> {
    index.write().unwrap_or_else(PoisonError::into_inner)
}

/// The error each write of a failed batch gets.
fn batch_error(full: bool, message: &str) -> Error {
    let source = std::io::Error::other(message.to_owned());
    if full {
        Error::NoSpace {
            source: Box::new(source),
        }
    } else {
        Error::backend("the write could not be committed", source)
    }
}

/// The writer's view of the keys during a batch: the index as committed, overlaid with the
/// batch's own changes so far.
struct BatchView<'a> {
    index: &'a KeyIndex,
    pending: HashMap<Bytes, Version>,
}

impl BatchView<'_> {
    fn latest(&self, key: &Bytes) -> Option<Version> {
        self.pending
            .get(key)
            .copied()
            .or_else(|| self.index.latest(key))
    }
}

/// Checks one write's precondition and appends its rows at `rev`.
fn apply(
    tx: &Connection,
    view: &mut BatchView<'_>,
    op: &WriteOp,
    rev: Revision,
) -> Result<WatchEvent, Refusal> {
    let key = op.key();
    let latest = view.latest(key);
    let prev_revision = latest.map_or(0, |l| sql(l.revision));
    let live = latest.filter(|l| !l.deleted);
    let not_found = || Refusal::Precondition(Error::NotFound { key: key.clone() });
    // The value the change replaces: the watch event's prev_kv, a conflict's current value.
    let current = |version: Version| -> Result<KeyValue, Refusal> {
        let value: Vec<u8> = tx
            .prepare_cached("SELECT value FROM data WHERE revision = ?1")?
            .query_row([sql(version.revision)], |r| r.get(0))?;
        Ok(KeyValue {
            key: key.clone(),
            value: value.into(),
            create_revision: version.create_revision,
            mod_revision: version.revision,
        })
    };
    let check = |version: Version, expected: Option<Revision>| -> Result<(), Refusal> {
        match expected {
            Some(expected) if expected != version.revision => {
                Err(Refusal::Precondition(Error::Conflict {
                    expected,
                    current: Box::new(current(version)?),
                }))
            }
            _ => Ok(()),
        }
    };
    let (kind, value, create_revision) = match op {
        WriteOp::Create { value, .. } => {
            if live.is_some() {
                return Err(Refusal::Precondition(Error::AlreadyExists {
                    key: key.clone(),
                }));
            }
            (EventKind::Put, value.clone(), rev)
        }
        WriteOp::Update {
            value, expected, ..
        } => {
            let version = live.ok_or_else(not_found)?;
            check(version, Some(*expected))?;
            (EventKind::Put, value.clone(), version.create_revision)
        }
        WriteOp::Delete { expected, .. } => {
            let version = live.ok_or_else(not_found)?;
            check(version, *expected)?;
            (EventKind::Delete, Bytes::new(), version.create_revision)
        }
    };
    let prev_kv = live.map(current).transpose()?;
    let deleted = kind == EventKind::Delete;
    tx.prepare_cached(
        "INSERT INTO log (revision, key, create_revision, prev_revision, deleted)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        sql(rev),
        key.as_ref(),
        sql(create_revision),
        prev_revision,
        deleted
    ])?;
    if !deleted {
        tx.prepare_cached("INSERT INTO data (revision, value) VALUES (?1, ?2)")?
            .execute(params![sql(rev), value.as_ref()])?;
    }
    view.pending.insert(
        key.clone(),
        Version {
            revision: rev,
            create_revision,
            deleted,
        },
    );
    Ok(WatchEvent {
        kind,
        kv: KeyValue {
            key: key.clone(),
            value,
            create_revision,
            mod_revision: rev,
        },
        prev_kv,
    })
}
