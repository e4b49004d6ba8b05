//! The simulator's I/O: one store watch per followed resource across every logical
//! cluster, and status writes through the API.
//!
//! ```text
//!  store: list + watch /core/nodes/, /apps/deployments/, /apps/replicasets/,
//!         /apps/statefulsets/, /apps/daemonsets/, /batch/jobs/   (6 watches in all)
//!     │ key /{group}/{plural}/{cluster}/[{namespace}/]{name}
//!     ▼
//!  Simulation (pure) ── due_writes(now) ──► PUT /clusters/<c>/apis/…/<name>/status
//!     ▲                                     through the in-process Client (resourceVersion,
//!     └── next_due ─► sleep_until           managedFields, client watches as usual)
//! ```

use std::sync::Arc;
use std::time::Duration;

use flotilla_apiserver::api::ROOT_CLUSTER;
use flotilla_apiserver::client::Client;
use flotilla_apiserver::registry::keys;
use flotilla_apiserver::{Api, Reason};
use flotilla_store::{EventKind, KeyValue, ListOptions, Store, WatchEvent};
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use regex::Regex;
use serde_json::Value;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::Error;
use crate::provision::FIELD_MANAGER;
use crate::simulation::{Simulation, StatusWrite, WorkloadKey};
use crate::workload::Kind;

/// How many status writes are in flight at once.
const WRITERS: usize = 32;

/// How many objects one page of the initial lists holds.
const LIST_PAGE: usize = 1000;

/// How long a failed watch waits before it starts again from a fresh list.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// How the simulated workloads behave.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long a workload's status trails a change (a new spec, room freed or taken).
    pub ready_delay: Duration,
    /// Images matching this never pull: their pods never get ready.
    pub fail_images: Option<Regex>,
}

/// What the simulator follows in the store.
#[derive(Clone, Copy, Debug)]
enum Followed {
    Nodes,
    Workloads(Kind),
}

impl Followed {
    fn all() -> impl Iterator<Item = Followed> {
        std::iter::once(Followed::Nodes).chain(Kind::ALL.into_iter().map(Followed::Workloads))
    }

    /// The store prefix of its objects in every logical cluster.
    fn prefix(self) -> Vec<u8> {
        match self {
            Followed::Nodes => keys::resource_prefix_of("", "nodes"),
            Followed::Workloads(kind) => keys::resource_prefix_of(kind.group(), kind.plural()),
        }
    }
}

/// Brings the workloads of every logical cluster of an API to readiness.
pub struct Simulator {
    client: Client,
    store: Arc<dyn Store>,
    config: Config,
}

impl Simulator {
    /// A simulator writing through `api` (the root cluster's) what it reads from `store`
    /// (the one under `api`).
    pub fn new(api: Api, store: Arc<dyn Store>, config: Config) -> Self {
        Simulator {
            client: Client::new(api).with_field_manager(FIELD_MANAGER),
            store,
            config,
        }
    }

    /// Runs until dropped. A watch that fails (compacted away, a store error) starts over
    /// from a fresh list after a pause.
    pub async fn run(self) {
        let span = info_span!("simulator");
        async {
            loop {
                if let Err(e) = self.follow().await {
                    warn!(error = %e, "the simulator starts its watches again");
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Lists and watches everything followed, writing statuses as they come due.
    async fn follow(&self) -> Result<(), Error> {
        let mut sim = Simulation::new(self.config.ready_delay, self.config.fail_images.clone());
        let mut streams: Vec<BoxStream<'static, (Followed, flotilla_store::Result<WatchEvent>)>> =
            Vec::new();
        for followed in Followed::all() {
            let prefix = followed.prefix();
            let mut options = ListOptions {
                limit: LIST_PAGE,
                ..ListOptions::default()
            };
            let revision = loop {
                let page = self.store.list(&prefix, options.clone()).await?;
                let now = Instant::now();
                for kv in &page.kvs {
                    apply(&mut sim, followed, kv, true, now);
                }
                match page.next {
                    Some(next) => {
                        options.revision = Some(page.revision);
                        options.after = Some(next);
                    }
                    None => break page.revision,
                }
            };
            let watch = self.store.watch(&prefix, revision).await?;
            streams.push(watch.map(move |event| (followed, event)).boxed());
        }
        let (clusters, workloads) = sim.size();
        info!(clusters, workloads, "following the store");
        let mut events = futures_util::stream::select_all(streams);
        loop {
            let writes =
                sim.due_writes(Instant::now(), &flotilla_apiserver::registry::object::now());
            if !writes.is_empty() {
                self.write(&mut sim, writes).await;
            }
            let next = sim.next_due();
            tokio::select! {
                event = events.next() => {
                    let mut event = event;
                    // Take a burst of changes at once: its clusters are re-fitted once.
                    loop {
                        let Some((followed, change)) = event else {
                            return Err(Error::WatchEnded);
                        };
                        let change = change?;
                        let put = change.kind == EventKind::Put;
                        apply(&mut sim, followed, &change.kv, put, Instant::now());
                        match events.next().now_or_never() {
                            Some(more) => event = more,
                            None => break,
                        }
                    }
                }
                () = sleep_until(next) => {}
            }
        }
    }

    /// Writes statuses, a few at a time; a failed one is tried again later.
    async fn write(&self, sim: &mut Simulation, writes: Vec<StatusWrite>) {
        let count = writes.len();
        let results: Vec<(StatusWrite, Option<String>)> = futures_util::stream::iter(writes)
            .map(|write| async move {
                let failure = match self.client.replace(&write.path(), &write.body()).await {
                    Ok(_) => None,
                    // Deleted meanwhile: its delete event is on its way.
                    Err(e) if e.reason == Reason::NotFound => None,
                    Err(e) => Some(crate::provision::message(&e)),
                };
                (write, failure)
            })
            .buffer_unordered(WRITERS)
            .collect()
            .await;
        let retry_at = Instant::now() + self.config.ready_delay.max(RESTART_PAUSE);
        for (write, failure) in results {
            if let Some(message) = failure {
                warn!(path = %write.path(), %message, "cannot write a status; will try again");
                sim.retry(&write, retry_at);
            }
        }
        debug!(count, "statuses written");
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Applies one stored object (`put`), or its deletion, to the simulation. Objects of the
/// root cluster are not simulated: it is the simulator's own control plane.
fn apply(sim: &mut Simulation, followed: Followed, kv: &KeyValue, put: bool, now: Instant) {
    let key = &kv.key[..];
    let Some(keys::Place {
        cluster,
        namespace,
        name,
    }) = keys::place(key, &followed.prefix())
    else {
        return;
    };
    if cluster == ROOT_CLUSTER {
        return;
    }
    let object = match put.then(|| serde_json::from_slice::<Value>(&kv.value)) {
        None => None,
        Some(Ok(object)) => Some(object),
        Some(Err(e)) => {
            warn!(key = %String::from_utf8_lossy(key), error = %e, "a stored object is not JSON");
            return;
        }
    };
    match (followed, namespace) {
        (Followed::Nodes, None) => match object {
            Some(node) => sim.node_changed(cluster, name, &node),
            None => sim.node_removed(cluster, name),
        },
        (Followed::Workloads(kind), Some(namespace)) => {
            let key = WorkloadKey {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            match object {
                Some(object) => {
                    let created = kv.create_revision.get();
                    sim.workload_changed(cluster, key, &object, created, now)
                }
                None => sim.workload_removed(cluster, &key),
            }
        }
        _ => {}
    }
}
