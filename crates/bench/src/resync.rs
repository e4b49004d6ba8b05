//! The resync scenario: a hub holding P placements × N clusters (P×N Works) is restarted;
//! how long until every Work is confirmed in sync again, and how much memory it takes
//! meanwhile — real `flotilla hub`, `flotilla sim` and `flotilla join` processes.
//!
//! ```text
//!  flotilla hub ◄── join ×N (label bench=resync) ── flotilla sim --clusters N
//!      │ ConfigMap bench/cm-<i> + Placement bench/cm-<i> (every cluster), i < P,
//!      │ 32 writes in flight
//!      │ wait: flotilla_works_in_sync (the hub's /metrics, polled every 200 ms) = P×N
//!      ▼                                                        → setup time, hub RSS
//!  SIGTERM, wait for the exit (SIGKILL after 60 s); start it again (same data, same port,
//!  members not joined again)
//!      │ wait: flotilla_works_in_sync = P×N                     → resync time
//!      ▼
//!  peak RSS of the new process: VmHWM at the end, and the largest VmRSS sampled every 200 ms
//! ```
//!
//! `flotilla_works_in_sync` counts the Works whose latest sync by the hub's push controller
//! since the hub process started applied every manifest of the Work's current generation.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::harness::{MEMBERS_PER_SIM, Processes};
use crate::plot::Chart;
use crate::propagation::FIELD_MANAGER;
use crate::system::{peak_rss_mib, rss_mib, settle};
use crate::{Error, Progress, Row, check};

/// The gauge of Works in sync on the hub's `/metrics`.
pub const GAUGE: &str = "flotilla_works_in_sync";

/// How often the gauge and the memory are read.
const POLL: Duration = Duration::from_millis(200);

/// What the scenario runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the hub's and the simulator's data go.
    pub dir: PathBuf,
    /// The `flotilla` binary.
    pub binary: PathBuf,
    /// Placements (each of one ConfigMap, on every cluster).
    pub placements: usize,
    /// Member clusters.
    pub clusters: usize,
    /// Writes to the hub in flight at once while creating the placements.
    pub in_flight: usize,
    /// The longest wait for every Work to be in sync (at setup, and after the restart).
    pub timeout: Duration,
}

impl Options {
    /// The full run: 1,000 placements × 100 clusters.
    pub fn new(dir: &Path, binary: PathBuf) -> Self {
        Options {
            dir: dir.join("resync"),
            binary,
            placements: 1000,
            clusters: 100,
            in_flight: 32,
            timeout: Duration::ZERO,
        }
        .with_sizes(1000, 100)
    }

    /// A smoke run: 20 placements × 5 clusters.
    pub fn quick(dir: &Path, binary: PathBuf) -> Self {
        Options::new(dir, binary).with_sizes(20, 5)
    }

    /// These options for `placements` × `clusters`, with a timeout to match.
    pub fn with_sizes(self, placements: usize, clusters: usize) -> Self {
        let works = (placements * clusters) as u64;
        Options {
            placements,
            clusters,
            timeout: Duration::from_secs(120 + works / 50),
            ..self
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"placements": self.placements, "clusters": self.clusters,
            "in_flight": self.in_flight, "timeout_s": self.timeout.as_secs(),
            "poll_ms": POLL.as_millis() as u64})
    }
}

/// The results.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Placements.
    pub placements: usize,
    /// Member clusters.
    pub clusters: usize,
    /// Works: placements × clusters.
    pub works: usize,
    /// How long joining the members took.
    pub join: Duration,
    /// From the first write of the placements to every Work in sync.
    pub setup: Duration,
    /// The hub's resident memory once every member joined, in MiB.
    pub hub_rss_joined_mib: f64,
    /// The hub's resident memory with every Work in sync, in MiB.
    pub hub_rss_in_sync_mib: f64,
    /// How long the hub took to stop on SIGTERM.
    pub stop: Duration,
    /// From the hub's restart to every Work in sync again.
    pub resync: Duration,
    /// The restarted hub's peak resident memory (`VmHWM`) at the end, in MiB.
    pub peak_rss_hwm_mib: f64,
    /// The largest resident memory sampled every 200 ms after the restart, in MiB.
    pub peak_rss_sampled_mib: f64,
    /// The gauge's last value.
    pub works_in_sync: u64,
    /// After the restart: (seconds, resident MiB).
    pub rss_timeline: Vec<(f64, f64)>,
    /// After the restart: (seconds, Works in sync).
    pub sync_timeline: Vec<(f64, u64)>,
}

impl Report {
    /// A human-readable table.
    pub fn table(&self) -> String {
        format!(
            "resync: {p} placements × {n} clusters = {w} Works, hub restarted (SIGTERM)\n\
             \x20 join {join:.1} s; setup (create → all in sync) {setup:.1} s; hub RSS joined {rj:.1} MiB, in sync {rs:.1} MiB\n\
             \x20 stop {stop:.1} s; restart → all {w} in sync: {resync:.2} s; peak RSS {hwm:.1} MiB (VmHWM), {sampled:.1} MiB (sampled)\n",
            p = self.placements,
            n = self.clusters,
            w = self.works,
            join = self.join.as_secs_f64(),
            setup = self.setup.as_secs_f64(),
            rj = self.hub_rss_joined_mib,
            rs = self.hub_rss_in_sync_mib,
            stop = self.stop.as_secs_f64(),
            resync = self.resync.as_secs_f64(),
            hwm = self.peak_rss_hwm_mib,
            sampled = self.peak_rss_sampled_mib,
        )
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "placements": self.placements,
            "clusters": self.clusters,
            "works": self.works,
            "join_s": self.join.as_secs_f64(),
            "setup_s": self.setup.as_secs_f64(),
            "hub_rss_joined_mib": self.hub_rss_joined_mib,
            "hub_rss_in_sync_mib": self.hub_rss_in_sync_mib,
            "stop_s": self.stop.as_secs_f64(),
            "resync_s": self.resync.as_secs_f64(),
            "peak_rss_hwm_mib": self.peak_rss_hwm_mib,
            "peak_rss_sampled_mib": self.peak_rss_sampled_mib,
            "works_in_sync": self.works_in_sync,
            "timeline": {
                "rss_mib": self.rss_timeline.iter().map(|(t, v)| json!([t, v])).collect::<Vec<_>>(),
                "in_sync": self.sync_timeline.iter().map(|(t, v)| json!([t, v])).collect::<Vec<_>>(),
            },
        })
    }

    /// The summary's rows.
    pub fn summary(&self) -> Vec<Row> {
        let size = format!(
            "{}×{} = {} Works",
            self.placements, self.clusters, self.works
        );
        vec![
            Row::new(
                "resync",
                format!("{size}: setup"),
                format!(
                    "{:.1} s, hub {:.0} MiB",
                    self.setup.as_secs_f64(),
                    self.hub_rss_in_sync_mib
                ),
                "create → all in sync",
            ),
            Row::new(
                "resync",
                format!("{size}: restart → in sync"),
                format!(
                    "{:.2} s, peak RSS {:.0} MiB",
                    self.resync.as_secs_f64(),
                    self.peak_rss_hwm_mib
                ),
                "< 60 s, < 1 GB at 1000×100",
            ),
        ]
    }

    /// Charts: Works in sync and memory after the restart.
    pub fn charts(&self) -> Vec<(&'static str, Chart)> {
        let in_sync = Chart::new(
            "After the hub's restart: Works confirmed in sync",
            "seconds since the restart",
            "Works in sync",
        )
        .line(
            &format!("{} Works", self.works),
            self.sync_timeline
                .iter()
                .map(|(t, v)| (*t, *v as f64))
                .collect(),
        );
        let memory = Chart::new(
            "After the hub's restart: resident memory",
            "seconds since the restart",
            "MiB",
        )
        .line("hub VmRSS", self.rss_timeline.clone());
        vec![("in-sync", in_sync), ("memory", memory)]
    }
}

/// The value of gauge `name` in a Prometheus or OpenMetrics text exposition (summed over
/// its label sets), if it is there.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let value = if let Some(labelled) = rest.strip_prefix('{') {
            labelled.split_once('}').map(|(_, v)| v)
        } else if rest.starts_with(' ') {
            Some(rest)
        } else {
            None
        };
        if let Some(v) = value
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
        {
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

/// The hub's `flotilla_works_in_sync`, or `None` if its `/metrics` has no such gauge.
async fn works_in_sync(client: &Client) -> Result<Option<u64>, Error> {
    Ok(metric(client, GAUGE)
        .await?
        .map(|v| v.max(0.0).round() as u64))
}

/// The text of `/metrics` on `client`'s server.
pub(crate) async fn metrics_text(client: &Client) -> Result<String, Error> {
    let request = hyper::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| check("metrics request", e))?;
    tokio::time::timeout(Duration::from_secs(10), client.request_text(request))
        .await
        .map_err(|_| Error::Check("/metrics did not answer within 10 s".into()))?
        .map_err(|e| check("/metrics", e))
}

/// Metric `name` on the `/metrics` of `client`'s server (summed over its label sets), or
/// `None` if it has no such metric.
pub(crate) async fn metric(client: &Client, name: &str) -> Result<Option<f64>, Error> {
    Ok(gauge(&metrics_text(client).await?, name))
}

/// Polls the gauge until it reaches `works`; returns its readings (seconds since `since`,
/// value).
async fn wait_in_sync(
    client: &Client,
    works: usize,
    since: Instant,
    timeout: Duration,
    progress: &mut Progress,
) -> Result<Vec<(f64, u64)>, Error> {
    let mut readings = Vec::new();
    let mut last_error = None;
    let mut missing_since: Option<Instant> = None;
    loop {
        match works_in_sync(client).await {
            Ok(Some(n)) => {
                readings.push((since.elapsed().as_secs_f64(), n));
                missing_since = None;
                progress.count("Works in sync", n as usize, works);
                if n as usize >= works {
                    return Ok(readings);
                }
            }
            Ok(None) => {
                let first = *missing_since.get_or_insert_with(Instant::now);
                if first.elapsed() > Duration::from_secs(30) {
                    return Err(Error::Check(format!(
                        "the hub's /metrics has no {GAUGE} gauge (a hub older than the gauge?)"
                    )));
                }
            }
            Err(e) => last_error = Some(e.to_string()),
        }
        if since.elapsed() > timeout {
            let in_sync = readings.last().map_or(0, |r| r.1);
            return Err(Error::Check(format!(
                "only {in_sync} of {works} Works in sync after {:.0} s{}",
                since.elapsed().as_secs_f64(),
                last_error.map_or(String::new(), |e| format!(" (last error: {e})"))
            )));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Creates the namespace, `placements` ConfigMaps and as many Placements on the hub,
/// `in_flight` writes at a time.
async fn create_placements(
    client: &Client,
    options: &Options,
    progress: &mut Progress,
) -> Result<(), Error> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}))
        .map_err(|e| check("namespace", e))?;
    Api::<Namespace>::all(client.clone())
        .patch("bench", &apply, &Patch::Apply(&namespace))
        .await
        .map_err(|e| check("namespace", e))?;
    let configmaps = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    let placements = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "flotilla.io",
        "v1alpha1",
        "Placement",
    ));
    let configmaps: Api<DynamicObject> = Api::namespaced_with(client.clone(), "bench", &configmaps);
    let placements: Api<DynamicObject> = Api::namespaced_with(client.clone(), "bench", &placements);
    let writes = (0..options.placements).flat_map(|i| [(i, false), (i, true)]);
    let mut writes = futures_util::stream::iter(writes)
        .map(|(i, placement)| {
            let (configmaps, placements, apply) = (&configmaps, &placements, &apply);
            async move {
                let name = format!("cm-{i}");
                let (api, object) = if placement {
                    (
                        placements,
                        json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "Placement",
                            "metadata": {"name": name, "namespace": "bench"},
                            "spec": {"resourceSelectors": [
                                {"apiVersion": "v1", "kind": "ConfigMap", "name": name}]}}),
                    )
                } else {
                    (
                        configmaps,
                        json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "bench"},
                            "data": {"index": i.to_string(), "colour": "blue",
                                "tier": "bench", "payload": "x".repeat(64)}}),
                    )
                };
                api.patch(&name, apply, &Patch::Apply(&object))
                    .await
                    .map(drop)
                    .map_err(|e| check(&format!("bench/{name}"), e))
            }
        })
        .buffer_unordered(options.in_flight.max(1));
    let mut done = 0;
    while writes.try_next().await?.is_some() {
        done += 1;
        if done % 2 == 0 {
            progress.count("creating placements", done / 2, options.placements);
        }
    }
    Ok(())
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let (p, n) = (options.placements, options.clusters);
    let works = p * n;
    let mut progress = Progress::new(format!("resync {p}×{n}"));
    progress.step("starting the hub and the simulator");
    let mut processes = Processes::start(&options.binary, &options.dir, n, MEMBERS_PER_SIM).await?;
    let all: Vec<u32> = std::iter::once(processes.hub_pid()?)
        .chain(processes.sim_pids()?)
        .collect();
    let hub_pid = all[0];
    let client = processes.hub_client().await?;
    let join = processes.join_all("bench=resync", &mut progress).await?;
    settle(&all, Duration::from_secs(30)).await;
    let hub_rss_joined_mib = rss_mib(hub_pid)?;

    let started = Instant::now();
    create_placements(&client, options, &mut progress).await?;
    wait_in_sync(&client, works, started, options.timeout, &mut progress).await?;
    let setup = started.elapsed();
    settle(&all, Duration::from_secs(30)).await;
    let hub_rss_in_sync_mib = rss_mib(hub_pid)?;

    progress.step("stopping the hub (SIGTERM)");
    drop(client);
    let stop = processes.stop_hub().await?;
    let client = processes.hub_client().await?;
    progress.step("restarting the hub");
    let restarted = Instant::now();
    processes.restart_hub()?;
    let pid = processes.hub_pid()?;
    let (stop_sampling, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                _ = &mut stopped => return samples,
                _ = tick.tick() => {}
            }
            match rss_mib(pid) {
                Ok(mib) => samples.push((restarted.elapsed().as_secs_f64(), mib)),
                Err(_) => return samples,
            }
        }
    });
    let waited = wait_in_sync(&client, works, restarted, options.timeout, &mut progress).await;
    let resync = restarted.elapsed();
    let peak_rss_hwm_mib = peak_rss_mib(pid);
    let _ = stop_sampling.send(());
    let rss_timeline = sampler.await?;
    let sync_timeline = waited?;
    Ok(Report {
        placements: p,
        clusters: n,
        works,
        join,
        setup,
        hub_rss_joined_mib,
        hub_rss_in_sync_mib,
        stop,
        resync,
        peak_rss_hwm_mib: peak_rss_hwm_mib?,
        peak_rss_sampled_mib: rss_timeline.iter().map(|s| s.1).fold(0.0, f64::max),
        works_in_sync: sync_timeline.last().map_or(0, |r| r.1),
        rss_timeline,
        sync_timeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_is_read_from_the_exposition() {
        let text = "# HELP flotilla_works_in_sync Works in sync.\n\
                    # TYPE flotilla_works_in_sync gauge\n\
                    flotilla_works_in_sync 100\n\
                    flotilla_works_in_sync_total 3\n\
                    other 5\n# EOF\n";
        assert_eq!(gauge(text, GAUGE), Some(100.0));
        let labelled =
            "flotilla_works_in_sync{cluster=\"a\"} 2\nflotilla_works_in_sync{cluster=\"b\"} 3.0\n";
        assert_eq!(gauge(labelled, GAUGE), Some(5.0));
        assert_eq!(gauge("other 1\n", GAUGE), None);
    }

    #[test]
    fn options_scale_their_timeout_with_the_works() {
        let quick = Options::quick(Path::new("/tmp"), PathBuf::from("flotilla"));
        assert_eq!((quick.placements, quick.clusters), (20, 5));
        assert_eq!(quick.timeout, Duration::from_secs(122));
        let full = Options::new(Path::new("/tmp"), PathBuf::from("flotilla"));
        assert_eq!((full.placements, full.clusters), (1000, 100));
        assert!(full.timeout > Duration::from_secs(1000));
    }
}
