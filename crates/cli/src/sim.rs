//! `flotilla sim`: N simulated member clusters, the logical clusters of one API server,
//! each with nodes, the About API and workloads that progress to ready.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use flotilla_apiserver::registry::object::{NameRule, check_name};
use flotilla_sim::{NodeShape, Simulator};
use regex::Regex;
use tracing::{Instrument, info, info_span, warn};

use crate::serve::{self, ApiServer, LogFormat, parse_duration};

/// How often the simulator's store is compacted.
const COMPACTION_INTERVAL: Duration = Duration::from_secs(300);

/// How long the simulated clusters keep an Event after its last write.
const EVENT_TTL: Duration = Duration::from_secs(3600);

/// `flotilla sim --clusters N [--first F] [--data-dir DIR] [--listen ADDR] [--prefix P] …`
#[derive(Debug, Parser)]
pub struct SimArgs {
    /// How many member clusters to serve, named PREFIX1 … PREFIXN.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub clusters: u32,
    /// The number of the first cluster: PREFIXF … PREFIX(F+N-1). Several simulators side
    /// by side serve one numbered fleet, each within its own open-file limit.
    #[arg(long, value_name = "F", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub first: u32,
    /// Where the certificates, token, store (sim.db) and kubeconfigs (kubeconfigs/) live.
    #[arg(long, value_name = "DIR", default_value = "flotilla-sim-data")]
    pub data_dir: PathBuf,
    /// The address to serve HTTPS on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7443")]
    pub listen: SocketAddr,
    /// The start of every cluster's name (lowercase letters, digits and '-').
    #[arg(long, value_name = "PREFIX", default_value = "member-", value_parser = parse_prefix)]
    pub prefix: String,
    /// Nodes per cluster.
    #[arg(long, value_name = "K", default_value_t = 3)]
    pub nodes: u32,
    /// Each node's CPU (a Kubernetes quantity: 8, 7500m).
    #[arg(long, value_name = "QUANTITY", default_value = "8", value_parser = parse_quantity)]
    pub node_cpu: String,
    /// Each node's memory (a Kubernetes quantity: 32Gi, 64G).
    #[arg(long, value_name = "QUANTITY", default_value = "32Gi", value_parser = parse_quantity)]
    pub node_memory: String,
    /// How many pods each node takes.
    #[arg(long, value_name = "N", default_value_t = 110)]
    pub node_pods: u32,
    /// How long a workload's status takes to follow a change (`200ms`, `1s`, `0`).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub ready_delay: Duration,
    /// Images matching this regular expression never pull: their pods never get ready.
    #[arg(long, value_name = "REGEX", value_parser = parse_regex)]
    pub fail_images: Option<Regex>,
    /// The log format.
    #[arg(long, value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// Pull mode: run one agent per member inside this process, each registered with the
    /// hub through the real flow (bootstrap token, CSR, approval) with its own key and
    /// certificate; the hub holds no member credentials.
    #[arg(long, requires = "hub_kubeconfig")]
    pub agents: bool,
    /// The hub the agents register with: its URL and CA come from this kubeconfig, and,
    /// without --token, an --auto-approve bootstrap token is made through it.
    #[arg(long, value_name = "FILE", requires = "agents")]
    pub hub_kubeconfig: Option<PathBuf>,
    /// The bootstrap token the agents register with (`flotilla token create`).
    #[arg(long, value_name = "TOKEN", requires = "agents", value_parser = crate::pull::bootstrap_token)]
    pub token: Option<flotilla_agent::token::BootstrapToken>,
    /// The agents' cluster labels, which placements select on.
    #[arg(long, value_name = "K=V,...", value_parser = crate::join::labels, default_value = "", requires = "agents")]
    pub labels: BTreeMap<String, String>,
    /// The cluster set the agents' clusters join.
    #[arg(long, value_name = "SET", value_parser = crate::join::cluster_name, requires = "agents")]
    pub clusterset: Option<String>,
    /// How often each agent renews its heartbeat Lease on the hub.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::pull::positive_duration)]
    pub heartbeat_period: Duration,
    /// How often each agent applies every Work again (drift corrected).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = crate::pull::positive_duration)]
    pub resync_period: Duration,
    /// The hub's name, as the objects it places carry it (the hub's `--name`).
    #[arg(long, value_name = "NAME", default_value = "flotilla-hub")]
    pub hub_name: String,
    /// Authenticate each member's ServiceAccount tokens, authorize every request but the
    /// admin's by the RBAC of its member cluster, and honour impersonation headers, as a
    /// real member's API server does (a placement's `serviceAccountName`, an agent bound
    /// to `flotilla agent print-rbac`'s role). Off by default: each member then
    /// bootstraps Kubernetes' default roles, which a simulation of thousands of members
    /// does not need.
    #[arg(long)]
    pub rbac: bool,
}

/// A cluster-name prefix: `<prefix><number>` must be a DNS label.
fn parse_prefix(text: &str) -> Result<String, String> {
    match check_name(&format!("{text}1"), NameRule::Label) {
        None => Ok(text.to_owned()),
        Some(why) => Err(format!(
            "invalid prefix {text:?}: the cluster names {text}1, {text}2… must be DNS labels: {why}"
        )),
    }
}

/// A non-negative Kubernetes quantity, kept as written.
fn parse_quantity(text: &str) -> Result<String, String> {
    match flotilla_sim::resources::milli(text) {
        Some(_) => Ok(text.to_owned()),
        None => Err(format!(
            "invalid quantity {text:?}: expected a non-negative Kubernetes quantity, e.g. 8, 500m or 32Gi"
        )),
    }
}

fn parse_regex(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|e| format!("invalid regular expression {text:?}: {e}"))
}

impl SimArgs {
    /// The member clusters' names, checked.
    fn members(&self) -> anyhow::Result<Vec<String>> {
        let Some(last) = self.first.checked_add(self.clusters - 1) else {
            anyhow::bail!(
                "--first {} with --clusters {} numbers past {}",
                self.first,
                self.clusters,
                u32::MAX
            );
        };
        let last_name = format!("{}{last}", self.prefix);
        if let Some(why) = check_name(&last_name, NameRule::Label) {
            anyhow::bail!(
                "--prefix {:?} is too long for cluster number {last}: {last_name}: {why}",
                self.prefix
            );
        }
        Ok((self.first..=last)
            .map(|i| format!("{}{i}", self.prefix))
            .collect())
    }

    /// Serves until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        let members = self.members()?;
        serve::init_logging(self.log_format);
        // Every member's clients connect to this one process: the hub's drift watch and
        // request connections, and whatever else watches the members (a benchmark does).
        let needed = crate::limits::needed_by_members(members.len() as u64);
        let files = crate::limits::raise_open_files(crate::limits::SERVING.max(needed));
        let what = format!("{} clusters", members.len());
        match crate::limits::shortfall_warning(files, needed, &what) {
            Some(warning) => warn!(limit = files.now, needed, "{warning}"),
            None => info!(before = files.before, now = files.now, "open-file limit"),
        }
        let span = info_span!("sim", clusters = members.len());
        serve::block_on(self.serve(members).instrument(span))
    }

    async fn serve(self, members: Vec<String>) -> anyhow::Result<()> {
        let started = Instant::now();
        let store = self.data_dir.join("sim.db");
        // The members are provisioned again at every start: an empty store is no loss.
        let options = crate::serve::OpenOptions {
            init: true,
            ..crate::serve::OpenOptions::default()
        };
        let store = crate::serve::StoreUrl::Sqlite(store);
        let mut server =
            ApiServer::open("sim", &self.data_dir, self.listen, &store, &options).await?;
        if self.rbac {
            server.authorize_with_rbac(Vec::new()).await?;
            let issuer = server.url.clone();
            server.identities(crate::serve::Identities {
                issuer,
                max_token_expiration: None,
                oidc: None,
            })?;
        }
        info!(clusters = members.len(), "setting up the member clusters");
        let nodes = NodeShape {
            count: self.nodes,
            cpu: self.node_cpu.clone(),
            memory: self.node_memory.clone(),
            pods: self.node_pods,
        };
        flotilla_sim::provision(&server.api, &members, &nodes).await?;
        let kubeconfigs = self.data_dir.join("kubeconfigs");
        for name in &members {
            let path = kubeconfigs.join(format!("{name}.kubeconfig"));
            let url = format!("{}/clusters/{name}", server.url);
            server
                .write_kubeconfig(name, &url, &path)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        server.compact_every(COMPACTION_INTERVAL);
        // Events on the simulated clusters expire as on a real one's (kube-apiserver's
        // default --event-ttl).
        server.expire_events_after(EVENT_TTL);
        let config = flotilla_sim::Config {
            ready_delay: self.ready_delay,
            fail_images: self.fail_images.clone(),
        };
        tokio::spawn(Simulator::new(server.api.clone(), server.store.clone(), config).run());
        if let Some(hub_kubeconfig) = self.hub_kubeconfig.clone().filter(|_| self.agents) {
            let agents = crate::sim_agents::AgentsConfig {
                hub_kubeconfig,
                token: self.token.clone(),
                labels: self.labels.clone(),
                cluster_set: self.clusterset.clone(),
                heartbeat_period: self.heartbeat_period,
                resync_period: self.resync_period,
                hub_name: self.hub_name.clone(),
            };
            crate::sim_agents::start(
                agents,
                &self.data_dir,
                &members,
                &server.api,
                &server.metrics,
            )
            .await?;
        }
        info!(
            clusters = members.len(),
            kubeconfigs = %kubeconfigs.display(),
            seconds = started.elapsed().as_secs_f64(),
            "member clusters ready"
        );
        server.serve().await
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Args, Command};

    fn parse(args: &[&str]) -> Result<SimArgs, clap::Error> {
        let mut argv = vec!["flotilla", "sim"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).map(|a| match a.command {
            Command::Sim(s) => s,
            other => panic!("parsed as {other:?}"),
        })
    }

    fn error(args: &[&str]) -> String {
        parse(args).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let args = parse(&["--clusters", "3"]).unwrap();
        assert_eq!(args.clusters, 3);
        assert_eq!(args.data_dir, PathBuf::from("flotilla-sim-data"));
        assert_eq!(args.listen, "127.0.0.1:7443".parse().unwrap());
        assert_eq!(args.prefix, "member-");
        assert_eq!(
            (
                args.nodes,
                args.node_cpu.as_str(),
                args.node_memory.as_str()
            ),
            (3, "8", "32Gi")
        );
        assert_eq!(args.node_pods, 110);
        assert_eq!(args.ready_delay, Duration::from_secs(1));
        assert!(args.fail_images.is_none());
        assert_eq!(args.log_format, LogFormat::Plain);
        assert_eq!(
            args.members().unwrap(),
            ["member-1", "member-2", "member-3"]
        );
    }

    #[test]
    fn every_flag() {
        let args = parse(&[
            "--clusters=2",
            "--prefix=edge",
            "--nodes=5",
            "--node-cpu=7500m",
            "--node-memory=1.5Ti",
            "--node-pods=30",
            "--ready-delay=200ms",
            "--fail-images=^registry\\.invalid/",
            "--log-format=json",
        ])
        .unwrap();
        assert_eq!(args.members().unwrap(), ["edge1", "edge2"]);
        assert_eq!(args.nodes, 5);
        assert_eq!(args.node_cpu, "7500m");
        assert_eq!(args.node_memory, "1.5Ti");
        assert_eq!(args.node_pods, 30);
        assert_eq!(args.ready_delay, Duration::from_millis(200));
        let fail = args.fail_images.unwrap();
        assert!(fail.is_match("registry.invalid/app:1") && !fail.is_match("nginx"));
        let args = parse(&["--clusters=3", "--first=5001"]).unwrap();
        assert_eq!(
            args.members().unwrap(),
            ["member-5001", "member-5002", "member-5003"]
        );
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert!(error(&[]).contains("--clusters"));
        assert!(error(&["--clusters", "0"]).contains("invalid value '0'"));
        assert!(error(&["--clusters", "-1"]).contains("--clusters"));
        assert!(error(&["--clusters", "1", "--first", "0"]).contains("invalid value '0'"));
        let args = parse(&["--clusters", "2", "--first", &u32::MAX.to_string()]).unwrap();
        let e = args.members().unwrap_err().to_string();
        assert!(e.contains("numbers past 4294967295"), "{e}");
        for prefix in ["Member-", "-m", "a.b-", "m_"] {
            let e = error(&["--clusters", "1", &format!("--prefix={prefix}")]);
            assert!(e.contains("invalid prefix"), "{prefix}: {e}");
        }
        assert!(parse(&["--clusters", "1", "--prefix", ""]).is_ok());
        for quantity in ["8x", "-1", "", "lots"] {
            let e = error(&["--clusters", "1", &format!("--node-cpu={quantity}")]);
            assert!(e.contains("invalid quantity"), "{quantity}: {e}");
        }
        assert!(error(&["--clusters", "1", "--node-memory", "32GB"]).contains("invalid quantity"));
        let e = error(&["--clusters", "1", "--fail-images", "(unclosed"]);
        assert!(e.contains("invalid regular expression"), "{e}");
        assert!(error(&["--clusters", "1", "--ready-delay", "1d"]).contains("invalid duration"));
        assert!(error(&["--clusters", "1", "--listen", "nowhere"]).contains("invalid value"));
    }

    #[test]
    fn agents_need_a_hub_and_their_flags_need_agents() {
        let args = parse(&[
            "--clusters",
            "2",
            "--agents",
            "--hub-kubeconfig",
            "hub.kubeconfig",
            "--token",
            "abcdef.0123456789abcdef",
            "--labels",
            "mode=pull,env=dev",
            "--heartbeat-period",
            "2s",
        ])
        .unwrap();
        assert!(args.agents);
        assert_eq!(args.hub_kubeconfig, Some(PathBuf::from("hub.kubeconfig")));
        assert_eq!(args.token.unwrap().id, "abcdef");
        assert_eq!(args.labels["env"], "dev");
        assert_eq!(args.heartbeat_period, Duration::from_secs(2));
        assert_eq!(args.resync_period, Duration::from_secs(60));
        let defaults = parse(&["--clusters", "1"]).unwrap();
        assert!(!defaults.agents && defaults.token.is_none() && defaults.labels.is_empty());
        // --agents without a hub, and agent flags without --agents, are refused.
        assert!(error(&["--clusters", "1", "--agents"]).contains("--hub-kubeconfig"));
        let e = error(&["--clusters", "1", "--hub-kubeconfig", "h"]);
        assert!(e.contains("--agents"), "{e}");
        let e = error(&["--clusters", "1", "--labels", "a=b"]);
        assert!(e.contains("--agents"), "{e}");
        let e = error(&[
            "--clusters",
            "1",
            "--agents",
            "--hub-kubeconfig",
            "h",
            "--token",
            "x",
        ]);
        assert!(e.contains("invalid value"), "{e}");
        let e = error(&["--clusters", "1", "--heartbeat-period", "0s"]);
        assert!(e.contains("longer than zero"), "{e}");
    }

    #[test]
    fn a_prefix_too_long_for_the_count_is_refused() {
        let prefix = "p".repeat(62);
        let args = parse(&["--clusters", "9", "--prefix", &prefix]).unwrap();
        assert_eq!(args.members().unwrap().len(), 9);
        let args = parse(&["--clusters", "10", "--prefix", &prefix]).unwrap();
        let e = args.members().unwrap_err().to_string();
        assert!(e.contains("too long for cluster number 10"), "{e}");
        // The longest name is the last one, wherever the numbering starts.
        let args = parse(&["--clusters", "2", "--first", "8", "--prefix", &prefix]).unwrap();
        assert_eq!(args.members().unwrap().len(), 2);
        let args = parse(&["--clusters", "2", "--first", "9", "--prefix", &prefix]).unwrap();
        assert!(args.members().is_err());
    }
}
