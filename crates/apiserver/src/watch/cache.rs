//! The watch cache: one store watch feeding every client watch, with a bounded history per
//! resource.
//!
//! ```text
//!  store.watch("/", from head) ─► feeder task ─► per resource (`/{group}/{plural}/`):
//!                                   │             decode once ─► history ring (bounded)
//!                                   │                          ─► the feed of the change's
//!                                   │                             logical cluster ─► its watches
//!                                   └─ processed revision (every change up to it is routed)
//!
//!  client watch from N: subscribe, then history (N, …] ─► live events (> last seen)
//!                       N older than the history ─► its prefix's changes up to the history,
//!                                                    read from the store's log, then the above
//!                       N more than `catch_up` revisions older ─► Expired (410): relist
//!                       fell behind the broadcast and the history ─► Expired (410): relist
//! ```
//!
//! Every change is decoded once, whatever the number of watchers. Because the feeder sees
//! every change of the store, its processed revision is a safe bookmark for any resource:
//! an idle watcher's resourceVersion still advances, so it can resume after a restart of
//! the connection without a relist.
//!
//! Consistent reads from the cache (as kube-apiserver serves them since 1.31):
//!
//! ```text
//!  get(key): the store's current revision H (an atomic read, no I/O); the resource's
//!            objects loaded? (the first read of a watched resource, or the 32nd of another,
//!            starts loading them: one list, then every routed change is applied; until
//!            then the caller reads the store)
//!              feeder has processed H ─► the object (or its absence) from memory
//!              else the store's index says the key is at the cached revision (or absent,
//!                as cached) ─► from memory too: one revision is one write
//!              else wait (briefly) for the feeder to reach H ─► from memory, or None: the
//!                caller reads the store
//! ```
//!
//! The history is bounded by time, as kube-apiserver's watch cache is: it keeps the changes of
//! the last [`Config::history_fresh`] (75 s), and at least the last [`Config::history_floor`]
//! whatever their age, within the hard caps of [`Config::history`] events and
//! [`Config::history_bytes`]. A resource rewritten by every member (heartbeat Leases, Cluster
//! statuses) then holds its last minute or so of changes, not ten thousand of them:
//!
//! ```text
//!  route(change) ─► push ─► trim: drop the oldest while over a cap, or while older than
//!                                 `history_fresh` and more than `history_floor` are kept
//!  every SWEEP   ─► trim every resource (a resource that fell quiet lets go of its past too)
//!  watch from before the history ─► catch-up from the store's log (or 410 once compacted)
//! ```
//!
//! A resource's objects are kept only once it is read by key often enough to be worth it
//! (a watched one at once, another after a few dozen reads): a hub that read a RoleBinding
//! or two at startup holds none of ten thousand. They are its objects' stored JSON
//! (shared with the watch events), not decoded values.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_store::{EventKind, ListOptions, Revision, Store, WatchEvent, WatchStream};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::broadcast::{self, error::TryRecvError};
use tracing::{Instrument, info_span, warn};

use crate::registry::keys::{cluster_part_of, namespace_part_of, resource_of};

/// Sizes of the cache.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Events kept per resource for watches that start in the past.
    pub history: usize,
    /// Bytes of stored JSON kept in a resource's history (each event counts its object,
    /// the object before it and its rendered line): the history is cut to whichever of
    /// `history` and this is smaller, so that a resource of large objects (such as
    /// placements reporting on a thousand clusters) does not hold gigabytes of them.
    pub history_bytes: usize,
    /// Changes younger than this are kept (within the caps above); older ones are dropped,
    /// except the last [`Config::history_floor`]. A watch resuming from further back is
    /// caught up from the store's log, or told to relist (410) once that is compacted.
    pub history_fresh: Duration,
    /// Changes kept per resource whatever their age (within the caps), so that a quiet
    /// resource's watchers resume from memory.
    pub history_floor: usize,
    /// Events buffered per live feed (a logical cluster's part of a resource: each watch
    /// is woken only by its own cluster's changes); a watcher further behind is caught up
    /// from the history, or ended with Expired.
    pub buffer: usize,
    /// Events buffered per namespace's live feed (the watches of one namespace): fewer,
    /// as there may be a feed for each of thousands of namespaces (every pull agent
    /// watches its own).
    pub namespace_buffer: usize,
    /// The most revisions a watch that starts before the history is caught up over from
    /// the store's log. The catch-up reads the changes of the watch's prefix
    /// ([`Store::changes`]), but even a log read by prefix passes every revision in between
    /// (and a backend without one reads every change): a Works watch of one agent resuming
    /// a minute back on a hub with 10,000 pull clusters (1,000 heartbeats a second) would
    /// pass 60,000. A watch from further back is told to relist (410 Expired), as
    /// kube-apiserver tells every watch older than its cache: an agent then lists its own
    /// namespace, a few objects.
    pub catch_up: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            history: 10_000,
            history_bytes: 32 << 20,
            history_fresh: Duration::from_secs(75),
            history_floor: 100,
            buffer: 256,
            namespace_buffer: 16,
            catch_up: 10_000,
        }
    }
}

/// How often every resource's history is trimmed to [`Config::history_fresh`], besides the
/// trim of a resource on each of its changes.
const SWEEP: Duration = Duration::from_secs(10);

/// Where the cache reads the time from, to age its histories: the system's monotonic clock,
/// or a clock a test moves by hand.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// One change of one object, shared by every watcher: its stored bytes, decoded at most
/// once (only if a watcher with selectors needs the objects).
#[derive(Debug)]
pub struct Change {
    /// The change's revision.
    pub revision: Revision,
    /// The object's store key.
    pub key: Bytes,
    /// Put or delete.
    pub kind: EventKind,
    /// The stored JSON after a put.
    pub raw_object: Option<Bytes>,
    /// The stored JSON before the change, and the revision it had.
    pub raw_previous: Option<(Bytes, Revision)>,
    object: OnceLock<Option<Value>>,
    previous: OnceLock<Option<Value>>,
    /// `{"metadata": …}` of the object and of the previous one: what label selectors (and
    /// field selectors of metadata) read, decoded without the rest.
    object_metadata: OnceLock<Option<Value>>,
    previous_metadata: OnceLock<Option<Value>>,
    /// The `{"type":…,"object":…}` line for watchers that see the change as it is, built
    /// once.
    line: OnceLock<Bytes>,
}

/// An object's metadata, the rest skipped without being built.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    metadata: Value,
}

/// `{"metadata": …}` of an object: copied from it when it is decoded already (`whole`),
/// else decoded alone from its stored bytes.
fn metadata_of(whole: &OnceLock<Option<Value>>, raw: Option<&[u8]>) -> Option<Value> {
    let metadata = match whole.get() {
        Some(object) => object.as_ref()?["metadata"].clone(),
        None => serde_json::from_slice::<Head>(raw?).ok()?.metadata,
    };
    Some(serde_json::json!({ "metadata": metadata }))
}

/// A stored object decoded, with its resourceVersion; `None` (and a warning) if it cannot be
/// ([`crate::registry::object::undecodable`], or not JSON): its events are left out.
fn decode(key: &[u8], value: &[u8], revision: Revision) -> Option<Value> {
    let decoded = match crate::registry::object::undecodable(value) {
        Some(reason) => Err(reason),
        None => serde_json::from_slice::<Value>(value).map_err(|e| e.to_string()),
    };
    match decoded {
        Ok(object) => Some(crate::registry::object::with_resource_version(
            object,
            revision.get(),
        )),
        Err(reason) => {
            tracing::warn!(key = %String::from_utf8_lossy(key), %reason,
                "a stored object cannot be decoded; its watch events are left out");
            None
        }
    }
}

impl Change {
    pub(crate) fn from_event(event: &WatchEvent) -> Change {
        Change::sharing(event, None)
    }

    /// The change `event` makes, its previous object taken from `previous` (the bytes the
    /// cache holds for it already, at the revision the event reports) rather than from the
    /// event, so that the object is held once however many places refer to it.
    fn sharing(event: &WatchEvent, previous: Option<&(Bytes, Revision)>) -> Change {
        let raw_previous = event.prev_kv.as_ref().map(|kv| match previous {
            Some((raw, revision)) if *revision == kv.mod_revision && *raw == kv.value => {
                (raw.clone(), *revision)
            }
            _ => (kv.value.clone(), kv.mod_revision),
        });
        Change {
            revision: event.revision(),
            key: event.kv.key.clone(),
            kind: event.kind,
            raw_object: (event.kind == EventKind::Put).then(|| event.kv.value.clone()),
            raw_previous,
            object: OnceLock::new(),
            previous: OnceLock::new(),
            object_metadata: OnceLock::new(),
            previous_metadata: OnceLock::new(),
            line: OnceLock::new(),
        }
    }

    /// The object after a put (with its resourceVersion).
    pub fn object(&self) -> Option<&Value> {
        self.object
            .get_or_init(|| {
                self.raw_object
                    .as_ref()
                    .and_then(|raw| decode(&self.key, raw, self.revision))
            })
            .as_ref()
    }

    /// The object before the change (with its resourceVersion), if it existed.
    pub fn previous(&self) -> Option<&Value> {
        self.previous
            .get_or_init(|| {
                self.raw_previous
                    .as_ref()
                    .and_then(|(raw, revision)| decode(&self.key, raw, *revision))
            })
            .as_ref()
    }

    /// `{"metadata": …}` of the object after a put, decoded alone (or taken from the
    /// object when that is decoded already).
    pub fn object_metadata(&self) -> Option<&Value> {
        self.object_metadata
            .get_or_init(|| metadata_of(&self.object, self.raw_object.as_deref()))
            .as_ref()
    }

    /// `{"metadata": …}` of the object before the change, if it existed.
    pub fn previous_metadata(&self) -> Option<&Value> {
        self.previous_metadata
            .get_or_init(|| {
                let raw = self.raw_previous.as_ref().map(|(raw, _)| &raw[..]);
                metadata_of(&self.previous, raw)
            })
            .as_ref()
    }

    /// Whether either whole object has been decoded.
    #[cfg(test)]
    pub(crate) fn decoded_whole(&self) -> bool {
        self.object.get().is_some() || self.previous.get().is_some()
    }

    /// About how many bytes the change holds once its line is rendered.
    fn weight(&self) -> usize {
        let object = self.raw_object.as_ref().map_or(0, Bytes::len);
        let previous = self.raw_previous.as_ref().map_or(0, |(raw, _)| raw.len());
        2 * object + previous + self.key.len() + std::mem::size_of::<Change>()
    }

    /// The watch event line for a watcher that selects everything, serialized once.
    pub fn line(&self, render: impl FnOnce(&Change) -> Bytes) -> Bytes {
        self.line.get_or_init(|| render(self)).clone()
    }
}

/// What a subscription yields.
#[derive(Debug)]
pub enum Next {
    /// A change after the subscription's position.
    Change(Arc<Change>),
    /// The watcher cannot be served any more (fell too far behind, or the history it needs
    /// was compacted): the client must relist. Carries the reason.
    Expired(String),
}

/// The live feeds of one resource, made by the first watch of each (a feed's buffer is
/// allocated whole). A change goes to the feed of its namespace, to that of its logical
/// cluster and to the feed of watches wider than one cluster, so that a watch is woken
/// only by changes of its own share: a thousand agents each watching the Works of its own
/// namespace are not all woken by every Work written.
#[derive(Default)]
struct Feeds {
    /// For watches of a prefix wider than one logical cluster.
    all: Option<broadcast::Sender<Arc<Change>>>,
    /// Per `/{group}/{plural}/{cluster}/`, and per `/{group}/{plural}/{cluster}/{namespace}/`
    /// (one map: the two never spell the same bytes).
    parts: HashMap<Box<[u8]>, broadcast::Sender<Arc<Change>>>,
}

impl Feeds {
    /// A receiver of every change under `prefix` (and possibly more) from now on; a
    /// namespace's feed buffers `namespace_buffer` changes, the others `buffer`.
    fn subscribe(
        &mut self,
        prefix: &[u8],
        buffer: usize,
        namespace_buffer: usize,
    ) -> broadcast::Receiver<Arc<Change>> {
        let part = namespace_part_of(prefix)
            .map(|part| (part, namespace_buffer))
            .or_else(|| cluster_part_of(prefix).map(|part| (part, buffer)));
        let sender = match part {
            Some((part, buffer)) => self
                .parts
                .entry(part.into())
                .or_insert_with(|| broadcast::channel(buffer.max(1)).0),
            None => self
                .all
                .get_or_insert_with(|| broadcast::channel(buffer.max(1)).0),
        };
        sender.subscribe()
    }

    /// Sends `change` to the feeds it concerns; a feed nobody receives any more is
    /// dropped.
    fn send(&mut self, change: &Arc<Change>) {
        if let Some(all) = &self.all {
            // No receivers is fine: nobody is watching right now.
            let _ = all.send(change.clone());
        }
        for part in [cluster_part_of(&change.key), namespace_part_of(&change.key)]
            .into_iter()
            .flatten()
        {
            if let Some(sender) = self.parts.get(part)
                && sender.send(change.clone()).is_err()
            {
                self.parts.remove(part);
            }
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.all.is_none() && self.parts.is_empty()
    }
}

/// The cache of every resource, fed by one store watch.
pub struct WatchCache {
    store: Arc<dyn Store>,
    config: Config,
    clock: Arc<dyn Clock>,
    inner: Arc<Shared>,
    started: tokio::sync::OnceCell<()>,
}

struct Shared {
    resources: Mutex<HashMap<Vec<u8>, Arc<Resource>>>,
    /// Every change up to this revision has been routed to the resources' caches.
    processed: AtomicU64,
    /// Store watches open for the cache (the feeder, and catch-ups from the log).
    store_watches: AtomicUsize,
    /// Client watches being served.
    watchers: AtomicUsize,
    /// Notified whenever `processed` moves.
    advanced: tokio::sync::Notify,
    /// Whether the feeder follows the store: false before it starts, from a failure of its
    /// store watch until it is restarted (changes in between reach no cache), and once the
    /// store is closed. Reads are answered from memory only while it does.
    following: std::sync::atomic::AtomicBool,
}

struct Resource {
    state: Mutex<ResourceState>,
}

struct ResourceState {
    history: VecDeque<Arc<Change>>,
    /// When each change of the history was routed (in step with `history`).
    routed_at: VecDeque<Instant>,
    /// The [`Change::weight`]s of the history, summed.
    history_bytes: usize,
    /// The history holds every change of the resource after this revision.
    complete_after: Revision,
    /// The live feeds; dropped when the cache is reset, which ends every subscription.
    feeds: Feeds,
    /// Whether a client ever watched the resource: until then it keeps no history (its
    /// cache exists for reads only) and a watch from the past catches up from the store.
    watched: bool,
    /// Reset: no watch may start on it any more.
    closed: bool,
    /// Reads by key that found its objects not loaded (see [`WatchCache::read_cold`]).
    cold_reads: u32,
    /// The resource's objects, for reads.
    objects: Objects,
}

/// Reads by key after which an unwatched resource's objects are loaded into memory.
const LOAD_AFTER_READS: u32 = 32;

/// The current objects of one resource, by store key: their stored JSON and revision.
enum Objects {
    /// Nobody has read the resource by key yet (or loading it failed).
    Absent,
    /// Being listed from the store; the changes routed meanwhile are applied once it is.
    Loading(Vec<Arc<Change>>),
    /// Every change up to the feeder's processed revision is applied.
    Ready {
        by_key: HashMap<Bytes, (Bytes, Revision)>,
        /// The revision the objects were listed at (changes up to it are in them).
        listed_at: Revision,
    },
}

impl ResourceState {
    /// Adds a routed change to the history and trims it.
    fn record(&mut self, change: Arc<Change>, now: Instant, config: &Config) {
        self.history_bytes += change.weight();
        self.history.push_back(change);
        self.routed_at.push_back(now);
        self.trim(now, config);
    }

    /// Drops the oldest changes while the history is over a cap, or while the oldest is
    /// older than [`Config::history_fresh`] and more than [`Config::history_floor`] are kept;
    /// the history then starts after the last one dropped.
    fn trim(&mut self, now: Instant, config: &Config) {
        while let (Some(oldest), Some(at)) = (self.history.front(), self.routed_at.front()) {
            let len = self.history.len();
            let over = len > config.history || self.history_bytes > config.history_bytes;
            let stale = len > config.history_floor
                && now.saturating_duration_since(*at) > config.history_fresh;
            if !over && !stale {
                break;
            }
            self.history_bytes -= oldest.weight();
            self.complete_after = oldest.revision;
            self.history.pop_front();
            self.routed_at.pop_front();
        }
    }

    /// The bytes the cache holds for `key` at present, if its objects are loaded.
    fn held(&self, key: &[u8]) -> Option<&(Bytes, Revision)> {
        match &self.objects {
            Objects::Ready { by_key, .. } => by_key.get(key),
            _ => None,
        }
    }
}

impl Objects {
    /// Applies one routed change (in revision order).
    fn apply(&mut self, change: &Arc<Change>) {
        match self {
            Objects::Absent => {}
            Objects::Loading(pending) => pending.push(change.clone()),
            Objects::Ready { by_key, listed_at } => {
                if change.revision <= *listed_at {
                    return;
                }
                match &change.raw_object {
                    Some(value) if change.kind == EventKind::Put => {
                        by_key.insert(change.key.clone(), (value.clone(), change.revision));
                    }
                    _ => {
                        by_key.remove(&change.key);
                    }
                }
            }
        }
    }
}

impl WatchCache {
    /// A cache over `store`; its feeder starts with the first watch.
    pub fn new(store: Arc<dyn Store>, config: Config) -> Self {
        WatchCache::with_clock(store, config, Arc::new(SystemClock))
    }

    /// A cache over `store` whose histories age by `clock`.
    pub fn with_clock(store: Arc<dyn Store>, config: Config, clock: Arc<dyn Clock>) -> Self {
        WatchCache {
            store,
            config,
            clock,
            inner: Arc::new(Shared {
                resources: Mutex::new(HashMap::new()),
                processed: AtomicU64::new(0),
                store_watches: AtomicUsize::new(0),
                watchers: AtomicUsize::new(0),
                advanced: tokio::sync::Notify::new(),
                following: std::sync::atomic::AtomicBool::new(false),
            }),
            started: tokio::sync::OnceCell::new(),
        }
    }

    /// How many store watches are open for the cache (one feeder, plus catch-ups of watches
    /// that started before the history).
    pub fn store_watches(&self) -> usize {
        self.inner.store_watches.load(Ordering::Relaxed)
    }

    /// How many client watches are being served.
    pub fn watchers(&self) -> usize {
        self.inner.watchers.load(Ordering::Relaxed)
    }

    /// Every change up to this revision has reached the caches.
    pub fn processed(&self) -> Revision {
        Revision::new(self.inner.processed.load(Ordering::Acquire))
    }

    /// The object under `key` (its stored JSON and revision, or `None` if there is none) as
    /// a consistent read finds it, when the cache can tell: the key's resource is loaded and
    /// either every change up to the store's current revision has reached it, or the store's
    /// index says the key is still at the revision the cache holds. `None` when it cannot
    /// (then read the store); such reads start loading the resource's objects (see
    /// [`WatchCache::read_cold`]).
    pub async fn get(&self, key: &[u8]) -> Option<Option<(Bytes, Revision)>> {
        self.start().await.ok()?;
        if !self.inner.following.load(Ordering::Acquire) {
            return None;
        }
        let prefix = resource_of(key)?;
        // The revision first: whatever the cache holds once it has processed this revision
        // is at least as new as the store's answer would be.
        let head = self.store.current_revision().await.ok()?;
        let resource = self
            .inner
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(prefix)
            .cloned();
        let Some(resource) = resource else {
            self.read_cold(prefix);
            return None;
        };
        // Checked before the object is read, so that the object is at least that new.
        let caught_up = self.processed() >= head;
        // Read under the lock, acted on without it (loading takes the lock again).
        let cached = match &resource
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .objects
        {
            Objects::Ready { by_key, .. } => Some(by_key.get(key).cloned()),
            Objects::Loading(_) | Objects::Absent => None,
        };
        let Some(cached) = cached else {
            self.read_cold(prefix);
            return None;
        };
        if caught_up {
            return Some(cached);
        }
        // The feeder is behind the store, but if the key is still at the revision the cache
        // holds (or still absent), the store holds what the cache does: one revision is one
        // write. The store answers that from its index, without reading a value.
        let latest = self.store.mod_revision(key).await.ok()?;
        if latest == cached.as_ref().map(|(_, revision)| *revision) {
            return Some(cached);
        }
        // The key changed lately: its change is about to be routed.
        if !self.caught_up(head).await {
            return None;
        }
        match &resource
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .objects
        {
            Objects::Ready { by_key, .. } => Some(by_key.get(key).cloned()),
            _ => None,
        }
    }

    /// The stored JSON `key` was written with at `revision`, while the resource's history
    /// still holds that change: one revision is one write, so it is what the store holds
    /// at that revision. Serves the read of a read-modify-write (an update or a patch of an
    /// object written moments before, such as a status write after an apply) from memory,
    /// without loading the resource's objects.
    pub fn written_at(&self, key: &[u8], revision: Revision) -> Option<Bytes> {
        let prefix = resource_of(key)?;
        let resource = self
            .inner
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(prefix)
            .cloned()?;
        let state = resource
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let at = state
            .history
            .binary_search_by_key(&revision, |change| change.revision)
            .ok()?;
        let change = &state.history[at];
        if change.key != key || change.kind != EventKind::Put {
            return None;
        }
        change.raw_object.clone()
    }

    /// Whether the feeder has processed `revision`, waiting a little for it: a write that
    /// just returned is routed within moments, sooner than the store answers a read.
    async fn caught_up(&self, revision: Revision) -> bool {
        const WAIT: std::time::Duration = std::time::Duration::from_millis(50);
        if self.processed() >= revision {
            return true;
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let advanced = self.inner.advanced.notified();
            let mut advanced = std::pin::pin!(advanced);
            // Registered before the check, so that no advance is missed between the two.
            advanced.as_mut().enable();
            if self.processed() >= revision {
                return true;
            }
            if tokio::time::timeout_at(deadline, advanced).await.is_err() {
                return self.processed() >= revision;
            }
        }
    }

    /// Counts a read by key that the cache could not answer because the resource's objects
    /// are not loaded, and starts loading them once the resource is worth holding: at once
    /// for a watched resource (something follows it, so it is read again), else after
    /// [`LOAD_AFTER_READS`] reads. A resource read now and then (such as the few objects
    /// the hub checks at startup) is read from the store and costs no memory.
    fn read_cold(&self, prefix: &[u8]) {
        let resource = {
            let mut resources = self
                .inner
                .resources
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !self.inner.following.load(Ordering::Acquire) {
                return;
            }
            self.resource_in(&mut resources, prefix)
        };
        let load = {
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !matches!(state.objects, Objects::Absent) {
                return;
            }
            state.cold_reads = state.cold_reads.saturating_add(1);
            state.watched || state.cold_reads >= LOAD_AFTER_READS
        };
        if load {
            self.load(prefix);
        }
    }

    /// Starts loading the objects of the resource `prefix` names, unless that has begun.
    fn load(&self, prefix: &[u8]) {
        let resource = {
            let mut resources = self
                .inner
                .resources
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Not while the feeder is being restarted: the list could miss changes it skips.
            if !self.inner.following.load(Ordering::Acquire) {
                return;
            }
            self.resource_in(&mut resources, prefix)
        };
        {
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !matches!(state.objects, Objects::Absent) {
                return;
            }
            // Every change routed from now on is kept until the list is in.
            state.objects = Objects::Loading(Vec::new());
        }
        let store = self.store.clone();
        let prefix = prefix.to_vec();
        let task = async move {
            // Listed at the store's current revision, which the feeder has not passed: the
            // changes routed since loading began cover everything after it.
            let listed = store.list(&prefix, ListOptions::default()).await;
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Objects::Loading(pending) = std::mem::replace(&mut state.objects, Objects::Absent)
            else {
                return;
            };
            match listed {
                Ok(page) => {
                    let by_key = page
                        .kvs
                        .into_iter()
                        .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
                        .collect();
                    let mut objects = Objects::Ready {
                        by_key,
                        listed_at: page.revision,
                    };
                    for change in &pending {
                        objects.apply(change);
                    }
                    state.objects = objects;
                }
                Err(e) => {
                    warn!(error = %e, "cannot load a resource's objects into the watch cache")
                }
            }
        };
        tokio::spawn(task.instrument(info_span!("watch_cache_load")));
    }

    async fn start(&self) -> flotilla_store::Result<()> {
        self.started
            .get_or_try_init(|| async {
                let head = self.store.current_revision().await?;
                let stream = self.store.watch(b"/", head).await?;
                self.inner.processed.store(head.get(), Ordering::Release);
                self.inner.following.store(true, Ordering::Release);
                self.inner.store_watches.fetch_add(1, Ordering::Relaxed);
                let feeder = Feeder {
                    store: self.store.clone(),
                    shared: self.inner.clone(),
                    config: self.config,
                    clock: self.clock.clone(),
                };
                tokio::spawn(feeder.run(stream).instrument(info_span!("watch_cache")));
                Ok::<_, flotilla_store::Error>(())
            })
            .await
            .map(drop)
    }

    fn resource(&self, prefix: &[u8]) -> Arc<Resource> {
        let mut resources = self
            .inner
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.resource_in(&mut resources, prefix)
    }

    /// The cache of the resource `prefix` names in `resources` (the locked map), created if
    /// missing.
    fn resource_in(
        &self,
        resources: &mut HashMap<Vec<u8>, Arc<Resource>>,
        prefix: &[u8],
    ) -> Arc<Resource> {
        resources
            .entry(prefix.to_vec())
            .or_insert_with(|| {
                // Under the map lock the feeder has routed exactly the changes up to
                // `processed`: every later change of this resource reaches its history.
                Arc::new(Resource {
                    state: Mutex::new(ResourceState {
                        history: VecDeque::new(),
                        routed_at: VecDeque::new(),
                        history_bytes: 0,
                        complete_after: Revision::new(self.inner.processed.load(Ordering::Acquire)),
                        feeds: Feeds::default(),
                        watched: false,
                        closed: false,
                        cold_reads: 0,
                        objects: Objects::Absent,
                    }),
                })
            })
            .clone()
    }

    /// Every change to keys under `prefix` (inside one resource) after `since`, in revision
    /// order, each once.
    pub async fn watch(
        &self,
        prefix: &[u8],
        since: Revision,
    ) -> flotilla_store::Result<Subscription> {
        self.start().await?;
        let resource_prefix = resource_of(prefix)
            .ok_or_else(|| {
                flotilla_store::Error::InvalidArgument(format!(
                    "{:?} names no resource",
                    String::from_utf8_lossy(prefix)
                ))
            })?
            .to_vec();
        let resource = self.resource(&resource_prefix);
        let (rx, backlog, complete_after) = {
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if state.closed {
                return Err(flotilla_store::Error::Compacted {
                    requested: since,
                    compacted: since,
                });
            }
            // Too far back to catch up from the log (see `Config::catch_up`): answered as
            // a compacted revision is, "too old; the oldest available is …" (410).
            let oldest = state
                .complete_after
                .get()
                .saturating_sub(self.config.catch_up);
            if since < state.complete_after && since.get() < oldest {
                return Err(flotilla_store::Error::Compacted {
                    requested: since,
                    compacted: Revision::new(oldest),
                });
            }
            state.watched = true;
            let rx =
                state
                    .feeds
                    .subscribe(prefix, self.config.buffer, self.config.namespace_buffer);
            let backlog: VecDeque<Arc<Change>> = state
                .history
                .iter()
                .filter(|c| c.revision > since && c.key.starts_with(prefix))
                .cloned()
                .collect();
            (rx, backlog, state.complete_after)
        };
        // A start older than the history: catch up from the store's log first, over the
        // changes of this prefix up to `complete_after` (a backend that reads its log by
        // prefix reads only those: an agent resuming its namespace's Works watch reads its
        // own few changes, not the whole fleet's heartbeats and Works in between).
        let catch_up = if since < complete_after {
            let stream = self.store.changes(prefix, since, complete_after).await?;
            self.inner.store_watches.fetch_add(1, Ordering::Relaxed);
            Some(CatchUp {
                stream,
                until: complete_after,
                shared: self.inner.clone(),
            })
        } else {
            None
        };
        self.inner.watchers.fetch_add(1, Ordering::Relaxed);
        Ok(Subscription {
            prefix: prefix.to_vec(),
            resource,
            rx,
            catch_up,
            backlog,
            lagged: false,
            last: since,
            shared: self.inner.clone(),
        })
    }
}

/// The single store watch that fills the caches.
struct Feeder {
    store: Arc<dyn Store>,
    shared: Arc<Shared>,
    config: Config,
    clock: Arc<dyn Clock>,
}

impl Feeder {
    async fn run(self, mut stream: WatchStream) {
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                _ = sweep.tick() => {
                    trim_every(&self.shared, &self.config, self.clock.now());
                    continue;
                }
            };
            match next {
                Some(Ok(event)) => self.route(&event),
                Some(Err(e)) => {
                    // Fell behind a compaction: every cache loses its continuity.
                    warn!(error = %e, "the watch cache's store watch failed; restarting it");
                    self.reset();
                    stream = loop {
                        match self.restart().await {
                            Ok(stream) => break stream,
                            Err(e) => {
                                warn!(error = %e, "cannot restart the watch cache's store watch");
                                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            }
                        }
                    };
                }
                None => {
                    self.shared.following.store(false, Ordering::Release);
                    self.shared.store_watches.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }

    async fn restart(&self) -> flotilla_store::Result<WatchStream> {
        let head = self.store.current_revision().await?;
        let stream = self.store.watch(b"/", head).await?;
        self.shared.processed.store(head.get(), Ordering::Release);
        self.shared.following.store(true, Ordering::Release);
        self.shared.advanced.notify_waiters();
        Ok(stream)
    }

    /// Drops every cache: their watchers end with Expired and relist; reads go to the store
    /// until the feeder follows it again.
    fn reset(&self) {
        let mut resources = self
            .shared
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.following.store(false, Ordering::Release);
        for resource in resources.values() {
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            state.feeds = Feeds::default();
            state.closed = true;
            state.objects = Objects::Absent;
        }
        resources.clear();
    }

    /// Hands a change to its resource's cache, then counts it as processed. Both happen
    /// under the map lock, so that a cache created meanwhile knows where its history
    /// starts; and the count moves only after the send, so that a watcher that finds
    /// nothing queued has received every change up to it.
    fn route(&self, event: &WatchEvent) {
        let revision = event.revision();
        let resources = self
            .shared
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let resource = resource_of(&event.kv.key).and_then(|prefix| resources.get(prefix));
        if let Some(resource) = resource {
            let mut state = resource
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let change = Arc::new(Change::sharing(event, state.held(&event.kv.key)));
            state.objects.apply(&change);
            if revision > state.complete_after {
                if !state.watched {
                    // Read, never watched: no history (nothing to send it to either).
                    state.complete_after = revision;
                } else {
                    state.record(change.clone(), self.clock.now(), &self.config);
                    state.feeds.send(&change);
                }
            }
        }
        self.shared
            .processed
            .fetch_max(revision.get(), Ordering::AcqRel);
        drop(resources);
        self.shared.advanced.notify_waiters();
    }
}

/// Trims every resource's history to what is still fresh at `now`.
fn trim_every(shared: &Shared, config: &Config, now: Instant) {
    let resources: Vec<Arc<Resource>> = shared
        .resources
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .values()
        .cloned()
        .collect();
    for resource in resources {
        resource
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .trim(now, config);
    }
}

/// A dedicated store watch serving the part of a watch that is older than the history.
struct CatchUp {
    stream: WatchStream,
    /// From this revision on the cache takes over.
    until: Revision,
    shared: Arc<Shared>,
}

impl Drop for CatchUp {
    fn drop(&mut self) {
        self.shared.store_watches.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One client's view of a resource's changes.
pub struct Subscription {
    prefix: Vec<u8>,
    resource: Arc<Resource>,
    rx: broadcast::Receiver<Arc<Change>>,
    catch_up: Option<CatchUp>,
    backlog: VecDeque<Arc<Change>>,
    /// The live buffer overflowed and the receiver skipped ahead (seen by `progress`): the
    /// changes it skipped must come from the history before any other.
    lagged: bool,
    /// The revision of the last change delivered or skipped.
    last: Revision,
    shared: Arc<Shared>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Subscription {
    /// The newest revision this watcher has accounted for: a safe bookmark.
    pub fn position(&self) -> Revision {
        self.last
    }

    /// A revision every change up to which the watcher has seen (or been sent), if nothing
    /// is pending for it: what a bookmark may carry.
    pub fn progress(&mut self) -> Option<Revision> {
        if self.catch_up.is_some() || !self.backlog.is_empty() || self.lagged {
            return None;
        }
        let processed = Revision::new(self.shared.processed.load(Ordering::Acquire));
        // Read the processed revision first: if nothing is queued after it, every change
        // up to it has been received.
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {
                self.last = self.last.max(processed);
                Some(self.last)
            }
            Ok(change) => {
                self.backlog.push_back(change);
                None
            }
            // The receiver has skipped ahead: `next` takes what it skipped from the history.
            Err(TryRecvError::Lagged(_)) => {
                self.lagged = true;
                None
            }
            Err(TryRecvError::Closed) => None,
        }
    }

    /// After the live buffer overflowed: the changes missed are taken from the history, if
    /// it still reaches back far enough; otherwise the watcher has expired.
    fn recover(&mut self) -> Option<Next> {
        let state = self
            .resource
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if state.complete_after > self.last {
            return Some(Next::Expired(format!(
                "the watcher fell behind: changes after revision {} are no longer in the watch cache",
                self.last.get()
            )));
        }
        self.backlog = state
            .history
            .iter()
            .filter(|c| c.revision > self.last)
            .cloned()
            .collect();
        None
    }

    fn accept(&mut self, change: Arc<Change>) -> Option<Arc<Change>> {
        if change.revision <= self.last {
            return None;
        }
        self.last = change.revision;
        change.key.starts_with(&self.prefix).then_some(change)
    }

    /// The next change, in revision order; `None` once the cache is gone (the server stops).
    pub async fn next(&mut self) -> Option<Next> {
        loop {
            if let Some(catch_up) = &mut self.catch_up {
                match catch_up.stream.next().await {
                    Some(Ok(event)) => {
                        let done = event.revision() >= catch_up.until;
                        let change = Arc::new(Change::from_event(&event));
                        if done {
                            self.catch_up = None;
                        }
                        if let Some(change) = self.accept(change) {
                            return Some(Next::Change(change));
                        }
                        continue;
                    }
                    Some(Err(e)) => return Some(Next::Expired(e.to_string())),
                    None => {
                        // Every change of the prefix up to `until` was delivered.
                        self.last = self.last.max(catch_up.until);
                        self.catch_up = None;
                        continue;
                    }
                }
            }
            if let Some(change) = self.backlog.pop_front() {
                if let Some(change) = self.accept(change) {
                    return Some(Next::Change(change));
                }
                continue;
            }
            if std::mem::take(&mut self.lagged) {
                if let Some(expired) = self.recover() {
                    return Some(expired);
                }
                continue;
            }
            match self.rx.recv().await {
                Ok(change) => {
                    if let Some(change) = self.accept(change) {
                        return Some(Next::Change(change));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Too slow for the live buffer.
                    if let Some(expired) = self.recover() {
                        return Some(expired);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {
                    // The cache was reset (its store watch failed): relist.
                    return Some(Next::Expired("the watch cache was reset".into()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flotilla_store_memory::MemoryStore;
    use serde_json::json;

    use super::*;

    fn value(name: &str, n: u64) -> Bytes {
        Bytes::from(json!({"metadata": {"name": name}, "n": n}).to_string())
    }

    /// Creates ConfigMaps `k0`..`k{count - 1}` in namespace `namespace` of the root cluster.
    async fn create_configmaps(store: &Arc<dyn Store>, namespace: &str, count: u64) {
        for i in 0..count {
            store
                .create(
                    format!("/core/configmaps/root/{namespace}/k{i}").as_bytes(),
                    value("k", i),
                )
                .await
                .unwrap();
        }
    }

    /// The next changes `sub` yields are at these revisions, in order.
    async fn expect_revisions(sub: &mut Subscription, revisions: impl IntoIterator<Item = u64>) {
        for revision in revisions {
            assert_eq!(next_change(sub).await.revision.get(), revision);
        }
    }

    async fn next_change(sub: &mut Subscription) -> Arc<Change> {
        match tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("a change in time")
        {
            Some(Next::Change(change)) => change,
            other => panic!("expected a change, got {other:?}"),
        }
    }

    /// Waits until `sub`'s catch-up has closed its store watch (the feeder's alone is
    /// open), with no change for `sub` meanwhile.
    async fn catch_up_closes(cache: &WatchCache, sub: &mut Subscription) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while cache.store_watches() != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the catch-up stays open"
            );
            let step = Duration::from_millis(50);
            assert!(tokio::time::timeout(step, sub.next()).await.is_err());
        }
    }

    /// Reads `key` from the cache until it answers (it loads the resource first).
    async fn cached(cache: &WatchCache, key: &[u8]) -> Option<(Bytes, Revision)> {
        for _ in 0..1_000 {
            if let Some(found) = cache.get(key).await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the cache never answered");
    }

    #[tokio::test]
    async fn reads_come_from_memory_once_loaded_and_never_miss_a_write_that_returned() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let key: &[u8] = b"/core/configmaps/root/a/x";
        let created = store.create(key, value("x", 1)).await.unwrap();
        store
            .create(b"/core/configmaps/root/b/y", value("y", 1))
            .await
            .unwrap();
        // The first read starts loading the resource: the store answers it.
        assert!(cache.get(key).await.is_none());
        assert_eq!(cached(&cache, key).await, Some((value("x", 1), created)));
        assert_eq!(cache.get(b"/core/configmaps/root/a/nope").await, Some(None));
        // Another resource is not loaded by it.
        assert!(cache.get(b"/core/secrets/root/a/x").await.is_none());
        let mut revision = created;
        for n in 2..50 {
            revision = store.update(key, value("x", n), revision).await.unwrap();
            // Right after a write the cache answers with it, or not at all.
            match cache.get(key).await {
                None => {}
                Some(found) => assert_eq!(found, Some((value("x", n), revision))),
            }
        }
        assert_eq!(cached(&cache, key).await, Some((value("x", 49), revision)));
        store.delete(key, None).await.unwrap();
        assert!(matches!(cache.get(key).await, None | Some(None)));
        assert_eq!(cached(&cache, key).await, None);
        let recreated = store.create(key, value("x", 100)).await.unwrap();
        assert_eq!(
            cached(&cache, key).await,
            Some((value("x", 100), recreated))
        );
        // Reads neither count as watchers nor keep a history (nor a feed's buffer).
        assert_eq!(cache.watchers(), 0);
        let resource = cache.resource(b"/core/configmaps/");
        let state = resource.state.lock().unwrap();
        assert!(state.history.is_empty() && state.feeds.is_empty());
    }

    #[tokio::test]
    async fn a_resource_read_now_and_then_is_left_in_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let key: &[u8] = b"/rbac.authorization.k8s.io/rolebindings/root/a/x";
        let created = store.create(key, value("x", 1)).await.unwrap();
        let loaded = |cache: &WatchCache| {
            let resource = cache.resource(b"/rbac.authorization.k8s.io/rolebindings/");
            let state = resource.state.lock().unwrap();
            !matches!(state.objects, Objects::Absent)
        };
        for _ in 1..LOAD_AFTER_READS {
            assert!(cache.get(key).await.is_none(), "a cold read is the store's");
        }
        assert!(!loaded(&cache), "a few reads hold no object in memory");
        // One more makes the resource worth holding.
        assert!(cache.get(key).await.is_none());
        assert!(loaded(&cache));
        assert_eq!(cached(&cache, key).await, Some((value("x", 1), created)));
    }

    #[tokio::test]
    async fn a_resource_watched_before_it_is_read_loads_on_its_first_read() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let key: &[u8] = b"/core/configmaps/root/a/x";
        let created = store.create(key, value("x", 1)).await.unwrap();
        let head = store.current_revision().await.unwrap();
        let mut sub = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(10), cached(&cache, key));
        assert_eq!(
            read.await.expect("no deadlock"),
            Some((value("x", 1), created))
        );
        let updated = store.update(key, value("x", 2), created).await.unwrap();
        assert_eq!(next_change(&mut sub).await.revision, updated);
        assert_eq!(cached(&cache, key).await, Some((value("x", 2), updated)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_read_sees_the_writes_that_returned_before_it_whatever_races() {
        reads_see_the_writes_before_them(Arc::new(MemoryStore::new())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_read_sees_the_writes_before_it_on_sqlite_whose_index_answers() {
        let dir = tempfile::tempdir().unwrap();
        let store = flotilla_store_sqlite::SqliteStore::open(dir.path().join("s.db"))
            .await
            .unwrap();
        reads_see_the_writes_before_them(Arc::new(store)).await;
    }

    async fn reads_see_the_writes_before_them(store: Arc<dyn Store>) {
        let cache = Arc::new(WatchCache::new(store.clone(), Config::default()));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let (store, cache) = (store.clone(), cache.clone());
            tasks.push(tokio::spawn(async move {
                // What a read may answer: the cache's view, or (None) "ask the store".
                let check = |found: Option<Option<(Bytes, Revision)>>,
                             expected: Option<(Bytes, Revision)>,
                             what: &str| {
                    if let Some(found) = found {
                        assert_eq!(found, expected, "{what}");
                    }
                };
                for i in 0..100u64 {
                    let key = format!("/core/configmaps/root/t{t}/k{}", i % 7);
                    let key = key.as_bytes();
                    let current = store.get(key, None).await.unwrap();
                    match (i % 3, current) {
                        (2, Some(_)) => {
                            store.delete(key, None).await.unwrap();
                            check(cache.get(key).await, None, "after a delete");
                        }
                        (_, Some(kv)) => {
                            let v = value("k", i);
                            let r = store.update(key, v.clone(), kv.mod_revision).await.unwrap();
                            check(cache.get(key).await, Some((v, r)), "after an update");
                        }
                        (_, None) => {
                            let v = value("k", i);
                            let r = store.create(key, v.clone()).await.unwrap();
                            check(cache.get(key).await, Some((v, r)), "after a create");
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        // By now the resource is loaded: the cache answers, and agrees with the store.
        for t in 0..8 {
            for k in 0..7 {
                let key = format!("/core/configmaps/root/t{t}/k{k}");
                let stored = store.get(key.as_bytes(), None).await.unwrap();
                assert_eq!(
                    cached(&cache, key.as_bytes()).await,
                    stored.map(|kv| (kv.value, kv.mod_revision))
                );
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_made_while_a_resource_loads_are_in_it() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        create_configmaps(&store, "a", 200).await;
        assert!(cache.get(b"/core/configmaps/root/a/k0").await.is_none());
        // Writes race with the load (and the feeder): each key's last write must win.
        let mut revisions = Vec::new();
        for i in 0..200 {
            let key = format!("/core/configmaps/root/a/k{i}");
            let current = store.get(key.as_bytes(), None).await.unwrap().unwrap();
            let revision = if i % 3 == 0 {
                store.delete(key.as_bytes(), None).await.unwrap();
                None
            } else {
                let v = value("k", 1_000 + i);
                Some((
                    v.clone(),
                    store
                        .update(key.as_bytes(), v, current.mod_revision)
                        .await
                        .unwrap(),
                ))
            };
            revisions.push(revision);
            tokio::task::yield_now().await;
        }
        for (i, expected) in revisions.into_iter().enumerate() {
            let key = format!("/core/configmaps/root/a/k{i}");
            assert_eq!(cached(&cache, key.as_bytes()).await, expected, "{key}");
        }
    }

    #[tokio::test]
    async fn a_resource_read_before_it_is_watched_catches_a_watch_up_from_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let start = store.current_revision().await.unwrap();
        let key: &[u8] = b"/core/configmaps/root/a/x";
        store.create(key, value("x", 1)).await.unwrap();
        assert!(cached(&cache, key).await.is_some());
        store
            .create(b"/core/configmaps/root/a/y", value("y", 1))
            .await
            .unwrap();
        assert!(cached(&cache, b"/core/configmaps/root/a/y").await.is_some());
        // The cache kept no history while it was only read: the watch reads the log.
        let mut sub = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        assert_eq!(cache.store_watches(), 2);
        store
            .create(b"/core/configmaps/root/a/z", value("z", 1))
            .await
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let change = next_change(&mut sub).await;
            seen.push(String::from_utf8_lossy(&change.key).into_owned());
        }
        assert_eq!(
            seen,
            [
                "/core/configmaps/root/a/x",
                "/core/configmaps/root/a/y",
                "/core/configmaps/root/a/z"
            ]
        );
    }

    #[tokio::test]
    async fn a_catch_up_ends_at_the_history_even_when_its_prefix_is_quiet() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let start = store.current_revision().await.unwrap();
        let key: &[u8] = b"/core/configmaps/root/a/x";
        store.create(key, value("x", 1)).await.unwrap();
        // Another resource's change: the configmaps' history starts after it.
        store
            .create(b"/core/secrets/root/a/s", value("s", 1))
            .await
            .unwrap();
        assert!(cached(&cache, b"/core/secrets/root/a/s").await.is_some());
        assert!(cached(&cache, key).await.is_some());
        let mut sub = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        assert_eq!(cache.store_watches(), 2);
        assert_eq!(&next_change(&mut sub).await.key[..], key);
        // Nothing more is written: the catch-up's store watch closes all the same.
        catch_up_closes(&cache, &mut sub).await;
    }

    #[tokio::test]
    async fn one_store_watch_serves_every_watcher_in_order_with_prefix_filtering() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let head = store.current_revision().await.unwrap();
        let mut all = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        let mut ns_a = cache
            .watch(b"/core/configmaps/root/a/", head)
            .await
            .unwrap();
        let mut secrets = cache.watch(b"/core/secrets/root/", head).await.unwrap();
        assert_eq!(cache.store_watches(), 1);
        assert_eq!(cache.watchers(), 3);
        store
            .create(b"/core/configmaps/root/a/x", value("x", 1))
            .await
            .unwrap();
        store
            .create(b"/core/configmaps/root/b/y", value("y", 1))
            .await
            .unwrap();
        store
            .create(b"/core/secrets/root/a/s", value("s", 1))
            .await
            .unwrap();
        let rev = store
            .update(
                b"/core/configmaps/root/a/x",
                value("x", 2),
                Revision::new(head.get() + 1),
            )
            .await
            .unwrap();
        let seen: Vec<(String, u64)> = {
            let mut out = Vec::new();
            for _ in 0..3 {
                let c = next_change(&mut all).await;
                out.push((
                    String::from_utf8_lossy(&c.key).into_owned(),
                    c.revision.get(),
                ));
            }
            out
        };
        assert_eq!(
            seen,
            [
                ("/core/configmaps/root/a/x".to_owned(), head.get() + 1),
                ("/core/configmaps/root/b/y".to_owned(), head.get() + 2),
                ("/core/configmaps/root/a/x".to_owned(), rev.get()),
            ]
        );
        let first = next_change(&mut ns_a).await;
        let second = next_change(&mut ns_a).await;
        assert_eq!(
            (first.revision.get(), second.revision),
            (head.get() + 1, rev)
        );
        assert_eq!(second.previous().unwrap()["n"], 1);
        assert_eq!(second.object().unwrap()["n"], 2);
        assert_eq!(
            second.object().unwrap()["metadata"]["resourceVersion"],
            rev.get().to_string()
        );
        assert_eq!(
            next_change(&mut secrets).await.revision.get(),
            head.get() + 3
        );
        drop(all);
        assert_eq!(cache.watchers(), 2);
        assert_eq!(cache.store_watches(), 1);
    }

    #[tokio::test]
    async fn a_watch_from_inside_the_history_replays_it_and_one_from_before_catches_up_from_the_store()
     {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 3,
                buffer: 16,
                ..Config::default()
            },
        );
        let start = store.current_revision().await.unwrap();
        store
            .create(b"/core/configmaps/root/a/before", value("before", 0))
            .await
            .unwrap();
        // The cache starts here: the first write is older than its history.
        let mut first = cache
            .watch(b"/core/configmaps/root/", start.next())
            .await
            .unwrap();
        create_configmaps(&store, "a", 5).await;
        expect_revisions(&mut first, (0..5).map(|i| start.get() + 2 + i)).await;
        // History holds the last 3 changes (revisions start+4..=start+6).
        let mut inside = cache
            .watch(b"/core/configmaps/root/", Revision::new(start.get() + 4))
            .await
            .unwrap();
        assert_eq!(cache.store_watches(), 1);
        assert_eq!(
            next_change(&mut inside).await.revision.get(),
            start.get() + 5
        );
        assert_eq!(
            next_change(&mut inside).await.revision.get(),
            start.get() + 6
        );
        // From before the history (and before the cache started): the store's log.
        let mut before = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        assert_eq!(cache.store_watches(), 2);
        let revisions: Vec<u64> = {
            let mut out = Vec::new();
            for _ in 0..6 {
                out.push(next_change(&mut before).await.revision.get());
            }
            out
        };
        assert_eq!(
            revisions,
            (start.get() + 1..=start.get() + 6).collect::<Vec<_>>()
        );
        store
            .create(b"/core/configmaps/root/a/after", value("after", 9))
            .await
            .unwrap();
        assert_eq!(
            next_change(&mut before).await.revision.get(),
            start.get() + 7
        );
        assert_eq!(
            cache.store_watches(),
            1,
            "the catch-up watch ended once the cache took over"
        );
    }

    /// A MemoryStore that counts the watches it starts and the changes its
    /// [`Store::changes`] streams yield.
    #[derive(Default)]
    struct Counted {
        store: MemoryStore,
        watches: AtomicUsize,
        changes_read: Arc<AtomicUsize>,
    }

    #[async_trait::async_trait]
    impl Store for Counted {
        async fn get(
            &self,
            key: &[u8],
            revision: Option<Revision>,
        ) -> flotilla_store::Result<Option<flotilla_store::KeyValue>> {
            self.store.get(key, revision).await
        }
        async fn list(
            &self,
            prefix: &[u8],
            options: ListOptions,
        ) -> flotilla_store::Result<flotilla_store::ListPage> {
            self.store.list(prefix, options).await
        }
        async fn count(&self, prefix: &[u8]) -> flotilla_store::Result<u64> {
            self.store.count(prefix).await
        }
        async fn create(&self, key: &[u8], value: Bytes) -> flotilla_store::Result<Revision> {
            self.store.create(key, value).await
        }
        async fn update(
            &self,
            key: &[u8],
            value: Bytes,
            expected: Revision,
        ) -> flotilla_store::Result<Revision> {
            self.store.update(key, value, expected).await
        }
        async fn delete(
            &self,
            key: &[u8],
            expected: Option<Revision>,
        ) -> flotilla_store::Result<(Revision, flotilla_store::KeyValue)> {
            self.store.delete(key, expected).await
        }
        async fn watch(
            &self,
            prefix: &[u8],
            since: Revision,
        ) -> flotilla_store::Result<WatchStream> {
            self.watches.fetch_add(1, Ordering::Relaxed);
            self.store.watch(prefix, since).await
        }
        async fn changes(
            &self,
            prefix: &[u8],
            after: Revision,
            up_to: Revision,
        ) -> flotilla_store::Result<WatchStream> {
            let read = self.changes_read.clone();
            let stream = self.store.changes(prefix, after, up_to).await?;
            Ok(Box::pin(stream.inspect(move |_| {
                read.fetch_add(1, Ordering::Relaxed);
            })))
        }
        async fn current_revision(&self) -> flotilla_store::Result<Revision> {
            self.store.current_revision().await
        }
        async fn compacted_revision(&self) -> flotilla_store::Result<Revision> {
            self.store.compacted_revision().await
        }
        async fn compact(&self, revision: Revision) -> flotilla_store::Result<()> {
            self.store.compact(revision).await
        }
    }

    /// A watch from before the history is caught up over its own prefix's changes: the
    /// changes of other namespaces and resources in between are not read for it (on a hub
    /// of 10,000 pull clusters, 10,000 agents resuming their Works watches each read every
    /// heartbeat and Work written meanwhile).
    #[tokio::test]
    async fn a_catch_up_reads_the_changes_of_its_prefix_alone() {
        let counted = Arc::new(Counted::default());
        let store: Arc<dyn Store> = counted.clone();
        let cache = WatchCache::new(store.clone(), Config::default());
        let start = store.current_revision().await.unwrap();
        let key: &[u8] = b"/core/configmaps/root/a/x";
        store.create(key, value("x", 1)).await.unwrap();
        create_configmaps(&store, "b", 50).await;
        for i in 0..50 {
            store
                .create(
                    format!("/core/secrets/root/a/s{i}").as_bytes(),
                    value("s", i),
                )
                .await
                .unwrap();
        }
        // The configmaps' history starts after every write above.
        assert!(cached(&cache, b"/core/secrets/root/a/s49").await.is_some());
        assert!(cached(&cache, key).await.is_some());
        let mut sub = cache
            .watch(b"/core/configmaps/root/a/", start)
            .await
            .unwrap();
        assert_eq!(&next_change(&mut sub).await.key[..], key);
        catch_up_closes(&cache, &mut sub).await;
        // The feeder's watch alone; the catch-up read one change, not 101.
        assert_eq!(counted.watches.load(Ordering::Relaxed), 1);
        assert_eq!(counted.changes_read.load(Ordering::Relaxed), 1);
        // Live changes follow.
        let r = store
            .create(b"/core/configmaps/root/a/y", value("y", 1))
            .await
            .unwrap();
        expect_revisions(&mut sub, [r.get()]).await;
    }

    /// A watch from before the history is caught up from the store's log only over
    /// `catch_up` revisions at most; from further back it is told to relist (410), and
    /// the store is not read for it.
    #[tokio::test]
    async fn a_watch_too_far_before_the_history_is_told_to_relist() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 3,
                buffer: 16,
                catch_up: 4,
                ..Config::default()
            },
        );
        let start = store.current_revision().await.unwrap();
        let mut first = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        create_configmaps(&store, "a", 10).await;
        expect_revisions(&mut first, (1..=10).map(|i| start.get() + i)).await;
        // The history holds the last 3 changes: it is complete after start + 7. A catch-up
        // may reach back 4 revisions more, to start + 3.
        let too_old = cache.watch(b"/core/configmaps/root/", start).await;
        match too_old {
            Err(flotilla_store::Error::Compacted {
                requested,
                compacted,
            }) => {
                assert_eq!(requested, start);
                assert_eq!(compacted.get(), start.get() + 3);
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a watch from {start} was caught up"),
        }
        assert_eq!(cache.store_watches(), 1, "no catch-up was started for it");
        let too_old = cache
            .watch(b"/core/configmaps/root/", Revision::new(start.get() + 2))
            .await;
        assert!(too_old.is_err(), "from start + 2: caught up");
        // From the oldest revision a catch-up reaches: every change after it, in order.
        let mut caught_up = cache
            .watch(b"/core/configmaps/root/", Revision::new(start.get() + 3))
            .await
            .unwrap();
        assert_eq!(cache.store_watches(), 2);
        expect_revisions(&mut caught_up, (4..=10).map(|i| start.get() + i)).await;
    }

    /// A watcher that lags, is cancelled mid-wait, takes bookmarks and starts again from
    /// them (as clients do after a watch's timeout) sees every change of its prefix once,
    /// in order, whatever the buffer and history sizes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_watcher_that_lags_is_cancelled_and_resumes_from_bookmarks_misses_nothing() {
        for (buffer, history, history_bytes) in
            [(4, 50, usize::MAX), (4, 10_000, 3_000), (64, 8, usize::MAX)]
        {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let cache = Arc::new(WatchCache::new(
                store.clone(),
                Config {
                    history,
                    history_bytes,
                    buffer,
                    ..Config::default()
                },
            ));
            let start = store.current_revision().await.unwrap();
            let mut writer = {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut ours = Vec::new();
                    for i in 0..3000u64 {
                        let part = if i.is_multiple_of(3) { "other" } else { "root" };
                        let key = format!("/core/configmaps/{part}/ns/k{i}");
                        let r = store.create(key.as_bytes(), value("k", i)).await.unwrap();
                        if part == "root" {
                            ours.push(r.get());
                        }
                        if i.is_multiple_of(97) {
                            tokio::task::yield_now().await;
                        }
                    }
                    ours
                })
            };
            let prefix = b"/core/configmaps/root/";
            let mut seen: Vec<u64> = Vec::new();
            let mut position = start;
            let mut sub = cache.watch(prefix, position).await.unwrap();
            let mut step = 0u64;
            // The writer's revisions under the prefix, once it is done; then how long the
            // watcher has to catch up.
            let mut ours: Option<(Vec<u64>, tokio::time::Instant)> = None;
            loop {
                step += 1;
                if step.is_multiple_of(7)
                    && let Some(bookmark) = sub.progress()
                {
                    position = position.max(bookmark);
                }
                if step.is_multiple_of(211) {
                    // The watch ends (its timeout): the client starts again from the
                    // newest revision it was told of.
                    sub = cache.watch(prefix, position).await.unwrap();
                }
                if step.is_multiple_of(13) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if ours.is_none() && writer.is_finished() {
                    let revisions = (&mut writer).await.unwrap();
                    ours = Some((
                        revisions,
                        tokio::time::Instant::now() + Duration::from_secs(20),
                    ));
                }
                if let Some((revisions, deadline)) = &ours
                    && (seen.last() >= revisions.last() || tokio::time::Instant::now() > *deadline)
                {
                    break;
                }
                match tokio::time::timeout(Duration::from_micros(50), sub.next()).await {
                    Err(_) => {}
                    Ok(Some(Next::Change(change))) => {
                        seen.push(change.revision.get());
                        position = change.revision;
                    }
                    Ok(Some(Next::Expired(_))) => {
                        // Resuming from the last change received is served from the log.
                        sub = cache.watch(prefix, position).await.unwrap();
                    }
                    Ok(None) => panic!("the cache ended"),
                }
            }
            let ours = ours.map(|(revisions, _)| revisions).unwrap_or_default();
            let first_difference = seen.iter().zip(&ours).position(|(a, b)| a != b);
            assert_eq!(
                seen,
                ours,
                "buffer {buffer}, history {history}/{history_bytes} B: first difference at {first_difference:?} ({:?} against {:?})",
                first_difference.map(|i| &seen[i.saturating_sub(3)..(i + 5).min(seen.len())]),
                first_difference.map(|i| &ours[i.saturating_sub(3)..(i + 5).min(ours.len())]),
            );
        }
    }

    #[tokio::test]
    async fn a_write_still_in_the_history_is_read_from_it_by_its_revision() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 3,
                ..Config::default()
            },
        );
        let key: &[u8] = b"/core/configmaps/root/a/x";
        let start = store.current_revision().await.unwrap();
        // Unwatched resources keep no history.
        let first = store.create(key, value("x", 1)).await.unwrap();
        assert_eq!(cache.written_at(key, first), None);
        let mut live = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        next_change(&mut live).await;
        let second = store.update(key, value("x", 2), first).await.unwrap();
        next_change(&mut live).await;
        assert_eq!(cache.written_at(key, second), Some(value("x", 2)));
        // The first write came before the watch: caught up from the store, not kept.
        assert_eq!(cache.written_at(key, first), None);
        // Only that key's change at that revision, and not a deletion.
        assert_eq!(cache.written_at(b"/core/configmaps/root/a/y", second), None);
        assert_eq!(cache.written_at(b"/core/secrets/root/a/x", second), None);
        let (deleted, _) = store.delete(key, None).await.unwrap();
        next_change(&mut live).await;
        assert_eq!(cache.written_at(key, deleted), None);
        // Once the history has moved past it, the store must be read.
        for n in 0..3 {
            let other = format!("/core/configmaps/root/a/o{n}");
            store.create(other.as_bytes(), value("o", n)).await.unwrap();
            next_change(&mut live).await;
        }
        assert_eq!(cache.written_at(key, second), None);
    }

    #[tokio::test]
    async fn the_history_keeps_no_more_bytes_than_it_is_given() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let large = |i: u64| {
            Bytes::from(
                json!({"metadata": {"name": "big"}, "n": i, "pad": "x".repeat(4000)}).to_string(),
            )
        };
        // Room for about three events of a 4 kB object (created, so without a previous
        // value), far fewer than the history's count.
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 100,
                history_bytes: 3 * (2 * large(0).len() + 400),
                ..Config::default()
            },
        );
        let start = store.current_revision().await.unwrap();
        let mut live = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        for i in 0..6 {
            store
                .create(format!("/core/configmaps/root/a/k{i}").as_bytes(), large(i))
                .await
                .unwrap();
            next_change(&mut live).await;
        }
        {
            let resources = cache.inner.resources.lock().unwrap();
            let state = resources[&b"/core/configmaps/"[..]].state.lock().unwrap();
            assert_eq!(state.history.len(), 3);
            assert_eq!(
                state.history_bytes,
                state.history.iter().map(|c| c.weight()).sum::<usize>()
            );
        }
        // The last three changes are replayed from the cache...
        let mut recent = cache
            .watch(b"/core/configmaps/root/", Revision::new(start.get() + 3))
            .await
            .unwrap();
        assert_eq!(cache.store_watches(), 1);
        expect_revisions(&mut recent, (4..=6).map(|i| start.get() + i)).await;
        // ...and the older ones come from the store's log, in full.
        let mut older = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        assert_eq!(cache.store_watches(), 2);
        expect_revisions(&mut older, (1..=6).map(|i| start.get() + i)).await;
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_the_buffer_and_the_history_expires() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 4,
                buffer: 2,
                ..Config::default()
            },
        );
        let head = store.current_revision().await.unwrap();
        let mut slow = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        let mut fast = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        for i in 0..10 {
            store
                .create(
                    format!("/core/configmaps/root/a/k{i}").as_bytes(),
                    value("k", i),
                )
                .await
                .unwrap();
            assert_eq!(
                next_change(&mut fast).await.revision.get(),
                head.get() + 1 + i
            );
        }
        match tokio::time::timeout(Duration::from_secs(10), slow.next())
            .await
            .unwrap()
        {
            Some(Next::Expired(reason)) => assert!(reason.contains("fell behind"), "{reason}"),
            other => panic!("expected Expired, got {other:?}"),
        }
        // A watcher behind the buffer but within the history is caught up from it.
        let cache = WatchCache::new(
            store.clone(),
            Config {
                history: 100,
                buffer: 2,
                ..Config::default()
            },
        );
        let head = store.current_revision().await.unwrap();
        let mut lagging = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        create_configmaps(&store, "b", 10).await;
        expect_revisions(&mut lagging, (0..10).map(|i| head.get() + 1 + i)).await;
    }

    /// A clock the test moves by hand.
    struct ManualClock(Mutex<Instant>);

    impl ManualClock {
        fn new() -> Arc<ManualClock> {
            Arc::new(ManualClock(Mutex::new(Instant::now())))
        }

        fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            *self.0.lock().unwrap()
        }
    }

    /// A cache whose histories keep 75 s of changes, and `floor` older ones.
    fn aging(
        store: &Arc<dyn Store>,
        clock: &Arc<ManualClock>,
        floor: usize,
        buffer: usize,
    ) -> WatchCache {
        WatchCache::with_clock(
            store.clone(),
            Config {
                history_fresh: Duration::from_secs(75),
                history_floor: floor,
                buffer,
                ..Config::default()
            },
            clock.clone(),
        )
    }

    /// The revisions in the history of `/core/configmaps/`, and where it is complete after.
    fn history_of(cache: &WatchCache) -> (Vec<u64>, Revision) {
        let resources = cache.inner.resources.lock().unwrap();
        let state = resources[&b"/core/configmaps/"[..]].state.lock().unwrap();
        assert_eq!(state.history.len(), state.routed_at.len());
        assert_eq!(
            state.history_bytes,
            state.history.iter().map(|c| c.weight()).sum::<usize>()
        );
        (
            state.history.iter().map(|c| c.revision.get()).collect(),
            state.complete_after,
        )
    }

    #[tokio::test]
    async fn the_history_keeps_fresh_changes_and_a_floor_of_older_ones() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let clock = ManualClock::new();
        let cache = aging(&store, &clock, 2, 256);
        let start = store.current_revision().await.unwrap();
        let mut live = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        let key: &[u8] = b"/core/configmaps/root/a/lease";
        store.create(key, value("lease", 0)).await.unwrap();
        next_change(&mut live).await;
        for i in 1..5 {
            let at = store.get(key, None).await.unwrap().unwrap().mod_revision;
            store.update(key, value("lease", i), at).await.unwrap();
            next_change(&mut live).await;
        }
        // Younger than 75 s: all five kept, well under the count cap.
        clock.advance(Duration::from_secs(74));
        let (kept, _) = history_of(&cache);
        assert_eq!(kept, (1..=5).map(|i| start.get() + i).collect::<Vec<_>>());
        // Older than 75 s: the next change lets go of them but for the floor of two.
        clock.advance(Duration::from_secs(2));
        let at = store.get(key, None).await.unwrap().unwrap().mod_revision;
        let sixth = store.update(key, value("lease", 5), at).await.unwrap();
        next_change(&mut live).await;
        let (kept, complete_after) = history_of(&cache);
        assert_eq!(kept, vec![start.get() + 5, sixth.get()]);
        assert_eq!(complete_after.get(), start.get() + 4);
        // A watch from inside what is kept replays it from memory...
        let mut recent = cache
            .watch(b"/core/configmaps/root/", Revision::new(start.get() + 4))
            .await
            .unwrap();
        assert_eq!(cache.store_watches(), 1);
        assert_eq!(
            next_change(&mut recent).await.revision.get(),
            start.get() + 5
        );
        assert_eq!(next_change(&mut recent).await.revision, sixth);
        // ...and one from before it is caught up from the store's log, missing nothing.
        let mut older = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        assert_eq!(cache.store_watches(), 2);
        expect_revisions(&mut older, (1..=6).map(|i| start.get() + i)).await;
    }

    #[tokio::test]
    async fn a_quiet_resource_lets_go_of_its_stale_history_at_the_sweep() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let clock = ManualClock::new();
        let cache = aging(&store, &clock, 1, 256);
        let start = store.current_revision().await.unwrap();
        let mut live = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        for i in 0..4 {
            let key = format!("/core/configmaps/root/a/csr{i}");
            store.create(key.as_bytes(), value("csr", i)).await.unwrap();
            next_change(&mut live).await;
        }
        // No further change: a sweep before 75 s keeps all, one after keeps the floor.
        clock.advance(Duration::from_secs(60));
        trim_every(&cache.inner, &cache.config, clock.now());
        assert_eq!(history_of(&cache).0.len(), 4);
        clock.advance(Duration::from_secs(16));
        trim_every(&cache.inner, &cache.config, clock.now());
        let (kept, complete_after) = history_of(&cache);
        assert_eq!(kept, vec![start.get() + 4]);
        assert_eq!(complete_after.get(), start.get() + 3);
        // The sweep never drops the changes a live watcher still has to receive: it
        // received them already here, and resuming from its position needs no catch-up.
        let resumed = cache
            .watch(b"/core/configmaps/root/", live.position())
            .await
            .unwrap();
        assert!(resumed.catch_up.is_none());
    }

    #[tokio::test]
    async fn a_watcher_behind_the_buffer_and_older_than_the_fresh_history_expires() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let clock = ManualClock::new();
        let cache = aging(&store, &clock, 0, 2);
        let head = store.current_revision().await.unwrap();
        let mut slow = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        let mut fast = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        for i in 0..5 {
            let key = format!("/core/configmaps/root/a/k{i}");
            store.create(key.as_bytes(), value("k", i)).await.unwrap();
            next_change(&mut fast).await;
        }
        // Within the count cap, but 76 s old: gone, so the slow watcher cannot be caught
        // up from memory and must relist (410).
        clock.advance(Duration::from_secs(76));
        let last = store
            .create(b"/core/configmaps/root/a/k5", value("k", 5))
            .await
            .unwrap();
        assert_eq!(next_change(&mut fast).await.revision, last);
        assert_eq!(history_of(&cache).0, vec![last.get()]);
        match tokio::time::timeout(Duration::from_secs(10), slow.next())
            .await
            .unwrap()
        {
            Some(Next::Expired(reason)) => assert!(reason.contains("fell behind"), "{reason}"),
            other => panic!("expected Expired, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_change_shares_the_previous_object_the_cache_holds() {
        // SQLite decodes every value it returns afresh: sharing is the cache's doing.
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            flotilla_store_sqlite::SqliteStore::open(dir.path().join("s.db"))
                .await
                .unwrap(),
        );
        let cache = WatchCache::new(store.clone(), Config::default());
        let key: &[u8] = b"/core/configmaps/root/a/x";
        store.create(key, value("x", 1)).await.unwrap();
        let start = store.current_revision().await.unwrap();
        let mut live = cache.watch(b"/core/configmaps/root/", start).await.unwrap();
        // Loaded (the resource is watched, so its first read loads it).
        let (held, at) = cached(&cache, key).await.unwrap();
        store.update(key, value("x", 2), at).await.unwrap();
        let change = next_change(&mut live).await;
        let (previous, revision) = change.raw_previous.as_ref().unwrap();
        assert_eq!(*revision, at);
        assert_eq!(previous, &held);
        // The very same bytes, not a copy of them.
        assert_eq!(previous.as_ptr(), held.as_ptr());
    }

    #[tokio::test]
    async fn a_watch_is_fed_only_its_own_logical_clusters_or_namespaces_changes() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let head = store.current_revision().await.unwrap();
        let mut a = cache.watch(b"/core/configmaps/a/", head).await.unwrap();
        let mut a_ns = cache.watch(b"/core/configmaps/a/ns/", head).await.unwrap();
        let a_other = cache
            .watch(b"/core/configmaps/a/other/", head)
            .await
            .unwrap();
        let mut b = cache.watch(b"/core/configmaps/b/ns/", head).await.unwrap();
        let mut every = cache.watch(b"/core/configmaps/", head).await.unwrap();
        let mut last = head;
        for i in 0..5 {
            let key = format!("/core/configmaps/a/ns/k{i}");
            last = store.create(key.as_bytes(), value("k", i)).await.unwrap();
            assert_eq!(next_change(&mut a).await.revision, last);
            assert_eq!(next_change(&mut a_ns).await.revision, last);
            assert_eq!(next_change(&mut every).await.revision, last);
        }
        // Nothing of cluster a reached b's feed, nor namespace ns other's: never woken.
        assert!(b.rx.is_empty());
        assert!(a_other.rx.is_empty());
        let written = store
            .create(b"/core/configmaps/b/ns/x", value("x", 0))
            .await
            .unwrap();
        assert_eq!(next_change(&mut b).await.revision, written);
        assert_eq!(next_change(&mut every).await.revision, written);
        assert!(written > last);
        // A feed goes once nobody watches it.
        drop((a, a_ns, a_other));
        let after = store
            .create(b"/core/configmaps/a/ns/y", value("y", 0))
            .await
            .unwrap();
        assert_eq!(next_change(&mut every).await.revision, after);
        let resource = cache.resource(b"/core/configmaps/");
        let state = resource.state.lock().unwrap();
        let mut parts: Vec<&[u8]> = state.feeds.parts.keys().map(|k| &k[..]).collect();
        parts.sort();
        // (a/other/ had no change to find it gone by.)
        assert_eq!(
            parts,
            vec![
                &b"/core/configmaps/a/other/"[..],
                &b"/core/configmaps/b/ns/"[..]
            ]
        );
    }

    /// A namespace's feed is small: a watcher that falls behind it is caught up from the
    /// history, in order, missing nothing.
    #[tokio::test]
    async fn a_watcher_behind_its_namespaces_small_feed_is_caught_up_from_the_history() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(
            store.clone(),
            Config {
                namespace_buffer: 2,
                ..Config::default()
            },
        );
        let head = store.current_revision().await.unwrap();
        let mut watch = cache.watch(b"/core/configmaps/a/ns/", head).await.unwrap();
        let mut written = Vec::new();
        for i in 0..6 {
            let key = format!("/core/configmaps/a/ns/k{i}");
            written.push(store.create(key.as_bytes(), value("k", i)).await.unwrap());
            // Another namespace's changes in between: never delivered.
            let key = format!("/core/configmaps/a/elsewhere/k{i}");
            store.create(key.as_bytes(), value("k", i)).await.unwrap();
        }
        let last = *written.last().unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while cache.processed() < last {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        let mut seen = Vec::new();
        for _ in 0..6 {
            let change = next_change(&mut watch).await;
            assert!(change.key.starts_with(b"/core/configmaps/a/ns/"));
            seen.push(change.revision);
        }
        assert_eq!(seen, written);
    }

    #[tokio::test]
    async fn progress_covers_changes_to_other_resources() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cache = WatchCache::new(store.clone(), Config::default());
        let head = store.current_revision().await.unwrap();
        let mut idle = cache.watch(b"/core/configmaps/root/", head).await.unwrap();
        let written = store
            .create(b"/core/secrets/root/a/s", value("s", 1))
            .await
            .unwrap();
        for _ in 0..1000 {
            if cache.processed() >= written {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(idle.progress(), Some(written));
        // A change of the watched resource that is queued holds the bookmark back.
        let next = store
            .create(b"/core/configmaps/root/a/c", value("c", 1))
            .await
            .unwrap();
        for _ in 0..1000 {
            if cache.processed() >= next {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(idle.progress(), None);
        assert_eq!(next_change(&mut idle).await.revision, next);
        assert_eq!(idle.progress(), Some(next));
    }
}
