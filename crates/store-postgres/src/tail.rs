//! The tail: one task per process that follows the log and publishes every committed
//! batch, of every process, on the process's [`EventBus`].
//!
//! ```text
//!  LISTEN flotilla_store ─┐
//!  this process's writer ─┼─► wake ─► SELECT rows after `published` (in revision order)
//!  every poll interval  ──┘          ─► EventBus::publish ─► published := last revision
//!  this process's writer, a batch right after `published` ─► EventBus::publish (no read)
//! ```
//!
//! Revisions commit in order (the sequencer), so the rows a read sees are always every
//! revision up to some head: reading "after `published`" never skips one that commits
//! later. Notifications only make the tail prompt; a lost one (a dropped listening
//! connection, a restart of the server) is made up by the poll, and by a read right after
//! reconnecting. While the database is unreachable the tail retries; the watches simply
//! wait, and resume from where they were once it is back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flotilla_store::watch::EventBus;
use flotilla_store::{Error, Revision, WatchEvent};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, warn};

use crate::conn::{Conn, connect};
use crate::read;
use crate::url::Target;

/// How many rows the tail reads at once.
const PAGE: usize = 1024;

/// What the tail shares with the store.
pub struct Tail {
    /// Every revision up to this one has been published.
    pub published: AtomicU64,
    /// The process's own writer pokes this after each commit.
    pub committed: Arc<Notify>,
    /// The broadcast of committed batches.
    pub bus: EventBus,
    /// Held while a batch is published, by the tail or by this process's writer, so that
    /// `published` and the bus move together.
    pub publishing: Mutex<()>,
}

impl Tail {
    /// A tail that has published every revision up to `head`.
    pub fn new(head: Revision, watch_buffer: usize) -> Self {
        Tail {
            published: AtomicU64::new(head.get()),
            committed: Arc::new(Notify::new()),
            bus: EventBus::new(watch_buffer),
            publishing: Mutex::new(()),
        }
    }

    /// The newest published revision.
    pub fn head(&self) -> Revision {
        Revision::new(self.published.load(Ordering::Acquire))
    }

    /// Publishes a batch this process's writer has just committed (consecutive revisions,
    /// with their previous values), if it directly follows what is published: the watches
    /// then get the writer's own changes without the tail reading them back. Otherwise
    /// (another process's rows come first and are not read yet) nothing is published and
    /// the tail reads the batch with the rows before it. Whether it was published.
    pub fn publish_own(&self, batch: Vec<WatchEvent>) -> bool {
        let _publishing = self
            .publishing
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return true;
        };
        if first.revision() != self.head().next() {
            return false;
        }
        self.published
            .store(last.revision().get(), Ordering::Release);
        self.bus.publish(batch);
        true
    }
}

/// Follows the log from `tail.published` until the store is dropped.
pub async fn run(target: Target, tail: Arc<Tail>, poll: Duration, connect_timeout: Duration) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let (notify_tx, mut notify_rx) = mpsc::unbounded_channel();
        let mut conn = match connect(&target, connect_timeout, Some(notify_tx)).await {
            Ok(client) => Conn::new(client, &target.server),
            Err(e) => {
                debug!(error = %e, "the watch feed cannot reach the database; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        if let Err(e) = conn
            .client
            .batch_execute(&format!("LISTEN {}", crate::schema::CHANNEL))
            .await
        {
            debug!(error = %e, "LISTEN failed; retrying");
            tokio::time::sleep(backoff).await;
            continue;
        }
        backoff = Duration::from_millis(100);
        loop {
            if let Err(e) = catch_up(&mut conn, &tail).await {
                if matches!(e, Error::Unavailable { .. }) || conn.is_closed() {
                    debug!(error = %e, "the watch feed lost the database; reconnecting");
                    break;
                }
                warn!(error = %e, "the watch feed cannot read the log");
            }
            tokio::select! {
                woken = notify_rx.recv() => {
                    if woken.is_none() {
                        break;
                    }
                    while notify_rx.try_recv().is_ok() {}
                }
                () = tail.committed.notified() => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
    }
}

/// Publishes every committed row after `published`: each run of consecutive revisions
/// as one batch, so that a row a compaction deleted before the feed read it is a hole in
/// front of a batch, which the watchers behind it fill from the history (and so end with
/// `Compacted`), never a change skipped silently inside a batch.
async fn catch_up(conn: &mut Conn, tail: &Tail) -> Result<(), Error> {
    loop {
        let after = tail.head();
        let events = read::events(
            conn,
            b"",
            None,
            after,
            Revision::new(u64::MAX),
            PAGE,
            read::Compaction::Ignore,
        )
        .await?;
        let full = events.len() >= PAGE;
        let mut run: Vec<WatchEvent> = Vec::new();
        for event in events {
            if let Some(last) = run.last()
                && event.revision() != last.revision().next()
            {
                publish(tail, std::mem::take(&mut run));
            }
            run.push(event);
        }
        publish(tail, run);
        if !full {
            return Ok(());
        }
    }
}

/// Publishes one run of consecutive revisions, after recording it as published; what the
/// writer published since the run was read is left out.
fn publish(tail: &Tail, mut run: Vec<WatchEvent>) {
    let _publishing = tail
        .publishing
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let head = tail.head();
    let seen = run.iter().take_while(|e| e.revision() <= head).count();
    run.drain(..seen);
    if let Some(last) = run.last() {
        if run[0].revision() != tail.head().next() {
            warn!(
                after = %tail.head(),
                next = %run[0].revision(),
                "the watch feed found revisions compacted away before it read them"
            );
        }
        tail.published
            .store(last.revision().get(), Ordering::Release);
        tail.bus.publish(run);
    }
}
