//! The hub's revisioned key-value store: the one narrow interface every backend implements.
//!
//! ```text
//!   apiserver ──► dyn Store ──► store-sqlite (embedded default)
//!                         └──► store-memory (reference, test double)
//!                         └──► store-postgres (log table, one sequencer, LISTEN/NOTIFY)
//!                         └──► store-etcd (etcd's revisions under a key prefix)
//! ```
//!
//! The semantics are etcd's, shaped by what a Kubernetes API server needs:
//!
//! * one global, strictly increasing [`Revision`]; every successful write gets a revision
//!   above every earlier one and a failed write consumes none. A store that has its engine
//!   to itself numbers its writes consecutively (each gets the current revision + 1), so
//!   its history has no holes; a store that shares its engine's counter with writers
//!   outside it (several hubs under their own prefixes of one etcd) skips the numbers
//!   their writes took. A watch is gap-free in either case: it misses no change of the
//!   store, whatever the numbers between them;
//! * reads at the latest revision or at any revision not yet compacted;
//! * lists by key prefix, paginated, where every page is read at one [`Revision`] so a
//!   paginated list is a consistent snapshot;
//! * create (fails if the key exists), compare-and-swap update and delete conditioned on the
//!   key's `mod_revision`;
//! * watch from a revision: every change after it, strictly in revision order, with no gaps
//!   and with the previous value, or [`Error::Compacted`] if that history is gone;
//! * compaction, which forgets superseded values older than a revision.
//!
//! Keys and values are bytes; nothing here assumes UTF-8.

mod error;
pub mod watch;

use std::fmt;

use async_trait::async_trait;
pub use bytes::Bytes;
pub use error::{Error, OpenFailure};
use futures_util::stream::BoxStream;

/// Result type of every store operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A position in the store's single global history.
///
/// Revision 0 is the empty store before any write; the first write gets revision 1 (the
/// first write of a store whose engine is shared gets the engine's next one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(u64);

impl Revision {
    /// The revision of an empty store, before any write.
    pub const ZERO: Revision = Revision(0);

    /// A revision from its number.
    pub const fn new(n: u64) -> Self {
        Revision(n)
    }

    /// The revision's number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision that follows this one.
    pub const fn next(self) -> Self {
        Revision(self.0 + 1)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for Revision {
    fn from(n: u64) -> Self {
        Revision(n)
    }
}

/// A key with its value and the revisions that created and last modified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Bytes,
    /// The value (empty in the `kv` of a [`EventKind::Delete`] event).
    pub value: Bytes,
    /// The revision at which the key was (last) created.
    pub create_revision: Revision,
    /// The revision of the key's latest change; for a delete event, the delete's revision.
    pub mod_revision: Revision,
}

/// What a [`WatchEvent`] did to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as delivered by [`Store::watch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// Put or delete.
    pub kind: EventKind,
    /// The key after the change. For a delete: the key, an empty value, the deleted key's
    /// `create_revision`, and the delete's revision as `mod_revision`.
    pub kv: KeyValue,
    /// The key before the change; `None` when the change created it.
    pub prev_kv: Option<KeyValue>,
}

impl WatchEvent {
    /// The revision at which this change happened.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// Options of [`Store::list`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read at this revision; `None` reads at the current revision.
    pub revision: Option<Revision>,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Start strictly after this key (the `next` of the previous page).
    pub after: Option<Bytes>,
}

/// One page of a [`Store::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    /// The keys of this page, in ascending byte order.
    pub kvs: Vec<KeyValue>,
    /// The revision the page was read at; pass it to read the next page of the same snapshot.
    pub revision: Revision,
    /// Where the next page starts (its `after`), or `None` when this is the last page.
    pub next: Option<Bytes>,
}

/// An ordered stream of changes; it ends after yielding an error.
pub type WatchStream = BoxStream<'static, Result<WatchEvent>>;

/// The revisioned key-value store the hub's API server runs on.
///
/// Every backend implements this trait and passes the `flotilla-store-tests` conformance
/// suite. Errors are backend-neutral [`Error`] kinds.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The value of `key` at the latest revision, or at `revision` if given.
    ///
    /// Every operation on a single key refuses the empty key with
    /// [`Error::InvalidArgument`]; as a prefix, the empty key covers every key.
    ///
    /// Fails with [`Error::Compacted`] if `revision` was compacted away and with
    /// [`Error::FutureRevision`] if it is ahead of the current revision.
    async fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>>;

    /// The `mod_revision` of `key` at the latest revision, or `None` if it does not exist
    /// then: what [`Store::get`] reports of it, without the value. A backend that keeps an
    /// index of its keys answers from it, without reading a value (the default reads one).
    async fn mod_revision(&self, key: &[u8]) -> Result<Option<Revision>> {
        Ok(self.get(key, None).await?.map(|kv| kv.mod_revision))
    }

    /// [`Store::mod_revision`] answered at once, by a backend whose index of keys is in
    /// this process's memory; `None` from one that must read to answer (the default), whose
    /// callers await [`Store::mod_revision`] instead. What a caller on every request asks
    /// (is this object still there, unchanged?) then costs no future.
    fn mod_revision_now(&self, key: &[u8]) -> Option<Result<Option<Revision>>> {
        let _ = key;
        None
    }

    /// The keys starting with `prefix`, in ascending byte order, read at one revision.
    ///
    /// `options.after` is a lower bound (exclusive); one that sorts before `prefix` has no
    /// effect. [`ListPage::next`] is `None` whenever no key follows the page, even when the
    /// page is full.
    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage>;

    /// Every key starting with `prefix` at the latest revision, read page by page at one
    /// revision, and that revision: what a controller reads before it watches from there.
    async fn list_all(&self, prefix: &[u8]) -> Result<(Vec<KeyValue>, Revision)> {
        let mut options = ListOptions {
            limit: 1000,
            ..ListOptions::default()
        };
        let mut all = Vec::new();
        loop {
            let page = self.list(prefix, options.clone()).await?;
            all.extend(page.kvs);
            match page.next {
                Some(next) => {
                    options.revision = Some(page.revision);
                    options.after = Some(next);
                }
                None => return Ok((all, page.revision)),
            }
        }
    }

    /// How many keys start with `prefix` at the latest revision.
    async fn count(&self, prefix: &[u8]) -> Result<u64>;

    /// Creates `key`; fails with [`Error::AlreadyExists`] if it exists. Returns the new revision.
    async fn create(&self, key: &[u8], value: Bytes) -> Result<Revision>;

    /// Replaces the value of `key` if its `mod_revision` is `expected`.
    ///
    /// Fails with [`Error::NotFound`] if the key does not exist and with [`Error::Conflict`],
    /// carrying the current value, if it was modified since. Returns the new revision.
    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision>;

    /// Deletes `key`, only if its `mod_revision` is `expected` when that is given.
    ///
    /// Fails with [`Error::NotFound`] if the key does not exist (whatever `expected` is) and
    /// with [`Error::Conflict`] if it was modified since `expected`.
    ///
    /// Returns the delete's revision and the value that was deleted.
    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<(Revision, KeyValue)>;

    /// Every change to keys starting with `prefix` with a revision greater than `since`, in
    /// revision order, without gaps, each with its previous value.
    ///
    /// Fails with [`Error::Compacted`] if `since` is older than the compacted revision. A
    /// `since` ahead of the current revision is allowed: the stream waits for it. A
    /// watcher that keeps up is never ended by a later compaction; one that falls behind is caught up from the history; if that history was
    /// compacted meanwhile the stream yields [`Error::Compacted`] and ends.
    async fn watch(&self, prefix: &[u8], since: Revision) -> Result<WatchStream>;

    /// The changes to keys starting with `prefix` with revisions in `(after, up_to]`, in
    /// revision order, each with its previous value, and then the end of the stream: what
    /// [`Store::watch`] from `after` delivers up to `up_to`, for catching a watcher up to
    /// where a cache of changes takes over. `up_to` is the revision of a change that was
    /// made.
    ///
    /// Fails with [`Error::Compacted`] if `after` is older than the compacted revision.
    ///
    /// The default watches every key from `after` and ends at the first change at or past
    /// `up_to`, so it reads every change in between, whatever its key (a watch of `prefix`
    /// alone would not end while the prefix is quiet). A backend that reads its history
    /// by prefix reads only the changes asked for ([`watch::range`]).
    async fn changes(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
    ) -> Result<WatchStream> {
        use futures_util::StreamExt;
        if after >= up_to {
            return Ok(Box::pin(futures_util::stream::empty()));
        }
        let prefix = Bytes::copy_from_slice(prefix);
        let every = self.watch(b"", after).await?;
        // Ends as soon as the change at `up_to` is seen, without waiting for the next.
        Ok(Box::pin(futures_util::stream::unfold(
            Some((every, prefix)),
            move |state| async move {
                let (mut every, prefix) = state?;
                loop {
                    match every.next().await? {
                        Err(e) => return Some((Err(e), None)),
                        Ok(e) if e.revision() > up_to => return None,
                        Ok(e) => {
                            let last = e.revision() == up_to;
                            if e.kv.key.starts_with(&prefix) {
                                return Some((Ok(e), (!last).then_some((every, prefix))));
                            }
                            if last {
                                return None;
                            }
                        }
                    }
                }
            },
        )))
    }

    /// The latest revision: every write up to it is visible to reads.
    async fn current_revision(&self) -> Result<Revision>;

    /// The oldest revision still readable (0 if never compacted).
    async fn compacted_revision(&self) -> Result<Revision>;

    /// Forgets every value superseded at or before `revision`, and every key deleted at or
    /// before it.
    ///
    /// Afterwards reads at revisions older than `revision` and watches from before it fail
    /// with [`Error::Compacted`]. Compacting at or below the compacted revision does
    /// nothing; compacting ahead of the current revision fails with
    /// [`Error::FutureRevision`].
    async fn compact(&self, revision: Revision) -> Result<()>;
}

/// The end of the key range that `prefix` covers: the smallest key greater than every key
/// starting with `prefix`, or `None` when the range is unbounded (empty or all-`0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte_below_ff() {
        assert_eq!(prefix_end(b"/a/"), Some(b"/a0".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
