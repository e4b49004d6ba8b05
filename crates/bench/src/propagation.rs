//! The propagation scenario: how fast a template change on the hub reaches every member,
//! against a plain kube-rs program applying the same object to the same members itself —
//! real `flotilla hub`, `flotilla sim` and `flotilla join` processes.
//!
//! ```text
//!  flotilla hub ◄── join ×N (8 at a time) ── flotilla sim --clusters N
//!      │ Deployment bench/web + Placement (every cluster)     ▲  ▲
//!      │ wait: the hub's Deployment ready on all N            │  │ one watch per member
//!      │ warm-ups: web-bare applied once to every member,     │  │ (this process)
//!      │ one change of web through the hub                    │  │
//!  each round r (3; 2 in --quick):                            │  │
//!  (b) baseline: web as the hub delivered it to member-1, provenance stripped, renamed
//!      web-bare; at t0 image nginx:2.r applied to all N, at most CONCURRENCY at once,
//!      one client per member ────────────────────────────────────────────┘  │
//!  (a) hub: at t0 image nginx:2.r on the hub's template ─────────────────────┘
//!      ▼
//!  latency = when each member's watch sees the new image − t0 (p50, p99, max), for (a)
//!  and (b); fleet overhead = hub p99 / baseline p99 (and p50), per round; the point
//!  reports the median round and keeps them all; hub RSS idle (before joins), joined,
//!  placed; the simulator's RSS once joined
//! ```
//!
//! Each side of a round starts once the hub and the simulator have settled (used under a
//! fifth of a core for half a second), so neither pays for the other's trailing work. The
//! members' `web-bare` is invisible to the hub (it carries no provenance label). Rounds,
//! rather than one change each, because one change on a shared two-core machine now and
//! then meets a stall on either side that says nothing of the other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::harness::{MEMBERS_PER_SIM, Processes, watch_clients};
use crate::plot::Chart;
use crate::resync::metrics_text;
use crate::room::Room;
use crate::system::{cpu_ticks, rss_mib, settle};
use crate::{Error, Latency, Progress, Row, check, ratio};

/// The hub's push concurrency (Works it syncs at once); the baseline applies as many at
/// once.
pub const CONCURRENCY: usize = flotilla_fleet::runtime::PUSH_CONCURRENCY;

/// The field manager of the baseline's applies and of the bench's writes on the hub.
pub const FIELD_MANAGER: &str = "flotilla-bench";

/// The longest wait for the processes to settle between steps.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the hub's and the simulator's data go.
    pub dir: PathBuf,
    /// The `flotilla` binary.
    pub binary: PathBuf,
    /// The fleet sizes measured, one after the other (a fresh hub and simulator each).
    pub clusters: Vec<usize>,
    /// The replicas of the placed Deployment (on every member).
    pub replicas: i32,
    /// Applies in flight at once in the baseline.
    pub concurrency: usize,
    /// Measured changes per fleet size, each side by side (a bare apply, then a change
    /// through the hub): the point is the round with the median overhead.
    pub rounds: usize,
    /// Members per simulator process (more start side by side).
    pub members_per_sim: usize,
    /// Push clusters (`flotilla join`), pull clusters (`flotilla sim --agents`), or both
    /// side by side at each fleet size.
    pub mode: Mode,
    /// A database server (`postgres://…` or `etcd://…`): each fleet size's push
    /// measurement is taken a second time with the hub on it (in a database or prefix of
    /// the run's own), right after the SQLite hub's, and compared with it.
    pub store: Option<String>,
}

/// Which members the propagation scenario measures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Push clusters: the hub applies (against a bare apply by the bench).
    #[default]
    Push,
    /// Pull clusters: an agent per member inside the simulator (`crate::pull`).
    Pull,
    /// Both, push then pull, at each fleet size.
    Both,
}

impl Mode {
    fn push(self) -> bool {
        self != Mode::Pull
    }

    fn pull(self) -> bool {
        self != Mode::Push
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Push => "push",
            Mode::Pull => "pull",
            Mode::Both => "both",
        }
    }
}

impl Options {
    /// The full run: 10, 100 and 1,000 members.
    pub fn new(dir: &Path, binary: PathBuf) -> Self {
        Options {
            dir: dir.join("propagation"),
            binary,
            clusters: vec![10, 100, 1000],
            replicas: 2,
            concurrency: CONCURRENCY,
            rounds: 3,
            members_per_sim: MEMBERS_PER_SIM,
            mode: Mode::Push,
            store: None,
        }
    }

    /// A smoke run: 5 and 10 members, two rounds; the 10 on two simulators, so that the
    /// path of the largest fleets runs too.
    pub fn quick(dir: &Path, binary: PathBuf) -> Self {
        Options {
            clusters: vec![5, 10],
            rounds: 2,
            members_per_sim: 6,
            ..Options::new(dir, binary)
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"clusters": self.clusters, "replicas": self.replicas,
            "concurrency": self.concurrency, "rounds": self.rounds, "sim_ready_delay_ms": 100, "joins_at_once": 8,
            "members_per_sim": self.members_per_sim, "mode": self.mode.name(),
            "server_store": self.store.as_deref().map(engine)})
    }
}

/// One fleet size's results: the latencies, CPU, writes and requests are those of its
/// median round.
#[derive(Debug, Clone, Default)]
pub struct Point {
    /// How many members.
    pub clusters: usize,
    /// The hub's store: `sqlite`, `postgres` or `etcd`.
    pub store: &'static str,
    /// How many simulator processes served them.
    pub simulators: usize,
    /// How long joining them took.
    pub join: Duration,
    /// From the Placement's creation to the hub's Deployment ready on every member.
    pub place: Duration,
    /// (a) From the image change on the hub to each member's watch seeing it.
    pub hub: Latency,
    /// (b) From the start of the bench's own applies to each member's watch seeing them.
    pub baseline: Latency,
    /// The hub's resident memory once serving, before any join, in MiB.
    pub hub_rss_idle_mib: f64,
    /// The hub's resident memory once every member joined, in MiB.
    pub hub_rss_joined_mib: f64,
    /// The hub's resident memory once the placement ran everywhere, in MiB.
    pub hub_rss_placed_mib: f64,
    /// The simulators' resident memory once every member joined, in MiB (summed).
    pub sim_rss_joined_mib: f64,
    /// CPU seconds (hub, simulator, this process) from the baseline's t0 until every
    /// member saw its change.
    pub baseline_cpu: Cpu,
    /// The same for the change through the hub: what the fleet costs per change, which
    /// the load on a shared machine does not distort as it does times.
    pub hub_cpu: Cpu,
    /// The hub's writes caused by the change (its store's revision before it and once the
    /// hub and the simulator are idle again), the status coming back included.
    pub hub_writes: u64,
    /// Requests the simulator served from the start of each phase (baseline, then through
    /// the hub) until the hub and the simulator were idle again, by verb and resource.
    pub sim_requests: [BTreeMap<String, u64>; 2],
    /// Requests the hub served for the change through it, its controllers' own included,
    /// until it was idle again, by verb and resource.
    pub hub_requests: BTreeMap<String, u64>,
    /// Every round, in the order measured.
    pub rounds: Vec<Round>,
}

/// One measured change through the hub and the bare apply just before it.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// (a) From the image change on the hub to each member's watch seeing it.
    pub hub: Latency,
    /// (b) From the start of the bench's own applies to each member's watch seeing them.
    pub baseline: Latency,
    /// CPU seconds from the baseline's t0 until every member saw its change.
    pub baseline_cpu: Cpu,
    /// The same for the change through the hub.
    pub hub_cpu: Cpu,
    /// The hub's writes caused by the change, its status coming back included.
    pub hub_writes: u64,
    /// Requests the simulator served in the baseline, then through the hub, by verb and
    /// resource (each until the processes were idle again).
    pub sim_requests: [BTreeMap<String, u64>; 2],
    /// Requests the hub served for the change through it (its controllers' included).
    pub hub_requests: BTreeMap<String, u64>,
}

impl Round {
    /// Hub p99 / baseline p99.
    pub fn overhead_p99(&self) -> f64 {
        ratio(self.hub.p99_ms, self.baseline.p99_ms)
    }

    /// Hub p50 / baseline p50.
    pub fn overhead_p50(&self) -> f64 {
        ratio(self.hub.p50_ms, self.baseline.p50_ms)
    }

    fn json(&self) -> Value {
        json!({"hub": self.hub.json(), "baseline": self.baseline.json(),
            "overhead_p99": self.overhead_p99(), "overhead_p50": self.overhead_p50(),
            "cpu_s": {"baseline": self.baseline_cpu.json(), "hub": self.hub_cpu.json()},
            "hub_writes": self.hub_writes,
            "sim_requests": {"baseline": self.sim_requests[0], "hub": self.sim_requests[1]},
            "hub_requests": self.hub_requests})
    }
}

/// The round of median overhead (p99), the lower of the two middle ones when they are
/// even; `None` when there are none.
pub fn median_round(rounds: &[Round]) -> Option<&Round> {
    let mut sorted: Vec<&Round> = rounds.iter().collect();
    sorted.sort_by(|a, b| a.overhead_p99().total_cmp(&b.overhead_p99()));
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// CPU seconds used in a phase, per process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    /// The hub's.
    pub hub: f64,
    /// The simulators'.
    pub sim: f64,
    /// The benchmark's own (watchers, and the bare applies in the baseline).
    pub bench: f64,
}

impl Cpu {
    pub(crate) fn json(&self) -> Value {
        json!({"hub": self.hub, "sim": self.sim, "bench": self.bench})
    }
}

/// CPU ticks of the hub, the simulator and this process, now.
pub(crate) fn ticks(hub: u32, sims: &[u32]) -> Result<[u64; 3], Error> {
    let mut sim = 0;
    for pid in sims {
        sim += cpu_ticks(*pid)?;
    }
    Ok([cpu_ticks(hub)?, sim, cpu_ticks(std::process::id())?])
}

/// The CPU seconds used since `before` (ticks of 1/100 s, the Linux USER_HZ).
pub(crate) fn used(before: [u64; 3], after: [u64; 3]) -> Cpu {
    let seconds = |i: usize| after[i].saturating_sub(before[i]) as f64 / 100.0;
    Cpu {
        hub: seconds(0),
        sim: seconds(1),
        bench: seconds(2),
    }
}

impl Point {
    /// The fleet overhead: hub p99 / baseline p99.
    pub fn overhead_p99(&self) -> f64 {
        ratio(self.hub.p99_ms, self.baseline.p99_ms)
    }

    /// The hub's writes per member for one change.
    pub fn writes_per_member(&self) -> f64 {
        ratio(self.hub_writes as f64, self.clusters as f64)
    }

    /// Hub p50 / baseline p50.
    pub fn overhead_p50(&self) -> f64 {
        ratio(self.hub.p50_ms, self.baseline.p50_ms)
    }

    /// The lowest and the highest overhead (p99) of the rounds.
    pub fn overhead_range(&self) -> (f64, f64) {
        self.rounds
            .iter()
            .map(Round::overhead_p99)
            .fold((f64::NAN, f64::NAN), |(low, high), r| {
                (low.min(r), high.max(r))
            })
    }

    /// The median of the rounds' hub p99 (the point's own when it has no rounds): what a
    /// hub on a database server is compared by, so that one round meeting the fleet's
    /// periodic work (health probes, heartbeats) moves neither side much.
    pub fn median_hub_p99_ms(&self) -> f64 {
        if self.rounds.is_empty() {
            return self.hub.p99_ms;
        }
        crate::median(self.rounds.iter().map(|r| r.hub.p99_ms).collect())
    }

    /// The point of `rounds` (the median one's results, and all of them).
    fn of_rounds(mut self, rounds: Vec<Round>) -> Self {
        if let Some(median) = median_round(&rounds).cloned() {
            self.hub = median.hub;
            self.baseline = median.baseline;
            self.baseline_cpu = median.baseline_cpu;
            self.hub_cpu = median.hub_cpu;
            self.hub_writes = median.hub_writes;
            self.sim_requests = median.sim_requests;
            self.hub_requests = median.hub_requests;
        }
        self.rounds = rounds;
        self
    }
}

/// Every fleet size measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One per fleet size (push clusters).
    pub points: Vec<Point>,
    /// One per fleet size (pull clusters).
    pub pull: Vec<crate::pull::PullPoint>,
    /// One per fleet size (push clusters), the hub on the database server of
    /// [`Options::store`], each measured right after its SQLite point.
    pub on_server: Vec<Point>,
}

impl Report {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "propagation: template change → every member's watch, through the hub (a) and applied by the bench (b)\n",
        );
        push_table(&mut out, &self.points);
        if let Some(engine) = self.on_server.first().map(|p| p.store) {
            out.push_str(&format!("the same, the hub on {engine}\n"));
            push_table(&mut out, &self.on_server);
            for (p, sqlite) in self.server_pairs() {
                out.push_str(&format!(
                    "N={}: hub p99 (median of the rounds) on {engine} {:.0} ms, on sqlite {:.0} ms: {:.2}×\n",
                    p.clusters,
                    p.median_hub_p99_ms(),
                    sqlite.median_hub_p99_ms(),
                    server_ratio(p, sqlite)
                ));
            }
        }
        if !self.pull.is_empty() {
            out.push_str(
                "propagation on pull clusters (an agent per member in the simulator)\n\
                 clusters  register s  place s   p50/p99/max ms       hub KiB/cluster ready/idle (floor)  sim KiB/agent  agent process MiB\n",
            );
            for p in &self.pull {
                out.push_str(&format!(
                    "{:>8} {:>11.1} {:>8.1}   {:>5.0} /{:>5.0} /{:>5.0}   {:>17.1} /{:>6.1} ({:>5.1}) {:>14.1} {:>18.1}\n",
                    p.clusters,
                    p.register.as_secs_f64(),
                    p.place.as_secs_f64(),
                    p.latency.p50_ms,
                    p.latency.p99_ms,
                    p.latency.max_ms,
                    p.hub_kib_per_cluster(),
                    p.hub_kib_per_idle_cluster(),
                    p.hub_kib_floor_per_cluster(),
                    p.sim_kib_per_agent(),
                    p.agent_rss_mib,
                ));
            }
        }
        out
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"points": self.points.iter().map(Point::json).collect::<Vec<_>>(),
        "on_server": self.on_server.iter().map(Point::json).collect::<Vec<_>>(),
        "p99_on_server_over_sqlite": self.server_pairs().map(|(p, sqlite)| json!({
            "clusters": p.clusters, "store": p.store,
            "median_hub_p99_ms": p.median_hub_p99_ms(),
            "sqlite_median_hub_p99_ms": sqlite.median_hub_p99_ms(),
            "ratio": server_ratio(p, sqlite)})).collect::<Vec<_>>(),
        "pull": self.pull.iter().map(crate::pull::PullPoint::json).collect::<Vec<_>>()})
    }

    /// Each point on the database server with the SQLite point of its fleet size.
    pub fn server_pairs(&self) -> impl Iterator<Item = (&Point, &Point)> {
        self.on_server.iter().filter_map(|p| {
            self.points
                .iter()
                .find(|q| q.clusters == p.clusters)
                .map(|q| (p, q))
        })
    }
}

impl Point {
    fn json(&self) -> Value {
        let p = self;
        json!({
            "clusters": p.clusters,
            "store": p.store,
            "simulators": p.simulators,
            "join_s": p.join.as_secs_f64(),
            "place_s": p.place.as_secs_f64(),
            "hub": p.hub.json(),
            "baseline": p.baseline.json(),
            "overhead_p99": p.overhead_p99(),
            "overhead_p50": p.overhead_p50(),
            "hub_rss_idle_mib": p.hub_rss_idle_mib,
            "hub_rss_joined_mib": p.hub_rss_joined_mib,
            "hub_rss_placed_mib": p.hub_rss_placed_mib,
            "sim_rss_joined_mib": p.sim_rss_joined_mib,
            "cpu_s": {"baseline": p.baseline_cpu.json(), "hub": p.hub_cpu.json()},
            "hub_writes": p.hub_writes,
            "hub_writes_per_member": p.writes_per_member(),
            "sim_requests": {"baseline": p.sim_requests[0], "hub": p.sim_requests[1]},
            "hub_requests": p.hub_requests,
            "overhead_p99_range": [p.overhead_range().0, p.overhead_range().1],
            "rounds": p.rounds.iter().map(Round::json).collect::<Vec<_>>(),
        })
    }
}

impl Report {
    /// The summary's rows.
    pub fn summary(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for p in &self.points {
            rows.push(Row::new(
                "propagation",
                format!("N={}: p99 hub / bare apply", p.clusters),
                format!(
                    "{:.0} / {:.0} ms = {:.2}× (p50 {:.2}×); median of {} rounds, {:.2}–{:.2}×",
                    p.hub.p99_ms,
                    p.baseline.p99_ms,
                    p.overhead_p99(),
                    p.overhead_p50(),
                    p.rounds.len(),
                    p.overhead_range().0,
                    p.overhead_range().1,
                ),
                "p99 < 2 s and ≤ 1.5× at N=1000",
            ));
            rows.push(Row::new(
                "propagation",
                format!("N={}: join, place; RSS", p.clusters),
                format!(
                    "{:.1} s, {:.1} s; hub {:.0}/{:.0}/{:.0} MiB, sim {:.0} MiB",
                    p.join.as_secs_f64(),
                    p.place.as_secs_f64(),
                    p.hub_rss_idle_mib,
                    p.hub_rss_joined_mib,
                    p.hub_rss_placed_mib,
                    p.sim_rss_joined_mib
                ),
                "hub RSS idle/joined/placed",
            ));
            let (b, h) = (p.baseline_cpu, p.hub_cpu);
            rows.push(Row::new(
                "propagation",
                format!("N={}: CPU s hub+sim", p.clusters),
                format!(
                    "through the hub {:.2}+{:.2}, bare {:.2}+{:.2}; hub writes {:.1}/member",
                    h.hub,
                    h.sim,
                    b.hub,
                    b.sim,
                    p.writes_per_member()
                ),
                "per change, until every member saw it (writes: until idle)",
            ));
            // Watches are left out: the bench's own watchers may still be starting theirs.
            let per_member = |counts: &BTreeMap<String, u64>| {
                let sum: u64 = counts
                    .iter()
                    .filter(|(key, _)| !key.starts_with("WATCH "))
                    .map(|(_, n)| n)
                    .sum();
                ratio(sum as f64, p.clusters as f64)
            };
            rows.push(Row::new(
                "propagation",
                format!("N={}: sim requests", p.clusters),
                format!(
                    "{:.1}/member through the hub, {:.1} bare",
                    per_member(&p.sim_requests[1]),
                    per_member(&p.sim_requests[0])
                ),
                "per change, until idle (by verb in the JSON)",
            ));
        }
        for (p, sqlite) in self.server_pairs() {
            rows.push(Row::new(
                "propagation",
                format!("N={}: p99 hub on {} / on sqlite", p.clusters, p.store),
                format!(
                    "{:.0} / {:.0} ms = {:.2}× (medians of {} and {} rounds); over a bare apply {:.2}× / {:.2}×",
                    p.median_hub_p99_ms(),
                    sqlite.median_hub_p99_ms(),
                    server_ratio(p, sqlite),
                    p.rounds.len(),
                    sqlite.rounds.len(),
                    p.overhead_p99(),
                    sqlite.overhead_p99(),
                ),
                "≤ 1.5× at N=1000",
            ));
        }
        self.pull_summary(&mut rows);
        rows
    }

    /// The summary's rows of the pull side, beside push's p99 at the same size.
    fn pull_summary(&self, rows: &mut Vec<Row>) {
        for p in &self.pull {
            let push = self.points.iter().find(|q| q.clusters == p.clusters);
            let versus = match push {
                Some(q) => format!(
                    "; push {:.0} / {:.0} ms: pull p99 = {:.2}× push",
                    q.hub.p50_ms,
                    q.hub.p99_ms,
                    ratio(p.latency.p99_ms, q.hub.p99_ms)
                ),
                None => String::new(),
            };
            rows.push(Row::new(
                "propagation",
                format!("N={}: pull p50 / p99", p.clusters),
                format!(
                    "{:.0} / {:.0} ms{versus}",
                    p.latency.p50_ms, p.latency.p99_ms
                ),
                "pull p99 ≤ 1.2× push p99 at N=1000",
            ));
            rows.push(Row::new(
                "propagation",
                format!("N={}: pull memory", p.clusters),
                format!(
                    "hub {:.1} KiB/cluster just Ready, {:.1} idle (its agent's connection alone: {:.1}), sim {:.1} KiB/agent, one agent process {:.1} MiB",
                    p.hub_kib_per_cluster(),
                    p.hub_kib_per_idle_cluster(),
                    p.hub_kib_floor_per_cluster(),
                    p.sim_kib_per_agent(),
                    p.agent_rss_mib
                ),
                "< 40 KiB, < 100 KiB, < 20 MiB",
            ));
            rows.push(Row::new(
                "propagation",
                format!("N={}: registering N agents", p.clusters),
                format!("{:.1} s", p.register.as_secs_f64()),
                "< 60 s at N=1000 (auto-approve token)",
            ));
        }
    }

    /// Charts: latency and memory by fleet size.
    pub fn charts(&self) -> Vec<(&'static str, Chart)> {
        let by_n = |f: &dyn Fn(&Point) -> f64| -> Vec<(f64, f64)> {
            self.points
                .iter()
                .map(|p| (p.clusters as f64, f(p)))
                .collect()
        };
        let latency = Chart::new(
            "Template change → every member's watch",
            "member clusters",
            "milliseconds",
        )
        .log_x()
        .line("hub p99", by_n(&|p| p.hub.p99_ms))
        .line("bare apply p99", by_n(&|p| p.baseline.p99_ms))
        .line("hub p50", by_n(&|p| p.hub.p50_ms))
        .line("bare apply p50", by_n(&|p| p.baseline.p50_ms));
        let memory = Chart::new("Resident memory by fleet size", "member clusters", "MiB")
            .log_x()
            .line("hub, placed", by_n(&|p| p.hub_rss_placed_mib))
            .line("hub, joined", by_n(&|p| p.hub_rss_joined_mib))
            .line("hub, idle", by_n(&|p| p.hub_rss_idle_mib))
            .line("simulator, joined", by_n(&|p| p.sim_rss_joined_mib));
        vec![("latency", latency), ("memory", memory)]
    }
}

/// The rows of `points` in the push table, under its header.
fn push_table(out: &mut String, points: &[Point]) {
    out.push_str(
        "clusters  join s  place s   hub p50/p99/max ms     base p50/p99/max ms   p99 ratio  p50 ratio   hub MiB idle/joined/placed   sim MiB\n",
    );
    for p in points {
        out.push_str(&format!(
            "{:>8} {:>7.1} {:>8.1}   {:>5.0} /{:>5.0} /{:>5.0}     {:>5.0} /{:>5.0} /{:>5.0}   {:>9.2}  {:>9.2}   {:>7.1} /{:>7.1} /{:>7.1}   {:>8.1}\n",
            p.clusters,
            p.join.as_secs_f64(),
            p.place.as_secs_f64(),
            p.hub.p50_ms,
            p.hub.p99_ms,
            p.hub.max_ms,
            p.baseline.p50_ms,
            p.baseline.p99_ms,
            p.baseline.max_ms,
            p.overhead_p99(),
            p.overhead_p50(),
            p.hub_rss_idle_mib,
            p.hub_rss_joined_mib,
            p.hub_rss_placed_mib,
            p.sim_rss_joined_mib,
        ));
    }
}

/// The hub on a database server against the SQLite hub: their rounds' median p99s.
fn server_ratio(on_server: &Point, sqlite: &Point) -> f64 {
    ratio(on_server.median_hub_p99_ms(), sqlite.median_hub_p99_ms())
}

/// The engine a database server's URL names.
fn engine(url: &str) -> &'static str {
    if url.starts_with("etcd://") {
        "etcd"
    } else {
        "postgres"
    }
}

/// Runs every fleet size.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let mut report = Report::default();
    for &clusters in &options.clusters {
        if options.mode.push() {
            report.points.push(measure(options, clusters, None).await?);
            if let Some(url) = &options.store {
                let room = Room::make(url, "propagation").await?;
                let point = measure(options, clusters, Some(&room)).await;
                let removed = room.remove().await;
                report.on_server.push(point?);
                removed?;
            }
        }
        if options.mode.pull() {
            report
                .pull
                .push(crate::pull::measure(options, clusters).await?);
        }
    }
    Ok(report)
}

fn deployments() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
}

/// The object the hub delivered, as a plain program would apply it: without the fields the
/// server sets and without the hub's provenance, named `name`.
pub fn bare_object(mut delivered: Value, name: &str) -> Value {
    fn provenance(key: &str) -> bool {
        key.starts_with("flotilla.io/") || key == "app.kubernetes.io/managed-by"
    }
    if let Some(object) = delivered.as_object_mut() {
        object.remove("status");
    }
    if let Some(metadata) = delivered.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            metadata.remove(field);
        }
        for map in ["labels", "annotations"] {
            let empty = metadata
                .get_mut(map)
                .and_then(Value::as_object_mut)
                .map(|m| {
                    m.retain(|k, _| !provenance(k));
                    m.is_empty()
                });
            if empty == Some(true) {
                metadata.remove(map);
            }
        }
        metadata.insert("name".into(), Value::String(name.to_owned()));
    }
    delivered
}

/// `object` (a Deployment) with its first container's image set to `image`.
fn with_image(mut object: Value, image: &str) -> Result<Value, Error> {
    let slot = object
        .pointer_mut("/spec/template/spec/containers/0/image")
        .ok_or_else(|| Error::Check("the delivered Deployment has no container image".into()))?;
    *slot = Value::String(image.to_owned());
    Ok(object)
}

/// One watch per member on Deployment `bench/<name>`, each reporting when it first sees
/// `image`.
pub(crate) struct Watchers {
    tasks: tokio::task::JoinSet<()>,
    seen: mpsc::UnboundedReceiver<Instant>,
    members: usize,
}

impl Watchers {
    /// Starts the watches and returns once every one has listed (is listening).
    async fn start(
        processes: &Processes,
        n: usize,
        name: &str,
        image: &str,
    ) -> Result<Self, Error> {
        let kubeconfigs: Vec<_> = (1..=n).map(|i| processes.member_kubeconfig(i)).collect();
        Self::start_with(watch_clients(&kubeconfigs).await?, name, image).await
    }

    /// [`Watchers::start`] through `clients`, one per member.
    pub(crate) async fn start_with(
        clients: Vec<kube::Client>,
        name: &str,
        image: &str,
    ) -> Result<Self, Error> {
        let n = clients.len();
        let (listening, mut listening_rx) = mpsc::unbounded_channel();
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let mut tasks = tokio::task::JoinSet::new();
        for client in clients {
            let (listening, seen_tx) = (listening.clone(), seen_tx.clone());
            let (field, image) = (format!("metadata.name={name}"), image.to_owned());
            tasks.spawn(async move {
                let api: Api<Deployment> = Api::namespaced(client, "bench");
                // The initial state comes over the watch itself (sendInitialEvents), so
                // `InitDone` means the watch is open. After a LIST, the WATCH request
                // would follow it later, and hundreds of them could land inside the
                // measured change.
                let config = watcher::Config::default().fields(&field).streaming_lists();
                let stream = watcher(api, config);
                futures_util::pin_mut!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::InitDone) => {
                            let _ = listening.send(());
                        }
                        Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                            let current = d
                                .spec
                                .and_then(|s| s.template.spec)
                                .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
                            if current.as_deref() == Some(image.as_str()) {
                                let _ = seen_tx.send(Instant::now());
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
        Ok(Watchers {
            tasks,
            seen,
            members: n,
        })
    }

    /// Each member's delay from `t0` to its watch seeing the image.
    pub(crate) async fn collect(mut self, t0: Instant) -> Result<Latency, Error> {
        let n = self.members;
        let mut delays = Vec::with_capacity(n);
        let deadline = tokio::time::Instant::from_std(t0) + Duration::from_secs(300);
        while delays.len() < n {
            let at = tokio::time::timeout_at(deadline, self.seen.recv())
                .await
                .map_err(|_| {
                    Error::Check(format!("{} of {n} members saw the change", delays.len()))
                })?
                .ok_or_else(|| Error::Check("a member watch ended".into()))?;
            delays.push(at.saturating_duration_since(t0));
        }
        self.tasks.abort_all();
        Ok(Latency::of(delays))
    }
}

/// Applies `object` to every member through `apis` (one client each), at most
/// `concurrency` at once.
async fn apply_everywhere(
    apis: &[Api<DynamicObject>],
    object: Value,
    concurrency: usize,
) -> Result<(), Error> {
    let object = Arc::new(object);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for api in apis {
        let (api, object, permits, name) =
            (api.clone(), object.clone(), permits.clone(), name.clone());
        tasks.spawn(async move {
            let _permit = permits
                .acquire_owned()
                .await
                .map_err(|e| check("apply", e))?;
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&*object),
            )
            .await
            .map(drop)
            .map_err(|e| check("bare apply", e))
        });
    }
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    Ok(())
}

/// Measures `n` push members, the hub on `server` when given (else on SQLite).
async fn measure(options: &Options, n: usize, server: Option<&Room>) -> Result<Point, Error> {
    let store = server.map_or("sqlite", Room::engine);
    let (label, dir) = match server {
        None => (
            format!("propagation N={n}"),
            options.dir.join(n.to_string()),
        ),
        Some(_) => (
            format!("propagation N={n} on {store}"),
            options.dir.join(format!("{n}-{store}")),
        ),
    };
    let mut progress = Progress::new(label);
    progress.step("starting the hub and the simulator");
    let mut processes = Processes::start_on(
        &options.binary,
        &dir,
        n,
        options.members_per_sim,
        server.map(Room::url),
    )
    .await?;
    let (hub_pid, sim_pids) = (processes.hub_pid()?, processes.sim_pids()?);
    let all: Vec<u32> = std::iter::once(hub_pid).chain(sim_pids.clone()).collect();
    let hub_client = processes.hub_client().await?;
    settle(&[hub_pid], SETTLE_LIMIT).await;
    let hub_rss_idle_mib = rss_mib(hub_pid)?;

    let join = processes
        .join_all("bench=propagation", &mut progress)
        .await?;
    settle(&all, SETTLE_LIMIT).await;
    let hub_rss_joined_mib = rss_mib(hub_pid)?;
    let mut sim_rss_joined_mib = 0.0;
    for pid in &sim_pids {
        sim_rss_joined_mib += rss_mib(*pid)?;
    }

    // Place a Deployment on every member and wait until the hub says it runs everywhere.
    progress.step("placing bench/web on every member");
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let deployments_on_hub = place_web(&hub_client, options.replicas).await?;
    let deployment = |image: &str| web(image, options.replicas);
    let started = Instant::now();
    let placements = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "flotilla.io",
        "v1alpha1",
        "Placement",
    ));
    let placement = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]}});
    let placements =
        Api::<DynamicObject>::namespaced_with(hub_client.clone(), "bench", &placements);
    placements
        .patch("web", &apply, &Patch::Apply(&placement))
        .await
        .map_err(|e| check("placement", e))?;
    let replicas = options.replicas;
    ready_everywhere(&deployments_on_hub, &placements, replicas, n).await?;
    let place = started.elapsed();
    settle(&all, SETTLE_LIMIT).await;
    let hub_rss_placed_mib = rss_mib(hub_pid)?;

    // (b) The baseline: the object as delivered, applied by this process.
    progress.step("bare-apply baseline: warm-up");
    let deployments = deployments();
    let delivered = Api::<DynamicObject>::namespaced_with(
        processes.member_client(1).await?,
        "bench",
        &deployments,
    )
    .get("web")
    .await
    .map_err(|e| check("web on member-1", e))?;
    let bare = bare_object(
        serde_json::to_value(&delivered).map_err(|e| check("web on member-1", e))?,
        "web-bare",
    );
    let mut members = Vec::with_capacity(n);
    for i in 1..=n {
        members.push(Api::<DynamicObject>::namespaced_with(
            processes.member_client(i).await?,
            "bench",
            &deployments,
        ));
    }
    // Warm-up: every client has applied once (its connection is open) before the clock.
    apply_everywhere(&members, bare.clone(), options.concurrency).await?;

    // (a) Through the hub, after a warm-up change as the baseline had its warm-up apply:
    // the simulator serves every member from one address, so the hub's idle connections
    // to them form one pool that ages out (after 90 s) if the hub sits idle, and a change
    // would open a thousand TLS connections at once. Real members, each at its own
    // address, keep theirs open with their health probes (every 10 s). The rounds follow
    // each other closely enough to keep the pool warm.
    settle(&all, SETTLE_LIMIT).await;
    progress.step("warm-up change through the hub");
    let watchers = Watchers::start(&processes, n, "web", "nginx:1.1").await?;
    deployments_on_hub
        .patch("web", &apply, &Patch::Apply(deployment("nginx:1.1")))
        .await
        .map_err(|e| check("warm-up change", e))?;
    watchers.collect(Instant::now()).await?;
    ready_everywhere(&deployments_on_hub, &placements, replicas, n).await?;

    let sim_clients = processes.sim_clients().await?;
    let sim_requests = || async {
        let mut all = BTreeMap::new();
        for client in &sim_clients {
            for (request, count) in requests(&metrics_text(client).await?) {
                *all.entry(request).or_insert(0.0) += count;
            }
        }
        Ok::<_, Error>(all)
    };
    let hub_requests = || async { Ok::<_, Error>(requests(&metrics_text(&hub_client).await?)) };
    let revision = || async {
        crate::resync::metric(&hub_client, "flotilla_store_revision")
            .await
            .map(Option::unwrap_or_default)
    };
    let mut rounds = Vec::with_capacity(options.rounds);
    for round in 1..=options.rounds.max(1) {
        let image = format!("nginx:2.{round}");
        // Each side starts with the hub and the simulator settled, so that neither pays
        // for the other's trailing work.
        settle(&all, SETTLE_LIMIT).await;
        progress.step(&format!("round {round}: bare apply"));
        let watchers = Watchers::start(&processes, n, "web-bare", &image).await?;
        let sim_before = sim_requests().await?;
        let changed = with_image(bare.clone(), &image)?;
        let before = ticks(hub_pid, &sim_pids)?;
        let t0 = Instant::now();
        apply_everywhere(&members, changed, options.concurrency).await?;
        let baseline = watchers.collect(t0).await?;
        let baseline_cpu = used(before, ticks(hub_pid, &sim_pids)?);
        settle(&all, SETTLE_LIMIT).await;
        let baseline_sim_requests = difference(&sim_before, &sim_requests().await?);

        progress.step(&format!("round {round}: template change through the hub"));
        let watchers = Watchers::start(&processes, n, "web", &image).await?;
        let writes_before = revision().await?;
        let sim_before = sim_requests().await?;
        let hub_before = hub_requests().await?;
        let before = ticks(hub_pid, &sim_pids)?;
        let t0 = Instant::now();
        deployments_on_hub
            .patch("web", &apply, &Patch::Apply(deployment(&image)))
            .await
            .map_err(|e| check("image change", e))?;
        let hub = watchers.collect(t0).await?;
        let hub_cpu = used(before, ticks(hub_pid, &sim_pids)?);
        // Every write the change caused on the hub, its status coming back included (some
        // of it written after a wait: until the revision stands still for 4 s).
        settle(&all, SETTLE_LIMIT).await;
        let mut last = revision().await?;
        let (mut still_since, deadline) = (Instant::now(), Instant::now() + SETTLE_LIMIT);
        while still_since.elapsed() < Duration::from_secs(4) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = revision().await?;
            if now != last {
                (last, still_since) = (now, Instant::now());
            }
        }
        let hub_writes = (last - writes_before).max(0.0) as u64;
        let hub_sim_requests = difference(&sim_before, &sim_requests().await?);
        let hub_requests = difference(&hub_before, &hub_requests().await?);
        let measured = Round {
            hub,
            baseline,
            baseline_cpu,
            hub_cpu,
            hub_writes,
            sim_requests: [baseline_sim_requests, hub_sim_requests],
            hub_requests,
        };
        progress.step(&format!(
            "round {round}: p99 hub {:.0} ms, bare {:.0} ms ({:.2}×)",
            measured.hub.p99_ms,
            measured.baseline.p99_ms,
            measured.overhead_p99()
        ));
        rounds.push(measured);
    }
    drop(members);
    if server.is_some() {
        // Its database or prefix goes next: nothing may write there any more.
        processes.stop_hub().await?;
    }
    Ok(Point {
        clusters: n,
        store,
        simulators: sim_pids.len(),
        join,
        place,
        hub_rss_idle_mib,
        hub_rss_joined_mib,
        hub_rss_placed_mib,
        sim_rss_joined_mib,
        ..Point::default()
    }
    .of_rounds(rounds))
}

/// Waits until the hub reports the Deployment's current generation ready on every member:
/// the placement chose all `n` members and the template reads `replicas` ready (its status
/// is in the template's units: every copy of a Duplicated placement ready).
pub(crate) async fn ready_everywhere(
    deployments: &Api<Deployment>,
    placements: &Api<DynamicObject>,
    replicas: i32,
    n: usize,
) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let web = deployments
            .get("web")
            .await
            .map_err(|e| check("deployment", e))?;
        let generation = web.metadata.generation;
        let status = web.status.unwrap_or_default();
        let ready = status.ready_replicas.unwrap_or(0);
        let placement = placements
            .get("web")
            .await
            .map_err(|e| check("placement", e))?;
        let placed = &placement.data["status"];
        let chosen = placed["clusters"].as_array().map_or(0, Vec::len)
            + placed["unlistedClusters"]
                .as_u64()
                .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if ready == replicas && status.observed_generation == generation && chosen == n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "the hub's Deployment never got ready on all {n} members: {ready}/{replicas} \
                 ready (in the template's units), {chosen} clusters chosen"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Requests served by verb and resource (`GET deployments`), from `apiserver_request_total`
/// in a `/metrics` text.
fn requests(text: &str) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"'))
                .unwrap_or_default()
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        *counts
            .entry(format!("{} {}", label("verb"), label("resource")))
            .or_insert(0.0) += value;
    }
    counts
}

/// What grew from `before` to `after`.
fn difference(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(key, value)| {
            let grown = value - before.get(key).copied().unwrap_or(0.0);
            (grown >= 1.0).then(|| (key.clone(), grown.round() as u64))
        })
        .collect()
}

/// The benchmarks' template: Deployment `bench/web` running `image`.
pub(crate) fn web(image: &str, replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]}}}})
}

/// Applies namespace `bench` and [`web`] (`nginx:1`) on the hub; its Deployments there.
pub(crate) async fn place_web(hub: &kube::Client, replicas: i32) -> Result<Api<Deployment>, Error> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}))
        .map_err(|e| check("namespace", e))?;
    Api::<Namespace>::all(hub.clone())
        .patch("bench", &apply, &Patch::Apply(&namespace))
        .await
        .map_err(|e| check("namespace", e))?;
    let deployments: Api<Deployment> = Api::namespaced(hub.clone(), "bench");
    deployments
        .patch("web", &apply, &Patch::Apply(web("nginx:1", replicas)))
        .await
        .map_err(|e| check("deployment", e))?;
    Ok(deployments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bare_object_has_no_server_fields_and_no_provenance() {
        let delivered = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "bench", "resourceVersion": "7",
                "uid": "u", "creationTimestamp": "t", "generation": 2,
                "managedFields": [{"manager": "flotilla"}],
                "labels": {"flotilla.io/hub": "h", "app.kubernetes.io/managed-by": "flotilla", "team": "a"},
                "annotations": {"flotilla.io/placement": "bench/web", "flotilla.io/work": "w"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}},
            "status": {"readyReplicas": 2}
        });
        let bare = bare_object(delivered, "web-bare");
        assert_eq!(
            bare,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web-bare", "namespace": "bench", "labels": {"team": "a"}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}
            })
        );
        let changed = with_image(bare, "nginx:2").unwrap();
        assert_eq!(
            changed["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:2"
        );
        assert!(with_image(json!({"spec": {}}), "x").is_err());
    }

    #[test]
    fn requests_are_counted_by_verb_and_resource_and_differences_keep_what_grew() {
        let before = requests(
            "# HELP apiserver_request_total x\n\
             apiserver_request_total{verb=\"GET\",group=\"\",resource=\"nodes\",code=\"200\"} 4\n\
             apiserver_request_total{verb=\"GET\",group=\"\",resource=\"nodes\",code=\"404\"} 1\n\
             apiserver_request_duration_seconds_count{verb=\"GET\",group=\"\",resource=\"nodes\"} 5\n",
        );
        assert_eq!(before, BTreeMap::from([("GET nodes".to_owned(), 5.0)]));
        let after = requests(
            "apiserver_request_total{verb=\"GET\",group=\"\",resource=\"nodes\",code=\"200\"} 4\n\
             apiserver_request_total{verb=\"GET\",group=\"\",resource=\"nodes\",code=\"404\"} 1\n\
             apiserver_request_total{verb=\"PATCH\",group=\"apps\",resource=\"deployments\",code=\"200\"} 7\n",
        );
        assert_eq!(
            difference(&before, &after),
            BTreeMap::from([("PATCH deployments".to_owned(), 7)])
        );
    }

    fn round(hub_p99: f64, base_p99: f64, writes: u64) -> Round {
        let latency = |p99: f64| Latency {
            p50_ms: p99 / 2.0,
            p99_ms: p99,
            max_ms: p99,
            samples: 10,
        };
        Round {
            hub: latency(hub_p99),
            baseline: latency(base_p99),
            hub_writes: writes,
            ..Round::default()
        }
    }

    #[test]
    fn a_point_reports_its_median_round_and_keeps_them_all() {
        // Overheads 1.2, 3.0 (a stalled round), 1.4: the median is the third round.
        let rounds = vec![
            round(120.0, 100.0, 1),
            round(300.0, 100.0, 2),
            round(140.0, 100.0, 3),
        ];
        assert_eq!(median_round(&rounds).unwrap().hub_writes, 3);
        let point = Point {
            clusters: 10,
            ..Point::default()
        }
        .of_rounds(rounds);
        assert_eq!(point.hub.p99_ms, 140.0);
        assert_eq!(point.hub_writes, 3);
        assert!((point.overhead_p99() - 1.4).abs() < 1e-9);
        assert_eq!(point.overhead_range(), (1.2, 3.0));
        let json = Report {
            points: vec![point.clone()],
            ..Report::default()
        }
        .json();
        assert_eq!(json["points"][0]["rounds"].as_array().unwrap().len(), 3);
        assert_eq!(json["points"][0]["rounds"][1]["overhead_p99"], 3.0);
        assert_eq!(json["points"][0]["overhead_p99_range"][1], 3.0);
        // Of two, the lower; of none, none.
        assert_eq!(median_round(&point.rounds[..2]).unwrap().hub_writes, 1);
        assert!(median_round(&[]).is_none());
        let summary = Report {
            points: vec![point],
            ..Report::default()
        }
        .summary();
        assert!(
            summary[0].value.contains("median of 3 rounds, 1.20–3.00×"),
            "{}",
            summary[0].value
        );
    }

    #[test]
    fn the_report_gives_ratios_rows_and_one_line_per_series() {
        let point = |n: usize, hub: f64, base: f64| Point {
            clusters: n,
            hub: Latency {
                p50_ms: hub / 2.0,
                p99_ms: hub,
                max_ms: hub,
                samples: n,
            },
            baseline: Latency {
                p50_ms: base / 2.0,
                p99_ms: base,
                max_ms: base,
                samples: n,
            },
            hub_rss_joined_mib: 60.0,
            hub_cpu: Cpu {
                hub: 2.0,
                sim: 1.0,
                bench: 0.5,
            },
            hub_writes: 3 * n as u64,
            ..Point::default()
        };
        let report = Report {
            points: vec![point(5, 150.0, 100.0), point(10, 300.0, 100.0)],
            ..Report::default()
        };
        assert_eq!(report.points[1].overhead_p99(), 3.0);
        let json = report.json();
        assert_eq!(json["points"][0]["overhead_p99"], 1.5);
        assert_eq!(json["points"][1]["baseline"]["samples"], 10);
        assert_eq!(json["points"][1]["cpu_s"]["hub"]["sim"], 1.0);
        assert_eq!(json["points"][1]["hub_writes_per_member"], 3.0);
        // Per fleet size: latency, memory, CPU and requests.
        assert_eq!(report.summary().len(), 8);
        let charts = report.charts();
        assert_eq!(charts.len(), 2);
        for (_, chart) in charts {
            assert_eq!(chart.svg().matches("<polyline").count(), chart.series.len());
        }
        assert!(report.table().contains("p99 ratio"));
    }

    #[test]
    fn pull_is_reported_per_cluster_and_beside_push() {
        let pull = crate::pull::PullPoint {
            clusters: 10,
            register: Duration::from_secs(3),
            latency: Latency {
                p50_ms: 100.0,
                p99_ms: 240.0,
                max_ms: 250.0,
                samples: 10,
            },
            hub_rss_empty_mib: 20.0,
            hub_rss_pull_mib: 20.25,
            hub_rss_idle_mib: 20.125,
            hub_rss_floor_mib: 20.0625,
            sim_rss_plain_mib: 30.0,
            sim_rss_agents_mib: 31.0,
            agent_rss_mib: 12.0,
            ..Default::default()
        };
        assert!((pull.hub_kib_per_cluster() - 25.6).abs() < 1e-9);
        assert!((pull.sim_kib_per_agent() - 102.4).abs() < 1e-9);
        assert!((pull.hub_kib_per_idle_cluster() - 12.8).abs() < 1e-9);
        assert!((pull.hub_kib_floor_per_cluster() - 6.4).abs() < 1e-9);
        let push = Point {
            clusters: 10,
            hub: Latency {
                p50_ms: 80.0,
                p99_ms: 200.0,
                max_ms: 210.0,
                samples: 10,
            },
            ..Point::default()
        };
        let report = Report {
            points: vec![push],
            pull: vec![pull],
            on_server: Vec::new(),
        };
        let rows = report.summary();
        let latency = rows
            .iter()
            .find(|r| r.what == "N=10: pull p50 / p99")
            .unwrap();
        assert!(
            latency.value.contains("pull p99 = 1.20× push"),
            "{latency:?}"
        );
        let json = report.json();
        assert_eq!(json["pull"][0]["hub_kib_per_pull_cluster"], 25.6);
        assert_eq!(json["pull"][0]["agent_process_rss_mib"], 12.0);
        assert_eq!(json["pull"][0]["hub_kib_per_idle_pull_cluster"], 12.8);
        assert_eq!(json["pull"][0]["hub_kib_floor_per_pull_cluster"], 6.4);
        let memory = rows.iter().find(|r| r.what == "N=10: pull memory").unwrap();
        assert!(
            memory
                .value
                .contains("12.8 idle (its agent's connection alone: 6.4)"),
            "{memory:?}"
        );
        assert!(report.table().contains("on pull clusters"));
    }

    #[test]
    fn the_median_hub_p99_is_taken_over_the_rounds() {
        let round = |p99_ms| Round {
            hub: Latency {
                p99_ms,
                ..Latency::default()
            },
            ..Round::default()
        };
        let point = |p99s: &[f64]| Point {
            hub: Latency {
                p99_ms: 7.0,
                ..Latency::default()
            },
            rounds: p99s.iter().map(|&p| round(p)).collect(),
            ..Point::default()
        };
        assert_eq!(point(&[]).median_hub_p99_ms(), 7.0);
        assert_eq!(point(&[3000.0, 1000.0, 2000.0]).median_hub_p99_ms(), 2000.0);
        assert_eq!(
            point(&[4000.0, 1000.0, 2000.0, 3000.0]).median_hub_p99_ms(),
            2500.0
        );
    }

    #[test]
    fn a_hub_on_a_database_server_is_compared_with_the_sqlite_hub_of_its_size() {
        let point = |clusters, store, p99_ms| Point {
            clusters,
            store,
            hub: Latency {
                p99_ms,
                samples: clusters,
                ..Latency::default()
            },
            baseline: Latency {
                p99_ms: 100.0,
                samples: clusters,
                ..Latency::default()
            },
            ..Point::default()
        };
        let report = Report {
            points: vec![point(10, "sqlite", 200.0), point(100, "sqlite", 400.0)],
            on_server: vec![point(100, "etcd", 500.0)],
            pull: Vec::new(),
        };
        let pairs: Vec<_> = report
            .server_pairs()
            .map(|(p, q)| (p.clusters, q.store))
            .collect();
        assert_eq!(pairs, [(100, "sqlite")]);
        let rows = report.summary();
        let row = rows
            .iter()
            .find(|r| r.what == "N=100: p99 hub on etcd / on sqlite")
            .unwrap();
        assert!(
            row.value
                .starts_with("500 / 400 ms = 1.25× (medians of 0 and 0 rounds)"),
            "{row:?}"
        );
        assert!(row.value.ends_with("5.00× / 4.00×"), "{row:?}");
        let json = report.json();
        assert_eq!(json["p99_on_server_over_sqlite"][0]["ratio"], 1.25);
        assert_eq!(json["on_server"][0]["store"], "etcd");
        let table = report.table();
        assert!(table.contains("the same, the hub on etcd"), "{table}");
        assert!(
            table.contains(
                "N=100: hub p99 (median of the rounds) on etcd 500 ms, on sqlite 400 ms: 1.25×"
            ),
            "{table}"
        );
    }
}
