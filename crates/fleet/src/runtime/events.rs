//! Kubernetes Events from the fleet controllers: what an operator wants to see on a
//! Placement, a Cluster or a Work (scheduled and rescheduled, applied or failed per
//! cluster, drift found and gone, Ready and NotReady, joined and unjoined), written as
//! `core/v1` Events so that `kubectl describe` and `kubectl get events` show them.
//!
//! ```text
//!  emit(regarding, type, reason, note)
//!     │ the same (object, type, reason, note) within SERIES_WINDOW: a repeat of its
//!     │ series (count + 1, lastTimestamp), else a new Event
//!     ▼
//!  Limiter: a token bucket per object and reason (burst PER_OBJECT_BURST, one more
//!     │ every PER_OBJECT_REFILL) and one over the whole hub (GLOBAL_BURST, GLOBAL_RATE
//!     │ a second); a repeat over the limit is counted, not written (the next write of
//!     │ its series carries the count); a new event over it is dropped
//!     ▼
//!  a queue of QUEUE writes (full: dropped) ─► one writer: create, or merge patch of
//!     the series' count and lastTimestamp
//! ```
//!
//! So 10,000 clusters turning NotReady at once cost at most `GLOBAL_BURST` writes at once
//! and `GLOBAL_RATE` a second after, and a Work failing every retry makes one Event whose
//! count grows.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tracing::debug;

/// The component the Events name as their source.
pub const COMPONENT: &str = "flotilla-fleet";

/// The controller the Events name as reporting them (`reportingComponent`).
pub const REPORTING_CONTROLLER: &str = "flotilla.io/fleet";

/// Events of one object and reason written at once at most.
pub const PER_OBJECT_BURST: f64 = 10.0;

/// After its burst, one more Event of an object and reason per this period.
pub const PER_OBJECT_REFILL: Duration = Duration::from_secs(60);

/// Event writes of the whole hub at once at most.
pub const GLOBAL_BURST: f64 = 200.0;

/// After the burst, Event writes of the whole hub a second at most.
pub const GLOBAL_RATE: f64 = 20.0;

/// How long an Event takes repeats of itself (count + 1) instead of a new Event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(600);

/// Writes waiting for the writer at most; past it, events are dropped.
const QUEUE: usize = 1024;

/// The longest note written (Kubernetes' limit is 1 kB).
const MAX_NOTE: usize = 1024;

/// How many names a note lists before "and N more".
const MAX_NAMES: usize = 10;

/// An Event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// Things going as they should.
    Normal,
    /// Something an operator may have to look at.
    Warning,
}

impl Type {
    fn as_str(self) -> &'static str {
        match self {
            Type::Normal => "Normal",
            Type::Warning => "Warning",
        }
    }
}

/// A token bucket: `burst` tokens at most, `rate` more a second.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Bucket {
        Bucket {
            tokens: burst,
            at: now,
        }
    }

    /// The tokens at `now`.
    fn refill(&mut self, burst: f64, rate: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
    }
}

/// The rate limits of Event writes: one token bucket per key (an object and a reason) and
/// one over all of them. A write takes a token from both, or from neither.
pub struct Limiter {
    per_key: HashMap<String, Bucket>,
    /// How many keys make the next pruning (twice those left by the last, at least
    /// [`TRACKED_KEYS`]): pruning costs a pass over them all, so it is not done per write.
    prune_at: usize,
    global: Bucket,
    per_key_burst: f64,
    per_key_rate: f64,
    global_burst: f64,
    global_rate: f64,
}

/// Keys tracked before full buckets (those that would allow a whole burst again) are
/// dropped: a bucket not tracked is a full one.
const TRACKED_KEYS: usize = 20_000;

impl Limiter {
    /// A limiter with the hub's limits ([`PER_OBJECT_BURST`], [`PER_OBJECT_REFILL`],
    /// [`GLOBAL_BURST`], [`GLOBAL_RATE`]).
    pub fn new(now: Instant) -> Limiter {
        Limiter::with(
            (PER_OBJECT_BURST, 1.0 / PER_OBJECT_REFILL.as_secs_f64()),
            (GLOBAL_BURST, GLOBAL_RATE),
            now,
        )
    }

    /// A limiter of `(burst, rate a second)` per key and over all keys.
    pub fn with(per_key: (f64, f64), global: (f64, f64), now: Instant) -> Limiter {
        Limiter {
            per_key: HashMap::new(),
            prune_at: TRACKED_KEYS,
            global: Bucket::full(global.0, now),
            per_key_burst: per_key.0,
            per_key_rate: per_key.1,
            global_burst: global.0,
            global_rate: global.1,
        }
    }

    /// Whether a write for `key` may go at `now` (its tokens taken if so).
    pub fn allow(&mut self, key: &str, now: Instant) -> bool {
        self.global.refill(self.global_burst, self.global_rate, now);
        if self.global.tokens < 1.0 {
            return false;
        }
        if self.per_key.len() >= self.prune_at && !self.per_key.contains_key(key) {
            let (burst, rate) = (self.per_key_burst, self.per_key_rate);
            self.per_key.retain(|_, b| {
                b.refill(burst, rate, now);
                b.tokens < burst
            });
            self.prune_at = (2 * self.per_key.len()).max(TRACKED_KEYS);
        }
        let bucket = self
            .per_key
            .entry(key.to_owned())
            .or_insert_with(|| Bucket::full(self.per_key_burst, now));
        bucket.refill(self.per_key_burst, self.per_key_rate, now);
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        self.global.tokens -= 1.0;
        true
    }

    /// How many keys hold a bucket now.
    pub fn tracked(&self) -> usize {
        self.per_key.len()
    }
}

/// One Event as written, and its repeats since.
#[derive(Clone, Debug)]
struct Series {
    /// The Event's namespace and name.
    namespace: String,
    name: String,
    /// Occurrences in all, and how many the Event says.
    count: i32,
    written: i32,
    /// When it last occurred.
    last: Instant,
}

/// What the recorder decided for one occurrence.
#[derive(Debug, PartialEq)]
enum Decision {
    /// A new Event named so.
    Create { namespace: String, name: String },
    /// The series' Event says `count` now.
    Repeat {
        namespace: String,
        name: String,
        count: i32,
    },
    /// Nothing is written (over the limits); a repeat is counted all the same.
    Drop,
}

/// The series and limits: what decides, with no I/O.
struct Aggregator {
    limiter: Limiter,
    series: HashMap<SeriesKey, Series>,
    /// How many series make the next pruning (as [`Limiter`]'s keys).
    prune_at: usize,
}

/// What makes two occurrences the same Event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: String,
    type_: Type,
    reason: &'static str,
    note: String,
}

impl Aggregator {
    fn new(limiter: Limiter) -> Aggregator {
        Aggregator {
            limiter,
            series: HashMap::new(),
            prune_at: TRACKED_KEYS,
        }
    }

    /// Decides for one occurrence at `now` of `key`, for an Event of `regarding`
    /// (`namespace`, object `name`), named after `nanos` if new.
    fn occur(
        &mut self,
        key: SeriesKey,
        namespace: &str,
        name: &str,
        nanos: i128,
        now: Instant,
    ) -> Decision {
        if self.series.len() >= self.prune_at {
            self.series
                .retain(|_, s| now.saturating_duration_since(s.last) < SERIES_WINDOW);
            self.prune_at = (2 * self.series.len()).max(TRACKED_KEYS);
        }
        let limit_key = format!("{}\u{0}{}", key.regarding, key.reason);
        if let Some(series) = self
            .series
            .get_mut(&key)
            .filter(|s| now.saturating_duration_since(s.last) < SERIES_WINDOW)
        {
            series.count += 1;
            series.last = now;
            if !self.limiter.allow(&limit_key, now) {
                return Decision::Drop;
            }
            series.written = series.count;
            return Decision::Repeat {
                namespace: series.namespace.clone(),
                name: series.name.clone(),
                count: series.count,
            };
        }
        if !self.limiter.allow(&limit_key, now) {
            return Decision::Drop;
        }
        let event_name = format!("{name}.{:x}", nanos.max(0));
        self.series.insert(
            key,
            Series {
                namespace: namespace.to_owned(),
                name: event_name.clone(),
                count: 1,
                written: 1,
                last: now,
            },
        );
        Decision::Create {
            namespace: namespace.to_owned(),
            name: event_name,
        }
    }
}

/// A write for the writer task.
enum Write {
    Create(Box<Event>),
    Repeat {
        namespace: String,
        name: String,
        count: i32,
        at: Time,
        /// The Event again, should it be gone (expired, deleted).
        event: Box<Event>,
    },
}

/// Records the controllers' Events (see the module's documentation).
pub struct Recorder {
    host: String,
    aggregator: Mutex<Aggregator>,
    queue: mpsc::Sender<Write>,
}

impl Recorder {
    /// A recorder writing through `client`, naming `host` (the hub) as the reporting
    /// instance; its writer runs on the current Tokio runtime until the recorder goes.
    pub fn new(client: Client, host: String) -> Recorder {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_all(client, rx));
        Recorder {
            host,
            aggregator: Mutex::new(Aggregator::new(Limiter::new(Instant::now()))),
            queue,
        }
    }

    /// Records that `reason` happened to `regarding` (`action` is what the controller
    /// did), `note` in words; `related` is another object involved.
    pub fn emit(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: Type,
        reason: &'static str,
        action: &'static str,
        note: &str,
    ) {
        let note = bounded(note);
        // Cluster-scoped objects' Events live in `default`, as Kubernetes has them.
        let namespace = regarding
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".into());
        let object = regarding.name.clone().unwrap_or_default();
        let key = SeriesKey {
            regarding: format!(
                "{}/{}/{}/{}",
                regarding.kind.as_deref().unwrap_or_default(),
                namespace,
                object,
                regarding.uid.as_deref().unwrap_or_default()
            ),
            type_,
            reason,
            note: note.clone(),
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let decision = self
            .aggregator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .occur(
                key,
                &namespace,
                &object,
                now.as_nanosecond(),
                Instant::now(),
            );
        let time = Time(now);
        let event = |name: String, count: i32| Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            related: related.cloned(),
            type_: Some(type_.as_str().into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            message: Some(note.clone()),
            count: Some(count),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time.clone()),
            event_time: Some(MicroTime(now)),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: Some(self.host.clone()),
            }),
            reporting_component: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.host.clone()),
            ..Event::default()
        };
        let write = match decision {
            Decision::Drop => {
                debug!(%reason, object = %object, "event over the rate limits: not written");
                return;
            }
            Decision::Create { name, .. } => Write::Create(Box::new(event(name, 1))),
            Decision::Repeat {
                namespace: ns,
                name,
                count,
            } => Write::Repeat {
                namespace: ns,
                event: Box::new(event(name.clone(), count)),
                name,
                count,
                at: time.clone(),
            },
        };
        if self.queue.try_send(write).is_err() {
            debug!(%reason, object = %object, "event queue full: not written");
        }
    }
}

/// Writes what the recorder queues, one at a time, until the recorder goes.
async fn write_all(client: Client, mut rx: mpsc::Receiver<Write>) {
    while let Some(write) = rx.recv().await {
        let result = match write {
            Write::Create(event) => create(&client, &event).await,
            Write::Repeat {
                namespace,
                name,
                count,
                at,
                event,
            } => {
                let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
                let patch = serde_json::json!({"count": count, "lastTimestamp": at});
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Err(kube::Error::Api(s)) if s.code == 404 => create(&client, &event).await,
                    other => other.map(drop),
                }
            }
        };
        if let Err(e) = result {
            debug!(error = %e, "an event was not written");
        }
    }
}

async fn create(client: &Client, event: &Event) -> Result<(), kube::Error> {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    match api.create(&PostParams::default(), event).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// `note` cut to [`MAX_NOTE`] bytes (on a character boundary), `…` marking the cut.
fn bounded(note: &str) -> String {
    if note.len() <= MAX_NOTE {
        return note.to_owned();
    }
    let mut end = MAX_NOTE - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &note[..end])
}

/// `names` for a note: the first [`MAX_NAMES`], then how many more.
pub fn listed(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(MAX_NAMES)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX_NAMES {
        text.push_str(&format!(" and {} more", names.len() - MAX_NAMES));
    }
    text
}

/// A placement was scheduled (`before`: no decision known) or rescheduled to `chosen`.
pub(super) fn scheduled(
    recorder: &Recorder,
    placement: &ObjectReference,
    before: Option<&[String]>,
    chosen: &[String],
) {
    if before == Some(chosen) {
        return;
    }
    if chosen.is_empty() {
        recorder.emit(
            placement,
            None,
            Type::Warning,
            "NoClusters",
            "Scheduling",
            "no cluster is chosen",
        );
        return;
    }
    let (reason, what) = match before {
        Some(before) if !before.is_empty() => ("Rescheduled", "rescheduled"),
        _ => ("Scheduled", "scheduled"),
    };
    let clusters = if chosen.len() == 1 {
        "cluster"
    } else {
        "clusters"
    };
    let note = format!("{what} to {} {clusters}: {}", chosen.len(), listed(chosen));
    recorder.emit(placement, None, Type::Normal, reason, "Scheduling", &note);
}

/// A rollout started moving the clusters of stage `stage`.
pub(super) fn stage_started(
    recorder: &Recorder,
    placement: &ObjectReference,
    stage: &str,
    rollout: &flotilla_api::RolloutStatus,
) {
    let note = format!(
        "revision {} reached stage {stage} ({} clusters updated)",
        rollout.revision.unwrap_or_default(),
        rollout.updated
    );
    recorder.emit(
        placement,
        None,
        Type::Normal,
        "StageStarted",
        "Rollout",
        &note,
    );
}

/// A rollout halted (a Warning), rolled back or completed.
pub(super) fn rollout(
    recorder: &Recorder,
    placement: &ObjectReference,
    warning: bool,
    reason: &'static str,
    note: &str,
) {
    let type_ = if warning { Type::Warning } else { Type::Normal };
    recorder.emit(placement, None, type_, reason, "Rollout", note);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(object: &str, reason: &'static str, note: &str) -> SeriesKey {
        SeriesKey {
            regarding: object.into(),
            type_: Type::Normal,
            reason,
            note: note.into(),
        }
    }

    #[test]
    fn a_key_gets_its_burst_then_one_per_refill_period() {
        let start = Instant::now();
        let mut limiter = Limiter::with((3.0, 0.5), (1000.0, 1000.0), start);
        let allowed = (0..10).filter(|_| limiter.allow("a", start)).count();
        assert_eq!(allowed, 3);
        // Another key has its own bucket.
        assert!(limiter.allow("b", start));
        // One token every two seconds.
        assert!(!limiter.allow("a", start + Duration::from_secs(1)));
        assert!(limiter.allow("a", start + Duration::from_secs(2)));
        assert!(!limiter.allow("a", start + Duration::from_secs(2)));
        // Never more than the burst, however long the wait.
        let later = start + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| limiter.allow("a", later)).count(), 3);
    }

    #[test]
    fn a_storm_of_ten_thousand_objects_is_bounded_by_the_global_bucket() {
        let start = Instant::now();
        let mut limiter = Limiter::new(start);
        // 10,000 clusters turn NotReady in the same second: a burst is written.
        let written = (0..10_000)
            .filter(|i| limiter.allow(&format!("Cluster/c{i}\u{0}NotReady"), start))
            .count();
        assert_eq!(written as f64, GLOBAL_BURST);
        // Then GLOBAL_RATE a second, whatever is asked.
        let second = start + Duration::from_secs(1);
        let written = (0..10_000)
            .filter(|i| limiter.allow(&format!("Cluster/d{i}\u{0}NotReady"), second))
            .count();
        assert_eq!(written as f64, GLOBAL_RATE);
        // Refused writes take no token of their key: each still has its burst.
        let much_later = start + Duration::from_secs(3600);
        let key = "Cluster/c9999\u{0}NotReady";
        let bursts = (0..100).filter(|_| limiter.allow(key, much_later)).count();
        assert_eq!(bursts as f64, PER_OBJECT_BURST);
    }

    #[test]
    fn keys_tracked_stay_bounded() {
        let start = Instant::now();
        let mut limiter = Limiter::with((2.0, 1.0), (1e9, 1e9), start);
        for i in 0..(TRACKED_KEYS * 3) {
            // Each key's bucket is full again a few seconds on.
            let now = start + Duration::from_secs(i as u64 / 1000);
            assert!(limiter.allow(&format!("k{i}"), now));
        }
        assert!(
            limiter.tracked() <= TRACKED_KEYS + 1,
            "{}",
            limiter.tracked()
        );
        // Keys all still spending their burst: kept, and pruning waits until they double
        // instead of passing over them for each new key.
        let mut busy = Limiter::with((2.0, 0.001), (1e9, 1e9), start);
        for i in 0..(TRACKED_KEYS + 10) {
            assert!(busy.allow(&format!("k{i}"), start));
        }
        assert_eq!(busy.tracked(), TRACKED_KEYS + 10);
        assert_eq!(busy.prune_at, 2 * TRACKED_KEYS);
    }

    #[test]
    fn repeats_make_one_event_whose_count_grows_and_counts_what_the_limits_dropped() {
        let start = Instant::now();
        let mut aggregator = Aggregator::new(Limiter::with((2.0, 0.1), (100.0, 100.0), start));
        let failed = key("Work/ns/w/u", "ApplyFailed", "connection refused");
        let first = aggregator.occur(failed.clone(), "ns", "w", 0xabc, start);
        assert_eq!(
            first,
            Decision::Create {
                namespace: "ns".into(),
                name: "w.abc".into()
            }
        );
        let second = aggregator.occur(failed.clone(), "ns", "w", 0xabd, start);
        assert_eq!(
            second,
            Decision::Repeat {
                namespace: "ns".into(),
                name: "w.abc".into(),
                count: 2
            }
        );
        // Over the object's burst: counted, not written…
        for _ in 0..5 {
            assert_eq!(
                aggregator.occur(failed.clone(), "ns", "w", 0, start),
                Decision::Drop
            );
        }
        // …and the next write carries every occurrence.
        let later = start + Duration::from_secs(10);
        assert_eq!(
            aggregator.occur(failed.clone(), "ns", "w", 0, later),
            Decision::Repeat {
                namespace: "ns".into(),
                name: "w.abc".into(),
                count: 8
            }
        );
        // Another note is another Event.
        let other = aggregator.occur(key("Work/ns/w/u", "Applied", "ok"), "ns", "w", 0xf, later);
        assert!(matches!(other, Decision::Create { name, .. } if name == "w.f"));
        // Past the window, a new Event starts.
        let window = later + SERIES_WINDOW;
        assert!(matches!(
            aggregator.occur(failed, "ns", "w", 0x1, window),
            Decision::Create { name, .. } if name == "w.1"
        ));
    }

    #[test]
    fn notes_are_bounded_and_long_lists_say_how_many_more() {
        let names: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
        assert_eq!(
            listed(&names),
            "c1, c2, c3, c4, c5, c6, c7, c8, c9, c10 and 2 more"
        );
        assert_eq!(listed(&names[..2]), "c1, c2");
        let long = "é".repeat(2000);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_NOTE && cut.ends_with('…'), "{}", cut.len());
        assert_eq!(bounded("short"), "short");
    }
}
