//! The writer thread: the only connection that writes, the sequencer of revisions, and
//! group commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use flotilla_store::watch::EventBus;
use flotilla_store::{Bytes, Error, EventKind, KeyValue, Result, Revision, WatchEvent};
use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;
use tracing::{debug, warn};

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

/// The latest row of a key, as the writer checks preconditions against it.
struct Latest {
    revision: i64,
    create_revision: i64,
    deleted: bool,
    value: Vec<u8>,
}

impl Latest {
    fn key_value(&self, key: &Bytes) -> KeyValue {
        KeyValue {
            key: key.clone(),
            value: Bytes::copy_from_slice(&self.value),
            create_revision: revision(self.create_revision),
            mod_revision: revision(self.revision),
        }
    }
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
    compaction_step: i64,
    /// The newest committed revision (the writer's own copy of the head).
    head: i64,
    /// Superseded rows up to this revision have been deleted …
    compaction_done: i64,
    /// … and must be, up to this one.
    compaction_target: i64,
    /// How long a batch may wait for more writers, as a share of `last_commit`.
    linger: f64,
    /// How long the last write batch took.
    last_commit: Duration,
    /// Writers in flight at the last few commits.
    concurrency: [u64; 8],
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
        progress: Arc<Progress>,
        bus: EventBus,
        config: &Config,
        state: State,
    ) -> Self {
        Writer {
            conn,
            queue,
            progress,
            bus,
            max_batch: config.max_batch.max(1),
            compaction_step: i64::try_from(config.compaction_step.max(1)).unwrap_or(i64::MAX),
            head: sql(state.head),
            compaction_done: sql(state.compaction_done),
            compaction_target: sql(state.compacted),
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
        let committed = (|| -> rusqlite::Result<()> {
            self.conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            for (op, _) in &writes {
                match apply(&self.conn, op, next + 1) {
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
                let committed = u64::try_from(next - self.head).unwrap_or(0);
                self.progress.transactions.fetch_add(1, Ordering::Relaxed);
                self.progress.writes.fetch_add(committed, Ordering::Relaxed);
                self.head = next;
                self.progress
                    .head
                    .store(u64::try_from(next).unwrap_or(0), Ordering::Release);
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
        let target_sql = sql(target);
        if target_sql > self.head {
            return Err(Error::FutureRevision {
                requested: target,
                current: revision(self.head),
            });
        }
        if target_sql <= self.compaction_target {
            return Ok(());
        }
        self.conn
            .execute(
                "UPDATE meta SET value = ?1 WHERE name = 'compact_revision'",
                [target_sql],
            )
            .map_err(|e| sql_error("cannot record the compaction", e))?;
        self.compaction_target = target_sql;
        self.progress
            .compacted
            .store(target.get(), Ordering::Release);
        debug!(revision = target_sql, "compaction started");
        Ok(())
    }

    /// Deletes the rows superseded within the next window of revisions, in one transaction.
    fn record_concurrency(&mut self) {
        let now = self.progress.in_flight.load(Ordering::Relaxed).max(1);
        self.concurrency.rotate_left(1);
        if let Some(last) = self.concurrency.last_mut() {
            *last = now;
        }
    }

    fn compaction_step(&mut self) {
        let from = self.compaction_done + 1;
        let to = self
            .compaction_target
            .min(self.compaction_done.saturating_add(self.compaction_step));
        let step = (|| -> rusqlite::Result<usize> {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            // Rows superseded by a change in the window, then the window's tombstones.
            let superseded = tx.execute(
                "DELETE FROM log WHERE revision IN (SELECT prev_revision FROM log
                 WHERE revision BETWEEN ?1 AND ?2 AND prev_revision > 0)",
                params![from, to],
            )?;
            let tombstones = tx.execute(
                "DELETE FROM log WHERE deleted = 1 AND revision BETWEEN ?1 AND ?2",
                params![from, to],
            )?;
            tx.execute(
                "UPDATE meta SET value = ?1 WHERE name = 'compact_done'",
                [to],
            )?;
            tx.commit()?;
            Ok(superseded + tombstones)
        })();
        match step {
            Ok(removed) => {
                debug!(from, to, removed, "compaction step");
                self.compaction_done = to;
            }
            Err(e) => {
                // Retried at the next step; reads below the target are refused meanwhile.
                warn!(error = %e, from, to, "a compaction step failed");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
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

/// Checks one write's precondition and appends its row at `rev`.
fn apply(tx: &Connection, op: &WriteOp, rev: i64) -> Result<WatchEvent, Refusal> {
    let key = op.key();
    let latest = tx
        .prepare_cached(
            "SELECT revision, create_revision, deleted, value FROM log
             WHERE key = ?1 ORDER BY revision DESC LIMIT 1",
        )?
        .query_row([key.as_ref()], |r| {
            Ok(Latest {
                revision: r.get(0)?,
                create_revision: r.get(1)?,
                deleted: r.get(2)?,
                value: r.get(3)?,
            })
        })
        .optional()?;
    let prev_revision = latest.as_ref().map_or(0, |l| l.revision);
    let live = latest.filter(|l| !l.deleted);
    let refuse = |e| Err(Refusal::Precondition(e));
    let not_found = || Refusal::Precondition(Error::NotFound { key: key.clone() });
    let (kind, value, create_revision) = match op {
        WriteOp::Create { value, .. } => {
            if live.is_some() {
                return refuse(Error::AlreadyExists { key: key.clone() });
            }
            (EventKind::Put, value.clone(), rev)
        }
        WriteOp::Update {
            value, expected, ..
        } => {
            let current = live.as_ref().ok_or_else(not_found)?;
            check_expected(key, current, Some(*expected))?;
            (EventKind::Put, value.clone(), current.create_revision)
        }
        WriteOp::Delete { expected, .. } => {
            let current = live.as_ref().ok_or_else(not_found)?;
            check_expected(key, current, *expected)?;
            (EventKind::Delete, Bytes::new(), current.create_revision)
        }
    };
    tx.prepare_cached(
        "INSERT INTO log (revision, key, create_revision, prev_revision, deleted, value)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        rev,
        key.as_ref(),
        create_revision,
        prev_revision,
        kind == EventKind::Delete,
        value.as_ref()
    ])?;
    Ok(WatchEvent {
        kind,
        kv: KeyValue {
            key: key.clone(),
            value,
            create_revision: revision(create_revision),
            mod_revision: revision(rev),
        },
        prev_kv: live.map(|l| l.key_value(key)),
    })
}

fn check_expected(
    key: &Bytes,
    current: &Latest,
    expected: Option<Revision>,
) -> Result<(), Refusal> {
    match expected {
        Some(expected) if sql(expected) != current.revision => {
            Err(Refusal::Precondition(Error::Conflict {
                expected,
                current: Box::new(current.key_value(key)),
            }))
        }
        _ => Ok(()),
    }
}
