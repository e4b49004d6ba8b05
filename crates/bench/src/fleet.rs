//! The fleet scenario: how fast a template change reaches every member, and what the hub
//! holds in memory, with N members joined — real `flotilla hub`, `flotilla sim` and
//! `flotilla join` processes.
//!
//! ```text
//!  flotilla hub ◄── join ×N (8 at a time) ── flotilla sim --clusters N
//!      │ Deployment bench/web + Placement (every cluster)     ▲
//!      │ wait: the hub's Deployment ready on all N            │ one watch per member
//!      │ t0: set a new image on the hub ──────────────────────┘ (this process)
//!      ▼
//!  propagation = when each member's watch sees the new image − t0 (p50, p99, max);
//!  the hub's RSS once joined and once placed
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use tokio::process::{Child, Command};

use crate::{Error, Latency};

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the hub's and the simulator's data go.
    pub dir: PathBuf,
    /// The `flotilla` binary.
    pub binary: PathBuf,
    /// The fleet sizes measured, one after the other.
    pub clusters: Vec<usize>,
    /// The replicas of the placed Deployment (on every member).
    pub replicas: i32,
}

impl Options {
    /// The full run: 100 and 1,000 members.
    pub fn new(dir: &Path, binary: PathBuf) -> Self {
        Options {
            dir: dir.join("fleet"),
            binary,
            clusters: vec![100, 1000],
            replicas: 2,
        }
    }

    /// A smoke run: 10 members.
    pub fn quick(dir: &Path, binary: PathBuf) -> Self {
        Options {
            clusters: vec![10],
            ..Options::new(dir, binary)
        }
    }
}

/// One fleet size's results.
#[derive(Debug, Clone)]
pub struct Point {
    /// How many members.
    pub clusters: usize,
    /// How long joining them took.
    pub join: Duration,
    /// From the Placement's creation to the hub's Deployment ready on every member.
    pub place: Duration,
    /// From the image change on the hub to each member's watch seeing it.
    pub propagation: Latency,
    /// The hub's resident memory once every member joined, in MiB.
    pub rss_joined_mib: f64,
    /// The hub's resident memory once the placement ran everywhere, in MiB.
    pub rss_placed_mib: f64,
}

/// Every fleet size measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One per fleet size.
    pub points: Vec<Point>,
}

impl Report {
    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "fleet: template change → every member (hub, sim and watchers on this machine)\n\
             clusters    join s   place s   prop p50 ms   prop p99 ms   prop max ms   RSS joined MiB   RSS placed MiB\n",
        );
        for p in &self.points {
            out.push_str(&format!(
                "{:>8} {:>9.1} {:>9.1} {:>13.0} {:>13.0} {:>13.0} {:>16.1} {:>16.1}\n",
                p.clusters,
                p.join.as_secs_f64(),
                p.place.as_secs_f64(),
                p.propagation.p50_ms,
                p.propagation.p99_ms,
                p.propagation.max_ms,
                p.rss_joined_mib,
                p.rss_placed_mib
            ));
        }
        out
    }

    /// As JSON.
    pub fn json(&self) -> serde_json::Value {
        json!({"scenario": "fleet", "points": self.points.iter().map(|p| json!({
            "clusters": p.clusters,
            "join_s": p.join.as_secs_f64(),
            "place_s": p.place.as_secs_f64(),
            "propagation": p.propagation.json(),
            "hub_rss_joined_mib": p.rss_joined_mib,
            "hub_rss_placed_mib": p.rss_placed_mib,
        })).collect::<Vec<_>>()})
    }
}

fn check(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Check(format!("{what}: {e}"))
}

/// Runs every fleet size.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let mut report = Report::default();
    for &clusters in &options.clusters {
        report.points.push(measure(options, clusters).await?);
    }
    Ok(report)
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn spawn(binary: &Path, args: &[&str], log: &Path) -> Result<Child, Error> {
    Ok(Command::new(binary)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .kill_on_drop(true)
        .spawn()?)
}

async fn wait_for(path: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(Error::Check(format!("{} never appeared", path.display())));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn client(kubeconfig: &Path) -> Result<Client, Error> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).map_err(|e| check("kubeconfig", e))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| check("kubeconfig", e))?;
    Client::try_from(config).map_err(|e| check("client", e))
}

fn rss_mib(child: &Child) -> Result<f64, Error> {
    let pid = child
        .id()
        .ok_or_else(|| Error::Check("the hub exited".into()))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .ok_or_else(|| Error::Check("no VmRSS in /proc status".into()))
}

async fn measure(options: &Options, n: usize) -> Result<Point, Error> {
    let dir = options.dir.join(format!("{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (hub_dir, sim_dir) = (dir.join("hub"), dir.join("sim"));
    let text = |p: &Path| p.to_string_lossy().into_owned();
    let hub = spawn(
        &options.binary,
        &[
            "hub",
            "--data-dir",
            &text(&hub_dir),
            "--listen",
            &format!("127.0.0.1:{}", free_port()?),
        ],
        &dir.join("hub.log"),
    )?;
    let _sim = spawn(
        &options.binary,
        &[
            "sim",
            "--clusters",
            &n.to_string(),
            "--data-dir",
            &text(&sim_dir),
            "--listen",
            &format!("127.0.0.1:{}", free_port()?),
            "--ready-delay",
            "100ms",
        ],
        &dir.join("sim.log"),
    )?;
    let hub_kubeconfig = hub_dir.join("admin.kubeconfig");
    let member = |i: usize| {
        sim_dir
            .join("kubeconfigs")
            .join(format!("member-{i}.kubeconfig"))
    };
    wait_for(&hub_kubeconfig).await?;
    wait_for(&member(n)).await?;
    let hub_client = client(&hub_kubeconfig).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while hub_client.apiserver_version().await.is_err() {
        if Instant::now() > deadline {
            return Err(Error::Check("the hub never answered".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Join every member, 8 at a time, as an operator would.
    let started = Instant::now();
    let joins = futures_util::stream::iter(1..=n)
        .map(|i| {
            let (binary, kubeconfig, hub) =
                (options.binary.clone(), member(i), hub_kubeconfig.clone());
            async move {
                let out = Command::new(binary)
                    .args(["join", &format!("member-{i}"), "--labels", "bench=fleet"])
                    .arg("--kubeconfig")
                    .arg(kubeconfig)
                    .arg("--hub-kubeconfig")
                    .arg(hub)
                    .args(["--timeout", "300s"])
                    .output()
                    .await?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(Error::Check(format!(
                        "join member-{i}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )))
                }
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>();
    joins.await?;
    let join = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_joined_mib = rss_mib(&hub)?;

    // Place a Deployment on every member and wait until the hub says it runs everywhere.
    let apply = PatchParams::apply("flotilla-bench").force();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}))
        .map_err(|e| check("namespace", e))?;
    Api::<Namespace>::all(hub_client.clone())
        .patch("bench", &apply, &Patch::Apply(&namespace))
        .await
        .map_err(|e| check("namespace", e))?;
    let deployments: Api<Deployment> = Api::namespaced(hub_client.clone(), "bench");
    let deployment = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "bench"},
            "spec": {"replicas": options.replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image}]}}}})
    };
    deployments
        .patch("web", &apply, &Patch::Apply(deployment("nginx:1")))
        .await
        .map_err(|e| check("deployment", e))?;
    let started = Instant::now();
    let placements = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "flotilla.io",
        "v1alpha1",
        "Placement",
    ));
    let placement = json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
        "metadata": {"name": "web", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}]}});
    Api::<kube::api::DynamicObject>::namespaced_with(hub_client.clone(), "bench", &placements)
        .patch("web", &apply, &Patch::Apply(&placement))
        .await
        .map_err(|e| check("placement", e))?;
    let everywhere = i64::from(options.replicas) * n as i64;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let web = deployments
            .get("web")
            .await
            .map_err(|e| check("deployment", e))?;
        let ready = web.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if i64::from(ready) == everywhere {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::Check(format!(
                "only {ready}/{everywhere} replicas ever got ready"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let place = started.elapsed();
    let rss_placed_mib = rss_mib(&hub)?;

    // One watch per member; once all are listening, change the image on the hub.
    let (listening, mut listening_rx) = tokio::sync::mpsc::unbounded_channel();
    let (seen, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watches = tokio::task::JoinSet::new();
    for i in 1..=n {
        let member_client = client(&member(i)).await?;
        let (listening, seen) = (listening.clone(), seen.clone());
        watches.spawn(async move {
            let api: Api<Deployment> = Api::namespaced(member_client, "bench");
            let stream = watcher(api, watcher::Config::default().fields("metadata.name=web"));
            futures_util::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        let _ = listening.send(());
                    }
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        let image = d
                            .spec
                            .and_then(|s| s.template.spec)
                            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()));
                        if image.as_deref() == Some("nginx:2") {
                            let _ = seen.send(Instant::now());
                            return;
                        }
                    }
                    _ => {}
                }
            }
        });
    }
    for _ in 0..n {
        listening_rx
            .recv()
            .await
            .ok_or_else(|| Error::Check("a member watch ended".into()))?;
    }
    let t0 = Instant::now();
    deployments
        .patch("web", &apply, &Patch::Apply(deployment("nginx:2")))
        .await
        .map_err(|e| check("image change", e))?;
    let mut delays = Vec::with_capacity(n);
    for _ in 0..n {
        let at = tokio::time::timeout(Duration::from_secs(300), seen_rx.recv())
            .await
            .map_err(|_| Error::Check(format!("{} of {n} members saw the change", delays.len())))?
            .ok_or_else(|| Error::Check("a member watch ended".into()))?;
        delays.push(at.saturating_duration_since(t0));
    }
    watches.abort_all();
    Ok(Point {
        clusters: n,
        join,
        place,
        propagation: Latency::of(delays),
        rss_joined_mib,
        rss_placed_mib,
    })
}
