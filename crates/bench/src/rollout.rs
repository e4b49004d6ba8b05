//! The rollout scenario: a `Rolling` rollout over N simulated members, measured against
//! the time its waves must take — real `flotilla hub`, `flotilla sim` and `flotilla join`
//! processes.
//!
//! ```text
//!  flotilla hub ◄── join ×N ── flotilla sim --clusters N (ready delay 100 ms)
//!      │ Deployment bench/web + Placement, strategy {type: Rolling, maxUnavailable: 10%,
//!      │ minReadySeconds: 1}: revision 1 everywhere, complete
//!      │                                               one watch per member (this process):
//!  t0: image nginx:2 on the hub's template ──────────► when it first sees nginx:2, and when
//!      │ poll the placement (its JSON's size, mid-        nginx:2 is available
//!      │ rollout and at most) until RolloutComplete
//!      ▼
//!  waves = the Works grouped by when they moved (rollout.flotilla.io/moved-at, one time per
//!  rollout step); per wave: propagation = wave start (t0 for the first) → member updated,
//!  ready delay = member updated → member available; total = t0 → RolloutComplete
//!  bound = 10 × (minReadySeconds + p99 ready delay + p99 propagation) + 10 %
//!  the controller's time per wave = Δ flotilla_rollout_step_seconds_sum / waves
//!    = its own compute (Δ flotilla_rollout_compute_seconds_sum / waves)
//!    + awaiting the store (Δ flotilla_rollout_write_seconds_sum / waves: Work writes, pruning)
//! ```
//!
//! The bound is what ten waves of a tenth of the fleet each must take at the least: every
//! wave waits for its clusters to be updated and then available for `minReadySeconds`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use flotilla_api::revision::{MOVED_AT_ANNOTATION, REVISION_ANNOTATION};

use crate::harness::{MEMBERS_PER_SIM, Processes};
use crate::plot::Chart;
use crate::propagation::{FIELD_MANAGER, place_web, web};
use crate::resync::metric;
use crate::{Error, Latency, Progress, Row, check, ratio};

/// The hub's histogram of rollout steps (the rollout part of a placement's reconcile).
pub const STEP_METRIC: &str = "flotilla_rollout_step_seconds";

/// The part of a step the controller computes (no writes awaited).
pub const COMPUTE_METRIC: &str = "flotilla_rollout_compute_seconds";

/// The part of a step spent awaiting the Works' writes and the pruning of revisions.
pub const WRITE_METRIC: &str = "flotilla_rollout_write_seconds";

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the hub's and the simulator's data go.
    pub dir: PathBuf,
    /// The `flotilla` binary.
    pub binary: PathBuf,
    /// How many members.
    pub clusters: usize,
    /// `maxUnavailable`, in percent of the members.
    pub max_unavailable_percent: u32,
    /// `minReadySeconds`.
    pub min_ready_seconds: u64,
    /// The replicas of the placed Deployment.
    pub replicas: i32,
    /// Members per simulator process.
    pub members_per_sim: usize,
}

impl Options {
    /// The full run: 1,000 members.
    pub fn new(dir: &Path, binary: PathBuf) -> Self {
        Options {
            dir: dir.join("rollout"),
            binary,
            clusters: 1000,
            max_unavailable_percent: 10,
            min_ready_seconds: 1,
            replicas: 1,
            members_per_sim: MEMBERS_PER_SIM,
        }
    }

    /// A smoke run: 10 members, half at a time (two waves).
    pub fn quick(dir: &Path, binary: PathBuf) -> Self {
        Options {
            clusters: 10,
            max_unavailable_percent: 50,
            ..Options::new(dir, binary)
        }
    }

    /// The waves a rollout takes at the least: 100 / `maxUnavailable` %.
    pub fn waves(&self) -> usize {
        100usize.div_ceil(self.max_unavailable_percent.max(1) as usize)
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"clusters": self.clusters, "max_unavailable_percent": self.max_unavailable_percent,
            "min_ready_seconds": self.min_ready_seconds, "replicas": self.replicas,
            "sim_ready_delay_ms": 100, "soak_seconds": 0, "members_per_sim": self.members_per_sim})
    }
}

/// One wave: the clusters one rollout step moved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wave {
    /// When it started, from t0.
    pub start: Duration,
    /// How many clusters it moved.
    pub clusters: usize,
    /// Wave start (t0 for the first) → each member's watch seeing the new image.
    pub propagation: Latency,
    /// Member updated → the member's Deployment available with the new image.
    pub ready: Latency,
}

/// The results.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// How many members.
    pub clusters: usize,
    /// The fewest waves the strategy allows (100 / maxUnavailable %).
    pub ideal_waves: usize,
    /// `minReadySeconds`.
    pub min_ready: Duration,
    /// How long joining took.
    pub join: Duration,
    /// t0 → the placement's `Progressing` reason `RolloutComplete` for the new revision.
    pub total: Duration,
    /// The waves, in order.
    pub waves: Vec<Wave>,
    /// Over every member: wave start → updated.
    pub propagation: Latency,
    /// Over every member: updated → available.
    pub ready: Latency,
    /// Seconds the hub spent in rollout steps during the rollout.
    pub controller_seconds: f64,
    /// Rollout steps during the rollout.
    pub controller_steps: u64,
    /// Of `controller_seconds`, the seconds the steps computed.
    pub compute_seconds: f64,
    /// Of `controller_seconds`, the seconds the steps awaited writes.
    pub write_seconds: f64,
    /// The placement's JSON, in bytes, at the first poll with half the members updated.
    pub status_bytes_mid: usize,
    /// The placement's JSON, in bytes, at most during the rollout.
    pub status_bytes_max: usize,
}

impl Report {
    /// 10 × (minReadySeconds + p99 ready delay + p99 propagation) + 10 %.
    pub fn bound(&self) -> Duration {
        let wave =
            self.min_ready.as_secs_f64() + (self.ready.p99_ms + self.propagation.p99_ms) / 1e3;
        Duration::from_secs_f64(self.ideal_waves as f64 * wave * 1.1)
    }

    /// The controller's time per wave (compute and writes awaited), in milliseconds.
    pub fn controller_ms_per_wave(&self) -> f64 {
        ratio(self.controller_seconds * 1e3, self.waves.len() as f64)
    }

    /// The controller's own computing per wave, in milliseconds.
    pub fn compute_ms_per_wave(&self) -> f64 {
        ratio(self.compute_seconds * 1e3, self.waves.len() as f64)
    }

    /// The controller's time per wave awaiting the store (Works, pruning), in milliseconds.
    pub fn write_ms_per_wave(&self) -> f64 {
        ratio(self.write_seconds * 1e3, self.waves.len() as f64)
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "rollout: {} members, Rolling maxUnavailable {}% → {} waves ({} at the least)\n\
             total {:.1} s, bound {:.1} s ({:.2}×); propagation p99 {:.0} ms, ready delay p99 {:.0} ms\n\
             controller {:.1} ms per wave = compute {:.1} + awaiting writes {:.1} ({} steps, {:.1} ms each); placement JSON {} B mid-rollout, {} B at most\n\
             wave  start s  clusters  propagation p50/p99 ms  ready p50/p99 ms\n",
            self.clusters,
            100 / self.ideal_waves.max(1),
            self.waves.len(),
            self.ideal_waves,
            self.total.as_secs_f64(),
            self.bound().as_secs_f64(),
            ratio(self.total.as_secs_f64(), self.bound().as_secs_f64()),
            self.propagation.p99_ms,
            self.ready.p99_ms,
            self.controller_ms_per_wave(),
            self.compute_ms_per_wave(),
            self.write_ms_per_wave(),
            self.controller_steps,
            ratio(self.controller_seconds * 1e3, self.controller_steps as f64),
            self.status_bytes_mid,
            self.status_bytes_max,
        );
        for (i, w) in self.waves.iter().enumerate() {
            out.push_str(&format!(
                "{:>4} {:>8.2} {:>9}   {:>8.0} /{:>8.0}      {:>6.0} /{:>6.0}\n",
                i + 1,
                w.start.as_secs_f64(),
                w.clusters,
                w.propagation.p50_ms,
                w.propagation.p99_ms,
                w.ready.p50_ms,
                w.ready.p99_ms
            ));
        }
        out
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "clusters": self.clusters,
            "ideal_waves": self.ideal_waves,
            "min_ready_s": self.min_ready.as_secs_f64(),
            "join_s": self.join.as_secs_f64(),
            "total_s": self.total.as_secs_f64(),
            "bound_s": self.bound().as_secs_f64(),
            "total_over_bound": ratio(self.total.as_secs_f64(), self.bound().as_secs_f64()),
            "propagation": self.propagation.json(),
            "ready": self.ready.json(),
            "controller_seconds": self.controller_seconds,
            "controller_steps": self.controller_steps,
            "controller_ms_per_wave": self.controller_ms_per_wave(),
            "compute_seconds": self.compute_seconds,
            "write_seconds": self.write_seconds,
            "compute_ms_per_wave": self.compute_ms_per_wave(),
            "write_ms_per_wave": self.write_ms_per_wave(),
            "status_bytes_mid": self.status_bytes_mid,
            "status_bytes_max": self.status_bytes_max,
            "waves": self.waves.iter().map(|w| json!({
                "start_s": w.start.as_secs_f64(), "clusters": w.clusters,
                "propagation": w.propagation.json(), "ready": w.ready.json()})).collect::<Vec<_>>(),
        })
    }

    /// The summary's rows.
    pub fn summary(&self) -> Vec<Row> {
        vec![
            Row::new(
                "rollout",
                format!("N={}: total / bound", self.clusters),
                format!(
                    "{:.1} / {:.1} s = {:.2}× ({} waves)",
                    self.total.as_secs_f64(),
                    self.bound().as_secs_f64(),
                    ratio(self.total.as_secs_f64(), self.bound().as_secs_f64()),
                    self.waves.len()
                ),
                "≤ 1 (10 × (ready delay + p99 propagation) + 10 %)",
            ),
            Row::new(
                "rollout",
                format!("N={}: controller per wave", self.clusters),
                format!(
                    "{:.1} ms = compute {:.1} + awaiting writes {:.1}",
                    self.controller_ms_per_wave(),
                    self.compute_ms_per_wave(),
                    self.write_ms_per_wave()
                ),
                "< 200 ms",
            ),
            Row::new(
                "rollout",
                format!("N={}: placement JSON mid-rollout", self.clusters),
                format!(
                    "{} B (at most {} B)",
                    self.status_bytes_mid, self.status_bytes_max
                ),
                "< 1 MiB (10,000 clusters: fleet unit test)",
            ),
        ]
    }

    /// Charts: each wave's propagation and ready delay.
    pub fn charts(&self) -> Vec<(&'static str, Chart)> {
        let by_wave = |f: &dyn Fn(&Wave) -> f64| -> Vec<(f64, f64)> {
            self.waves
                .iter()
                .enumerate()
                .map(|(i, w)| ((i + 1) as f64, f(w)))
                .collect()
        };
        let waves = Chart::new("Rolling rollout, per wave", "wave", "milliseconds")
            .line("propagation p99", by_wave(&|w| w.propagation.p99_ms))
            .line("ready delay p99", by_wave(&|w| w.ready.p99_ms))
            .line("propagation p50", by_wave(&|w| w.propagation.p50_ms));
        vec![("waves", waves)]
    }
}

/// What one member's watch saw: when it first saw the new image, and when first available
/// with it (wall-clock times, to compare with the hub's moved-at).
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    updated: Option<SystemTime>,
    available: Option<SystemTime>,
}

/// Whether `d` runs `image` with every replica updated and available, its status about its
/// spec.
fn available_with(d: &Deployment, image: &str) -> bool {
    let spec = d.spec.as_ref();
    let current = spec
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref());
    let wanted = spec.and_then(|s| s.replicas).unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    current == Some(image)
        && status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.available_replicas.unwrap_or(0) >= wanted
}

fn image_of(d: &Deployment) -> Option<&str> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
}

/// One watch per member on Deployment `bench/web`; returns once every one is listening,
/// and a channel of (member, Seen) once each saw `image` available.
async fn watch_members(
    processes: &Processes,
    n: usize,
    image: &str,
) -> Result<
    (
        tokio::task::JoinSet<()>,
        mpsc::UnboundedReceiver<(usize, Seen)>,
    ),
    Error,
> {
    let (listening, mut listening_rx) = mpsc::unbounded_channel();
    let (done, seen) = mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=n {
        let client = processes.member_client(i).await?;
        let (listening, done, image) = (listening.clone(), done.clone(), image.to_owned());
        tasks.spawn(async move {
            let api: Api<Deployment> = Api::namespaced(client, "bench");
            let config = watcher::Config::default()
                .fields("metadata.name=web")
                .streaming_lists();
            let stream = watcher(api, config);
            futures_util::pin_mut!(stream);
            let mut seen = Seen::default();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let _ = listening.send(());
                    }
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        let now = SystemTime::now();
                        if seen.updated.is_none() && image_of(&d) == Some(image.as_str()) {
                            seen.updated = Some(now);
                        }
                        if seen.updated.is_some() && available_with(&d, &image) {
                            seen.available = Some(now);
                            let _ = done.send((i, seen));
                            return;
                        }
                    }
                    _ => {}
                }
            }
        });
    }
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(120), listening_rx.recv())
            .await
            .map_err(|_| Error::Check("the member watches did not all start".into()))?
            .ok_or_else(|| Error::Check("a member watch ended".into()))?;
    }
    Ok((tasks, seen))
}

/// The rollout reason and revision the placement's status gives, and how many clusters
/// it says are updated.
fn standing(placement: &Value) -> (Option<&str>, Option<i64>, i64) {
    let status = &placement["status"];
    let reason = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"))
        .and_then(|c| c["reason"].as_str());
    (
        reason,
        status["rollout"]["revision"].as_i64(),
        status["rollout"]["updated"].as_i64().unwrap_or(0),
    )
}

/// Groups members by when they moved (`(member, moved at)`), earliest first.
fn waves_of(moved: &BTreeMap<usize, Timestamp>) -> Vec<(Timestamp, Vec<usize>)> {
    let mut by_time: BTreeMap<Timestamp, Vec<usize>> = BTreeMap::new();
    for (member, at) in moved {
        by_time.entry(*at).or_default().push(*member);
    }
    by_time.into_iter().collect()
}

/// `b - a`, or zero when `b` is earlier.
fn since(a: SystemTime, b: SystemTime) -> Duration {
    b.duration_since(a).unwrap_or_default()
}

fn system_time(t: Timestamp) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(t.as_nanosecond()).unwrap_or(0))
}

/// The waves' figures from when each member moved and what its watch saw; `t0` is the
/// template change (the first wave's propagation counts from it).
fn measure_waves(
    moved: &BTreeMap<usize, Timestamp>,
    seen: &BTreeMap<usize, Seen>,
    t0: SystemTime,
) -> Result<(Vec<Wave>, Latency, Latency), Error> {
    let (mut all_propagation, mut all_ready, mut waves) = (Vec::new(), Vec::new(), Vec::new());
    for (k, (at, members)) in waves_of(moved).into_iter().enumerate() {
        let start = if k == 0 { t0 } else { system_time(at) };
        let (mut propagation, mut ready) = (Vec::new(), Vec::new());
        for m in &members {
            let s = seen
                .get(m)
                .ok_or_else(|| Error::Check(format!("member-{m}'s watch saw nothing")))?;
            let (Some(updated), Some(available)) = (s.updated, s.available) else {
                return Err(Error::Check(format!("member-{m} never ran the new image")));
            };
            propagation.push(since(start, updated));
            ready.push(since(updated, available));
        }
        all_propagation.extend(&propagation);
        all_ready.extend(&ready);
        waves.push(Wave {
            start: since(t0, system_time(at)),
            clusters: members.len(),
            propagation: Latency::of(propagation),
            ready: Latency::of(ready),
        });
    }
    Ok((waves, Latency::of(all_propagation), Latency::of(all_ready)))
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let n = options.clusters;
    let mut progress = Progress::new(format!("rollout N={n}"));
    progress.step("starting the hub and the simulator");
    let processes =
        Processes::start(&options.binary, &options.dir, n, options.members_per_sim).await?;
    let hub = processes.hub_client().await?;
    let join = processes.join_all("bench=rollout", &mut progress).await?;

    progress.step("placing bench/web with a Rolling strategy");
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let deployments = place_web(&hub, options.replicas).await?;
    let deployment = |image: &str| web(image, options.replicas);
    let gvk =
        |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.io", "v1alpha1", kind));
    let placements = Api::<DynamicObject>::namespaced_with(hub.clone(), "bench", &gvk("Placement"));
    let placement = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "strategy": {"type": "Rolling", "maxUnavailable": format!("{}%", options.max_unavailable_percent),
                "maxSurge": 0, "minReadySeconds": options.min_ready_seconds,
                "progressDeadlineSeconds": 600}}});
    placements
        .patch("web", &apply, &Patch::Apply(&placement))
        .await
        .map_err(|e| check("placement", e))?;
    let get = || async {
        let p = placements
            .get("web")
            .await
            .map_err(|e| check("placement", e))?;
        serde_json::to_value(&p).map_err(|e| check("placement", e))
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let p = get().await?;
        if standing(&p) == (Some("RolloutComplete"), Some(1), n as i64) {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "revision 1 never completed: {}",
                p["status"]["rollout"]
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    progress.step("watching every member");
    let (tasks, mut seen_rx) = watch_members(&processes, n, "nginx:2").await?;
    let step_sum = format!("{STEP_METRIC}_sum");
    let step_count = format!("{STEP_METRIC}_count");
    let seconds_before = metric(&hub, &step_sum).await?.unwrap_or(0.0);
    let steps_before = metric(&hub, &step_count).await?.unwrap_or(0.0);
    let (compute_sum, write_sum) = (
        format!("{COMPUTE_METRIC}_sum"),
        format!("{WRITE_METRIC}_sum"),
    );
    let compute_before = metric(&hub, &compute_sum).await?.unwrap_or(0.0);
    let write_before = metric(&hub, &write_sum).await?.unwrap_or(0.0);

    progress.step("rolling out nginx:2");
    let (t0, started) = (SystemTime::now(), Instant::now());
    deployments
        .patch("web", &apply, &Patch::Apply(deployment("nginx:2")))
        .await
        .map_err(|e| check("image change", e))?;
    let (mut status_bytes_mid, mut status_bytes_max) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let total = loop {
        let p = get().await?;
        let bytes = serde_json::to_vec(&p).map_or(0, |b| b.len());
        status_bytes_max = status_bytes_max.max(bytes);
        let (reason, revision, updated) = standing(&p);
        if revision == Some(2) {
            progress.count("clusters updated", updated as usize, n);
            if status_bytes_mid == 0 && updated as usize * 2 >= n {
                status_bytes_mid = bytes;
            }
            if reason == Some("RolloutComplete") {
                break started.elapsed();
            }
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "revision 2 never completed: {}",
                p["status"]["rollout"]
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let controller_seconds = metric(&hub, &step_sum).await?.unwrap_or(0.0) - seconds_before;
    let controller_steps = metric(&hub, &step_count).await?.unwrap_or(0.0) - steps_before;
    let compute_seconds = metric(&hub, &compute_sum).await?.unwrap_or(0.0) - compute_before;
    let write_seconds = metric(&hub, &write_sum).await?.unwrap_or(0.0) - write_before;

    progress.step("reading the waves");
    let mut seen = BTreeMap::new();
    while seen.len() < n {
        let (member, s) = tokio::time::timeout(Duration::from_secs(60), seen_rx.recv())
            .await
            .map_err(|_| Error::Check(format!("{} of {n} members ran nginx:2", seen.len())))?
            .ok_or_else(|| Error::Check("a member watch ended".into()))?;
        seen.insert(member, s);
    }
    drop(tasks);
    let works = Api::<DynamicObject>::all_with(hub.clone(), &gvk("Work"));
    let mut moved = BTreeMap::new();
    for work in works
        .list(&ListParams::default())
        .await
        .map_err(|e| check("works", e))?
    {
        let namespace = work.metadata.namespace.clone().unwrap_or_default();
        let Some(member) = namespace
            .strip_prefix("flotilla-cluster-member-")
            .and_then(|i| i.parse::<usize>().ok())
        else {
            continue;
        };
        let annotations = work.metadata.annotations.unwrap_or_default();
        let get = |key: &str| annotations.get(key).map(String::as_str);
        if get(REVISION_ANNOTATION) != Some("2") {
            return Err(Error::Check(format!(
                "member-{member}'s Work is not at revision 2"
            )));
        }
        let at = get(MOVED_AT_ANNOTATION)
            .and_then(|t| t.parse::<Timestamp>().ok())
            .ok_or_else(|| Error::Check(format!("member-{member}'s Work has no moved-at")))?;
        moved.insert(member, at);
    }
    if moved.len() != n {
        return Err(Error::Check(format!("{} Works of {n} found", moved.len())));
    }
    let (waves, propagation, ready) = measure_waves(&moved, &seen, t0)?;
    Ok(Report {
        clusters: n,
        ideal_waves: options.waves(),
        min_ready: Duration::from_secs(options.min_ready_seconds),
        join,
        total,
        waves,
        propagation,
        ready,
        controller_seconds,
        controller_steps: controller_steps.max(0.0) as u64,
        compute_seconds,
        write_seconds,
        status_bytes_mid,
        status_bytes_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    fn stamp(ms: u64) -> Timestamp {
        Timestamp::from_millisecond(1_000_000 + ms as i64).unwrap()
    }

    #[test]
    fn waves_are_the_members_that_moved_together_measured_from_their_start() {
        // Members 1, 2 moved at +50 ms (after the change at 0), 3 at +1,500 ms.
        let moved = BTreeMap::from([(1, stamp(50)), (2, stamp(50)), (3, stamp(1500))]);
        let seen = |updated, available| Seen {
            updated: Some(at(updated)),
            available: Some(at(available)),
        };
        let watched = BTreeMap::from([
            (1, seen(100, 300)),
            (2, seen(200, 250)),
            (3, seen(1600, 1800)),
        ]);
        let (waves, propagation, ready) = measure_waves(&moved, &watched, at(0)).unwrap();
        assert_eq!(waves.len(), 2);
        assert_eq!(waves[0].clusters, 2);
        // The first wave counts from the template change, the next from its start.
        assert_eq!(waves[0].propagation.max_ms, 200.0);
        assert_eq!(waves[1].start, Duration::from_millis(1500));
        assert_eq!(waves[1].propagation.max_ms, 100.0);
        assert_eq!(waves[0].ready.max_ms, 200.0);
        assert_eq!(propagation.samples, 3);
        assert_eq!(ready.max_ms, 200.0);
        // A member whose watch saw nothing is an error, not a gap.
        assert!(measure_waves(&moved, &BTreeMap::new(), at(0)).is_err());
    }

    #[test]
    fn the_bound_is_ten_waves_of_ready_and_propagation_plus_a_tenth() {
        let latency = |p99_ms: f64| Latency {
            p50_ms: p99_ms,
            p99_ms,
            max_ms: p99_ms,
            samples: 1,
        };
        let report = Report {
            clusters: 1000,
            ideal_waves: Options::new(Path::new("/tmp"), PathBuf::new()).waves(),
            min_ready: Duration::from_secs(1),
            total: Duration::from_secs(20),
            propagation: latency(400.0),
            ready: latency(100.0),
            waves: vec![Wave::default(); 10],
            controller_seconds: 0.5,
            compute_seconds: 0.2,
            write_seconds: 0.3,
            ..Report::default()
        };
        assert_eq!(report.ideal_waves, 10);
        // 10 × (1 + 0.1 + 0.4) × 1.1 = 16.5 s.
        assert!((report.bound().as_secs_f64() - 16.5).abs() < 1e-9);
        assert_eq!(report.controller_ms_per_wave(), 50.0);
        assert_eq!(report.compute_ms_per_wave(), 20.0);
        assert_eq!(report.write_ms_per_wave(), 30.0);
        assert!(
            report
                .table()
                .contains("= compute 20.0 + awaiting writes 30.0")
        );
        let json = report.json();
        assert!((json["total_over_bound"].as_f64().unwrap() - 20.0 / 16.5).abs() < 1e-9);
        assert_eq!(report.summary().len(), 3);
        assert!(report.table().contains("10 waves (10 at the least)"));
    }

    #[test]
    fn standing_reads_the_reason_revision_and_updated() {
        let p = json!({"status": {"conditions": [{"type": "Ready", "reason": "X"},
            {"type": "Progressing", "reason": "RolloutComplete"}],
            "rollout": {"revision": 2, "updated": 7}}});
        assert_eq!(standing(&p), (Some("RolloutComplete"), Some(2), 7));
        assert_eq!(standing(&json!({})), (None, None, 0));
    }
}
