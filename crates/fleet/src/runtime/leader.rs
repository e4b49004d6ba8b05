//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`:
//! of several hub replicas over one store, one at a time runs a group of controllers.
//!
//! ```text
//!  candidate ──(every retry period, +≤20 %)──── try: the Lease is missing → create it;
//!      ▲                                        free ("" holder) or not renewed for its
//!      │                                        duration (by this replica's clock, since
//!      │                                        the record last changed) → update it with
//!      │                                        its resourceVersion (CAS); transitions+1
//!      │ lost: no renewal within the             when the holder changes
//!      │ renew deadline, or another holder      │ acquired
//!      │ seen → the work is cancelled           ▼
//!      └──────────────────────────────────── leading: the work runs; renewed every retry
//!                                             period (renewTime, CAS)
//!  stop (SIGTERM) ─► the work is cancelled, the Lease released at once (holder "",
//!                    duration 1 s): another candidate takes it on its next try
//! ```
//!
//! Expiry is judged on the observing replica's clock, from when it last saw the record
//! change (never by comparing its clock with the holder's `renewTime`), so clock skew
//! between replicas does not shorten a lease. The work is a factory: each term starts it
//! afresh, and losing the lease drops (cancels) the running future and every task it
//! spawned that ends with it.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tracing::{Instrument, debug, info, info_span, warn};

/// The durations of an election, as client-go's (and kube-controller-manager's
/// `--leader-elect-*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderConfig {
    /// How long a Lease holds without renewal before a candidate may take it.
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal; below the lease
    /// duration, so it stops before anyone else may start.
    pub renew_deadline: Duration,
    /// How often a candidate tries to acquire and the leader renews.
    pub retry_period: Duration,
}

impl Default for LeaderConfig {
    /// 15 s, 10 s, 2 s.
    fn default() -> Self {
        LeaderConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderConfig {
    /// Why these durations cannot work, if they cannot: the renew deadline must be below
    /// the lease duration and the retry period below the renew deadline, none zero.
    pub fn check(&self) -> Result<(), LeaderConfigError> {
        if self.retry_period.is_zero() {
            return Err(LeaderConfigError::Zero);
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(LeaderConfigError::RenewNotBelowLease);
        }
        if self.retry_period >= self.renew_deadline {
            return Err(LeaderConfigError::RetryNotBelowRenew);
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(LeaderConfigError::LeaseTooShort);
        }
        Ok(())
    }
}

/// Durations of a [`LeaderConfig`] that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaderConfigError {
    /// A zero retry period.
    #[error("the retry period must be above zero")]
    Zero,
    /// The leader would act past the point where another may take the lease.
    #[error("the renew deadline must be shorter than the lease duration")]
    RenewNotBelowLease,
    /// The leader would not try to renew before its deadline.
    #[error("the retry period must be shorter than the renew deadline")]
    RetryNotBelowRenew,
    /// A Lease records whole seconds.
    #[error("the lease duration must be at least 1s")]
    LeaseTooShort,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    lease: String,
}

/// What `/metrics` shows of the elections: `flotilla_leader{lease}` (1 while this replica
/// holds it, else 0) and `flotilla_leader_transitions{lease}` (the Lease's
/// `leaseTransitions` as this replica last saw it). Clones share the values.
#[derive(Clone, Debug, Default)]
pub struct LeaderMetrics {
    leader: Family<LeaseLabels, Gauge<i64, AtomicI64>>,
    transitions: Family<LeaseLabels, Gauge<i64, AtomicI64>>,
}

impl LeaderMetrics {
    /// Adds the metrics to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "flotilla_leader",
            "Whether this replica holds the Lease (1) or not (0)",
            self.leader.clone(),
        );
        registry.register(
            "flotilla_leader_transitions",
            "The Lease's leaseTransitions (changes of holder) as this replica last saw it",
            self.transitions.clone(),
        );
    }

    fn leading(&self, lease: &str, leading: bool) {
        self.leader
            .get_or_create(&labels(lease))
            .set(i64::from(leading));
    }

    fn transitions(&self, lease: &str, transitions: i32) {
        self.transitions
            .get_or_create(&labels(lease))
            .set(i64::from(transitions));
    }
}

fn labels(lease: &str) -> LeaseLabels {
    LeaseLabels {
        lease: lease.to_owned(),
    }
}

/// What the leader runs: started afresh on each acquisition, dropped on loss.
pub type Work = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// A holder identity unique to this process: the host name, the process id and 64 random
/// bits (a replica restarted with the same pid is still another holder).
pub fn unique_identity() -> String {
    use ring::rand::SecureRandom;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "flotilla".to_owned());
    let mut random = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut random);
    let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("{host}_{}_{random}", std::process::id())
}

/// One attempt's outcome.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease (acquired or renewed).
    Held,
    /// Another replica holds it; it expires in this long unless renewed.
    Other(Duration),
    /// The API failed or another write came first.
    Failed,
}

/// Why a term ended.
enum End {
    Lost,
    Stopped,
}

/// A candidate for one Lease.
pub struct Elector {
    leases: Api<Lease>,
    name: String,
    identity: String,
    config: LeaderConfig,
    metrics: LeaderMetrics,
    /// The resourceVersion of the record last seen, and when (this replica's clock).
    observed: Option<(String, Instant)>,
    /// The holder last seen, for a log line when it changes.
    seen_holder: String,
}

impl Elector {
    /// A candidate for Lease `namespace/name` as `identity`, through `client` (which may
    /// get, create and update it).
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        config: LeaderConfig,
        metrics: LeaderMetrics,
    ) -> Elector {
        metrics.leading(name, false);
        Elector {
            leases: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            config,
            metrics,
            observed: None,
            seen_holder: String::new(),
        }
    }

    /// Campaigns until `stop` turns true: runs `work` while holding the Lease, cancels it
    /// when the Lease is lost (and campaigns again), and on stop cancels it and releases
    /// the Lease before returning.
    pub async fn run(mut self, work: Work, mut stop: watch::Receiver<bool>) {
        let span = info_span!("leader_election", lease = %self.name, identity = %self.identity);
        async move {
            loop {
                tokio::select! {
                    biased;
                    _ = stop.wait_for(|stop| *stop) => return,
                    () = self.acquire() => {}
                }
                info!("acquired the lease: leading");
                self.metrics.leading(&self.name, true);
                // Should the work end by itself, the lease is still held (and renewed).
                let task = tokio::spawn(work());
                let end = tokio::select! {
                    biased;
                    _ = stop.wait_for(|stop| *stop) => End::Stopped,
                    end = self.renew() => end,
                };
                task.abort();
                let _ = task.await;
                self.metrics.leading(&self.name, false);
                match end {
                    End::Lost => {
                        warn!("lost the lease: the elected work is stopped; a candidate again")
                    }
                    End::Stopped => {
                        self.release().await;
                        return;
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Tries every retry period (plus up to a fifth of it, so that candidates spread) until
    /// the Lease is held; right when a held Lease would expire if that comes sooner.
    async fn acquire(&mut self) {
        loop {
            let period = self.config.retry_period;
            let next = period + period.mul_f64(0.2 * random_fraction());
            let wait = match self.try_acquire_or_renew().await {
                Attempt::Held => return,
                Attempt::Other(left) => next.min(left + Duration::from_millis(10)),
                Attempt::Failed => next,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Renews every retry period; returns once the renew deadline passed since the last
    /// renewal, or another holder is seen.
    async fn renew(&mut self) -> End {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = renewed + self.config.renew_deadline;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return End::Lost;
            }
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Attempt::Held) => renewed = Instant::now(),
                Ok(Attempt::Other(_)) => return End::Lost,
                Ok(Attempt::Failed) | Err(_) => {}
            }
        }
    }

    /// Notes the record `lease` holds; returns when it was first seen as it is.
    fn observe(&mut self, lease: &Lease) -> Instant {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let spec = lease.spec.clone().unwrap_or_default();
        self.metrics
            .transitions(&self.name, spec.lease_transitions.unwrap_or(0));
        let holder = spec.holder_identity.unwrap_or_default();
        if holder != self.seen_holder {
            if holder != self.identity && !holder.is_empty() {
                info!(holder = %holder, "new leader observed");
            }
            self.seen_holder = holder;
        }
        match &self.observed {
            Some((seen, at)) if *seen == version => *at,
            _ => {
                let now = Instant::now();
                self.observed = Some((version, now));
                now
            }
        }
    }

    /// One try, as client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let current = match self.leases.get_opt(&self.name).await {
            Ok(current) => current,
            Err(e) => {
                debug!(error = %e, "cannot read the lease");
                return Attempt::Failed;
            }
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.leases.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Attempt::Held
                }
                Err(e) => {
                    debug!(error = %e, "cannot create the lease");
                    Attempt::Failed
                }
            };
        };
        let seen_at = self.observe(&lease);
        let spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        if !mine && !holder.is_empty() {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            if let Some(left) = duration.checked_sub(seen_at.elapsed())
                && !left.is_zero()
            {
                return Attempt::Other(left);
            }
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..spec
        });
        // The resourceVersion read above makes this a compare-and-swap.
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                if !mine {
                    info!(
                        previous = %holder,
                        transitions = transitions.saturating_add(1),
                        "took the lease"
                    );
                }
                self.observe(&written);
                Attempt::Held
            }
            Err(e) => {
                debug!(error = %e, "cannot write the lease");
                Attempt::Failed
            }
        }
    }

    /// Gives the Lease up if this replica holds it: no holder, a 1 s duration (as
    /// client-go's ReleaseOnCancel), so another candidate takes it on its next try.
    async fn release(&mut self) {
        let attempt = async {
            let mut lease = self.leases.get_opt(&self.name).await.ok()??;
            let spec = lease.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return None;
            }
            let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            });
            self.leases
                .replace(&self.name, &PostParams::default(), &lease)
                .await
                .ok()
        };
        match tokio::time::timeout(self.config.renew_deadline, attempt).await {
            Ok(Some(_)) => info!("released the lease"),
            _ => warn!("could not release the lease; it expires by itself"),
        }
    }
}

/// A number in [0, 1) for jitter.
fn random_fraction() -> f64 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 2];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    f64::from(u16::from_le_bytes(bytes)) / 65536.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_checked_as_client_go_does() {
        assert_eq!(LeaderConfig::default().check(), Ok(()));
        let config = |lease, renew, retry| LeaderConfig {
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        };
        assert_eq!(
            config(10, 10, 2).check(),
            Err(LeaderConfigError::RenewNotBelowLease)
        );
        assert_eq!(
            config(15, 10, 10).check(),
            Err(LeaderConfigError::RetryNotBelowRenew)
        );
        assert_eq!(config(15, 10, 0).check(), Err(LeaderConfigError::Zero));
    }

    #[test]
    fn identities_differ_per_process_start() {
        assert_ne!(unique_identity(), unique_identity());
        assert!(unique_identity().contains(&std::process::id().to_string()));
    }
}
