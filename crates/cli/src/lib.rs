//! The `flotilla` command line: clap `Args` per subcommand, wiring only.
//!
//! ```text
//!   flotilla bench  ──► flotilla-bench scenarios (store: SqliteStore vs raw SQLite)
//!   flotilla hub    ──► flotilla-apiserver over flotilla-store-sqlite, TLS by flotilla-pki
//!   flotilla agent  ──► flotilla-agent (registration, pull delivery through flotilla-delivery)
//!   flotilla token | approve | revoke ──► clients of the hub (pull registration)
//! ```

mod access;
mod bench;
mod demo;
mod hub;
mod identity;
mod join;
mod limits;
mod pull;
mod rollout;
mod serve;
mod sim;
mod sim_agents;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A multi-cluster control plane for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about)]
pub struct Args {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the hub: a Kubernetes-compatible API server over its store (SQLite,
    /// PostgreSQL or etcd).
    Hub(Box<hub::HubArgs>),
    /// Measure Flotilla against the limits underneath it, side by side in one run.
    Bench(bench::BenchArgs),
    /// Serve simulated member clusters whose workloads progress to ready.
    Sim(sim::SimArgs),
    /// Register a member cluster with the hub (push mode).
    Join(join::JoinArgs),
    /// Remove a member cluster from the hub, with what the hub placed on it.
    Unjoin(join::UnjoinArgs),
    /// A hub and three simulated clusters with an example placement, for a first look.
    Demo(demo::DemoArgs),
    /// Follow, approve, pause, resume or undo a placement's rollout (`status`, `history`,
    /// `approve`, `pause`, `resume`, `undo`), as kubectl rollout does for Deployments.
    Rollout(rollout::RolloutArgs),
    /// Bootstrap tokens with which pull agents register.
    Token(pull::TokenArgs),
    /// Run a pull agent next to a member: register with a token, then apply the
    /// cluster's Works from the hub (`print-rbac`: the RBAC it needs on the member).
    Agent(Box<pull::AgentCli>),
    /// Approve a pull cluster's pending certificate request: the cluster joins.
    Approve(pull::ApproveArgs),
    /// Revoke a pull cluster's certificate: its agent's next request is refused.
    Revoke(pull::RevokeArgs),
}

impl Args {
    /// Parses the process arguments and runs the subcommand; errors end the process with
    /// one readable line and a non-zero status.
    pub fn parse_and_run() -> ExitCode {
        let args = Args::parse();
        match args.run() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }

    /// Runs the parsed subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Hub(args) => (*args).run(),
            Command::Bench(args) => args.run(),
            Command::Sim(args) => args.run(),
            Command::Join(args) => args.run(),
            Command::Unjoin(args) => args.run(),
            Command::Demo(args) => args.run(),
            Command::Rollout(args) => args.run(),
            Command::Token(args) => args.run(),
            Command::Agent(args) => (*args).run(),
            Command::Approve(args) => args.run(),
            Command::Revoke(args) => args.run(),
        }
    }
}
