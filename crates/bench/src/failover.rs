//! The failover scenario: two hub replicas on one PostgreSQL or etcd, default leases; the
//! replica holding the fleet Lease is killed (SIGKILL) and a template change goes in
//! through the other at once. Measured from the kill: the Lease held by the survivor, the
//! first reconcile of the new leader (the first Work carrying the new image), and every
//! member running it.
//!
//! ```text
//!  store URL ─► a database (postgres) or prefix (etcd) of this run's own, dropped after
//!  hub A (DIR/hub-a) ─┐  Lease flotilla-fleet (flotilla-system): holder host_PID_random
//!  hub B (DIR/hub-b) ─┘      │ fleet controllers ─► flotilla sim: member-1 … member-N
//!  bench/web + bench/settings placed on every member, ready
//!  round: watches through the survivor (Lease, Works) and on every member (web)
//!         t0: kill -9 the holder ─► image nginx:failover-R through the survivor
//!         (a) t0 → Lease held by the survivor   (b) t0 → first Work with the new image
//!         (c) t0 → every member runs it; settings' resourceVersions unchanged (checked)
//!         the killed replica restarted on its data directory (a candidate again)
//! ```
//!
//! The holder of the Lease is found by its `holderIdentity`, which names the process id of
//! the replica that wrote it (`host_PID_random`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::process::Child;
use tokio::sync::oneshot;

use crate::harness::{client, free_port, join_members, spawn, wait_for, wait_until_serving};
use crate::propagation::{FIELD_MANAGER, Watchers, place_web, ready_everywhere, web};
use crate::room::Room;
use crate::{Error, Latency, Progress, Row, check};

/// The Lease that holds the fleet controllers (the hub's `FLEET_LEASE`).
pub const FLEET_LEASE: &str = "flotilla-fleet";

/// The namespace of the hub's Leases.
const LEASE_NAMESPACE: &str = "flotilla-system";

/// The issue's target for kill -9 → first reconcile on the new leader, in seconds.
pub const TARGET_S: f64 = 20.0;

/// How long one round may take from the kill to every member running the new image.
const ROUND_LIMIT: Duration = Duration::from_secs(180);

/// Replicas of the template Deployment.
const REPLICAS: i32 = 1;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The store the replicas share (`postgres://…` or `etcd://…`): the scenario makes a
    /// database (PostgreSQL) or prefix (etcd) of its own on it and removes it afterwards.
    pub url: String,
    /// Where the processes' data and logs go (emptied first).
    pub dir: PathBuf,
    /// The `flotilla` binary for the hubs, the simulator and the joins.
    pub binary: PathBuf,
    /// Simulated members.
    pub clusters: usize,
    /// Rounds (one kill each).
    pub rounds: usize,
    /// A smoke run.
    pub quick: bool,
}

impl Options {
    /// The defaults: 10 members, 3 rounds.
    pub fn new(dir: &Path, binary: PathBuf, url: String) -> Self {
        Options {
            url,
            dir: dir.join("failover"),
            binary,
            clusters: 10,
            rounds: 3,
            quick: false,
        }
    }

    /// A smoke run: 3 members, 1 round.
    pub fn quick(dir: &Path, binary: PathBuf, url: String) -> Self {
        Options {
            clusters: 3,
            rounds: 1,
            quick: true,
            ..Options::new(dir, binary, url)
        }
    }

    /// As JSON (the URL without its password).
    pub fn json(&self) -> Value {
        json!({"quick": self.quick, "clusters": self.clusters, "rounds": self.rounds,
            "store": redact(&self.url), "replicas": 2,
            "leases": "the hub's defaults (15 s lease, 10 s renew deadline, 2 s retry)"})
    }
}

/// The URL without a password.
fn redact(url: &str) -> String {
    flotilla_store_postgres::url::redact(url)
}

/// One kill.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// The killed replica (`a` or `b`) and its process id.
    pub killed: (String, u32),
    /// The survivor and its process id.
    pub survivor: (String, u32),
    /// The survivor's holder identity, as the Lease shows it once taken over.
    pub survivor_identity: String,
    /// (a) From the kill to the Lease held by the survivor.
    pub lease_taken: Duration,
    /// (b) From the kill to the first Work carrying the new image (the new leader's first
    /// reconcile of the change).
    pub first_reconcile: Duration,
    /// (c) From the kill to every member running the new image.
    pub all_members: Duration,
    /// The members' own delays from the kill to seeing the new image.
    pub members: Latency,
    /// Member objects the change does not touch whose resourceVersions were checked
    /// unchanged over the round.
    pub unchanged_checked: usize,
}

impl Round {
    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"killed": self.killed.0, "killed_pid": self.killed.1,
            "survivor": self.survivor.0, "survivor_pid": self.survivor.1,
            "survivor_identity": self.survivor_identity, "survivor_took_lease": true,
            "lease_taken_s": self.lease_taken.as_secs_f64(),
            "first_reconcile_s": self.first_reconcile.as_secs_f64(),
            "all_members_s": self.all_members.as_secs_f64(),
            "members": self.members.json(),
            "unchanged_objects_checked": self.unchanged_checked, "no_reapply": true})
    }
}

/// The results.
#[derive(Clone, Debug)]
pub struct Report {
    /// `postgres` or `etcd`.
    pub engine: &'static str,
    /// Members.
    pub clusters: usize,
    /// Every round.
    pub rounds: Vec<Round>,
}

/// The latency of `rounds`' durations `f`.
fn over(rounds: &[Round], f: fn(&Round) -> Duration) -> Latency {
    Latency::of(rounds.iter().map(f).collect())
}

impl Report {
    /// (a) over the rounds.
    pub fn lease_taken(&self) -> Latency {
        over(&self.rounds, |r| r.lease_taken)
    }

    /// (b) over the rounds.
    pub fn first_reconcile(&self) -> Latency {
        over(&self.rounds, |r| r.first_reconcile)
    }

    /// (c) over the rounds.
    pub fn all_members(&self) -> Latency {
        over(&self.rounds, |r| r.all_members)
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"engine": self.engine, "clusters": self.clusters,
            "rounds": self.rounds.iter().map(Round::json).collect::<Vec<_>>(),
            "lease_taken": self.lease_taken().json(),
            "first_reconcile": self.first_reconcile().json(),
            "all_members": self.all_members().json(),
            "target_s": TARGET_S,
            "within_target": self.first_reconcile().max_ms < TARGET_S * 1e3})
    }

    /// The table for stderr.
    pub fn table(&self) -> String {
        let mut out = format!(
            "failover on {} ({} members), seconds from kill -9\n{:<6} {:<10} {:>8} {:>16} {:>12}  {}\n",
            self.engine,
            self.clusters,
            "round",
            "killed",
            "lease",
            "first reconcile",
            "all members",
            "unchanged objects"
        );
        for (i, r) in self.rounds.iter().enumerate() {
            out += &format!(
                "{:<6} {:<10} {:>8.1} {:>16.1} {:>12.1}  {} checked\n",
                i + 1,
                format!("{} ({})", r.killed.0, r.killed.1),
                r.lease_taken.as_secs_f64(),
                r.first_reconcile.as_secs_f64(),
                r.all_members.as_secs_f64(),
                r.unchanged_checked
            );
        }
        let p50: fn(&Latency) -> f64 = |l| l.p50_ms;
        let max: fn(&Latency) -> f64 = |l| l.max_ms;
        for (what, l) in [("p50", p50), ("max", max)] {
            out += &format!(
                "{what:<6} {:<10} {:>8.1} {:>16.1} {:>12.1}\n",
                "",
                l(&self.lease_taken()) / 1e3,
                l(&self.first_reconcile()) / 1e3,
                l(&self.all_members()) / 1e3
            );
        }
        out
    }

    /// The summary rows.
    pub fn summary(&self) -> Vec<Row> {
        let seconds =
            |l: Latency| format!("p50 {:.1} s, max {:.1} s", l.p50_ms / 1e3, l.max_ms / 1e3);
        vec![
            Row::new(
                "failover",
                format!(
                    "failover (kill -9) → first reconcile on the new leader ({})",
                    self.engine
                ),
                seconds(self.first_reconcile()),
                format!("< {TARGET_S:.0} s"),
            ),
            Row::new(
                "failover",
                "kill -9 → Lease held by the survivor",
                seconds(self.lease_taken()),
                "",
            ),
            Row::new(
                "failover",
                format!("kill -9 → all {} members run the change", self.clusters),
                seconds(self.all_members()),
                "",
            ),
        ]
    }
}

/// One hub replica on the shared store: its own data directory and port.
struct Replica {
    name: &'static str,
    binary: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
    child: Child,
    starts: usize,
}

impl Replica {
    /// Starts `flotilla hub --data-dir DIR/hub-NAME --store URL` on a free port and waits
    /// until it serves.
    async fn start(
        name: &'static str,
        binary: &Path,
        dir: &Path,
        url: &str,
    ) -> Result<Self, Error> {
        let args: Vec<String> = vec![
            "hub".into(),
            "--data-dir".into(),
            dir.join(format!("hub-{name}"))
                .to_string_lossy()
                .into_owned(),
            "--listen".into(),
            format!("127.0.0.1:{}", free_port()?),
            "--store".into(),
            url.to_owned(),
        ];
        let child = spawn(binary, &args, &dir.join(format!("hub-{name}-1.log")))?;
        let replica = Replica {
            name,
            binary: binary.to_owned(),
            dir: dir.to_owned(),
            args,
            child,
            starts: 1,
        };
        replica.wait_until_serving().await?;
        Ok(replica)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir
            .join(format!("hub-{}", self.name))
            .join("admin.kubeconfig")
    }

    fn pid(&self) -> Result<u32, Error> {
        self.child
            .id()
            .ok_or_else(|| Error::Check(format!("hub {} exited", self.name)))
    }

    async fn client(&self) -> Result<Client, Error> {
        client(
            &self.kubeconfig(),
            &flotilla_fleet::runtime::Pools::default(),
        )
        .await
    }

    async fn wait_until_serving(&self) -> Result<(), Error> {
        wait_for(&self.kubeconfig()).await?;
        wait_until_serving(&self.client().await?, &format!("hub {}", self.name)).await
    }

    /// SIGKILL, and reaped: it can write nothing more.
    async fn kill9(&mut self) -> Result<(), Error> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }

    /// Starts it again on its data directory and port (a new log); waits until it serves.
    async fn restart(&mut self) -> Result<(), Error> {
        self.starts += 1;
        let log = self
            .dir
            .join(format!("hub-{}-{}.log", self.name, self.starts));
        self.child = spawn(&self.binary, &self.args, &log)?;
        self.wait_until_serving().await
    }
}

/// The process id in a holder identity `host_PID_random`.
fn holder_pid(identity: &str) -> Option<u32> {
    let mut parts = identity.rsplitn(3, '_');
    let _random = parts.next()?;
    let pid = parts.next()?;
    parts.next()?;
    pid.parse().ok()
}

/// The fleet Lease's holder identity, as `hub` serves it ("" if none).
async fn holder(hub: &Client) -> Result<String, Error> {
    let lease = Api::<Lease>::namespaced(hub.clone(), LEASE_NAMESPACE)
        .get_opt(FLEET_LEASE)
        .await
        .map_err(|e| check("the fleet Lease", e))?;
    Ok(lease
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

/// Which of `replicas` holds the fleet Lease, once one does (two minutes at most).
async fn leader(replicas: &[Replica], hub: &Client) -> Result<usize, Error> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let identity = holder(hub).await?;
        let pids: Vec<u32> = replicas.iter().filter_map(|r| r.child.id()).collect();
        if let Some(i) = holder_pid(&identity).and_then(|p| pids.iter().position(|q| *q == p)) {
            return Ok(i);
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "no replica holds the fleet Lease (holder {identity:?}, replicas {pids:?})"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A watch through `hub` that reports when `seen` first holds for an object, once it is
/// open (listed).
async fn watch_until<K>(
    api: Api<K>,
    config: watcher::Config,
    seen: impl Fn(&K) -> Option<String> + Send + 'static,
) -> Result<oneshot::Receiver<(Instant, String)>, Error>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let (open_tx, open_rx) = oneshot::channel();
    let (seen_tx, seen_rx) = oneshot::channel();
    tokio::spawn(async move {
        let stream = watcher(api, config);
        futures_util::pin_mut!(stream);
        let mut open_tx = Some(open_tx);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = open_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Some(what) = seen(&o) {
                        let _ = seen_tx.send((Instant::now(), what));
                        return;
                    }
                }
                _ => {}
            }
            if seen_tx.is_closed() {
                return;
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(60), open_rx)
        .await
        .map_err(|_| Error::Check("a watch through the survivor did not open".into()))?
        .map_err(|_| Error::Check("a watch through the survivor ended".into()))?;
    Ok(seen_rx)
}

/// Waits for a watch's report; its delay from `t0`.
async fn delay(
    what: &str,
    rx: oneshot::Receiver<(Instant, String)>,
    t0: Instant,
) -> Result<(Duration, String), Error> {
    let (at, detail) = tokio::time::timeout_at((t0 + ROUND_LIMIT).into(), rx)
        .await
        .map_err(|_| {
            Error::Check(format!(
                "{what}: not within {}s of the kill",
                ROUND_LIMIT.as_secs()
            ))
        })?
        .map_err(|_| Error::Check(format!("{what}: the watch ended")))?;
    Ok((at.saturating_duration_since(t0), detail))
}

/// The resourceVersion of ConfigMap `bench/settings` on each member.
async fn settings_versions(members: &[Client]) -> Result<Vec<String>, Error> {
    let mut versions = Vec::with_capacity(members.len());
    for (i, member) in members.iter().enumerate() {
        let settings = Api::<ConfigMap>::namespaced(member.clone(), "bench")
            .get("settings")
            .await
            .map_err(|e| check(&format!("settings on member-{}", i + 1), e))?;
        versions.push(settings.metadata.resource_version.unwrap_or_default());
    }
    Ok(versions)
}

/// Runs the scenario; the run's database or prefix is removed whatever the outcome.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let room = Room::make(&options.url, "failover").await?;
    let result = measure(options, room.url(), room.engine()).await;
    let removed = room.remove().await;
    let report = result?;
    removed?;
    Ok(report)
}

async fn measure(options: &Options, url: &str, engine: &'static str) -> Result<Report, Error> {
    let mut progress = Progress::new(format!("failover ({engine})"));
    let dir = &options.dir;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let n = options.clusters.max(1);

    progress.step("starting two hub replicas and the simulator");
    let sim_dir = dir.join("sim");
    let sim_args: Vec<String> = vec![
        "sim".into(),
        "--clusters".into(),
        n.to_string(),
        "--data-dir".into(),
        sim_dir.to_string_lossy().into_owned(),
        "--listen".into(),
        format!("127.0.0.1:{}", free_port()?),
        "--ready-delay".into(),
        "100ms".into(),
    ];
    let mut sim = spawn(&options.binary, &sim_args, &dir.join("sim.log"))?;
    // One after the other: the first creates the hub's identity in the store, the
    // second reads it.
    let mut replicas = vec![Replica::start("a", &options.binary, dir, url).await?];
    replicas.push(Replica::start("b", &options.binary, dir, url).await?);
    let kubeconfigs: Vec<PathBuf> = (1..=n)
        .map(|i| {
            sim_dir
                .join("kubeconfigs")
                .join(format!("member-{i}.kubeconfig"))
        })
        .collect();
    wait_for(&kubeconfigs[n - 1]).await?;
    let pools = flotilla_fleet::runtime::Pools::default();
    let mut members = Vec::with_capacity(n);
    for kubeconfig in &kubeconfigs {
        members.push(client(kubeconfig, &pools).await?);
    }
    wait_until_serving(&members[n - 1], "simulator").await?;
    join_members(
        &options.binary,
        &replicas[0].kubeconfig(),
        kubeconfigs,
        "bench=failover",
        &mut progress,
    )
    .await?;

    progress.step("placing bench/web and bench/settings on every member");
    let hub = replicas[1].client().await?;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    place_web(&hub, REPLICAS).await?;
    let settings = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "bench"}, "data": {"colour": "blue"}});
    Api::<ConfigMap>::namespaced(hub.clone(), "bench")
        .patch("settings", &apply, &Patch::Apply(&settings))
        .await
        .map_err(|e| check("settings", e))?;
    let placements = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "flotilla.io",
        "v1alpha1",
        "Placement",
    ));
    let placement = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"resourceSelectors": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]}});
    Api::<DynamicObject>::namespaced_with(hub.clone(), "bench", &placements)
        .patch("web", &apply, &Patch::Apply(&placement))
        .await
        .map_err(|e| check("placement", e))?;
    ready_everywhere(
        &Api::namespaced(hub.clone(), "bench"),
        &Api::namespaced_with(hub.clone(), "bench", &placements),
        REPLICAS,
        n,
    )
    .await?;

    let works = ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.io", "v1alpha1", "Work"));
    let mut rounds = Vec::with_capacity(options.rounds);
    for round in 1..=options.rounds.max(1) {
        let first = replicas[0].client().await?;
        let leading = leader(&replicas, &first).await?;
        let other = 1 - leading;
        let survivor = replicas[other].client().await?;
        let killed = (replicas[leading].name.to_owned(), replicas[leading].pid()?);
        let survivor_pid = replicas[other].pid()?;
        progress.step(&format!(
            "round {round}: hub {} ({}) leads; watches through hub {}",
            killed.0, killed.1, replicas[other].name
        ));
        let image = format!("nginx:failover-{round}");
        let before = settings_versions(&members).await?;
        let leases = Api::<Lease>::namespaced(survivor.clone(), LEASE_NAMESPACE);
        let lease_rx = watch_until(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={FLEET_LEASE}")),
            move |lease: &Lease| {
                let identity = lease.spec.as_ref()?.holder_identity.clone()?;
                (holder_pid(&identity) == Some(survivor_pid)).then_some(identity)
            },
        )
        .await?;
        let wanted = image.clone();
        let work_rx = watch_until(
            Api::<DynamicObject>::all_with(survivor.clone(), &works),
            watcher::Config::default(),
            move |work: &DynamicObject| {
                work.data["spec"]["manifests"]
                    .to_string()
                    .contains(&wanted)
                    .then(|| work.metadata.name.clone().unwrap_or_default())
            },
        )
        .await?;
        let watchers = Watchers::start_with(members.clone(), "web", &image).await?;

        let t0 = Instant::now();
        replicas[leading].kill9().await?;
        Api::<Deployment>::namespaced(survivor.clone(), "bench")
            .patch("web", &apply, &Patch::Apply(web(&image, REPLICAS)))
            .await
            .map_err(|e| check("image change through the survivor", e))?;
        let (lease_taken, survivor_identity) =
            delay("the Lease held by the survivor", lease_rx, t0).await?;
        let (first_reconcile, work) = delay("a Work with the new image", work_rx, t0).await?;
        let member_delays = watchers.collect(t0).await?;
        let all_members = Duration::from_secs_f64(member_delays.max_ms / 1e3);
        progress.step(&format!(
            "round {round}: Lease {:.1} s, first reconcile {:.1} s (Work {work}), all members {:.1} s",
            lease_taken.as_secs_f64(),
            first_reconcile.as_secs_f64(),
            all_members.as_secs_f64()
        ));

        // Settled: the status back on the survivor; then no member object the change does
        // not touch was applied again.
        ready_everywhere(
            &Api::namespaced(survivor.clone(), "bench"),
            &Api::namespaced_with(survivor.clone(), "bench", &placements),
            REPLICAS,
            n,
        )
        .await?;
        let after = settings_versions(&members).await?;
        let changed: BTreeMap<String, (String, String)> = before
            .iter()
            .zip(&after)
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .map(|(i, (b, a))| (format!("member-{}", i + 1), (b.clone(), a.clone())))
            .collect();
        if !changed.is_empty() {
            return Err(Error::Check(format!(
                "round {round}: bench/settings was applied again on members whose copy needed \
                 no change (resourceVersion before → after): {changed:?}"
            )));
        }

        progress.step(&format!("round {round}: restarting hub {}", killed.0));
        replicas[leading].restart().await?;
        rounds.push(Round {
            killed,
            survivor: (replicas[other].name.to_owned(), survivor_pid),
            survivor_identity,
            lease_taken,
            first_reconcile,
            all_members,
            members: member_delays,
            unchanged_checked: before.len(),
        });
    }
    // Stopped and reaped before the run's database or prefix is removed: nothing writes
    // to it after. (On an error the processes are killed as they are dropped.)
    for replica in &mut replicas {
        replica.kill9().await?;
    }
    sim.start_kill()?;
    sim.wait().await?;
    Ok(Report {
        engine,
        clusters: n,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_names_its_process() {
        assert_eq!(holder_pid("box_4242_00ff00ff00ff00ff"), Some(4242));
        assert_eq!(holder_pid("my_host_17_abcdef"), Some(17));
        assert_eq!(holder_pid("4242_abc"), None);
        assert_eq!(holder_pid(""), None);
        assert_eq!(holder_pid("box_x_abc"), None);
    }

    #[test]
    fn the_report_summarises_each_measure_over_the_rounds() {
        let round = |a: u64, b: u64, c: u64| Round {
            lease_taken: Duration::from_secs(a),
            first_reconcile: Duration::from_secs(b),
            all_members: Duration::from_secs(c),
            ..Round::default()
        };
        let report = Report {
            engine: "postgres",
            clusters: 10,
            rounds: vec![round(15, 16, 17), round(13, 14, 15), round(17, 18, 19)],
        };
        let json = report.json();
        assert_eq!(json["first_reconcile"]["p50_ms"], 16_000.0);
        assert_eq!(json["first_reconcile"]["max_ms"], 18_000.0);
        assert_eq!(json["lease_taken"]["samples"], 3);
        assert_eq!(json["within_target"], true);
        let rows = report.summary();
        assert_eq!(rows[0].value, "p50 16.0 s, max 18.0 s");
        assert_eq!(rows[0].target, "< 20 s");
        assert!(report.table().contains("first reconcile"));
    }
}
