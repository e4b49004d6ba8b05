//! `flotilla bench`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, ValueEnum};

/// The benchmark scenarios.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Durable writes, lists and watch delivery against a raw SQLite loop.
    Store,
    /// The hub's API over HTTPS against the bare store underneath it.
    Api,
    /// A template change reaching every member of a simulated fleet; the hub's memory.
    Fleet,
}

/// `flotilla bench [--quick] [--out DIR] [--scenario S]…`
#[derive(Debug, Parser)]
pub struct BenchArgs {
    /// Fewer iterations, for a smoke run.
    #[arg(long)]
    pub quick: bool,
    /// Where results (JSON) go; the scenarios' scratch files are made inside it too, so it
    /// should be on the disk under test.
    #[arg(long, value_name = "DIR", default_value = "flotilla-bench")]
    pub out: PathBuf,
    /// Which scenarios to run (all if not given).
    #[arg(long = "scenario", value_enum)]
    pub scenarios: Vec<Scenario>,
}

impl BenchArgs {
    /// Runs the chosen scenarios, printing a summary and writing `DIR/<scenario>.json`.
    pub fn run(self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("cannot create {}", self.out.display()))?;
        let scenarios = if self.scenarios.is_empty() {
            vec![Scenario::Store, Scenario::Api, Scenario::Fleet]
        } else {
            self.scenarios.clone()
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        for scenario in scenarios {
            match scenario {
                Scenario::Store => {
                    let mut options = flotilla_bench::store::Options::new(&self.out);
                    options.quick = self.quick;
                    let report = runtime.block_on(flotilla_bench::store::run(&options))?;
                    println!("{}", report.table());
                    let file = self.out.join("store.json");
                    std::fs::write(&file, serde_json::to_string_pretty(&report.json())?)
                        .with_context(|| format!("cannot write {}", file.display()))?;
                    println!("results: {}", file.display());
                }
                Scenario::Fleet => {
                    let binary =
                        std::env::current_exe().context("cannot find the flotilla binary")?;
                    let options = if self.quick {
                        flotilla_bench::fleet::Options::quick(&self.out, binary)
                    } else {
                        flotilla_bench::fleet::Options::new(&self.out, binary)
                    };
                    let report = runtime.block_on(flotilla_bench::fleet::run(&options))?;
                    println!("{}", report.table());
                    let file = self.out.join("fleet.json");
                    std::fs::write(&file, serde_json::to_string_pretty(&report.json())?)
                        .with_context(|| format!("cannot write {}", file.display()))?;
                    println!("results: {}", file.display());
                }
                Scenario::Api => {
                    let mut options = if self.quick {
                        flotilla_bench::api::Options::quick(&self.out)
                    } else {
                        flotilla_bench::api::Options::new(&self.out)
                    };
                    options.hub_binary = std::env::current_exe().ok();
                    let report = runtime.block_on(flotilla_bench::api::run(&options))?;
                    println!("{}", report.table());
                    let file = self.out.join("api.json");
                    std::fs::write(&file, serde_json::to_string_pretty(&report.json())?)
                        .with_context(|| format!("cannot write {}", file.display()))?;
                    println!("results: {}", file.display());
                }
            }
        }
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
    fn out_needs_a_value() {
        assert!(parse(&["--out"]).is_err());
    }
}
