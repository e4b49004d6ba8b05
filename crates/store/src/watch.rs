//! Serving [`Store::watch`](crate::Store::watch) the same way on every backend.
//!
//! ```text
//!  writer ── commit ──► head advances ──► EventBus::publish(batch)
//!                                              │ broadcast (bounded)
//!  watcher: subscribe ─► read head ─► catch up (since, head] from History ─► follow the bus
//!           on lag or on a gap in the bus: catch up from History again, never skip
//! ```
//!
//! A backend commits a batch of changes, makes them readable through its [`History`], and
//! only then publishes them on its [`EventBus`], in revision order. A watcher subscribes
//! before it reads the head revision, so every change after that head reaches it through
//! the bus; everything up to the head it reads from the history. Because it tracks the
//! last revision it has accounted for, duplicates are dropped and holes are filled from the
//! history, so the stream is strictly ordered and gap-free.
//!
//! [`range`] reads a bounded stretch of one prefix's history and ends, for
//! [`Store::changes`](crate::Store::changes): a catch-up that reads only the keys asked for,
//! with no bus to follow.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::broadcast::{self, error::RecvError};

use crate::{Error, Result, Revision, WatchEvent, WatchStream};

/// How many events a catch-up reads from the history at once.
const CATCH_UP_PAGE: usize = 1024;

/// The changes a backend can read back from its own history.
#[async_trait]
pub trait History: Send + Sync + 'static {
    /// The newest revision whose changes are readable with [`History::events`]; every change
    /// after it is yet to be published on the backend's [`EventBus`].
    async fn head(&self) -> Result<Revision>;

    /// Changes to keys starting with `prefix` with revisions in `(after, up_to]`, in revision
    /// order, at most `limit` of them; [`Error::Compacted`] if `after` is older than the
    /// compacted revision.
    async fn events(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
        limit: usize,
    ) -> Result<Vec<WatchEvent>>;
}

/// The in-process broadcast of committed changes, one message per committed batch.
#[derive(Clone, Debug)]
pub struct EventBus {
    tx: broadcast::Sender<Arc<[WatchEvent]>>,
}

impl EventBus {
    /// A bus that holds up to `capacity` batches for slow watchers; a watcher further behind
    /// catches up from the history.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        EventBus { tx }
    }

    /// Publishes a committed batch. Batches must be published in revision order, each
    /// after its changes became readable from the history.
    pub fn publish(&self, events: Vec<WatchEvent>) {
        if !events.is_empty() {
            // No subscriber is not an error: there is nobody to tell.
            let _ = self.tx.send(events.into());
        }
    }

    /// How many watchers are subscribed.
    pub fn watchers(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// Starts a watch of `prefix` after `since`, served from `bus` and caught up from `history`.
///
/// Fails at once with [`Error::Compacted`] if `since` is older than the compacted revision.
pub async fn watch<H: History>(
    history: Arc<H>,
    bus: &EventBus,
    prefix: &[u8],
    since: Revision,
) -> Result<WatchStream> {
    let rx = bus.tx.subscribe();
    let head = history.head().await?;
    Feed::start(history, Some(rx), prefix, since, head).await
}

/// The changes under `prefix` in `(after, up_to]`, read from `history` a page at a time,
/// and then the end of the stream.
///
/// Fails at once with [`Error::Compacted`] if `after` is older than the compacted revision.
pub async fn range<H: History>(
    history: Arc<H>,
    prefix: &[u8],
    after: Revision,
    up_to: Revision,
) -> Result<WatchStream> {
    Feed::start(history, None, prefix, after, up_to).await
}

/// One watcher's position.
struct Feed<H> {
    history: Arc<H>,
    /// The bus it follows once caught up; `None` for a [`range`], which ends there.
    rx: Option<broadcast::Receiver<Arc<[WatchEvent]>>>,
    prefix: Bytes,
    /// Every change up to this revision has been delivered (or did not match the prefix).
    accounted: Revision,
    /// Catch up from the history until `accounted` reaches this.
    target: Revision,
    buf: VecDeque<WatchEvent>,
    done: bool,
}

impl<H: History> Feed<H> {
    /// The stream of a feed of `prefix` that has accounted for every change up to `after`
    /// and catches up to `target` first (then follows `rx`, if given, or ends). The first
    /// page is read now, so that a compacted `after` fails the call itself.
    async fn start(
        history: Arc<H>,
        rx: Option<broadcast::Receiver<Arc<[WatchEvent]>>>,
        prefix: &[u8],
        after: Revision,
        target: Revision,
    ) -> Result<WatchStream> {
        let mut feed = Feed {
            history,
            rx,
            prefix: Bytes::copy_from_slice(prefix),
            accounted: after,
            target,
            buf: VecDeque::new(),
            done: false,
        };
        if feed.accounted < feed.target {
            feed.catch_up().await?;
        }
        Ok(Box::pin(futures_util::stream::unfold(
            feed,
            |mut feed| async move { feed.next().await.map(|item| (item, feed)) },
        )))
    }

    async fn next(&mut self) -> Option<Result<WatchEvent>> {
        loop {
            if let Some(event) = self.buf.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let step = if self.accounted < self.target {
                self.catch_up().await
            } else if self.rx.is_some() {
                self.follow().await
            } else {
                return None;
            };
            if let Err(e) = step {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    /// Reads one page of `(accounted, target]` from the history.
    async fn catch_up(&mut self) -> Result<()> {
        let page = self
            .history
            .events(&self.prefix, self.accounted, self.target, CATCH_UP_PAGE)
            .await?;
        self.accounted = match page.last() {
            Some(last) if page.len() >= CATCH_UP_PAGE => last.revision(),
            _ => self.target,
        };
        self.buf.extend(page);
        Ok(())
    }

    /// Takes the next batch from the bus, or schedules a catch-up when that is not possible.
    async fn follow(&mut self) -> Result<()> {
        let Some(rx) = &mut self.rx else {
            return Err(Error::Closed);
        };
        match rx.recv().await {
            Ok(batch) => {
                let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
                    return Ok(());
                };
                let last = last.revision();
                if last <= self.accounted {
                    return Ok(());
                }
                if first.revision() > self.accounted.next() {
                    // A hole before this batch: fill it, and the batch, from the history.
                    self.target = last;
                    return Ok(());
                }
                let after = self.accounted;
                self.buf.extend(
                    batch
                        .iter()
                        .filter(|e| e.revision() > after && e.kv.key.starts_with(&self.prefix))
                        .cloned(),
                );
                self.accounted = last;
                Ok(())
            }
            Err(RecvError::Lagged(_)) => {
                self.target = self.history.head().await?;
                Ok(())
            }
            Err(RecvError::Closed) => Err(Error::Closed),
        }
    }
}
