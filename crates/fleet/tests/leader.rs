//! The elector against a real in-process API server (memory store): one holder at a time,
//! release on stop, takeover after expiry, cancellation of the work on a lost Lease, and
//! `leaseTransitions` counting changes of holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flotilla_apiserver::Api;
use flotilla_apiserver::http::metrics::Metrics;
use flotilla_apiserver::http::server::local_service_as;
use flotilla_fleet::runtime::leader::{Elector, LeaderConfig, LeaderMetrics, Work};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use tokio::sync::watch;

const NAMESPACE: &str = "default";
const LEASE: &str = "test-lease";

async fn client() -> kube::Client {
    let store: Arc<dyn flotilla_store::Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let api = Api::new(
        store,
        Arc::new(flotilla_apiserver::Registry::builtin()),
        "127.0.0.1",
    );
    api.bootstrap().await.unwrap();
    kube::Client::new(
        local_service_as(
            api,
            Arc::new(Metrics::new()),
            flotilla_apiserver::auth::UserInfo::loopback(),
        ),
        NAMESPACE,
    )
}

fn config() -> LeaderConfig {
    LeaderConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    }
}

/// A candidate: how many copies of its work run now, and how many were ever started.
struct Candidate {
    running: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// Counts itself out of `running` when dropped (the work cancelled).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn candidate(client: &kube::Client, identity: &str, metrics: &LeaderMetrics) -> Candidate {
    let running = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (r, s) = (running.clone(), started.clone());
    let work: Work = Arc::new(move || {
        let (r, s) = (r.clone(), s.clone());
        Box::pin(async move {
            s.fetch_add(1, Ordering::SeqCst);
            r.fetch_add(1, Ordering::SeqCst);
            let _running = Running(r);
            std::future::pending::<()>().await;
        })
    });
    let elector = Elector::new(
        client.clone(),
        NAMESPACE,
        LEASE,
        identity,
        config(),
        metrics.clone(),
    );
    let (stop, stopped) = watch::channel(false);
    Candidate {
        running,
        started,
        stop,
        task: tokio::spawn(elector.run(work, stopped)),
    }
}

impl Candidate {
    fn runs(&self) -> bool {
        self.running.load(Ordering::SeqCst) > 0
    }
}

/// Polls `probe` every 50 ms until it holds, for at most 20 s.
async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !probe().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn lease(client: &kube::Client) -> (Option<String>, i32) {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), NAMESPACE);
    let spec = leases.get(LEASE).await.unwrap().spec.unwrap_or_default();
    (spec.holder_identity, spec.lease_transitions.unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_runs_the_work_and_hands_over_on_stop_and_on_expiry() {
    let client = client().await;
    let metrics = LeaderMetrics::default();
    let mut a = candidate(&client, "a", &metrics);
    eventually("a holds the lease and runs", async || {
        a.runs() && lease(&client).await.0.as_deref() == Some("a")
    })
    .await;
    assert_eq!(lease(&client).await.1, 0, "created: no transition yet");
    let b = candidate(&client, "b", &metrics);
    // b keeps trying for longer than a lease lasts: a renews, b never runs.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(!b.runs(), "b runs while a holds the lease");
        assert_eq!(a.running.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lease(&client).await, (Some("a".to_owned()), 0));

    // Stopped: a's work is cancelled, the lease released, and b takes it over.
    a.stop.send(true).unwrap();
    (&mut a.task).await.unwrap();
    assert!(!a.runs(), "a's work still runs after stop");
    eventually("b holds the lease and runs", async || {
        b.runs() && lease(&client).await.0.as_deref() == Some("b")
    })
    .await;
    assert_eq!(lease(&client).await.1, 1);

    // b dies without a word (no release): c takes the lease once it expires.
    b.task.abort();
    let _ = b.task.await;
    let c = candidate(&client, "c", &metrics);
    eventually("c holds the lease and runs", async || {
        c.runs() && lease(&client).await.0.as_deref() == Some("c")
    })
    .await;
    assert_eq!(lease(&client).await.1, 2);
    assert_eq!(c.started.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_work_and_the_replica_campaigns_again() {
    let client = client().await;
    let metrics = LeaderMetrics::default();
    let a = candidate(&client, "a", &metrics);
    eventually("a runs", async || a.runs()).await;
    // Another holder writes itself into the lease (as a replica that judged it expired).
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), NAMESPACE);
    let mut current = leases.get(LEASE).await.unwrap();
    let spec = current.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".to_owned());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace(LEASE, &PostParams::default(), &current)
        .await
        .unwrap();
    eventually("a's work is cancelled", async || !a.runs()).await;
    // The intruder never renews: a takes the lease back and starts its work afresh.
    eventually("a leads again", async || {
        a.runs() && lease(&client).await.0.as_deref() == Some("a")
    })
    .await;
    assert_eq!(a.started.load(Ordering::SeqCst), 2);
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(&format!("flotilla_leader{{lease=\"{LEASE}\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "flotilla_leader_transitions{{lease=\"{LEASE}\"}} 1"
        )),
        "{text}"
    );
    a.stop.send(true).unwrap();
    a.task.await.unwrap();
    assert_eq!(lease(&client).await.0, None, "released on stop");
}
