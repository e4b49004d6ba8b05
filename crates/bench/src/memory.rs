//! The memory scenario: the hub's resident memory per joined cluster and per Work, and the
//! simulator's per simulated cluster, derived from the propagation and resync runs.
//!
//! Method (resident memory, VmRSS, of the real processes; 1 KiB = 1024 bytes, as `/proc`
//! counts):
//!
//! ```text
//!  hub per joined cluster = least-squares slope of the hub's RSS once N members joined,
//!                           over N, across the propagation points
//!                           (a single point: (RSS joined − RSS idle) / N)
//!  hub per Work           = (hub RSS with all P×N Works in sync − hub RSS joined) / (P×N),
//!                           from the resync setup (before the restart)
//!  (also: hub per Work after a restart = (the restarted hub's peak RSS − hub RSS joined)
//!   / (P×N): the same Works without what creating them left in the allocator)
//!  simulator per cluster  = least-squares slope of the simulator's RSS once joined over N
//!                           (a single point: RSS / N, which counts its fixed cost too)
//! ```
//!
//! When propagation and resync ran in the same invocation their measurements are used; run
//! alone (or without one of them), this scenario runs its own small series: N = 5, 10 and
//! 20 placements × 5 clusters (`--quick`), N = 10, 50, 100 and 100 × 20 (full).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::plot::{Chart, fit};
use crate::{Error, Row, propagation, resync};

/// What the scenario runs when it has to measure for itself.
#[derive(Debug, Clone)]
pub struct Options {
    /// The propagation series it runs when none ran before it.
    pub propagation: propagation::Options,
    /// The resync setup it runs when none ran before it.
    pub resync: resync::Options,
}

impl Options {
    /// The full run's own series: N = 10, 50, 100; 100 placements × 20 clusters.
    pub fn new(dir: &Path, binary: PathBuf) -> Self {
        let dir = dir.join("memory");
        Options {
            propagation: propagation::Options {
                clusters: vec![10, 50, 100],
                ..propagation::Options::new(&dir, binary.clone())
            },
            resync: resync::Options::new(&dir, binary).with_sizes(100, 20),
        }
    }

    /// A smoke run's own series: N = 5, 10; 20 placements × 5 clusters.
    pub fn quick(dir: &Path, binary: PathBuf) -> Self {
        let dir = dir.join("memory");
        Options {
            propagation: propagation::Options::quick(&dir, binary.clone()),
            resync: resync::Options::quick(&dir, binary),
        }
    }
}

/// One fleet size's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Members.
    pub clusters: usize,
    /// Hub RSS before joins, MiB.
    pub hub_idle_mib: f64,
    /// Hub RSS once joined, MiB.
    pub hub_joined_mib: f64,
    /// Simulator RSS once joined, MiB.
    pub sim_joined_mib: f64,
}

/// The results.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The hub's memory per joined cluster, KiB.
    pub hub_kib_per_cluster: f64,
    /// The hub's memory per Work, KiB.
    pub hub_kib_per_work: f64,
    /// The hub's memory per Work once restarted on them (its peak RSS), KiB.
    pub hub_kib_per_work_restarted: f64,
    /// The simulator's memory per simulated cluster, KiB.
    pub sim_kib_per_cluster: f64,
    /// The fleet sizes measured.
    pub samples: Vec<Sample>,
    /// Works in the resync setup.
    pub works: usize,
    /// Hub RSS joined before the resync's placements, MiB.
    pub resync_joined_mib: f64,
    /// Hub RSS with every Work in sync, MiB.
    pub resync_in_sync_mib: f64,
    /// The restarted hub's peak RSS, MiB.
    pub resync_restarted_peak_mib: f64,
    /// Where the inputs came from: `propagation and resync scenarios`, or `own series`.
    pub source: String,
}

/// The slope of `points` (MiB over clusters) in KiB per cluster; with fewer than two fleet
/// sizes, `single_mib` shared by the `clusters` of the one point.
fn per_cluster(points: &[(f64, f64)], single_mib: f64, clusters: usize) -> f64 {
    match fit(points) {
        Some((slope, _)) => slope * 1024.0,
        None if clusters > 0 => single_mib * 1024.0 / clusters as f64,
        None => f64::NAN,
    }
}

impl Report {
    /// The memory figures from a propagation series and a resync setup.
    pub fn derive(
        propagation: &propagation::Report,
        resync: &resync::Report,
        source: &str,
    ) -> Self {
        let samples: Vec<Sample> = propagation
            .points
            .iter()
            .map(|p| Sample {
                clusters: p.clusters,
                hub_idle_mib: p.hub_rss_idle_mib,
                hub_joined_mib: p.hub_rss_joined_mib,
                sim_joined_mib: p.sim_rss_joined_mib,
            })
            .collect();
        let hub: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| (s.clusters as f64, s.hub_joined_mib))
            .collect();
        let sim: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| (s.clusters as f64, s.sim_joined_mib))
            .collect();
        let first = samples.first().copied().unwrap_or_default();
        let per_work = |mib: f64| {
            if resync.works > 0 {
                (mib - resync.hub_rss_joined_mib) * 1024.0 / resync.works as f64
            } else {
                f64::NAN
            }
        };
        Report {
            hub_kib_per_cluster: per_cluster(
                &hub,
                first.hub_joined_mib - first.hub_idle_mib,
                first.clusters,
            ),
            sim_kib_per_cluster: per_cluster(&sim, first.sim_joined_mib, first.clusters),
            hub_kib_per_work: per_work(resync.hub_rss_in_sync_mib),
            hub_kib_per_work_restarted: per_work(resync.peak_rss_hwm_mib),
            samples,
            works: resync.works,
            resync_joined_mib: resync.hub_rss_joined_mib,
            resync_in_sync_mib: resync.hub_rss_in_sync_mib,
            resync_restarted_peak_mib: resync.peak_rss_hwm_mib,
            source: source.to_owned(),
        }
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "memory ({}): hub {:.1} KiB per joined cluster, {:.2} KiB per Work; simulator {:.1} KiB per cluster\n",
            self.source, self.hub_kib_per_cluster, self.hub_kib_per_work, self.sim_kib_per_cluster
        );
        out.push_str("  clusters   hub idle MiB   hub joined MiB   sim joined MiB\n");
        for s in &self.samples {
            out.push_str(&format!(
                "  {:>8} {:>14.1} {:>16.1} {:>16.1}\n",
                s.clusters, s.hub_idle_mib, s.hub_joined_mib, s.sim_joined_mib
            ));
        }
        out.push_str(&format!(
            "  {} Works: hub {:.1} MiB joined → {:.1} MiB in sync; restarted on them: peak {:.1} MiB ({:.2} KiB per Work)\n",
            self.works,
            self.resync_joined_mib,
            self.resync_in_sync_mib,
            self.resync_restarted_peak_mib,
            self.hub_kib_per_work_restarted
        ));
        out
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "hub_kib_per_cluster": self.hub_kib_per_cluster,
            "hub_kib_per_work": self.hub_kib_per_work,
            "hub_kib_per_work_restarted": self.hub_kib_per_work_restarted,
            "sim_kib_per_cluster": self.sim_kib_per_cluster,
            "source": self.source,
            "method": {
                "hub_per_cluster": "least-squares slope of hub RSS joined over N across the propagation points ((joined - idle) / N for one point)",
                "hub_per_work": "(hub RSS with all P×N Works in sync - hub RSS joined) / (P×N), resync setup",
                "hub_per_work_restarted": "(restarted hub's peak RSS (VmHWM) - hub RSS joined) / (P×N), resync",
                "sim_per_cluster": "least-squares slope of simulator RSS joined over N (RSS / N for one point)",
            },
            "samples": self.samples.iter().map(|s| json!({
                "clusters": s.clusters, "hub_rss_idle_mib": s.hub_idle_mib,
                "hub_rss_joined_mib": s.hub_joined_mib, "sim_rss_joined_mib": s.sim_joined_mib,
            })).collect::<Vec<_>>(),
            "resync": {"works": self.works, "hub_rss_joined_mib": self.resync_joined_mib,
                "hub_rss_in_sync_mib": self.resync_in_sync_mib,
                "hub_peak_rss_restarted_mib": self.resync_restarted_peak_mib},
        })
    }

    /// The summary's rows.
    pub fn summary(&self) -> Vec<Row> {
        let sizes: Vec<String> = self
            .samples
            .iter()
            .map(|s| s.clusters.to_string())
            .collect();
        vec![
            Row::new(
                "memory",
                format!("hub per joined cluster (N={})", sizes.join(",")),
                format!("{:.1} KiB", self.hub_kib_per_cluster),
                "< 100 KB",
            ),
            Row::new(
                "memory",
                format!("hub per Work ({} Works)", self.works),
                format!(
                    "{:.1} KiB ({:.1} restarted)",
                    self.hub_kib_per_work, self.hub_kib_per_work_restarted
                ),
                "(1 GB for 100,000 Works ≈ 10 KB each)",
            ),
            Row::new(
                "memory",
                "simulator per cluster",
                format!("{:.1} KiB", self.sim_kib_per_cluster),
                "",
            ),
        ]
    }

    /// Chart: the measured memory by fleet size and the fitted lines.
    pub fn charts(&self) -> Vec<(&'static str, Chart)> {
        let points = |f: fn(&Sample) -> f64| -> Vec<(f64, f64)> {
            self.samples
                .iter()
                .map(|s| (s.clusters as f64, f(s)))
                .collect()
        };
        let fitted = |points: &[(f64, f64)]| -> Vec<(f64, f64)> {
            match fit(points) {
                Some((slope, intercept)) => points
                    .iter()
                    .map(|(x, _)| (*x, intercept + slope * x))
                    .collect(),
                None => Vec::new(),
            }
        };
        let hub = points(|s| s.hub_joined_mib);
        let sim = points(|s| s.sim_joined_mib);
        let chart = Chart::new(
            "Resident memory once joined, and least-squares fits",
            "member clusters",
            "MiB",
        )
        .line("hub, joined", hub.clone())
        .dashed("hub fit", fitted(&hub))
        .line("simulator, joined", sim.clone())
        .dashed("simulator fit", fitted(&sim));
        vec![("fit", chart)]
    }
}

/// Runs the scenario: from the reports given, running whichever is missing at this
/// scenario's own sizes.
pub async fn run(
    options: &Options,
    propagation: Option<&propagation::Report>,
    resync: Option<&resync::Report>,
) -> Result<Report, Error> {
    let source = match (propagation, resync) {
        (Some(_), Some(_)) => "the propagation and resync scenarios",
        (Some(_), None) => "the propagation scenario and an own resync",
        (None, Some(_)) => "an own propagation series and the resync scenario",
        (None, None) => "an own series",
    };
    let own_propagation;
    let propagation = match propagation {
        Some(p) => p,
        None => {
            own_propagation = propagation::run(&options.propagation).await?;
            &own_propagation
        }
    };
    let own_resync;
    let resync = match resync {
        Some(r) => r,
        None => {
            own_resync = resync::run(&options.resync).await?;
            &own_resync
        }
    };
    Ok(Report::derive(propagation, resync, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(clusters: usize, idle: f64, joined: f64, sim: f64) -> propagation::Point {
        propagation::Point {
            clusters,
            hub_rss_idle_mib: idle,
            hub_rss_joined_mib: joined,
            sim_rss_joined_mib: sim,
            ..Default::default()
        }
    }

    fn resync() -> resync::Report {
        resync::Report {
            works: 1024,
            hub_rss_joined_mib: 60.0,
            hub_rss_in_sync_mib: 64.0,
            peak_rss_hwm_mib: 62.0,
            ..Default::default()
        }
    }

    #[test]
    fn slopes_across_the_points_give_memory_per_cluster() {
        let propagation = propagation::Report {
            points: vec![
                point(10, 50.0, 51.0, 40.0),
                point(100, 50.0, 60.0, 58.0),
                point(1000, 50.0, 150.0, 238.0),
            ],
            ..Default::default()
        };
        let report = Report::derive(&propagation, &resync(), "test");
        // 1 MiB per 10 clusters = 102.4 KiB each; the simulator 0.2 MiB = 204.8 KiB.
        assert!((report.hub_kib_per_cluster - 102.4).abs() < 1e-9);
        assert!((report.sim_kib_per_cluster - 204.8).abs() < 1e-9);
        assert!((report.hub_kib_per_work - 4.0).abs() < 1e-9);
        assert!((report.hub_kib_per_work_restarted - 2.0).abs() < 1e-9);
        assert_eq!(report.json()["samples"].as_array().unwrap().len(), 3);
        assert_eq!(report.summary().len(), 3);
        let (_, chart) = &report.charts()[0];
        assert_eq!(chart.svg().matches("<polyline").count(), 4);
    }

    #[test]
    fn one_point_falls_back_to_differences() {
        let propagation = propagation::Report {
            points: vec![point(10, 50.0, 51.0, 20.0)],
            ..Default::default()
        };
        let report = Report::derive(&propagation, &resync(), "test");
        assert!((report.hub_kib_per_cluster - 102.4).abs() < 1e-9);
        assert!((report.sim_kib_per_cluster - 2048.0).abs() < 1e-9);
        assert!(report.table().contains("1024 Works"));
    }
}
