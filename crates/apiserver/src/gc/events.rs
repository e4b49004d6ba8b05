//! Events expire, as kube-apiserver's `--event-ttl` makes them: an Event not written for
//! the TTL (1 h by default) is deleted.
//!
//! ```text
//!  every min(ttl/4, 1 min): list /core/events/ (every logical cluster, both versions),
//!    page by page at the latest revision ─► each Event's last time
//!      (the latest of series.lastObservedTime, lastTimestamp | deprecatedLastTimestamp,
//!       eventTime, firstTimestamp | deprecatedFirstTimestamp, metadata.creationTimestamp)
//!    older than now − ttl ─► store.delete(key, its mod_revision)
//!      Conflict (written meanwhile) or NotFound (deleted meanwhile): left as it is
//!    not decodable (not JSON, a time that is no RFC 3339, no time at all): left alone
//! ```
//!
//! The deletes go through the store, so the watch cache (which follows every change of
//! the store) hands watchers a `DELETED` event for each, as for any other delete.

use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{Bytes, Error, ListOptions, Store};
use jiff::Timestamp;
use serde::Deserialize;
use tracing::{Instrument, debug, info, info_span, warn};

/// The store prefix of every Event, of both versions, in every logical cluster.
fn prefix() -> Vec<u8> {
    crate::registry::keys::resource_prefix_of("", "events")
}

/// Keys read per page of a sweep.
const PAGE: usize = 500;

/// The longest time between two sweeps.
const MAX_PERIOD: Duration = Duration::from_secs(60);

/// The shortest time between two sweeps (for a TTL of a few hundred milliseconds).
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// How often Events are looked at for a TTL of `ttl`: a quarter of it, at most a minute,
/// so that an Event lives at most `ttl` + that period.
pub fn period(ttl: Duration) -> Duration {
    (ttl / 4).clamp(MIN_PERIOD, MAX_PERIOD)
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Events deleted.
    pub deleted: usize,
    /// Events written within the TTL, kept.
    pub kept: usize,
    /// Expired Events changed or deleted by someone else between the list and the delete.
    pub raced: usize,
    /// Events whose last time could not be read, kept.
    pub undecodable: usize,
}

/// Deletes every Event of `store` whose last time is older than `now - ttl`, each
/// conditioned on the revision it was listed at. Fails on the first store error other
/// than a conflict or a missing key (the next sweep starts over).
pub async fn sweep(store: &dyn Store, ttl: Duration, now: Timestamp) -> Result<Sweep, Error> {
    let ttl = jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX);
    let cutoff = now.checked_sub(ttl).unwrap_or(Timestamp::MIN);
    let mut done = Sweep::default();
    let mut after: Option<Bytes> = None;
    let prefix = prefix();
    loop {
        // Each page at the latest revision: a long sweep must not fail because the store
        // was compacted past the revision of its first page, and the deletes are
        // conditioned anyway.
        let page = store
            .list(
                &prefix,
                ListOptions {
                    revision: None,
                    limit: PAGE,
                    after: after.take(),
                },
            )
            .await?;
        for kv in &page.kvs {
            let last = match last_time(&kv.value) {
                Ok(last) => last,
                Err(why) => {
                    let key = String::from_utf8_lossy(&kv.key);
                    if done.undecodable == 0 {
                        warn!(%key, %why, "an Event whose last time cannot be read is kept");
                    } else {
                        debug!(%key, %why, "an Event whose last time cannot be read is kept");
                    }
                    done.undecodable += 1;
                    continue;
                }
            };
            if last >= cutoff {
                done.kept += 1;
                continue;
            }
            match store.delete(&kv.key, Some(kv.mod_revision)).await {
                Ok(_) => done.deleted += 1,
                Err(Error::Conflict { .. } | Error::NotFound { .. }) => done.raced += 1,
                Err(e) => return Err(e),
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(done),
        }
    }
}

/// Sweeps `store` every [`period`] of `ttl`, until the task is dropped.
pub async fn run(store: Arc<dyn Store>, ttl: Duration) {
    let every = period(ttl);
    async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match sweep(store.as_ref(), ttl, Timestamp::now()).await {
                Ok(done) if done.deleted > 0 || done.undecodable > 0 => info!(
                    deleted = done.deleted,
                    kept = done.kept,
                    raced = done.raced,
                    undecodable = done.undecodable,
                    "expired Events deleted"
                ),
                Ok(done) => debug!(kept = done.kept, raced = done.raced, "no Event expired"),
                Err(e) => warn!(error = %e, "the Events' expiry failed; trying again later"),
            }
        }
    }
    .instrument(info_span!(
        "event_expiry",
        ttl_secs = ttl.as_secs_f64(),
        period_secs = every.as_secs_f64()
    ))
    .await
}

/// The times of an Event that say when it was last written, in either version.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Times {
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    series: Option<Series>,
    #[serde(default)]
    last_timestamp: Option<String>,
    #[serde(default)]
    deprecated_last_timestamp: Option<String>,
    #[serde(default)]
    event_time: Option<String>,
    #[serde(default)]
    first_timestamp: Option<String>,
    #[serde(default)]
    deprecated_first_timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    #[serde(default)]
    creation_timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Series {
    #[serde(default)]
    last_observed_time: Option<String>,
}

/// Why an Event's last time cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Undecodable {
    /// The stored value is not an Event's JSON.
    #[error("not an Event's JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A time field holds no RFC 3339 time.
    #[error("{field} {value:?} is no RFC 3339 time: {error}")]
    Time {
        /// The field.
        field: &'static str,
        /// What it holds.
        value: String,
        /// The parser's complaint.
        error: jiff::Error,
    },
    /// No time field is set.
    #[error("it has no time at all")]
    NoTime,
}

/// The last time an Event (stored JSON of either version) was written: the latest of the
/// times it has. A time that is set but unreadable makes the whole Event unreadable (it is
/// not guessed from the others).
pub fn last_time(stored: &[u8]) -> Result<Timestamp, Undecodable> {
    let times: Times = serde_json::from_slice(stored)?;
    let fields = [
        (
            "series.lastObservedTime",
            times.series.and_then(|s| s.last_observed_time),
        ),
        ("lastTimestamp", times.last_timestamp),
        ("deprecatedLastTimestamp", times.deprecated_last_timestamp),
        ("eventTime", times.event_time),
        ("firstTimestamp", times.first_timestamp),
        ("deprecatedFirstTimestamp", times.deprecated_first_timestamp),
        (
            "metadata.creationTimestamp",
            times.metadata.and_then(|m| m.creation_timestamp),
        ),
    ];
    let mut latest: Option<Timestamp> = None;
    for (field, value) in fields {
        // A zero time is written as null, or as "" by some clients: not set.
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            continue;
        };
        let time: Timestamp = value.parse().map_err(|error| Undecodable::Time {
            field,
            value: value.clone(),
            error,
        })?;
        latest = latest.max(Some(time));
    }
    latest.ok_or(Undecodable::NoTime)
}

#[cfg(test)]
mod tests {
    use flotilla_store::Revision;
    use flotilla_store_memory::MemoryStore;
    use serde_json::{Value, json};

    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(now: Timestamp, ago: Duration) -> String {
        let ago = jiff::SignedDuration::try_from(ago).unwrap();
        now.checked_sub(ago).unwrap().to_string()
    }

    /// A core/v1 Event whose times are all `ago` before `now`.
    fn core(now: Timestamp, ago: Duration) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "x", "namespace": "shop", "creationTimestamp": at(now, ago)},
            "involvedObject": {"kind": "Placement", "name": "web"},
            "reason": "Scheduled", "message": "m", "type": "Normal",
            "firstTimestamp": at(now, ago), "lastTimestamp": at(now, ago),
            "eventTime": null, "count": 1
        })
    }

    /// An events.k8s.io/v1 Event whose times are all `ago` before `now` (MicroTime).
    fn new_style(now: Timestamp, ago: Duration) -> Value {
        let micro = |ago| {
            let ago = jiff::SignedDuration::try_from(ago).unwrap();
            now.checked_sub(ago)
                .unwrap()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string()
        };
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "y", "namespace": "shop", "creationTimestamp": at(now, ago)},
            "regarding": {"kind": "Placement", "name": "web"},
            "reason": "Scheduled", "note": "m", "type": "Normal",
            "action": "Scheduling", "reportingController": "flotilla.io/fleet",
            "reportingInstance": "hub", "eventTime": micro(ago)
        })
    }

    async fn put(store: &MemoryStore, key: &str, value: &Value) {
        store
            .create(key.as_bytes(), Bytes::from(value.to_string()))
            .await
            .unwrap();
    }

    async fn keys(store: &MemoryStore) -> Vec<String> {
        let page = store.list(b"/", ListOptions::default()).await.unwrap();
        page.kvs
            .iter()
            .map(|kv| String::from_utf8(kv.key.to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn events_last_written_before_the_ttl_are_deleted_in_every_cluster_and_form() {
        let store = MemoryStore::new();
        let now = Timestamp::now();
        let old = 2 * HOUR;
        let fresh = Duration::from_secs(60);
        // Old: core/v1 and events.k8s.io/v1, in two logical clusters.
        put(&store, "/core/events/root/shop/old-core", &core(now, old)).await;
        put(
            &store,
            "/core/events/team-a/shop/old-new",
            &new_style(now, old),
        )
        .await;
        put(&store, "/core/events/team-a/x/old-core", &core(now, old)).await;
        // Fresh: kept.
        put(
            &store,
            "/core/events/root/shop/fresh-core",
            &core(now, fresh),
        )
        .await;
        put(
            &store,
            "/core/events/team-a/shop/fresh-new",
            &new_style(now, fresh),
        )
        .await;
        // Created 2 h ago, but its series was observed a minute ago: kept (either form).
        let mut series = new_style(now, old);
        series["series"] = json!({"count": 40, "lastObservedTime": at(now, fresh)});
        put(&store, "/core/events/root/shop/series-new", &series).await;
        let mut series = core(now, old);
        series["series"] = json!({"count": 40, "lastObservedTime": at(now, fresh)});
        put(&store, "/core/events/team-a/shop/series-core", &series).await;
        // First seen 2 h ago, last seen now (aggregated repeats, core/v1): kept.
        let mut repeated = core(now, old);
        repeated["lastTimestamp"] = at(now, fresh).into();
        put(&store, "/core/events/root/shop/repeated", &repeated).await;
        // A deprecatedLastTimestamp that is fresh keeps an events.k8s.io/v1 Event.
        let mut deprecated = new_style(now, old);
        deprecated["deprecatedLastTimestamp"] = at(now, fresh).into();
        put(&store, "/core/events/root/shop/deprecated", &deprecated).await;
        // Undecodable: not JSON, a time that is no time, no time at all. Kept.
        store
            .create(
                b"/core/events/root/shop/garbage",
                Bytes::from_static(b"{not json"),
            )
            .await
            .unwrap();
        let mut bad_time = core(now, old);
        bad_time["lastTimestamp"] = "yesterday".into();
        put(&store, "/core/events/root/shop/bad-time", &bad_time).await;
        put(
            &store,
            "/core/events/root/shop/timeless",
            &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "timeless"}}),
        )
        .await;
        // Not an Event: an old ConfigMap, and a key beside the prefix.
        put(&store, "/core/configmaps/root/shop/old", &core(now, old)).await;
        put(&store, "/core/eventsx/root/shop/old", &core(now, old)).await;

        let done = sweep(&store, HOUR, now).await.unwrap();
        assert_eq!(
            done,
            Sweep {
                deleted: 3,
                kept: 6,
                raced: 0,
                undecodable: 3
            }
        );
        assert_eq!(
            keys(&store).await,
            [
                "/core/configmaps/root/shop/old",
                "/core/events/root/shop/bad-time",
                "/core/events/root/shop/deprecated",
                "/core/events/root/shop/fresh-core",
                "/core/events/root/shop/garbage",
                "/core/events/root/shop/repeated",
                "/core/events/root/shop/series-new",
                "/core/events/root/shop/timeless",
                "/core/events/team-a/shop/fresh-new",
                "/core/events/team-a/shop/series-core",
                "/core/eventsx/root/shop/old",
            ]
        );
        // Nothing more to do a second time.
        let again = sweep(&store, HOUR, now).await.unwrap();
        assert_eq!((again.deleted, again.kept), (0, 6));
    }

    #[tokio::test]
    async fn a_sweep_pages_through_more_events_than_one_page() {
        let store = MemoryStore::new();
        let now = Timestamp::now();
        for n in 0..(PAGE * 2 + 7) {
            let ago = if n % 2 == 0 { 2 * HOUR } else { Duration::ZERO };
            put(
                &store,
                &format!("/core/events/root/ns/e{n:05}"),
                &core(now, ago),
            )
            .await;
        }
        let done = sweep(&store, HOUR, now).await.unwrap();
        assert_eq!((done.deleted, done.kept), (PAGE + 4, PAGE + 3));
        assert_eq!(store.count(&prefix()).await.unwrap(), (PAGE + 3) as u64);
    }

    /// A MemoryStore where every Event is written again (fresh) just before it is
    /// deleted: a client's write between the sweep's list and its delete.
    struct WrittenMeanwhile(MemoryStore);

    #[async_trait::async_trait]
    impl Store for WrittenMeanwhile {
        async fn get(
            &self,
            key: &[u8],
            revision: Option<flotilla_store::Revision>,
        ) -> flotilla_store::Result<Option<flotilla_store::KeyValue>> {
            self.0.get(key, revision).await
        }
        async fn list(
            &self,
            prefix: &[u8],
            options: ListOptions,
        ) -> flotilla_store::Result<flotilla_store::ListPage> {
            self.0.list(prefix, options).await
        }
        async fn count(&self, prefix: &[u8]) -> flotilla_store::Result<u64> {
            self.0.count(prefix).await
        }
        async fn create(&self, key: &[u8], value: Bytes) -> flotilla_store::Result<Revision> {
            self.0.create(key, value).await
        }
        async fn update(
            &self,
            key: &[u8],
            value: Bytes,
            expected: Revision,
        ) -> flotilla_store::Result<Revision> {
            self.0.update(key, value, expected).await
        }
        async fn delete(
            &self,
            key: &[u8],
            expected: Option<Revision>,
        ) -> flotilla_store::Result<(Revision, flotilla_store::KeyValue)> {
            let current = self.0.get(key, None).await?.unwrap();
            let fresh = core(Timestamp::now(), Duration::ZERO).to_string();
            self.0
                .update(key, Bytes::from(fresh), current.mod_revision)
                .await?;
            self.0.delete(key, expected).await
        }
        async fn watch(
            &self,
            prefix: &[u8],
            since: Revision,
        ) -> flotilla_store::Result<flotilla_store::WatchStream> {
            self.0.watch(prefix, since).await
        }
        async fn current_revision(&self) -> flotilla_store::Result<Revision> {
            self.0.current_revision().await
        }
        async fn compacted_revision(&self) -> flotilla_store::Result<Revision> {
            self.0.compacted_revision().await
        }
        async fn compact(&self, revision: Revision) -> flotilla_store::Result<()> {
            self.0.compact(revision).await
        }
    }

    #[tokio::test]
    async fn an_event_written_after_it_was_listed_is_not_deleted() {
        // The delete is conditioned on the revision listed: the write in between wins.
        let store = WrittenMeanwhile(MemoryStore::new());
        let now = Timestamp::now();
        let key = b"/core/events/root/shop/e";
        store
            .create(key, Bytes::from(core(now, 2 * HOUR).to_string()))
            .await
            .unwrap();
        let done = sweep(&store, HOUR, now).await.unwrap();
        assert_eq!((done.deleted, done.raced), (0, 1));
        assert!(store.get(key, None).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn the_store_watch_sees_each_expired_event_deleted() {
        let store = MemoryStore::new();
        let now = Timestamp::now();
        put(&store, "/core/events/root/shop/old", &core(now, 2 * HOUR)).await;
        let from = store.current_revision().await.unwrap();
        let mut watch = store.watch(&prefix(), from).await.unwrap();
        assert_eq!(sweep(&store, HOUR, now).await.unwrap().deleted, 1);
        let event = futures_util::StreamExt::next(&mut watch)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.kind, flotilla_store::EventKind::Delete);
        assert_eq!(&event.kv.key[..], b"/core/events/root/shop/old");
    }

    #[test]
    fn the_last_time_is_the_latest_of_the_times_given() {
        let event = json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "firstTimestamp": "2026-01-01T00:00:00Z",
            "eventTime": "2026-01-01T00:05:00.123456Z",
            "series": {"lastObservedTime": "2026-01-01T00:03:00.000001Z"},
            "lastTimestamp": null
        });
        let last = last_time(event.to_string().as_bytes()).unwrap();
        assert_eq!(last, "2026-01-01T00:05:00.123456Z".parse().unwrap());
        let e = last_time(br#"{"eventTime": 5}"#).unwrap_err();
        assert!(matches!(e, Undecodable::Json(_)), "{e}");
        let e = last_time(br#"{"eventTime": ""}"#).unwrap_err();
        assert!(matches!(e, Undecodable::NoTime), "{e}");
    }

    #[test]
    fn sweeps_come_every_quarter_ttl_at_most_a_minute_apart() {
        assert_eq!(period(HOUR), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(3)), Duration::from_millis(750));
        assert_eq!(period(Duration::from_millis(10)), MIN_PERIOD);
    }
}
