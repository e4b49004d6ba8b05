//! The reference implementation of Flotilla's [`Store`]: everything in memory, behind one
//! mutex.
//!
//! ```text
//!  write ──► lock ──► check precondition ──► next revision: new version + log event
//!                                         ──► EventBus::publish (still under the lock,
//!                                             so the bus sees revision order)
//!  get/list/count ──► lock ──► per key, the newest version at or below the revision read
//!  watch ──► flotilla_store::watch over the log (History) and the bus
//! ```
//!
//! Every key keeps its versions (puts and delete tombstones) in revision order, so any
//! revision that is not compacted can be read; the log keeps every change after the
//! compacted revision for watchers. It is meant to be short and obviously correct: the
//! semantics every other backend is held to, and a test double for the layers above.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use flotilla_store::watch::{self, EventBus, History};
use flotilla_store::{
    Bytes, Error, EventKind, KeyValue, ListOptions, ListPage, Result, Revision, Store, WatchEvent,
    WatchStream,
};

/// How many write batches the bus holds for a slow watcher before it catches up from the log.
const BUS_CAPACITY: usize = 1024;

/// An in-memory [`Store`]. Cloning is cheap and gives another handle to the same store.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("MemoryStore")
            .field("current", &state.current)
            .field("compacted", &state.compacted)
            .field("keys", &state.keys.len())
            .finish()
    }
}

struct Inner {
    state: Mutex<State>,
    bus: EventBus,
}

/// A key's versions in revision order: the value put at a revision, or `None` for a delete.
type Versions = Vec<(Revision, Option<KeyValue>)>;

#[derive(Default)]
struct State {
    current: Revision,
    compacted: Revision,
    keys: BTreeMap<Bytes, Versions>,
    /// Every change after `compacted`, in order: `log[i]` has revision `compacted + 1 + i`.
    log: VecDeque<WatchEvent>,
}

impl MemoryStore {
    /// An empty store at revision 0.
    pub fn new() -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                bus: EventBus::new(BUS_CAPACITY),
            }),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("the key is empty".into()));
    }
    Ok(())
}

/// The key as of `revision`, if it existed then.
fn value_at(versions: &Versions, revision: Revision) -> Option<&KeyValue> {
    let (_, kv) = versions.iter().rev().find(|(r, _)| *r <= revision)?;
    kv.as_ref()
}

impl State {
    /// The revision a read at `requested` (latest if `None`) sees, if it can be read.
    fn read_revision(&self, requested: Option<Revision>) -> Result<Revision> {
        let Some(requested) = requested else {
            return Ok(self.current);
        };
        if requested < self.compacted {
            return Err(Error::Compacted {
                requested,
                compacted: self.compacted,
            });
        }
        if requested > self.current {
            return Err(Error::FutureRevision {
                requested,
                current: self.current,
            });
        }
        Ok(requested)
    }

    fn latest(&self, key: &[u8]) -> Option<&KeyValue> {
        value_at(self.keys.get(key)?, self.current)
    }

    /// The keys starting with `prefix` and greater than `after`, ascending.
    fn keys_from<'a>(
        &'a self,
        prefix: &'a [u8],
        after: Option<&'a [u8]>,
    ) -> impl Iterator<Item = &'a Versions> + 'a {
        let start = match after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        self.keys
            .range::<[u8], _>((start, Bound::Unbounded))
            .take_while(move |(key, _)| key.starts_with(prefix))
            .map(|(_, versions)| versions)
    }

    /// Applies a put (`Some(value)`) or a delete (`None`) of `key` at the next revision.
    fn apply(&mut self, key: &[u8], value: Option<Bytes>) -> WatchEvent {
        let revision = self.current.next();
        let prev_kv = self.latest(key).cloned();
        let kind = match value {
            Some(_) => EventKind::Put,
            None => EventKind::Delete,
        };
        let kv = KeyValue {
            key: Bytes::copy_from_slice(key),
            value: value.unwrap_or_default(),
            create_revision: prev_kv
                .as_ref()
                .map_or(revision, |prev| prev.create_revision),
            mod_revision: revision,
        };
        let version = (kind == EventKind::Put).then(|| kv.clone());
        self.keys
            .entry(kv.key.clone())
            .or_default()
            .push((revision, version));
        let event = WatchEvent { kind, kv, prev_kv };
        self.log.push_back(event.clone());
        self.current = revision;
        event
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks `precondition` against the key's current value, then applies the write and
    /// publishes it, all under the lock.
    fn write(
        &self,
        key: &[u8],
        value: Option<Bytes>,
        precondition: impl FnOnce(Option<&KeyValue>) -> Result<()>,
    ) -> Result<WatchEvent> {
        check_key(key)?;
        let mut state = self.lock();
        precondition(state.latest(key))?;
        let event = state.apply(key, value);
        self.bus.publish(vec![event.clone()]);
        Ok(event)
    }
}

#[async_trait]
impl History for Inner {
    async fn head(&self) -> Result<Revision> {
        Ok(self.lock().current)
    }

    async fn events(
        &self,
        prefix: &[u8],
        after: Revision,
        up_to: Revision,
        limit: usize,
    ) -> Result<Vec<WatchEvent>> {
        let state = self.lock();
        if after < state.compacted {
            return Err(Error::Compacted {
                requested: after,
                compacted: state.compacted,
            });
        }
        let skip = usize::try_from(after.get() - state.compacted.get()).unwrap_or(usize::MAX);
        Ok(state
            .log
            .iter()
            .skip(skip)
            .take_while(|event| event.revision() <= up_to)
            .filter(|event| event.kv.key.starts_with(prefix))
            .take(limit)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let state = self.inner.lock();
        let revision = state.read_revision(revision)?;
        Ok(state
            .keys
            .get(key)
            .and_then(|versions| value_at(versions, revision))
            .cloned())
    }

    fn mod_revision_now(&self, key: &[u8]) -> Option<Result<Option<Revision>>> {
        Some(check_key(key).map(|()| self.inner.lock().latest(key).map(|kv| kv.mod_revision)))
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListPage> {
        let state = self.inner.lock();
        let revision = state.read_revision(options.revision)?;
        let mut kvs: Vec<KeyValue> = Vec::new();
        let mut next = None;
        let live = state
            .keys_from(prefix, options.after.as_deref())
            .filter_map(|versions| value_at(versions, revision));
        for kv in live {
            if options.limit != 0 && kvs.len() == options.limit {
                next = kvs.last().map(|last| last.key.clone());
                break;
            }
            kvs.push(kv.clone());
        }
        Ok(ListPage {
            kvs,
            revision,
            next,
        })
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let state = self.inner.lock();
        let count = state
            .keys_from(prefix, None)
            .filter(|versions| value_at(versions, state.current).is_some())
            .count();
        Ok(count as u64)
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<Revision> {
        let event = self
            .inner
            .write(key, Some(value), |current| match current {
                Some(_) => Err(Error::AlreadyExists {
                    key: Bytes::copy_from_slice(key),
                }),
                None => Ok(()),
            })?;
        Ok(event.revision())
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision> {
        let event = self.inner.write(key, Some(value), |current| {
            check_expected(key, current, Some(expected))
        })?;
        Ok(event.revision())
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let event = self
            .inner
            .write(key, None, |current| check_expected(key, current, expected))?;
        let deleted = event.prev_kv.expect("a deleted key existed");
        Ok((event.kv.mod_revision, deleted))
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
        Ok(self.inner.lock().current)
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.inner.lock().compacted)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let mut state = self.inner.lock();
        if revision > state.current {
            return Err(Error::FutureRevision {
                requested: revision,
                current: state.current,
            });
        }
        if revision <= state.compacted {
            return Ok(());
        }
        state.keys.retain(|_, versions| {
            // Keep the version visible at `revision` (unless it is a delete) and later ones.
            if let Some(visible) = versions.iter().rposition(|(r, _)| *r <= revision) {
                versions.drain(..visible);
                if versions[0].1.is_none() {
                    versions.remove(0);
                }
            }
            !versions.is_empty()
        });
        let dropped = usize::try_from(revision.get() - state.compacted.get())
            .expect("the log fits in memory");
        state.log.drain(..dropped);
        state.compacted = revision;
        Ok(())
    }
}

/// The precondition of an update or delete: the key exists and, if `expected` is given,
/// was last modified at `expected`.
fn check_expected(
    key: &[u8],
    current: Option<&KeyValue>,
    expected: Option<Revision>,
) -> Result<()> {
    let Some(current) = current else {
        return Err(Error::NotFound {
            key: Bytes::copy_from_slice(key),
        });
    };
    match expected {
        Some(expected) if expected != current.mod_revision => Err(Error::Conflict {
            expected,
            current: Box::new(current.clone()),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_under_the_lock_leaves_the_store_usable() {
        let store = MemoryStore::new();
        let inner = store.inner.clone();
        let panicked = std::thread::spawn(move || {
            let _held = inner.state.lock();
            panic!("a bug while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(store.inner.state.is_poisoned());
        // Recovered (ARCHITECTURE.md, "Poisoned locks"): read as it was left.
        assert_eq!(store.inner.lock().current, Revision::default());
        assert!(format!("{store:?}").contains("keys: 0"));
    }
}
