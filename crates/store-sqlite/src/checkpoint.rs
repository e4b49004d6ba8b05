//! Checkpoints: copying the WAL into the database without holding writers up.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its threshold, so
//! under load the writers queued behind that commit wait for the copy and an extra fsync.
//! A checkpoint thread avoids that, but when nobody is waiting it only costs: its fsyncs
//! compete with the commits', and it cannot copy the frames committed while it runs, so the
//! WAL never starts over while writes continue. The writer's connection therefore has the
//! automatic checkpoint switched off and decides after each commit, once the WAL holds
//! [`WAL_PAGES`] (SQLite's default threshold):
//!
//! * one writer at a time lately: checkpoint inline, as SQLite would (nobody queues
//!   behind it, and the lone writer's commits keep the disk to themselves);
//! * several writers: ask the checkpoint thread for a `PASSIVE` checkpoint, which blocks
//!   neither the writer nor the readers;
//! * the WAL past twice the threshold (the thread could not let it start over): checkpoint
//!   inline, which then copies only the frames the thread has not.
//!
//! Once a checkpoint has copied every frame, the next commit starts the WAL over from its
//! beginning, so the WAL file stays small and is overwritten in place rather than grown.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

use flotilla_store::{Error, Result};
use rusqlite::Connection;
use rusqlite::hooks::Wal;
use tracing::{debug, warn};

use crate::schema;

/// How many pages in the WAL call for a checkpoint.
pub(crate) const WAL_PAGES: i32 = 1000;

/// The writer's side of checkpointing.
pub(crate) struct Checkpoints {
    /// The WAL's size in pages after the last commit (set by the WAL hook).
    pages: Arc<AtomicI32>,
    /// Requests to the checkpoint thread, which stops when this is dropped.
    background: SyncSender<()>,
}

/// Switches the writer's connection to [`Checkpoints`] and starts the checkpoint thread.
pub(crate) fn install(conn: &mut Connection, path: &Path) -> Result<(Checkpoints, JoinHandle<()>)> {
    let setup = |e| Error::backend("cannot set up checkpoints", e);
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0")
        .map_err(setup)?;
    let pages = Arc::new(AtomicI32::new(0));
    let size = pages.clone();
    conn.wal_hook(Some(move |_: &mut Wal, wal_pages: i32| {
        size.store(wal_pages, Ordering::Relaxed);
        Ok(())
    }))
    .map_err(setup)?;
    let checkpointer = schema::open_reader(path)?;
    // A checkpoint writes the database file: this connection may not be query-only.
    checkpointer
        .execute_batch("PRAGMA query_only = 0")
        .map_err(setup)?;
    let (background, requests) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("flotilla-sqlite-checkpoint".into())
        .spawn(move || serve(&checkpointer, &requests))
        .map_err(|e| Error::backend("cannot start the checkpoint thread", e))?;
    Ok((Checkpoints { pages, background }, thread))
}

impl Checkpoints {
    /// Called by the writer after each commit; `alone` tells whether one writer at a time
    /// has been writing lately.
    pub(crate) fn after_commit(&self, conn: &Connection, alone: bool) {
        let pages = self.pages.load(Ordering::Relaxed);
        if pages < WAL_PAGES {
            return;
        }
        if pages < 2 * WAL_PAGES && !alone {
            match self.background.try_send(()) {
                // A request already pending covers this one too.
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
            return;
        }
        if checkpoint(conn) {
            self.pages.store(0, Ordering::Relaxed);
        }
    }
}

/// The checkpoint thread: one `PASSIVE` checkpoint per request.
fn serve(conn: &Connection, requests: &Receiver<()>) {
    while let Ok(()) = requests.recv() {
        checkpoint(conn);
    }
}

/// Runs a `PASSIVE` checkpoint; true if it copied every frame.
fn checkpoint(conn: &Connection) -> bool {
    let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((busy, wal, copied)) => {
            debug!(busy, wal, copied, "checkpoint");
            busy == 0 && wal == copied
        }
        Err(e) => {
            warn!(error = %e, "a checkpoint failed; the next one retries");
            false
        }
    }
}
