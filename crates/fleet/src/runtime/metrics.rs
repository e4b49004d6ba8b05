//! What the fleet controllers count, for the hub's `/metrics`: how many Works are
//! confirmed in sync on their members, and how syncs end.
//!
//! ```text
//!  push: sync of a Work ─► every manifest applied, current generation? ─► in sync set
//!                       └► flotilla_work_syncs_total{result}
//!  Work withdrawn / sync failed ─► out of the set
//!  flotilla_works_in_sync = size of the set (Works confirmed since the hub started)
//! ```

use std::collections::HashSet;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyncLabels {
    result: &'static str,
}

/// The fleet controllers' metrics. Clones share the values.
#[derive(Clone, Default)]
pub struct Metrics {
    in_sync: Arc<Mutex<HashSet<String>>>,
    in_sync_gauge: Gauge<i64, AtomicI64>,
    syncs: Family<SyncLabels, Counter>,
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
}
