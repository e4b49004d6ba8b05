//! The simulation's state: every cluster's nodes and workloads, which pods have room, and
//! when each workload's status is due. Plain data, no I/O: the runtime feeds it the
//! store's changes and the time, and writes the statuses it hands back.
//!
//! ```text
//!  node changed/removed ─────────┐
//!  workload changed/removed ─────┴─► its cluster is marked to re-fit
//!      (a new object or generation: due = now + delay, the clock starts again)
//!  due_writes(now) ─► re-fit marked clusters: the sum of their Ready nodes' allocatable
//!                     is handed out in creation order (creationTimestamp, then the
//!                     store's create revision); a workload whose target status
//!                     differs from its status is due at now + delay (if not already)
//!                  ─► each workload due by now whose target still differs ─► StatusWrite
//! ```
//!
//! A status thus trails what the cluster can give a workload by `delay`; pods that do not
//! fit stay unready until room comes (another workload deleted or scaled down, a node
//! added). Pods of failing images are scheduled, so they take room, but never get ready.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use regex::Regex;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::resources::Resources;
use crate::workload::{Kind, Workload, with_times, without_times};

/// Names a workload within its cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// A status to write through the API.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    /// The logical cluster.
    pub cluster: String,
    /// The workload.
    pub key: WorkloadKey,
    /// Its new `.status`.
    pub status: Value,
}

impl StatusWrite {
    /// The path of the workload's status subresource, from the root of the server.
    pub fn path(&self) -> String {
        let WorkloadKey {
            kind,
            namespace,
            name,
        } = &self.key;
        format!(
            "/clusters/{}/apis/{}/namespaces/{namespace}/{}/{name}/status",
            self.cluster,
            kind.api_version(),
            kind.plural()
        )
    }

    /// The body of a PUT to [`path`](Self::path): the object's identity and new status.
    pub fn body(&self) -> Value {
        json!({
            "apiVersion": self.key.kind.api_version(),
            "kind": self.key.kind.name(),
            "metadata": {"name": self.key.name, "namespace": self.key.namespace},
            "status": self.status,
        })
    }
}

/// One workload and what the simulation knows of it.
struct Tracked {
    workload: Workload,
    /// The store revision that created it: orders workloads created in the same second.
    created_revision: u64,
    /// How many of its pods had room at the last fit.
    fit: u64,
    /// When its status is due, if it is.
    due: Option<Instant>,
}

#[derive(Default)]
struct Cluster {
    /// Each schedulable, Ready node's allocatable resources.
    nodes: BTreeMap<String, Resources>,
    workloads: HashMap<WorkloadKey, Tracked>,
}

/// Every simulated cluster's nodes and workloads, and the statuses due.
pub struct Simulation {
    delay: Duration,
    fail_images: Option<Regex>,
    clusters: HashMap<String, Cluster>,
    /// Every due status: (when, cluster, workload).
    timers: BTreeSet<(Instant, String, WorkloadKey)>,
    /// Clusters whose room is to be handed out again.
    marked: HashSet<String>,
}

/// Sets (or moves) when `tracked`'s status is due.
fn schedule(
    timers: &mut BTreeSet<(Instant, String, WorkloadKey)>,
    cluster: &str,
    key: &WorkloadKey,
    tracked: &mut Tracked,
    at: Instant,
) {
    if let Some(before) = tracked.due.replace(at) {
        timers.remove(&(before, cluster.to_owned(), key.clone()));
    }
    timers.insert((at, cluster.to_owned(), key.clone()));
}

/// Whether a node takes pods: its Ready condition is True and it is not cordoned.
fn schedulable(node: &Value) -> bool {
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    ready && node["spec"]["unschedulable"] != true
}

impl Simulation {
    /// An empty simulation: statuses trail their targets by `delay`; images matching
    /// `fail_images` never pull.
    pub fn new(delay: Duration, fail_images: Option<Regex>) -> Self {
        Simulation {
            delay,
            fail_images,
            clusters: HashMap::new(),
            timers: BTreeSet::new(),
            marked: HashSet::new(),
        }
    }

    fn cluster(&mut self, name: &str) -> &mut Cluster {
        self.marked.insert(name.to_owned());
        self.clusters.entry(name.to_owned()).or_default()
    }

    /// A node was created or changed.
    pub fn node_changed(&mut self, cluster: &str, name: &str, node: &Value) {
        let nodes = &mut self.cluster(cluster).nodes;
        if schedulable(node) {
            let status = &node["status"];
            let allocatable = match status["allocatable"].is_object() {
                true => &status["allocatable"],
                false => &status["capacity"],
            };
            nodes.insert(name.to_owned(), Resources::from_list(allocatable));
        } else {
            nodes.remove(name);
        }
    }

    /// A node was deleted.
    pub fn node_removed(&mut self, cluster: &str, name: &str) {
        self.cluster(cluster).nodes.remove(name);
    }

    /// A workload was created or changed (`created_revision`: the store revision that
    /// created it): a new object or a new generation is due `delay` from `now`, whatever
    /// was due before.
    pub fn workload_changed(
        &mut self,
        cluster: &str,
        key: WorkloadKey,
        object: &Value,
        created_revision: u64,
        now: Instant,
    ) {
        let workload = Workload::from_object(key.kind, object, self.fail_images.as_ref());
        let at = now + self.delay;
        let state = self.clusters.entry(cluster.to_owned()).or_default();
        self.marked.insert(cluster.to_owned());
        let (tracked, renewed) = match state.workloads.entry(key.clone()) {
            Entry::Occupied(entry) => {
                let tracked = entry.into_mut();
                let renewed = tracked.workload.generation != workload.generation;
                tracked.workload = workload;
                (tracked, renewed)
            }
            Entry::Vacant(entry) => {
                let tracked = Tracked {
                    workload,
                    created_revision,
                    fit: 0,
                    due: None,
                };
                (entry.insert(tracked), true)
            }
        };
        if renewed {
            schedule(&mut self.timers, cluster, &key, tracked, at);
        }
    }

    /// A workload was deleted: its room is free.
    pub fn workload_removed(&mut self, cluster: &str, key: &WorkloadKey) {
        if let Some(tracked) = self.cluster(cluster).workloads.remove(key)
            && let Some(due) = tracked.due
        {
            self.timers.remove(&(due, cluster.to_owned(), key.clone()));
        }
    }

    /// Forgets a write that failed and tries it again at `at`.
    pub fn retry(&mut self, write: &StatusWrite, at: Instant) {
        let Some(state) = self.clusters.get_mut(&write.cluster) else {
            return;
        };
        if let Some(tracked) = state.workloads.get_mut(&write.key) {
            schedule(&mut self.timers, &write.cluster, &write.key, tracked, at);
        }
    }

    /// When the next status is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _, _)| *at)
    }

    /// How many clusters and workloads are simulated.
    pub fn size(&self) -> (usize, usize) {
        let workloads = self.clusters.values().map(|c| c.workloads.len()).sum();
        (self.clusters.len(), workloads)
    }

    /// The statuses due by `now` that differ from the workloads' current ones, with
    /// `wall` (RFC 3339) as the time of every change.
    pub fn due_writes(&mut self, now: Instant, wall: &str) -> Vec<StatusWrite> {
        self.refit(now);
        let mut writes = Vec::new();
        while let Some((at, _, _)) = self.timers.first()
            && *at <= now
        {
            let Some((_, cluster, key)) = self.timers.pop_first() else {
                break;
            };
            let Some(state) = self.clusters.get_mut(&cluster) else {
                continue;
            };
            let nodes = state.nodes.len() as u64;
            let Some(tracked) = state.workloads.get_mut(&key) else {
                continue;
            };
            tracked.due = None;
            let target = tracked.workload.target(tracked.fit, nodes);
            if target != without_times(&tracked.workload.status) {
                let status = with_times(key.kind, target, &tracked.workload.status, wall);
                writes.push(StatusWrite {
                    cluster,
                    key,
                    status,
                });
            }
        }
        writes
    }

    /// Hands out each marked cluster's room again, in creation order; workloads whose
    /// status now differs from their target become due (those already due keep their time).
    fn refit(&mut self, now: Instant) {
        let at = now + self.delay;
        for name in std::mem::take(&mut self.marked) {
            let Some(state) = self.clusters.get_mut(&name) else {
                continue;
            };
            let nodes = state.nodes.len() as u64;
            let mut free = state
                .nodes
                .values()
                .fold(Resources::default(), |sum, n| sum.plus(*n));
            let mut order: Vec<(&str, u64, &WorkloadKey)> = state
                .workloads
                .iter()
                .map(|(key, t)| (t.workload.created.as_str(), t.created_revision, key))
                .collect();
            order.sort_unstable();
            let order: Vec<WorkloadKey> = order.into_iter().map(|(_, _, k)| k.clone()).collect();
            for key in order {
                let Some(tracked) = state.workloads.get_mut(&key) else {
                    continue;
                };
                let each = tracked.workload.each;
                tracked.fit = free.room_for(each, tracked.workload.pods_wanted(nodes));
                free = free.minus(each, tracked.fit);
                let stale = tracked.workload.target(tracked.fit, nodes)
                    != without_times(&tracked.workload.status);
                if stale && tracked.due.is_none() {
                    schedule(&mut self.timers, &name, &key, tracked, at);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::workload::{IMAGE_PULL_BACK_OFF, INSUFFICIENT_CAPACITY};

    const DELAY: Duration = Duration::from_secs(1);

    /// The simulation with a stand-in for the store: written statuses come back to it as
    /// the watch would bring them.
    struct Harness {
        sim: Simulation,
        objects: HashMap<(String, WorkloadKey), Value>,
        /// Each object's create revision, as the store numbers them.
        revisions: HashMap<(String, WorkloadKey), u64>,
        clock: u32,
    }

    fn key(kind: Kind, name: &str) -> WorkloadKey {
        WorkloadKey {
            kind,
            namespace: "default".into(),
            name: name.into(),
        }
    }

    fn node(cpu: &str, memory: &str, pods: u32, ready: &str) -> Value {
        json!({"spec": {}, "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods.to_string()},
            "conditions": [{"type": "Ready", "status": ready}]}})
    }

    fn workload(kind: Kind, replicas: u64, cpu: &str, image: &str, created: u32) -> Value {
        let mut object = json!({"metadata": {"generation": 1,
                "creationTimestamp": format!("2025-01-01T00:00:{created:02}Z")},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "c", "image": image, "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}});
        if kind == Kind::Job {
            object["spec"] = json!({"completions": replicas, "parallelism": replicas,
                "template": object["spec"]["template"].clone()});
        }
        object
    }

    impl Harness {
        /// Clusters `a` and `b`, each with two Ready nodes of 4 CPUs.
        fn new(fail_images: Option<&str>) -> Harness {
            let mut sim = Simulation::new(DELAY, fail_images.map(|p| Regex::new(p).unwrap()));
            for cluster in ["a", "b"] {
                for n in ["n1", "n2"] {
                    sim.node_changed(cluster, n, &node("4", "64Gi", 110, "True"));
                }
            }
            Harness {
                sim,
                objects: HashMap::new(),
                revisions: HashMap::new(),
                clock: 0,
            }
        }

        fn put(&mut self, cluster: &str, key: WorkloadKey, object: Value) {
            let id = (cluster.to_owned(), key.clone());
            let next = self.revisions.len() as u64 + 1;
            let revision = *self.revisions.entry(id.clone()).or_insert(next);
            self.sim
                .workload_changed(cluster, key, &object, revision, Instant::now());
            self.objects.insert(id, object);
        }

        fn delete(&mut self, cluster: &str, key: &WorkloadKey) {
            self.sim.workload_removed(cluster, key);
            self.objects.remove(&(cluster.to_owned(), key.clone()));
            self.revisions.remove(&(cluster.to_owned(), key.clone()));
        }

        /// Scales a workload: a new generation.
        fn scale(&mut self, cluster: &str, key: &WorkloadKey, replicas: u64) {
            let mut object = self.objects[&(cluster.to_owned(), key.clone())].clone();
            object["spec"]["replicas"] = json!(replicas);
            let generation = object["metadata"]["generation"].as_i64().unwrap();
            object["metadata"]["generation"] = json!(generation + 1);
            self.put(cluster, key.clone(), object);
        }

        /// Writes what is due now; returns how many statuses were written.
        fn write_due(&mut self) -> usize {
            self.clock += 1;
            let writes = self
                .sim
                .due_writes(Instant::now(), &format!("T{}", self.clock));
            for write in &writes {
                let id = (write.cluster.clone(), write.key.clone());
                let mut object = self.objects[&id].clone();
                object["status"] = write.status.clone();
                self.put(&write.cluster, write.key.clone(), object);
            }
            writes.len()
        }

        /// Advances the paused clock by `by`, writing every status due on the way.
        async fn run_for(&mut self, by: Duration) {
            let end = Instant::now() + by;
            loop {
                self.write_due();
                match self.sim.next_due() {
                    Some(at) if at <= end => tokio::time::advance(at - Instant::now()).await,
                    _ => break,
                }
            }
            tokio::time::advance(end - Instant::now()).await;
            self.write_due();
        }

        fn status(&self, cluster: &str, key: &WorkloadKey) -> &Value {
            &self.objects[&(cluster.to_owned(), key.clone())]["status"]
        }

        fn ready(&self, cluster: &str, key: &WorkloadKey) -> &Value {
            let status = self.status(cluster, key);
            match key.kind {
                Kind::DaemonSet => &status["numberReady"],
                _ => &status["readyReplicas"],
            }
        }

        fn reason(&self, cluster: &str, key: &WorkloadKey, condition: &str) -> &Value {
            self.status(cluster, key)["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == condition))
                .map_or(&Value::Null, |c| &c["reason"])
        }
    }

    #[tokio::test(start_paused = true)]
    async fn statuses_come_after_the_delay_and_settle() {
        let mut h = Harness::new(None);
        let web = key(Kind::Deployment, "web");
        h.put(
            "a",
            web.clone(),
            workload(Kind::Deployment, 2, "500m", "nginx", 0),
        );
        h.run_for(DELAY / 2).await;
        assert!(h.status("a", &web).is_null(), "nothing before the delay");
        h.run_for(DELAY / 2).await;
        assert_eq!(*h.ready("a", &web), 2);
        assert_eq!(h.status("a", &web)["observedGeneration"], 1);
        assert_eq!(h.sim.next_due(), None, "settled: nothing more to write");
        assert_eq!(h.write_due(), 0);

        // A scale-up shows after the delay; until then the old status stands.
        h.scale("a", &web, 3);
        h.run_for(DELAY - Duration::from_millis(1)).await;
        assert_eq!(*h.ready("a", &web), 2);
        h.run_for(Duration::from_millis(1)).await;
        assert_eq!(*h.ready("a", &web), 3);
        assert_eq!(h.status("a", &web)["observedGeneration"], 2);
        assert_eq!(h.sim.size(), (2, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn room_goes_in_creation_order_and_deletes_free_it() {
        let mut h = Harness::new(None);
        // 8 CPUs in cluster a: first takes 3 × 2, second gets 1 of its 3, third none.
        let (first, second, third) = (
            key(Kind::Deployment, "zz-first"),
            key(Kind::StatefulSet, "second"),
            key(Kind::ReplicaSet, "a-third"),
        );
        h.put(
            "a",
            third.clone(),
            workload(Kind::ReplicaSet, 1, "1", "x", 3),
        );
        h.put(
            "a",
            second.clone(),
            workload(Kind::StatefulSet, 3, "2", "x", 2),
        );
        h.put(
            "a",
            first.clone(),
            workload(Kind::Deployment, 3, "2", "x", 1),
        );
        // The same in cluster b has the whole of b's room.
        h.put(
            "b",
            third.clone(),
            workload(Kind::ReplicaSet, 1, "1", "x", 3),
        );
        h.run_for(DELAY).await;
        assert_eq!(*h.ready("a", &first), 3);
        assert_eq!(*h.ready("a", &second), 1);
        assert_eq!(*h.ready("a", &third), 0);
        assert_eq!(*h.ready("b", &third), 1);
        assert_eq!(
            h.reason("a", &second, "ReplicaFailure"),
            INSUFFICIENT_CAPACITY
        );
        assert_eq!(
            h.reason("a", &first, "Available"),
            "MinimumReplicasAvailable"
        );

        // Deleting the first frees 6 CPUs: the others get ready a delay later.
        h.delete("a", &first);
        h.run_for(DELAY / 2).await;
        assert_eq!(*h.ready("a", &second), 1);
        h.run_for(DELAY / 2).await;
        assert_eq!(*h.ready("a", &second), 3);
        assert_eq!(*h.ready("a", &third), 1);
        assert!(h.status("a", &third).get("conditions").is_none());

        // Scaling the second up takes the room of the later third.
        h.scale("a", &second, 4);
        h.run_for(DELAY).await;
        assert_eq!(*h.ready("a", &second), 4);
        assert_eq!(*h.ready("a", &third), 0);
        assert_eq!(h.sim.next_due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn workloads_created_in_the_same_second_go_in_store_order() {
        let mut h = Harness::new(None);
        let (zeta, alpha) = (
            key(Kind::Deployment, "zeta"),
            key(Kind::Deployment, "alpha"),
        );
        h.put(
            "a",
            zeta.clone(),
            workload(Kind::Deployment, 3, "2", "x", 7),
        );
        h.put(
            "a",
            alpha.clone(),
            workload(Kind::Deployment, 3, "2", "x", 7),
        );
        h.run_for(DELAY).await;
        assert_eq!(*h.ready("a", &zeta), 3);
        assert_eq!(*h.ready("a", &alpha), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn failing_images_never_get_ready_but_take_room() {
        let mut h = Harness::new(Some(r"^registry\.invalid/"));
        let broken = key(Kind::Deployment, "broken");
        let after = key(Kind::Deployment, "after");
        h.put(
            "a",
            broken.clone(),
            workload(Kind::Deployment, 3, "2", "registry.invalid/app:1", 0),
        );
        h.put(
            "a",
            after.clone(),
            workload(Kind::Deployment, 2, "2", "nginx", 1),
        );
        h.run_for(DELAY * 5).await;
        assert_eq!(*h.ready("a", &broken), 0);
        assert_eq!(h.reason("a", &broken, "Available"), IMAGE_PULL_BACK_OFF);
        assert_eq!(
            h.reason("a", &broken, "Progressing"),
            "ProgressDeadlineExceeded"
        );
        assert_eq!(*h.ready("a", &after), 1, "the broken pods hold 6 of 8 CPUs");
        assert_eq!(h.sim.next_due(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemonset_runs_one_pod_per_ready_node() {
        let mut h = Harness::new(None);
        let agent = key(Kind::DaemonSet, "agent");
        h.put(
            "a",
            agent.clone(),
            workload(Kind::DaemonSet, 0, "100m", "agent", 0),
        );
        h.run_for(DELAY).await;
        assert_eq!(h.status("a", &agent)["desiredNumberScheduled"], 2);
        assert_eq!(*h.ready("a", &agent), 2);

        h.sim
            .node_changed("a", "n3", &node("4", "64Gi", 110, "True"));
        h.sim
            .node_changed("a", "n1", &node("4", "64Gi", 110, "False"));
        h.run_for(DELAY).await;
        assert_eq!(h.status("a", &agent)["desiredNumberScheduled"], 2);
        h.sim.node_removed("a", "n2");
        h.run_for(DELAY).await;
        assert_eq!(h.status("a", &agent)["desiredNumberScheduled"], 1);
        assert_eq!(*h.ready("a", &agent), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_completes_after_the_delay_and_frees_its_room() {
        let mut h = Harness::new(None);
        let job = key(Kind::Job, "batch");
        let web = key(Kind::Deployment, "web");
        h.put("a", job.clone(), workload(Kind::Job, 4, "2", "busybox", 0));
        h.put(
            "a",
            web.clone(),
            workload(Kind::Deployment, 2, "2", "nginx", 1),
        );
        h.run_for(DELAY).await;
        let status = h.status("a", &job).clone();
        assert_eq!(status["succeeded"], 4);
        assert_eq!(h.reason("a", &job, "Complete"), "CompletionsReached");
        assert!(status["completionTime"].is_string());
        // The job held all 8 CPUs; once complete they go to the deployment.
        assert_eq!(*h.ready("a", &web), 0);
        h.run_for(DELAY).await;
        assert_eq!(*h.ready("a", &web), 2);
        assert_eq!(h.status("a", &job), &status, "complete stays complete");
        assert_eq!(h.sim.next_due(), None);
    }
}
