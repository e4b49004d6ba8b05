//! `flotilla bench`: runs the scenarios of `flotilla-bench`, writes `DIR/<scenario>.json`
//! and `DIR/<scenario>-<what>.svg`, shows progress on stderr and a summary on stdout.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use flotilla_bench::{
    Output, Row, admission, api, baseline, failover, memory, propagation, rbac, resync, rollout,
    server_store, store, summary, system, views, write,
};
use serde_json::json;

/// The benchmark scenarios, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    /// Durable writes, lists and watch delivery against a raw SQLite loop.
    Store,
    /// The hub's API over HTTPS against the bare store underneath it.
    Api,
    /// Creates with no policies, 20 non-matching and 5 matching ValidatingAdmission-
    /// Policies, and a matching webhook on loopback, side by side.
    Admission,
    /// A service account's requests against the admin's on a hub holding 1,000
    /// ClusterRoles and 10,000 RoleBindings; the policy's idle RSS.
    Rbac,
    /// This binary's hub against another binary's (`--baseline`), both running, in
    /// alternating rounds: GET and create at 1, 16 and 64 clients, idle RSS. Runs only
    /// when `--baseline` is given.
    Baseline,
    /// A template change reaching every member of a simulated fleet, against applying it
    /// directly; the hub's and the simulator's memory.
    Propagation,
    /// P placements × N clusters: the hub restarted, until every Work is in sync again.
    Resync,
    /// A Rolling rollout (maxUnavailable 10 %, minReadySeconds 1) over a simulated fleet:
    /// total time against ten waves' bound, per-wave propagation and ready delay, the
    /// controller's time per wave, the placement's size mid-rollout.
    Rollout,
    /// Hub memory per joined cluster and per Work, simulator memory per cluster.
    Memory,
    /// Two hub replicas on one PostgreSQL or etcd (`--store`, required): kill -9 of the
    /// fleet Lease's holder → the Lease taken over, the first reconcile on the new leader,
    /// every member changed. Runs by default only when `--store` names a server.
    Failover,
}

/// `flotilla bench [--quick] [--out DIR] [--scenario S]…`
#[derive(Debug, Parser)]
pub struct BenchArgs {
    /// Small sizes, for a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// Where results (JSON, SVG) go; the scenarios' scratch files are made inside it too,
    /// so it should be on the disk under test.
    #[arg(long, value_name = "DIR", default_value = "flotilla-bench")]
    pub out: PathBuf,
    /// Which scenarios to run (all if not given).
    #[arg(long = "scenario", value_enum)]
    pub scenarios: Vec<Scenario>,
    /// The propagation scenario's fleet sizes instead of the defaults (10,100,1000;
    /// quick: 5,10); the rollout and failover scenarios' fleet is the largest of them
    /// (rollout: default 1000, quick: 10; failover: default 10, quick: 3).
    #[arg(long, value_name = "N,...", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub clusters: Vec<u32>,
    /// The resync scenario's placements instead of the default (1000; quick: 20).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(1..))]
    pub placements: Option<u32>,
    /// The store scenario on a database server instead of SQLite: the PostgreSQL or etcd
    /// store against its raw engine on the same server (postgres://… or etcd://…); the
    /// server the failover scenario's replicas share; the propagation scenario measures
    /// each fleet size (push) a second time with the hub on it. Both make a database or
    /// prefix of their own there and remove it after.
    #[arg(long, value_name = "URL")]
    pub store: Option<crate::serve::StoreUrl>,
    /// The resync scenario's clusters instead of the default (100; quick: 5).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub resync_clusters: Option<u32>,
    /// Another `flotilla` binary (a previous commit's) whose hub the baseline scenario
    /// measures this one against.
    #[arg(long, value_name = "BINARY")]
    pub baseline: Option<PathBuf>,
    /// The binary whose hub the baseline scenario measures against `--baseline` (default:
    /// this one), to compare two builds older than the benchmark.
    #[arg(long, value_name = "BINARY", requires = "baseline")]
    pub hub_binary: Option<PathBuf>,
    /// The baseline scenario's two hubs on the machine's last CPU and its clients on the
    /// others (with taskset), so that a p99 measures the hubs rather than the clients and
    /// the hub taking turns on the same cores.
    #[arg(long, requires = "baseline")]
    pub split_cpus: bool,
    /// The rounds of the rbac, baseline, failover, propagation and admission scenarios
    /// instead of their defaults (12, 10, 3, 3 and 5): more rounds narrow their medians.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: Option<u32>,
    /// The propagation scenario's members: push (`flotilla join`), pull (an agent per
    /// member inside the simulator), or both side by side at each fleet size.
    #[arg(long, value_enum, default_value = "push")]
    pub mode: Mode,
}

/// `--mode` of the propagation scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Push clusters, against a bare apply.
    Push,
    /// Pull clusters (`flotilla sim --agents`).
    Pull,
    /// Push and pull, side by side.
    Both,
}

impl BenchArgs {
    /// The scenarios to run, in order, each once; the baseline scenario only with a
    /// baseline binary, which it must have when asked for.
    fn chosen(&self) -> anyhow::Result<Vec<Scenario>> {
        let mut scenarios = if self.scenarios.is_empty() {
            Scenario::value_variants()
                .iter()
                .copied()
                .filter(|s| *s != Scenario::Baseline || self.baseline.is_some())
                .filter(|s| *s != Scenario::Failover || self.server_store().is_some())
                .collect()
        } else {
            self.scenarios.clone()
        };
        if scenarios.contains(&Scenario::Baseline) {
            match &self.baseline {
                None => anyhow::bail!(
                    "--scenario baseline needs --baseline BINARY (the flotilla binary to compare with)"
                ),
                Some(binary) if !binary.is_file() => {
                    anyhow::bail!("--baseline {}: no such file", binary.display())
                }
                Some(_) => {}
            }
            if let Some(binary) = self.hub_binary.as_ref().filter(|b| !b.is_file()) {
                anyhow::bail!("--hub-binary {}: no such file", binary.display());
            }
        }
        if scenarios.contains(&Scenario::Failover) && self.server_store().is_none() {
            anyhow::bail!(
                "--scenario failover needs --store postgres://… or etcd://… (the hub replicas share one database server)"
            );
        }
        scenarios.sort();
        scenarios.dedup();
        Ok(scenarios)
    }

    /// The URL of `--store` when it names a database server (PostgreSQL or etcd).
    fn server_store(&self) -> Option<String> {
        match &self.store {
            Some(crate::serve::StoreUrl::Postgres(url) | crate::serve::StoreUrl::Etcd(url)) => {
                Some(url.clone())
            }
            _ => None,
        }
    }

    fn admission_options(&self) -> admission::Options {
        let mut options = if self.quick {
            admission::Options::quick(&self.out)
        } else {
            admission::Options::new(&self.out)
        };
        if let Some(rounds) = self.rounds {
            options.rounds = rounds as usize;
        }
        options
    }

    fn failover_options(&self, binary: PathBuf, url: String) -> failover::Options {
        let mut options = if self.quick {
            failover::Options::quick(&self.out, binary, url)
        } else {
            failover::Options::new(&self.out, binary, url)
        };
        if let Some(&n) = self.clusters.iter().max() {
            options.clusters = n as usize;
        }
        if let Some(rounds) = self.rounds {
            options.rounds = rounds as usize;
        }
        options
    }

    fn propagation_options(&self, binary: PathBuf) -> propagation::Options {
        let mut options = if self.quick {
            propagation::Options::quick(&self.out, binary)
        } else {
            propagation::Options::new(&self.out, binary)
        };
        if !self.clusters.is_empty() {
            options.clusters = self.clusters.iter().map(|&n| n as usize).collect();
        }
        options.mode = match self.mode {
            Mode::Push => propagation::Mode::Push,
            Mode::Pull => propagation::Mode::Pull,
            Mode::Both => propagation::Mode::Both,
        };
        options.store = self.server_store();
        if let Some(rounds) = self.rounds {
            options.rounds = rounds as usize;
        }
        options
    }

    fn rollout_options(&self, binary: PathBuf) -> rollout::Options {
        let mut options = if self.quick {
            rollout::Options::quick(&self.out, binary)
        } else {
            rollout::Options::new(&self.out, binary)
        };
        if let Some(&n) = self.clusters.iter().max() {
            options.clusters = n as usize;
        }
        options
    }

    fn resync_options(&self, binary: PathBuf) -> resync::Options {
        let options = if self.quick {
            resync::Options::quick(&self.out, binary)
        } else {
            resync::Options::new(&self.out, binary)
        };
        let placements = self.placements.map_or(options.placements, |p| p as usize);
        let clusters = self
            .resync_clusters
            .map_or(options.clusters, |n| n as usize);
        options.with_sizes(placements, clusters)
    }

    /// Runs the chosen scenarios, writing their files as each finishes, then prints the
    /// summary.
    pub fn run(self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("cannot create {}", self.out.display()))?;
        // The benchmark's own member clients, and the hub and simulator it starts (which
        // inherit the limit), hold a connection per member.
        crate::limits::raise_open_files(crate::limits::SERVING);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let binary = std::env::current_exe().context("cannot find the flotilla binary")?;
        let all_started = Instant::now();
        let mut rows: Vec<Row> = Vec::new();
        let mut files = Vec::new();
        let mut propagation_report = None;
        let mut resync_report = None;
        for scenario in self.chosen()? {
            let (date, started) = (system::now_utc(), Instant::now());
            let (output, table, summary_rows) = match scenario {
                Scenario::Store
                    if self
                        .store
                        .as_ref()
                        .is_some_and(|s| !matches!(s, crate::serve::StoreUrl::Sqlite(_))) =>
                {
                    let url = match &self.store {
                        Some(
                            crate::serve::StoreUrl::Postgres(url)
                            | crate::serve::StoreUrl::Etcd(url),
                        ) => url.clone(),
                        _ => unreachable!("checked by the guard"),
                    };
                    let options = server_store::Options {
                        url,
                        quick: self.quick,
                        value_size: 1024,
                    };
                    let report = runtime.block_on(server_store::run(&options))?;
                    let ratio = report.ratio_64().unwrap_or_default();
                    let share = match report.engine_name() {
                        "etcd" => "≥ 0.60",
                        _ => "≥ 0.50",
                    };
                    let mut rows = vec![
                        Row::new(
                            "store",
                            format!("{} store / raw, 64 writers", report.engine_name()),
                            format!("{ratio:.2}"),
                            share,
                        ),
                        Row::new(
                            "store",
                            "watch delivery p99, write acknowledged → watcher (64 writers)"
                                .to_owned(),
                            format!("{:.1} ms", report.watch_after_ack.p99_ms),
                            "< 20 ms",
                        ),
                        Row::new(
                            "store",
                            "watch p99, write submitted → watcher (64 writers)".to_owned(),
                            format!("{:.1} ms", report.watch_end_to_end.p99_ms),
                            "(the write's own latency included)",
                        ),
                    ];
                    if let Some((_, floor, to_floor)) = report.floor.iter().find(|(w, ..)| *w == 64)
                    {
                        rows.push(Row::new(
                            "store",
                            format!("etcd store / create-if-absent txns (the floor: {floor:.0}/s), 64 writers"),
                            format!("{to_floor:.2}"),
                            "(the least a CAS store pays)",
                        ));
                    }
                    let output = Output {
                        scenario: "store",
                        date,
                        options: json!({"quick": options.quick, "value_size": options.value_size,
                            "store": self.store.as_ref().map(ToString::to_string)}),
                        results: report.json(),
                        charts: Vec::new(),
                    };
                    (output, report.table(), rows)
                }
                Scenario::Store => {
                    let mut options = store::Options::new(&self.out);
                    options.quick = self.quick;
                    let report = runtime.block_on(store::run(&options))?;
                    let output = Output {
                        scenario: "store",
                        date,
                        options: json!({"quick": options.quick, "value_size": options.value_size}),
                        results: report.json(),
                        charts: views::store_charts(&report),
                    };
                    (output, report.table(), views::store_summary(&report))
                }
                Scenario::Api => {
                    let mut options = if self.quick {
                        api::Options::quick(&self.out)
                    } else {
                        api::Options::new(&self.out)
                    };
                    options.hub_binary = Some(binary.clone());
                    let report = runtime.block_on(api::run(&options))?;
                    let output = Output {
                        scenario: "api",
                        date,
                        options: json!({"quick": options.quick, "clients": options.clients,
                            "objects": options.objects, "watchers": options.watchers,
                            "watch_events": options.watch_events}),
                        results: report.json(),
                        charts: views::api_charts(&report),
                    };
                    (output, report.table(), views::api_summary(&report))
                }
                Scenario::Admission => {
                    let options = self.admission_options();
                    let report = runtime.block_on(admission::run(&options))?;
                    let output = Output {
                        scenario: "admission",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: report.charts(),
                    };
                    (output, report.table(), report.summary())
                }
                Scenario::Rbac => {
                    let mut options = if self.quick {
                        rbac::Options::quick(&self.out, binary.clone())
                    } else {
                        rbac::Options::new(&self.out, binary.clone())
                    };
                    if let Some(rounds) = self.rounds {
                        options.rounds = rounds as usize;
                    }
                    let report = runtime.block_on(rbac::run(&options))?;
                    let output = Output {
                        scenario: "rbac",
                        date,
                        options: json!({"quick": self.quick, "clients": options.clients,
                            "requests": options.requests, "get_requests": options.get_requests,
                            "rounds": options.rounds}),
                        results: report.json(),
                        charts: Vec::new(),
                    };
                    (output, report.table(), report.summary())
                }
                Scenario::Baseline => {
                    let Some(theirs) = self.baseline.clone() else {
                        anyhow::bail!("--scenario baseline needs --baseline BINARY");
                    };
                    let ours = self.hub_binary.clone().unwrap_or_else(|| binary.clone());
                    let mut options = if self.quick {
                        baseline::Options::quick(&self.out, ours, theirs)
                    } else {
                        baseline::Options::new(&self.out, ours, theirs)
                    };
                    if let Some(rounds) = self.rounds {
                        options.rounds = rounds as usize;
                    }
                    options.split_cpus = self.split_cpus;
                    let report = runtime.block_on(baseline::run(&options))?;
                    let output = Output {
                        scenario: "baseline",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: Vec::new(),
                    };
                    (output, report.table(), report.summary())
                }
                Scenario::Propagation => {
                    let options = self.propagation_options(binary.clone());
                    let report = runtime.block_on(propagation::run(&options))?;
                    let output = Output {
                        scenario: "propagation",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: report.charts(),
                    };
                    let (table, rows) = (report.table(), report.summary());
                    propagation_report = Some(report);
                    (output, table, rows)
                }
                Scenario::Resync => {
                    let options = self.resync_options(binary.clone());
                    let report = runtime.block_on(resync::run(&options))?;
                    let output = Output {
                        scenario: "resync",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: report.charts(),
                    };
                    let (table, rows) = (report.table(), report.summary());
                    resync_report = Some(report);
                    (output, table, rows)
                }
                Scenario::Rollout => {
                    let options = self.rollout_options(binary.clone());
                    let report = runtime.block_on(rollout::run(&options))?;
                    let output = Output {
                        scenario: "rollout",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: report.charts(),
                    };
                    (output, report.table(), report.summary())
                }
                Scenario::Memory => {
                    let options = if self.quick {
                        memory::Options::quick(&self.out, binary.clone())
                    } else {
                        memory::Options::new(&self.out, binary.clone())
                    };
                    let report = runtime.block_on(memory::run(
                        &options,
                        propagation_report.as_ref(),
                        resync_report.as_ref(),
                    ))?;
                    let output = Output {
                        scenario: "memory",
                        date,
                        options: json!({
                            "source": report.source,
                            "own_propagation": propagation_report.is_none().then(|| options.propagation.json()),
                            "own_resync": resync_report.is_none().then(|| options.resync.json()),
                        }),
                        results: report.json(),
                        charts: report.charts(),
                    };
                    (output, report.table(), report.summary())
                }
                Scenario::Failover => {
                    let Some(url) = self.server_store() else {
                        anyhow::bail!("--scenario failover needs --store postgres://… or etcd://…");
                    };
                    let options = self.failover_options(binary.clone(), url);
                    let report = runtime.block_on(failover::run(&options))?;
                    let output = Output {
                        scenario: "failover",
                        date,
                        options: options.json(),
                        results: report.json(),
                        charts: Vec::new(),
                    };
                    (output, report.table(), report.summary())
                }
            };
            eprintln!("{table}");
            let written = write(&self.out, &output)
                .with_context(|| format!("cannot write the results to {}", self.out.display()))?;
            eprintln!(
                "{}: done in {:.1} s\n",
                output.scenario,
                started.elapsed().as_secs_f64()
            );
            files.extend(written);
            rows.extend(summary_rows);
        }
        print!("{}", summary(&rows));
        let names: Vec<String> = files
            .iter()
            .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        println!(
            "\nresults in {}: {}\n(all in {:.0} s)",
            self.out.display(),
            names.join(", "),
            all_started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Args, Command};

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        let mut argv = vec!["flotilla", "bench"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).map(|a| match a.command {
            Command::Bench(b) => b,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn defaults_run_every_scenario_in_full() {
        let args = parse(&[]).unwrap();
        assert!(!args.quick);
        assert_eq!(args.out, PathBuf::from("flotilla-bench"));
        assert!(args.scenarios.is_empty());
    }

    #[test]
    fn scenarios_and_options_parse() {
        let args = parse(&["--quick", "--out", "/tmp/b", "--scenario", "store"]).unwrap();
        assert!(args.quick);
        assert_eq!(args.out, PathBuf::from("/tmp/b"));
        assert_eq!(args.scenarios, vec![Scenario::Store]);
    }

    #[test]
    fn an_unknown_scenario_is_refused_with_the_choices() {
        let err = parse(&["--scenario", "warp"]).unwrap_err().to_string();
        assert!(err.contains("invalid value 'warp'"), "{err}");
        assert!(err.contains("store"), "{err}");
    }

    #[test]
    fn scenarios_run_in_order_once_and_sizes_can_be_chosen() {
        let args = parse(&[
            "--scenario",
            "memory",
            "--scenario",
            "propagation",
            "--scenario",
            "memory",
            "--clusters",
            "10,100",
            "--placements",
            "100",
            "--resync-clusters",
            "20",
        ])
        .unwrap();
        assert_eq!(
            args.chosen().unwrap(),
            [Scenario::Propagation, Scenario::Memory]
        );
        let options = args.propagation_options(PathBuf::from("flotilla"));
        assert_eq!(options.clusters, [10, 100]);
        let options = args.resync_options(PathBuf::from("flotilla"));
        assert_eq!((options.placements, options.clusters), (100, 20));
        assert_eq!(parse(&[]).unwrap().chosen().unwrap().len(), 8);
        let args = parse(&["--scenario", "rollout", "--clusters", "50"]).unwrap();
        assert_eq!(args.chosen().unwrap(), [Scenario::Rollout]);
        let options = args.rollout_options(PathBuf::from("flotilla"));
        assert_eq!(
            (options.clusters, options.max_unavailable_percent),
            (50, 10)
        );
        let options = parse(&[])
            .unwrap()
            .rollout_options(PathBuf::from("flotilla"));
        assert_eq!(options.clusters, 1000);
        assert!(parse(&["--scenario", "fleet"]).is_err());
        assert!(parse(&["--clusters", "0"]).is_err());
    }

    #[test]
    fn the_baseline_scenario_runs_only_with_a_baseline_binary() {
        let err = parse(&["--scenario", "baseline"])
            .unwrap()
            .chosen()
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs --baseline BINARY"), "{err}");
        let err = parse(&[
            "--scenario",
            "baseline",
            "--baseline",
            "/nonexistent/flotilla",
        ])
        .unwrap()
        .chosen()
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/flotilla: no such file"), "{err}");
        let binary = std::env::current_exe().unwrap();
        let binary = binary.to_str().unwrap();
        let args = parse(&["--scenario", "baseline", "--baseline", binary]).unwrap();
        assert_eq!(args.chosen().unwrap(), [Scenario::Baseline]);
        // Every scenario: the baseline too once a binary is given.
        assert_eq!(
            parse(&["--baseline", binary])
                .unwrap()
                .chosen()
                .unwrap()
                .len(),
            9
        );
        // Another binary may be measured in this one's place, against a baseline only.
        assert!(parse(&["--hub-binary", binary]).is_err());
        // The CPUs split between the hubs and their clients: for the baseline only.
        assert!(parse(&["--split-cpus"]).is_err());
        assert!(
            parse(&["--baseline", binary, "--split-cpus"])
                .unwrap()
                .split_cpus
        );
        let args = parse(&["--baseline", binary, "--hub-binary", "/nonexistent/new"]).unwrap();
        let err = args.chosen().unwrap_err().to_string();
        assert!(
            err.contains("--hub-binary /nonexistent/new: no such file"),
            "{err}"
        );
    }

    #[test]
    fn the_failover_scenario_needs_a_database_server() {
        let err = parse(&["--scenario", "failover"])
            .unwrap()
            .chosen()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs --store postgres://… or etcd://…"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        let err = parse(&["--scenario", "failover", "--store", "sqlite:///tmp/x.db"])
            .unwrap()
            .chosen()
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs --store"), "{err}");
        let args = parse(&[
            "--scenario",
            "failover",
            "--store",
            "postgres://u@127.0.0.1:5432/db",
            "--quick",
            "--rounds",
            "2",
        ])
        .unwrap();
        assert_eq!(args.chosen().unwrap(), [Scenario::Failover]);
        let options =
            args.failover_options(PathBuf::from("flotilla"), args.server_store().unwrap());
        assert_eq!((options.clusters, options.rounds), (3, 2));
        let options = parse(&["--clusters", "5", "--store", "etcd://127.0.0.1:2379"])
            .unwrap()
            .failover_options(PathBuf::from("flotilla"), "etcd://127.0.0.1:2379".into());
        assert_eq!((options.clusters, options.rounds), (5, 3));
        // By default only with a database server to run on.
        assert!(
            !parse(&[])
                .unwrap()
                .chosen()
                .unwrap()
                .contains(&Scenario::Failover)
        );
        let all = parse(&["--store", "etcd://127.0.0.1:2379"])
            .unwrap()
            .chosen()
            .unwrap();
        assert_eq!(all.last(), Some(&Scenario::Failover));
    }

    #[test]
    fn rounds_are_a_positive_count() {
        assert_eq!(parse(&["--rounds", "30"]).unwrap().rounds, Some(30));
        assert_eq!(parse(&[]).unwrap().rounds, None);
        let err = parse(&["--rounds", "0"]).unwrap_err().to_string();
        assert!(err.contains("invalid value '0'"), "{err}");
        assert!(parse(&["--rounds", "many"]).is_err());
    }

    #[test]
    fn the_admission_scenario_takes_its_rounds() {
        assert_eq!(parse(&[]).unwrap().admission_options().rounds, 5);
        assert_eq!(parse(&["--quick"]).unwrap().admission_options().rounds, 2);
        let options = parse(&["--rounds", "40"]).unwrap().admission_options();
        assert_eq!((options.rounds, options.per_round), (40, 1_000));
    }

    #[test]
    fn out_needs_a_value() {
        assert!(parse(&["--out"]).is_err());
    }
}
