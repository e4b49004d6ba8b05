//! Where each cluster's probes and confirmations fall in time: spread evenly by the
//! cluster's name, not wherever its join happened to put them.
//!
//! ```text
//!  epoch ─┬──── period ────┬──── period ────┬─ …
//!         │ phase(c)       │                │      probes of c:  epoch + phase(c) + k·period
//!         ●                ●                ●      confirmations: at the probes whose
//!       k = 0            k = 1            k = 2    k ≡ slot(c) (mod slots), one per
//!                                                  slots × period
//! ```
//!
//! Clusters that joined together (a fleet registered at once, a hub restarted on a
//! store of a thousand clusters) would otherwise be probed together every period, and
//! renew their heartbeat, list their members' Nodes and re-read their namespaces and
//! profiles together once a minute: a thousand status writes within a second or two, each
//! a change every cache of Clusters decodes, with every other request of those seconds
//! queued behind them. Spread, the same work is a steady trickle of a slot's share each
//! period (kube's node lifecycle and kubelet jitter their periodic work for the same
//! reason).

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// The phase and confirmation slot of every cluster, from one epoch.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spread {
    epoch: Instant,
    slots: u32,
}

impl Spread {
    /// Phases counted from `epoch`; a confirmation falls in one of every `slots` probes.
    pub(super) fn new(epoch: Instant, slots: u32) -> Self {
        Spread {
            epoch,
            slots: slots.max(1),
        }
    }

    /// Where `cluster` falls: its phase as a fraction of a period, in [0, 1), and its
    /// confirmation slot, in [0, slots). A fixed hash of the name: the same on every
    /// probe and on every replica.
    fn position(&self, cluster: &str) -> (f64, u64) {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        cluster.hash(&mut hasher);
        let hash = hasher.finish();
        // The top 53 bits make the phase, the low bits the slot.
        let phase = (hash >> 11) as f64 / (1u64 << 53) as f64;
        (phase, (hash & 0xffff) % u64::from(self.slots))
    }

    /// The index of the period `now` falls in for `cluster` (its probes start each one),
    /// and how far into it `now` is.
    fn period_at(&self, cluster: &str, period: Duration, now: Instant) -> (u64, Duration) {
        let period = period.max(Duration::from_millis(1));
        let (phase, _) = self.position(cluster);
        // A whole period after the epoch first, so that `now` is never before the first
        // probe time counted.
        let since = now.saturating_duration_since(self.epoch) + period;
        let since = since.saturating_sub(period.mul_f64(phase));
        let index = (since.as_nanos() / period.as_nanos()) as u64;
        let into = Duration::from_nanos((since.as_nanos() % period.as_nanos()) as u64);
        (index, into)
    }

    /// How long from `now` until `cluster`'s next probe: at its phase, and at least half a
    /// period away (so a probe just made is not made again at once). Probed at its phase,
    /// the next probe is exactly a period later.
    pub(super) fn next_probe(&self, cluster: &str, period: Duration, now: Instant) -> Duration {
        let (_, into) = self.period_at(cluster, period, now);
        let next = period.saturating_sub(into);
        if next >= period / 2 {
            next
        } else {
            next + period
        }
    }

    /// How old a confirmation of `cluster` (its heartbeat, its member's facts, its
    /// namespace and profile) may be at a probe at `now`: half of `every` in the cluster's
    /// slot, one and a half times `every` anywhere else. So it is renewed once per `every`,
    /// in its own slot once it has got there, and it gets there within 1.5 × `every` of a
    /// join, since its slot comes round once per `every`.
    pub(super) fn max_age(
        &self,
        cluster: &str,
        period: Duration,
        every: Duration,
        now: Instant,
    ) -> Duration {
        if self.in_slot(cluster, period, now) {
            every / 2
        } else {
            every + every / 2
        }
    }

    /// Whether the period `now` falls in is `cluster`'s confirmation slot.
    fn in_slot(&self, cluster: &str, period: Duration, now: Instant) -> bool {
        let (_, slot) = self.position(cluster);
        let (index, _) = self.period_at(cluster, period, now);
        index % u64::from(self.slots) == slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(10);

    #[test]
    fn probed_at_its_phase_a_cluster_is_probed_again_a_period_later() {
        let epoch = Instant::now();
        let spread = Spread::new(epoch, 6);
        for name in ["a", "b", "member-17", "member-999"] {
            // The first probe: somewhere at least half a period from now, within one and a
            // half periods.
            let first = spread.next_probe(name, PERIOD, epoch);
            assert!(
                first >= PERIOD / 2 && first < PERIOD * 3 / 2,
                "{name}: {first:?}"
            );
            // From then on, exactly a period apart.
            let at = epoch + first;
            assert_eq!(spread.next_probe(name, PERIOD, at), PERIOD, "{name}");
            // Late by a little (a busy controller): still back at the phase.
            let late = at + Duration::from_millis(300);
            assert_eq!(
                spread.next_probe(name, PERIOD, late),
                PERIOD - Duration::from_millis(300)
            );
            // Reconciled for another reason just after a probe: not again at once.
            let soon = spread.next_probe(name, PERIOD, at + Duration::from_millis(10));
            assert!(soon > PERIOD / 2, "{name}: {soon:?}");
        }
    }

    #[test]
    fn a_thousand_clusters_joined_at_once_are_probed_evenly_over_the_period() {
        let epoch = Instant::now();
        let spread = Spread::new(epoch, 6);
        // Ten buckets of a second each: where each cluster's steady-state probe falls.
        let mut buckets = [0u32; 10];
        for i in 0..1_000 {
            let name = format!("member-{i}");
            let first = spread.next_probe(&name, PERIOD, epoch);
            let offset = (first.as_secs_f64() % PERIOD.as_secs_f64()) as usize;
            buckets[offset.min(9)] += 1;
        }
        // Uniform would be 100 a bucket; a hash is close to it (joined all at once and
        // not spread, one bucket would hold all 1,000).
        assert!(
            buckets.iter().all(|&n| (50..=150).contains(&n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn a_confirmation_is_renewed_once_per_six_periods_in_the_clusters_own_slot() {
        let epoch = Instant::now();
        let spread = Spread::new(epoch, 6);
        let every = PERIOD * 6;
        let mut slots_used = [0u32; 6];
        for i in 0..600 {
            let name = format!("member-{i}");
            // Probes at the cluster's phase; a confirmation renewed when older than the
            // age allowed at that probe.
            let mut at = epoch + spread.next_probe(&name, PERIOD, epoch);
            let mut confirmed = at;
            let mut renewals = Vec::new();
            for _ in 0..40 {
                at += PERIOD;
                if at - confirmed >= spread.max_age(&name, PERIOD, every, at) {
                    renewals.push(at - confirmed);
                    confirmed = at;
                }
            }
            // Never older than one and a half times `every`; after the first, exactly
            // `every` apart, all in the same slot.
            assert!(
                renewals.iter().all(|&age| age <= every * 3 / 2),
                "{renewals:?}"
            );
            assert!(
                renewals[1..].iter().all(|&age| age == every),
                "{renewals:?}"
            );
            let (_, slot) = spread.position(&name);
            assert!(spread.in_slot(&name, PERIOD, confirmed));
            slots_used[slot as usize] += 1;
        }
        // The clusters' renewals spread over the six slots.
        assert!(slots_used.iter().all(|&n| n >= 60), "{slots_used:?}");
    }
}
