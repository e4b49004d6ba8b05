//! The propagation scenario on pull clusters (`--mode pull`, or `both` beside push): the
//! same template change, delivered by one agent per member running inside the simulator
//! (`flotilla sim --agents`), and what pull costs in memory and registration time.
//!
//! ```text
//!  flotilla hub (empty) ─ settle ─► hub RSS empty
//!  N stand-ins for agents' connections, each a client of its own made as an agent's is:
//!     a watch held open and a request answered (over HTTP/2, on the same connection)
//!     ─ settle ─► hub RSS with them (the floor: what an agent's connection costs the
//!     hub) ─► closed
//!  flotilla sim --clusters N (no agents; DIR/plain) ─ settle ─► sim RSS without agents
//!  flotilla sim --clusters N --agents --hub-kubeconfig … (DIR/agents; an auto-approve
//!     token the simulator makes) ─► registration time: its start → N Clusters Ready
//!     ─ settle ─► hub RSS with N pull clusters just Ready, sim RSS with agents
//!     ─ IDLE (the watch cache's history of the registrations past) ─► hub RSS with N
//!     idle pull clusters
//!  Deployment bench/web + Placement (every cluster) ─► ready everywhere (status back at
//!     the agents' resync)
//!  rounds: image nginx:2.r on the template at t0 ─► each member's watch sees it (p50, p99)
//!  flotilla agent (its own process) for cluster `solo` on member-1 of DIR/plain
//!     ─ Ready, settle ─► its RSS
//!  per pull cluster on the hub = (hub RSS with N just Ready, or idle − empty) / N
//!  the connections' floor per agent = (hub RSS with the stand-ins − empty) / N
//!  per agent in the simulator = (sim RSS with agents − without) / N
//! ```

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::process::Child;

use crate::harness::{
    client, config_of, free_port, spawn, wait_for, wait_until_serving, watch_clients,
};
use crate::propagation::{
    Cpu, FIELD_MANAGER, Options, Watchers, place_web, ready_everywhere, ticks, used, web,
};
use crate::system::{rss_mib, settle};
use crate::{Error, Latency, Progress, check, ratio};

/// The longest wait for the processes to settle between steps.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// How often the bench's agents apply their Works again: they learn of the members'
/// statuses then (the placement reads ready once they have).
const RESYNC: &str = "10s";

/// How long the pull clusters stay idle after registering before the hub's memory is
/// read again: past the watch cache's history (75 s) of the registrations' writes, which
/// it keeps for watchers that resume.
const IDLE: Duration = Duration::from_secs(90);

/// One fleet size on pull clusters.
#[derive(Debug, Clone, Default)]
pub struct PullPoint {
    /// How many members (one agent each).
    pub clusters: usize,
    /// From the agents' simulator's start to every Cluster Ready.
    pub register: Duration,
    /// From the Placement's creation to the hub's Deployment ready on every member.
    pub place: Duration,
    /// From the image change on the hub to each member's watch seeing it: the median
    /// round (by p99).
    pub latency: Latency,
    /// Every round's latency.
    pub rounds: Vec<Latency>,
    /// Every round's CPU seconds, from the change to the last member seeing it: the
    /// hub's, the agents' simulator's (agents and members) and the bench's watchers'.
    pub rounds_cpu: Vec<Cpu>,
    /// The hub's RSS empty, in MiB.
    pub hub_rss_empty_mib: f64,
    /// The hub's RSS with N pull clusters just Ready, in MiB.
    pub hub_rss_pull_mib: f64,
    /// The hub's RSS with N pull clusters idle for [`IDLE`], in MiB.
    pub hub_rss_idle_mib: f64,
    /// The hub's RSS with N stand-ins for agents' connections open (a watch and a request
    /// connection kept alive each), in MiB.
    pub hub_rss_floor_mib: f64,
    /// The simulator's RSS without agents, in MiB.
    pub sim_rss_plain_mib: f64,
    /// The simulator's RSS with N agents registered and idle, in MiB.
    pub sim_rss_agents_mib: f64,
    /// One `flotilla agent` process's RSS, registered and idle, in MiB.
    pub agent_rss_mib: f64,
}

impl PullPoint {
    /// The hub's memory per pull cluster, in KiB.
    pub fn hub_kib_per_cluster(&self) -> f64 {
        ratio(
            (self.hub_rss_pull_mib - self.hub_rss_empty_mib) * 1024.0,
            self.clusters as f64,
        )
    }

    /// The hub's memory per pull cluster once idle, in KiB.
    pub fn hub_kib_per_idle_cluster(&self) -> f64 {
        ratio(
            (self.hub_rss_idle_mib - self.hub_rss_empty_mib) * 1024.0,
            self.clusters as f64,
        )
    }

    /// The hub's memory per agent's connection alone, in KiB: the floor under its
    /// memory per pull cluster.
    pub fn hub_kib_floor_per_cluster(&self) -> f64 {
        ratio(
            (self.hub_rss_floor_mib - self.hub_rss_empty_mib) * 1024.0,
            self.clusters as f64,
        )
    }

    /// The simulator's memory per agent, in KiB.
    pub fn sim_kib_per_agent(&self) -> f64 {
        ratio(
            (self.sim_rss_agents_mib - self.sim_rss_plain_mib) * 1024.0,
            self.clusters as f64,
        )
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"clusters": self.clusters, "register_s": self.register.as_secs_f64(),
            "place_s": self.place.as_secs_f64(), "latency": self.latency.json(),
            "rounds": self.rounds.iter().map(Latency::json).collect::<Vec<_>>(),
            "rounds_cpu_s": self.rounds_cpu.iter().map(Cpu::json).collect::<Vec<_>>(),
            "hub_rss_empty_mib": self.hub_rss_empty_mib, "hub_rss_pull_mib": self.hub_rss_pull_mib,
            "hub_kib_per_pull_cluster": self.hub_kib_per_cluster(),
            "hub_rss_idle_mib": self.hub_rss_idle_mib,
            "hub_kib_per_idle_pull_cluster": self.hub_kib_per_idle_cluster(),
            "hub_rss_floor_mib": self.hub_rss_floor_mib,
            "hub_kib_floor_per_pull_cluster": self.hub_kib_floor_per_cluster(),
            "sim_rss_plain_mib": self.sim_rss_plain_mib, "sim_rss_agents_mib": self.sim_rss_agents_mib,
            "sim_kib_per_agent": self.sim_kib_per_agent(), "agent_process_rss_mib": self.agent_rss_mib})
    }
}

/// The processes of one pull measurement; killed when dropped.
struct Running {
    children: Vec<Child>,
}

fn pid(child: &Child) -> Result<u32, Error> {
    child
        .id()
        .ok_or_else(|| Error::Check("a process of the pull scenario exited".into()))
}

fn text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// `flotilla sim --clusters n` in `dir` (more args added); its kubeconfigs' directory.
fn sim(binary: &Path, dir: &Path, name: &str, n: usize, more: &[String]) -> Result<Child, Error> {
    let mut args: Vec<String> = vec![
        "sim".into(),
        "--clusters".into(),
        n.to_string(),
        "--data-dir".into(),
        text(&dir.join(name)),
        "--listen".into(),
        format!("127.0.0.1:{}", free_port()?),
        "--ready-delay".into(),
        "100ms".into(),
    ];
    args.extend_from_slice(more);
    spawn(binary, &args, &dir.join(format!("{name}.log")))
}

/// Waits until member `last`'s kubeconfig in `sim_dir` exists and its server answers.
async fn sim_serving(sim_dir: &Path, last: usize) -> Result<(), Error> {
    let kubeconfig = sim_dir
        .join("kubeconfigs")
        .join(format!("member-{last}.kubeconfig"));
    wait_for(&kubeconfig).await?;
    let pools = flotilla_fleet::runtime::Pools::default();
    wait_until_serving(&client(&kubeconfig, &pools).await?, "simulator").await
}

/// Whether a Cluster is Ready.
fn is_ready(cluster: &DynamicObject) -> bool {
    cluster.data["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Waits until `count` Clusters are Ready: ten minutes at most, or 100 ms per cluster
/// for more than 6,000. It follows a watch of the Clusters (a list, then their changes),
/// so the hub's work for it grows with the changes, not with how often it looks: a look
/// every 250 ms, as before, listed 2 MB of Clusters at N = 1,000, and would list 20 MB at
/// N = 10,000.
async fn wait_ready(hub: &Client, count: usize, progress: &mut Progress) -> Result<(), Error> {
    use futures_util::TryStreamExt as _;
    use kube::runtime::watcher;
    let deadline = Duration::from_millis(100)
        .saturating_mul(u32::try_from(count).unwrap_or(u32::MAX))
        .max(Duration::from_secs(600));
    let clusters =
        ApiResource::from_gvk(&GroupVersionKind::gvk("flotilla.io", "v1alpha1", "Cluster"));
    let stream = watcher(
        Api::<DynamicObject>::all_with(hub.clone(), &clusters),
        watcher::Config::default(),
    );
    futures_util::pin_mut!(stream);
    // The Ready Clusters' names; while the watcher lists (again), the ones listed so far.
    let (mut ready, mut listing) = (HashSet::new(), HashSet::new());
    let follow = async {
        while let Some(event) = stream.try_next().await.map_err(|e| check("clusters", e))? {
            match event {
                watcher::Event::Init => listing.clear(),
                watcher::Event::InitApply(c) if is_ready(&c) => {
                    listing.insert(c.name_any());
                }
                watcher::Event::InitApply(_) => {}
                watcher::Event::InitDone => ready = std::mem::take(&mut listing),
                watcher::Event::Apply(c) if is_ready(&c) => {
                    ready.insert(c.name_any());
                }
                watcher::Event::Apply(c) | watcher::Event::Delete(c) => {
                    ready.remove(&c.name_any());
                }
            }
            progress.count("registering", ready.len(), count);
            if ready.len() >= count {
                return Ok(());
            }
        }
        Err(Error::Check("the watch of Clusters ended".into()))
    };
    match tokio::time::timeout(deadline, follow).await {
        Ok(result) => result,
        Err(_) => Err(Error::Check(format!(
            "{} of {count} pull clusters became Ready",
            ready.len()
        ))),
    }
}

/// Runs the pull side at `n` members.
pub async fn measure(options: &Options, n: usize) -> Result<PullPoint, Error> {
    let mut progress = Progress::new(format!("propagation (pull) N={n}"));
    let dir = options.dir.join(format!("pull-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let binary = &options.binary;
    let mut running = Running {
        children: Vec::new(),
    };

    progress.step("starting an empty hub");
    let hub_dir = dir.join("hub");
    let hub_url_port = free_port()?;
    let hub_args: Vec<String> = vec![
        "hub".into(),
        "--data-dir".into(),
        text(&hub_dir),
        "--listen".into(),
        format!("127.0.0.1:{hub_url_port}"),
    ];
    running
        .children
        .push(spawn(binary, &hub_args, &dir.join("hub.log"))?);
    let hub_pid = pid(&running.children[0])?;
    let hub_kubeconfig = hub_dir.join("admin.kubeconfig");
    wait_for(&hub_kubeconfig).await?;
    let pools = flotilla_fleet::runtime::Pools::default();
    let hub = client(&hub_kubeconfig, &pools).await?;
    wait_until_serving(&hub, "hub").await?;
    settle(&[hub_pid], SETTLE_LIMIT).await;
    let hub_rss_empty_mib = rss_mib(hub_pid)?;

    progress.step("stand-ins for the agents' connections");
    let stand_ins = StandIns::open(&hub_kubeconfig, n).await?;
    settle(&[hub_pid], SETTLE_LIMIT).await;
    let hub_rss_floor_mib = rss_mib(hub_pid)?;
    drop(stand_ins);

    progress.step("a simulator without agents");
    running.children.push(sim(binary, &dir, "plain", n, &[])?);
    let plain_pid = pid(&running.children[1])?;
    sim_serving(&dir.join("plain"), n).await?;
    settle(&[plain_pid], SETTLE_LIMIT).await;
    let sim_rss_plain_mib = rss_mib(plain_pid)?;

    progress.step("a simulator with an agent per member");
    let started = Instant::now();
    let agents_args: Vec<String> = vec![
        "--agents".into(),
        "--hub-kubeconfig".into(),
        text(&hub_kubeconfig),
        "--resync-period".into(),
        RESYNC.into(),
    ];
    running
        .children
        .push(sim(binary, &dir, "agents", n, &agents_args)?);
    let agents_pid = pid(&running.children[2])?;
    wait_ready(&hub, n, &mut progress).await?;
    let register = started.elapsed();
    settle(&[hub_pid, agents_pid], SETTLE_LIMIT).await;
    let hub_rss_pull_mib = rss_mib(hub_pid)?;
    let sim_rss_agents_mib = rss_mib(agents_pid)?;
    // Each reading as it is taken, so that a run stopped later still tells it.
    let per = |mib: f64, base: f64| ratio((mib - base) * 1024.0, n as f64);
    progress.step(&format!(
        "registered in {:.1} s; hub {:.1} KiB per cluster (floor {:.1}), sim {:.1} KiB per agent; {} s idle",
        register.as_secs_f64(),
        per(hub_rss_pull_mib, hub_rss_empty_mib),
        per(hub_rss_floor_mib, hub_rss_empty_mib),
        per(sim_rss_agents_mib, sim_rss_plain_mib),
        IDLE.as_secs()
    ));
    tokio::time::sleep(IDLE).await;
    let hub_rss_idle_mib = rss_mib(hub_pid)?;
    progress.step(&format!(
        "idle: hub {:.1} KiB per cluster",
        per(hub_rss_idle_mib, hub_rss_empty_mib)
    ));

    progress.step("placing bench/web on every pull member");
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let deployments = place_web(&hub, options.replicas).await?;
    let deployment = |image: &str| web(image, options.replicas);
    let placements = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "flotilla.io",
        "v1alpha1",
        "Placement",
    ));
    let placements = Api::<DynamicObject>::namespaced_with(hub.clone(), "bench", &placements);
    let placement = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]}});
    let placed_at = Instant::now();
    placements
        .patch("web", &apply, &Patch::Apply(&placement))
        .await
        .map_err(|e| check("placement", e))?;
    ready_everywhere(&deployments, &placements, options.replicas, n).await?;
    let place = placed_at.elapsed();
    progress.step(&format!("placed in {:.1} s", place.as_secs_f64()));

    // The members' watches: through the agents' simulator's kubeconfigs.
    let kubeconfigs: Vec<_> = (1..=n)
        .map(|i| {
            dir.join("agents")
                .join("kubeconfigs")
                .join(format!("member-{i}.kubeconfig"))
        })
        .collect();
    let members = || watch_clients(&kubeconfigs);
    let all = [hub_pid, agents_pid];
    let mut rounds = Vec::new();
    let mut rounds_cpu = Vec::new();
    for round in 0..=options.rounds.max(1) {
        // Round 0 is a warm-up, as the push side's.
        let image = format!("nginx:2.{round}");
        settle(&all, SETTLE_LIMIT).await;
        progress.step(&format!("round {round}: template change through the hub"));
        let watchers = Watchers::start_with(members().await?, "web", &image).await?;
        let before = ticks(hub_pid, &[agents_pid])?;
        let t0 = Instant::now();
        deployments
            .patch("web", &apply, &Patch::Apply(deployment(&image)))
            .await
            .map_err(|e| check("image change", e))?;
        let latency = watchers.collect(t0).await?;
        let cpu = used(before, ticks(hub_pid, &[agents_pid])?);
        if round > 0 {
            progress.step(&format!(
                "round {round}: p50 {:.0} ms, p99 {:.0} ms; CPU s hub {:.2}, sim {:.2}, bench {:.2}",
                latency.p50_ms, latency.p99_ms, cpu.hub, cpu.sim, cpu.bench
            ));
            rounds.push(latency);
            rounds_cpu.push(cpu);
        }
    }
    let mut sorted = rounds.clone();
    sorted.sort_by(|a, b| a.p99_ms.total_cmp(&b.p99_ms));
    let latency = sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .cloned()
        .unwrap_or_default();

    progress.step("one agent as its own process");
    let agent_rss_mib = solo_agent(options, &dir, &hub_kubeconfig, &hub, n, &mut running).await?;
    drop(running);
    Ok(PullPoint {
        clusters: n,
        register,
        place,
        latency,
        rounds,
        rounds_cpu,
        hub_rss_empty_mib,
        hub_rss_pull_mib,
        hub_rss_idle_mib,
        hub_rss_floor_mib,
        sim_rss_plain_mib,
        sim_rss_agents_mib,
        agent_rss_mib,
    })
}

/// Stand-ins for N agents' connections to the hub, open while it lives: each a client of
/// its own made as an agent's hub client is (`flotilla_agent::hub_client_for`: HTTP/2,
/// its watch and requests on one connection), holding a watch open, as an agent watches
/// its Works, and having had a request answered, as an agent's heartbeat has. What the
/// hub holds for them is what it holds per agent before any state of a cluster.
struct StandIns {
    _held: Vec<(Client, Watch)>,
}

/// A stand-in's open watch (held, never read).
type Watch = futures_util::stream::BoxStream<
    'static,
    kube::Result<kube::api::WatchEvent<k8s_openapi::api::core::v1::ConfigMap>>,
>;

impl StandIns {
    async fn open(hub_kubeconfig: &Path, n: usize) -> Result<Self, Error> {
        use futures_util::{StreamExt as _, TryStreamExt as _};
        use k8s_openapi::api::core::v1::ConfigMap;
        let config = config_of(hub_kubeconfig, "the hub's kubeconfig").await?;
        let config = &config;
        let opened = futures_util::stream::iter(0..n)
            .map(|i| async move {
                let client = flotilla_agent::hub_client_for(config)
                    .map_err(|e| check("a stand-in's client", e))?;
                let api = Api::<ConfigMap>::namespaced(client.clone(), &format!("stand-in-{i}"));
                let watch = api
                    .watch(&kube::api::WatchParams::default(), "0")
                    .await
                    .map_err(|e| check("a stand-in's watch", e))?;
                // Over HTTP/1.1 (a hub without HTTP/2) this would go over a second
                // connection.
                api.get_opt("none")
                    .await
                    .map_err(|e| check("a stand-in's request", e))?;
                Ok::<_, Error>((client, watch.boxed() as Watch))
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        Ok(Self { _held: opened })
    }
}

/// Runs `flotilla agent` for cluster `solo` on member-1 of the simulator without agents,
/// registered with a new auto-approve token; its RSS once Ready and settled.
async fn solo_agent(
    options: &Options,
    dir: &Path,
    hub_kubeconfig: &Path,
    hub: &Client,
    n: usize,
    running: &mut Running,
) -> Result<f64, Error> {
    let out = tokio::process::Command::new(&options.binary)
        .args(["token", "create", "--auto-approve", "--hub-kubeconfig"])
        .arg(hub_kubeconfig)
        .output()
        .await?;
    if !out.status.success() {
        return Err(Error::Check(format!(
            "token create: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = stdout.lines();
    let token = lines.next().unwrap_or_default().to_owned();
    let command: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let flag = |name: &str| {
        command
            .iter()
            .position(|w| *w == name)
            .and_then(|i| command.get(i + 1))
            .map(|s| (*s).to_owned())
            .ok_or_else(|| Error::Check(format!("token create printed no {name}")))
    };
    let args: Vec<String> = vec![
        "agent".into(),
        "--hub".into(),
        flag("--hub")?,
        "--token".into(),
        token,
        "--ca-hash".into(),
        flag("--ca-hash")?,
        "--cluster".into(),
        "solo".into(),
        "--kubeconfig".into(),
        text(
            &dir.join("plain")
                .join("kubeconfigs")
                .join("member-1.kubeconfig"),
        ),
        "--data-dir".into(),
        text(&dir.join("solo-agent")),
    ];
    running
        .children
        .push(spawn(&options.binary, &args, &dir.join("agent.log"))?);
    let agent_pid = pid(running
        .children
        .last()
        .ok_or_else(|| Error::Check("no agent".into()))?)?;
    let mut quiet = Progress::new("solo agent".to_owned());
    wait_ready(hub, n + 1, &mut quiet).await?;
    settle(&[agent_pid], SETTLE_LIMIT).await;
    rss_mib(agent_pid)
}
