//! What the fleet controllers count, for the hub's `/metrics`: how many Works are
//! confirmed in sync on their members, how syncs end, and how long rollout steps take.
//!
//! ```text
//!  push: sync of a Work ─► every manifest applied, current generation? ─► in sync set
//!                       └► flotilla_work_syncs_total{result}
//!  Work withdrawn / sync failed ─► out of the set
//!  flotilla_works_in_sync = size of the set (Works confirmed since the hub started)
//!  placement: rollout step = compute (plan the wave)   + writes (its Works, pruning)
//!                       │       └► flotilla_rollout_compute_seconds  └► flotilla_rollout_write_seconds
//!                       └► flotilla_rollout_step_seconds (histogram: both, as since stop 31)
//! ```
//!
//! The writes are the Works' server-side applies through the in-process API into the store
//! (each a durable commit), awaited a few at a time: the step's time waiting on the store.
//! The compute part is the controller's own work (render, plan, compare).

use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncLabels {
    result: &'static str,
}

/// The buckets of [`Metrics`]' rollout step histogram, in seconds: 1 ms to 4 s.
const STEP_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0,
];

/// The fleet controllers' metrics. Clones share the values.
#[derive(Clone)]
pub struct Metrics {
    in_sync: Arc<Mutex<HashSet<String>>>,
    in_sync_gauge: Gauge<i64, AtomicI64>,
    syncs: Family<SyncLabels, Counter>,
    rollout_steps: Histogram,
    rollout_compute: Histogram,
    rollout_writes: Histogram,
}

/// How long one rollout step took, in seconds, by part.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct StepTime {
    /// Planning: reading the revisions' renders, the wave planner, comparing with the Works.
    pub compute: f64,
    /// Awaiting the Works' writes (and deletes) and the pruning of old revisions.
    pub writes: f64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            in_sync: Arc::default(),
            in_sync_gauge: Gauge::default(),
            syncs: Family::default(),
            rollout_steps: Histogram::new(STEP_BUCKETS),
            rollout_compute: Histogram::new(STEP_BUCKETS),
            rollout_writes: Histogram::new(STEP_BUCKETS),
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("works_in_sync", &self.works_in_sync())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Adds these metrics to `registry` (the hub's `/metrics`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "flotilla_works_in_sync",
            "Works whose latest sync since the hub started applied every manifest of their current generation",
            self.in_sync_gauge.clone(),
        );
        registry.register(
            "flotilla_work_syncs",
            "Syncs of Works to their members, by result (in_sync, not_applied, failed)",
            self.syncs.clone(),
        );
        registry.register(
            "flotilla_rollout_step_seconds",
            "Time the placement controller spent in one rollout step: planning the wave, writing its Works and pruning old revisions",
            self.rollout_steps.clone(),
        );
        registry.register(
            "flotilla_rollout_compute_seconds",
            "Time the placement controller computed in one rollout step: rendering, planning the wave and comparing with the current Works (no writes)",
            self.rollout_compute.clone(),
        );
        registry.register(
            "flotilla_rollout_write_seconds",
            "Time one rollout step awaited its Works' writes and the pruning of old revisions (the store's commits)",
            self.rollout_writes.clone(),
        );
    }

    /// Records a rollout step's time: each part, and their sum in the step histogram.
    pub(super) fn rollout_step(&self, time: StepTime) {
        self.rollout_compute.observe(time.compute);
        self.rollout_writes.observe(time.writes);
        self.rollout_steps.observe(time.compute + time.writes);
    }

    /// How many Works are confirmed in sync.
    pub fn works_in_sync(&self) -> usize {
        self.in_sync
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Records that the Work `key` was synced: `applied` when every manifest of its
    /// current generation is applied.
    pub(super) fn synced(&self, key: &str, applied: bool) {
        let result = if applied { "in_sync" } else { "not_applied" };
        self.syncs.get_or_create(&SyncLabels { result }).inc();
        self.set(key, applied);
    }

    /// Records that syncing the Work `key` failed, or that it is gone.
    pub(super) fn failed(&self, key: &str) {
        self.syncs
            .get_or_create(&SyncLabels { result: "failed" })
            .inc();
        self.set(key, false);
    }

    /// Forgets the Work `key` (withdrawn from its member).
    pub(super) fn forget(&self, key: &str) {
        self.set(key, false);
    }

    fn set(&self, key: &str, in_sync: bool) {
        let mut set = self.in_sync.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = if in_sync {
            set.insert(key.to_owned())
        } else {
            set.remove(key)
        };
        if changed {
            self.in_sync_gauge
                .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn works_enter_and_leave_the_in_sync_set() {
        let metrics = Metrics::default();
        metrics.synced("ns/a", true);
        metrics.synced("ns/a", true);
        metrics.synced("ns/b", true);
        metrics.synced("ns/c", false);
        assert_eq!(metrics.works_in_sync(), 2);
        let text = scrape(&metrics);
        assert!(text.contains("flotilla_works_in_sync 2\n"), "{text}");
        assert!(
            text.contains("flotilla_work_syncs_total{result=\"in_sync\"} 3\n"),
            "{text}"
        );
        metrics.synced("ns/a", false);
        metrics.failed("ns/b");
        metrics.forget("ns/c");
        assert_eq!(metrics.works_in_sync(), 0);
        let text = scrape(&metrics);
        assert!(text.contains("flotilla_works_in_sync 0\n"), "{text}");
        assert!(
            text.contains("flotilla_work_syncs_total{result=\"failed\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn rollout_steps_are_timed_in_a_histogram() {
        let metrics = Metrics::default();
        metrics.rollout_step(StepTime {
            compute: 0.001,
            writes: 0.002,
        });
        metrics.rollout_step(StepTime {
            compute: 0.1,
            writes: 0.2,
        });
        let text = scrape(&metrics);
        assert!(
            text.contains("flotilla_rollout_step_seconds_count 2\n"),
            "{text}"
        );
        assert!(
            text.contains("flotilla_rollout_step_seconds_sum 0.303"),
            "{text}"
        );
        assert!(
            text.contains("flotilla_rollout_step_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        // Each part on its own.
        assert!(
            text.contains("flotilla_rollout_compute_seconds_sum 0.101"),
            "{text}"
        );
        assert!(
            text.contains("flotilla_rollout_write_seconds_sum 0.202"),
            "{text}"
        );
        assert!(
            text.contains("flotilla_rollout_write_seconds_bucket{le=\"0.001\"} 0\n"),
            "{text}"
        );
    }
}
