//! The baseline scenario: this binary's hub against another binary's (a previous commit's),
//! both running at once on the same machine, measured in alternating rounds.
//!
//! ```text
//!  flotilla hub (this binary, DIR/baseline/ours)      flotilla hub (--baseline BIN, DIR/baseline/theirs)
//!    idle RSS, empty                                     idle RSS, empty
//!  round r, for each of GET and create at 1, 16, 64 clients:
//!    r even: ours then theirs; r odd: theirs then ours (the same requests, admin token)
//!  each figure: the median over the rounds of ours / theirs in the same round
//!  --split-cpus: both hubs on the machine's last CPU, the clients on the others (taskset),
//!     so that the clients' scheduling does not land in the hubs' latencies
//! ```
//!
//! A redesign that must not slow the hub is judged by this: two hubs measured minutes apart
//! on a shared 2-core machine differ by more than the few per cent to be shown, so each
//! figure pairs the two hubs' runs of the same phase, taken one right after the other, and
//! the order alternates so that neither is always first.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Target, api_phase};
use crate::harness::{LoneHub, trusting};
use crate::{Error, Latency, Row};

/// What to compare.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the two hubs' data directories go (`DIR/baseline`, emptied first).
    pub dir: PathBuf,
    /// This binary.
    pub hub_binary: PathBuf,
    /// The binary it is compared with.
    pub baseline_binary: PathBuf,
    /// The client counts.
    pub clients: Vec<usize>,
    /// Creates of each phase.
    pub requests: usize,
    /// GETs of each phase: more than creates, as a GET takes a fraction of a create's time
    /// and a phase must last long enough (a second or so) for a hiccup of the machine not
    /// to be its median.
    pub get_requests: usize,
    /// Rounds; each measures every phase on both hubs.
    pub rounds: usize,
    /// Both hubs on the last CPU and this process on the others, for the run. On a small
    /// machine the clients and the hub take turns on the same cores, and a p99 then moves
    /// by more from pair to pair of rounds than the few per cent to be shown.
    pub split_cpus: bool,
}

impl Options {
    /// The issue's sizes: GET and create at 1, 16 and 64 clients; 10 rounds of 10,000 GETs
    /// and 2,000 creates a phase.
    pub fn new(dir: impl Into<PathBuf>, hub_binary: PathBuf, baseline_binary: PathBuf) -> Self {
        Options {
            dir: dir.into(),
            hub_binary,
            baseline_binary,
            clients: vec![1, 16, 64],
            requests: 2_000,
            get_requests: 10_000,
            rounds: 10,
            split_cpus: false,
        }
    }

    /// A smoke run: 1 and 4 clients, 2 rounds of 200 requests a phase.
    pub fn quick(dir: impl Into<PathBuf>, hub_binary: PathBuf, baseline_binary: PathBuf) -> Self {
        Options {
            clients: vec![1, 4],
            requests: 200,
            get_requests: 200,
            rounds: 2,
            ..Options::new(dir, hub_binary, baseline_binary)
        }
    }

    /// The options as JSON.
    pub fn json(&self) -> Value {
        json!({"baseline": self.baseline_binary.display().to_string(),
            "clients": self.clients, "requests": self.requests,
            "get_requests": self.get_requests, "rounds": self.rounds,
            "split_cpus": self.split_cpus})
    }
}

/// One phase (an operation at a client count) on both hubs, every round.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// `get` or `create`.
    pub op: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// This binary's latency, round by round.
    pub ours: Vec<Latency>,
    /// The baseline's, round by round.
    pub theirs: Vec<Latency>,
}

impl Phase {
    fn pairs(&self, percentile: fn(&Latency) -> f64) -> Vec<(f64, f64)> {
        self.theirs
            .iter()
            .zip(&self.ours)
            .map(|(theirs, ours)| (percentile(theirs), percentile(ours)))
            .collect()
    }

    /// This binary's p50 against the baseline's: the median over the rounds of their ratio,
    /// less one.
    pub fn p50_change(&self) -> f64 {
        crate::paired_ratio(&self.pairs(|l| l.p50_ms)) - 1.0
    }

    /// The same for p99.
    pub fn p99_change(&self) -> f64 {
        crate::paired_ratio(&self.pairs(|l| l.p99_ms)) - 1.0
    }

    /// The median round's figure of one side (for the columns of the report).
    fn median(rounds: &[Latency], percentile: fn(&Latency) -> f64) -> f64 {
        let mut figures: Vec<f64> = rounds.iter().map(percentile).collect();
        figures.sort_by(f64::total_cmp);
        figures.get(figures.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// The results.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The baseline binary.
    pub baseline: String,
    /// Every phase.
    pub phases: Vec<Phase>,
    /// This binary's idle hub on an empty store, in MiB.
    pub idle_rss_ours_mib: f64,
    /// The baseline's.
    pub idle_rss_theirs_mib: f64,
    /// With `--split-cpus`: the CPUs the kernel let this hub, the baseline's and this
    /// process run on, read from `/proc` while they ran.
    pub cpus: Option<[String; 3]>,
}

impl Report {
    /// The report as JSON.
    pub fn json(&self) -> Value {
        json!({
            "baseline": self.baseline,
            "phases": self.phases.iter().map(|p| json!({
                "op": p.op, "clients": p.clients,
                "ours": {"p50_ms": Phase::median(&p.ours, |l| l.p50_ms),
                    "p99_ms": Phase::median(&p.ours, |l| l.p99_ms)},
                "theirs": {"p50_ms": Phase::median(&p.theirs, |l| l.p50_ms),
                    "p99_ms": Phase::median(&p.theirs, |l| l.p99_ms)},
                "p50_change": p.p50_change(), "p99_change": p.p99_change(),
                "rounds_p50_ms": p.theirs.iter().zip(&p.ours)
                    .map(|(t, o)| (t.p50_ms, o.p50_ms)).collect::<Vec<_>>(),
                "rounds_p99_ms": p.theirs.iter().zip(&p.ours)
                    .map(|(t, o)| (t.p99_ms, o.p99_ms)).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "idle_rss_ours_mib": self.idle_rss_ours_mib,
            "idle_rss_theirs_mib": self.idle_rss_theirs_mib,
            "cpus": self.cpus.as_ref().map(|[ours, theirs, clients]|
                json!({"ours": ours, "theirs": theirs, "clients": clients})),
        })
    }

    /// The report as a table: both columns and the paired change.
    pub fn table(&self) -> String {
        let mut out = format!(
            "baseline: this binary against {}\n\
             op       clients   baseline p50 / p99 ms   this p50 / p99 ms      p50       p99\n",
            self.baseline
        );
        for p in &self.phases {
            out.push_str(&format!(
                "{:<8} {:>7}   {:>8.3} / {:>8.3}     {:>8.3} / {:>8.3}   {:>+6.1} %  {:>+6.1} %\n",
                p.op,
                p.clients,
                Phase::median(&p.theirs, |l| l.p50_ms),
                Phase::median(&p.theirs, |l| l.p99_ms),
                Phase::median(&p.ours, |l| l.p50_ms),
                Phase::median(&p.ours, |l| l.p99_ms),
                p.p50_change() * 100.0,
                p.p99_change() * 100.0,
            ));
        }
        out.push_str(&format!(
            "idle hub RSS: baseline {:.1} MiB, this {:.1} MiB ({:+.1} MiB)\n",
            self.idle_rss_theirs_mib,
            self.idle_rss_ours_mib,
            self.idle_rss_ours_mib - self.idle_rss_theirs_mib
        ));
        out
    }

    /// The summary's rows (target: within 5 %, idle RSS within 2 MiB).
    pub fn summary(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for p in &self.phases {
            for (which, change) in [("p50", p.p50_change()), ("p99", p.p99_change())] {
                rows.push(Row::new(
                    "baseline",
                    format!("{} {which} at {} clients vs the baseline", p.op, p.clients),
                    format!("{:+.1} %", change * 100.0),
                    "within ±5 %",
                ));
            }
        }
        rows.push(Row::new(
            "baseline",
            "idle hub RSS vs the baseline",
            format!(
                "{:+.1} MiB",
                self.idle_rss_ours_mib - self.idle_rss_theirs_mib
            ),
            "within ±2 MiB",
        ));
        rows
    }
}

/// A hub of `binary` in `dir` (on `cpus` alone if given), and a client target with its
/// admin token.
async fn hub(binary: &Path, dir: &Path, cpus: Option<&str>) -> Result<(LoneHub, Target), Error> {
    let hub = LoneHub::start_on_cpus(binary, dir, cpus).await?;
    let data = hub.data_dir();
    let target = Target {
        address: hub.address(),
        tls: trusting(&data.join(flotilla_pki::CA_CERT_FILE))?,
        token: std::fs::read_to_string(data.join(flotilla_pki::ADMIN_TOKEN_FILE))?
            .trim()
            .to_owned(),
        padding: 0,
    };
    Ok((hub, target))
}

/// This process on every CPU it may use but the last, which the hubs get, until dropped
/// (then on all it could use before).
struct CpuSplit {
    /// The hubs' CPU, as taskset names it.
    hubs: String,
    /// The CPUs this process could use before, to give them back.
    all: String,
}

impl CpuSplit {
    fn take() -> Result<Self, Error> {
        let all = allowed_cpus(std::process::id())?;
        let cpus = cpu_list(&all).ok_or_else(|| {
            crate::check("/proc status", format!("a CPU list not understood: {all}"))
        })?;
        let Some((hubs, bench)) = cpus.split_last().filter(|(_, rest)| !rest.is_empty()) else {
            return Err(crate::check(
                "--split-cpus",
                format!("needs two CPUs or more; this process may use {all}"),
            ));
        };
        let split = CpuSplit {
            hubs: hubs.to_string(),
            all,
        };
        let bench: Vec<String> = bench.iter().map(usize::to_string).collect();
        pin_self(&bench.join(","))?;
        Ok(split)
    }
}

impl Drop for CpuSplit {
    fn drop(&mut self) {
        let _ = pin_self(&self.all);
    }
}

/// The CPUs of a list as `/proc` and taskset write it (`0-3,6,8-9`), in order; `None` if
/// it is not one.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let cpu = part.parse().ok()?;
                (cpu, cpu)
            }
        };
        if first > last {
            return None;
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The CPUs process `pid` may run on (`Cpus_allowed_list` in its status).
fn allowed_cpus(pid: u32) -> Result<String, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|cpus| cpus.trim().to_owned())
        .ok_or_else(|| crate::check("/proc status", format!("no Cpus_allowed_list for {pid}")))
}

/// Every thread of this process (and those it starts later) on `cpus` (taskset's list).
fn pin_self(cpus: &str) -> Result<(), Error> {
    let pid = std::process::id().to_string();
    let out = std::process::Command::new("taskset")
        .args(["--all-tasks", "--pid", "--cpu-list", cpus, &pid])
        .output()
        .map_err(|e| crate::check("--split-cpus needs taskset (util-linux)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(crate::check(
            "taskset",
            String::from_utf8_lossy(&out.stderr).trim(),
        ))
    }
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    let progress = |what: &str| eprintln!("baseline: {what}");
    let dir = options.dir.join("baseline");
    let _ = std::fs::remove_dir_all(&dir);
    let split = if options.split_cpus {
        Some(CpuSplit::take()?)
    } else {
        None
    };
    let hub_cpus = split.as_ref().map(|s| s.hubs.as_str());
    // Started one after the other, each measured idle before the other starts.
    let (ours_hub, ours) = hub(&options.hub_binary, &dir.join("ours"), hub_cpus).await?;
    let idle_rss_ours_mib = ours_hub.idle_rss_mib().await?;
    let (theirs_hub, theirs) = hub(&options.baseline_binary, &dir.join("theirs"), hub_cpus).await?;
    let idle_rss_theirs_mib = theirs_hub.idle_rss_mib().await?;
    let cpus = match split {
        None => None,
        Some(_) => Some([
            allowed_cpus(ours_hub.pid()?)?,
            allowed_cpus(theirs_hub.pid()?)?,
            allowed_cpus(std::process::id())?,
        ]),
    };

    let object = |name: String| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"payload": "x".repeat(1024)}})
    };
    for target in [&ours, &theirs] {
        let mut connection = target.open().await?;
        connection
            .expect(
                Method::POST,
                "/api/v1/namespaces/default/configmaps",
                Some(Bytes::from(object("read".into()).to_string())),
                StatusCode::CREATED,
            )
            .await?;
    }

    let mut phases: Vec<Phase> = Vec::new();
    for op in ["get", "create"] {
        for &clients in &options.clients {
            phases.push(Phase {
                op,
                clients,
                ..Phase::default()
            });
        }
    }
    for round in 0..options.rounds {
        progress(&format!("round {} of {}", round + 1, options.rounds));
        for phase in &mut phases {
            let order = if round.is_multiple_of(2) {
                [0, 1]
            } else {
                [1, 0]
            };
            for side in order {
                let target = [&ours, &theirs][side];
                let (op, clients) = (phase.op, phase.clients);
                let (latency, _) = if op == "get" {
                    api_phase(target, clients, options.get_requests, |_| {
                        (
                            Method::GET,
                            "/api/v1/namespaces/default/configmaps/read".to_owned(),
                            None,
                            StatusCode::OK,
                        )
                    })
                    .await?
                } else {
                    api_phase(target, clients, options.requests, move |i| {
                        (
                            Method::POST,
                            "/api/v1/namespaces/default/configmaps".to_owned(),
                            Some(Bytes::from(
                                object(format!("r{round}-c{clients}-{i}")).to_string(),
                            )),
                            StatusCode::CREATED,
                        )
                    })
                    .await?
                };
                if side == 0 {
                    phase.ours.push(latency);
                } else {
                    phase.theirs.push(latency);
                }
            }
        }
    }
    drop((ours_hub, theirs_hub, split));
    Ok(Report {
        baseline: options.baseline_binary.display().to_string(),
        phases,
        idle_rss_ours_mib,
        idle_rss_theirs_mib,
        cpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(p50_ms: f64, p99_ms: f64) -> Latency {
        Latency {
            p50_ms,
            p99_ms,
            ..Latency::default()
        }
    }

    #[test]
    fn a_cpu_list_is_read_as_proc_writes_it() {
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("2,4-6,9\n"), Some(vec![2, 4, 5, 6, 9]));
        assert_eq!(cpu_list("5"), Some(vec![5]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("0-x"), None);
        assert_eq!(cpu_list(""), None);
    }

    #[test]
    fn each_change_pairs_the_two_hubs_round_by_round() {
        // The machine was twice as busy in round 2: both hubs slowed, the pair did not move.
        let phase = Phase {
            op: "get",
            clients: 16,
            ours: vec![at(1.02, 3.0), at(2.04, 6.0), at(1.5, 3.3)],
            theirs: vec![at(1.0, 3.0), at(2.0, 6.0), at(1.0, 3.0)],
        };
        assert!(
            (phase.p50_change() - 0.02).abs() < 1e-9,
            "{}",
            phase.p50_change()
        );
        assert!(
            (phase.p99_change() - 0.0).abs() < 1e-9,
            "{}",
            phase.p99_change()
        );
        let report = Report {
            baseline: "old".into(),
            phases: vec![phase],
            idle_rss_ours_mib: 30.5,
            idle_rss_theirs_mib: 30.0,
            cpus: None,
        };
        let rows = report.summary();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].value, "+2.0 %");
        assert_eq!(rows[2].value, "+0.5 MiB");
        assert!(
            report.table().contains("get           16"),
            "{}",
            report.table()
        );
    }
}
