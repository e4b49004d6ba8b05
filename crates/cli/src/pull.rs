//! Pull mode on the command line: `flotilla token create` (a bootstrap token and the
//! agent's command line), `flotilla agent` (the member's side, `flotilla_agent`),
//! `flotilla approve NAME` and `flotilla revoke NAME` (the hub's admin deciding).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use flotilla_agent::registrar::{ISSUED_AT_ANNOTATION, cluster_request};
use flotilla_agent::token::BootstrapToken;
use flotilla_api::Cluster;
use flotilla_api::agent::{REQUEST_ANNOTATION, SERIAL_ANNOTATION, TOKEN_ID_ANNOTATION};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};

use crate::join::{HubAccess, cluster_name, labels};
use crate::serve::{LogFormat, block_on, init_logging, parse_duration};

/// `flotilla token create [--ttl 24h] [--auto-approve] [--clusterset SET]`
#[derive(Debug, Parser)]
pub struct TokenArgs {
    /// What to do with tokens.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// `flotilla token` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a bootstrap token for pull agents; prints it, then the agent's command line.
    Create(TokenCreateArgs),
}

/// `flotilla token create`
#[derive(Debug, Parser)]
pub struct TokenCreateArgs {
    /// How long the token may register agents (`0`: until its Secret is deleted).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub ttl: Duration,
    /// The hub approves the certificate of each cluster registered with this token at
    /// once (mass onboarding); otherwise `flotilla approve NAME` does.
    #[arg(long)]
    pub auto_approve: bool,
    /// The cluster set the token's clusters join (an auto-approved cluster must be in it).
    #[arg(long, value_name = "SET", value_parser = cluster_name)]
    pub clusterset: Option<String>,
    /// The hub.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// `flotilla approve NAME`
#[derive(Debug, Parser)]
pub struct ApproveArgs {
    /// The cluster whose agent's pending certificate request is approved.
    #[arg(value_parser = cluster_name)]
    pub name: String,
    /// The hub.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// `flotilla revoke NAME`
#[derive(Debug, Parser)]
pub struct RevokeArgs {
    /// The cluster whose agent's certificate is revoked.
    #[arg(value_parser = cluster_name)]
    pub name: String,
    /// The hub.
    #[command(flatten)]
    pub hub: HubAccess,
}

/// `flotilla agent FLAGS` runs the agent; `flotilla agent print-rbac …` prints what it
/// needs on the member.
#[derive(Debug, Parser)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AgentCli {
    /// A subcommand; none: run the agent with the flags.
    #[command(subcommand)]
    pub command: Option<AgentCommand>,
    /// The agent's flags.
    #[command(flatten)]
    pub run: Option<AgentArgs>,
}

/// `flotilla agent` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum AgentCommand {
    /// Print the minimal RBAC the agent needs on its member, as YAML to apply there.
    PrintRbac(PrintRbacArgs),
}

/// `flotilla agent print-rbac --cluster NAME [--service-account NAMESPACE/NAME …]`
#[derive(Debug, Parser)]
pub struct PrintRbacArgs {
    /// The cluster's name on the hub (it labels the objects).
    #[arg(long, value_name = "NAME", value_parser = cluster_name)]
    pub cluster: String,
    /// A service account the placements apply as on this member (their
    /// `apply.serviceAccountName`, with its namespace); repeatable. The agent may then
    /// impersonate exactly these and applies nothing as itself. None: the agent applies
    /// as itself, and its role allows every kind (narrow it to what you place).
    #[arg(long = "service-account", value_name = "NAMESPACE/NAME", value_parser = named_account)]
    pub service_accounts: Vec<flotilla_agent::member_rbac::NamedAccount>,
}

fn named_account(text: &str) -> Result<flotilla_agent::member_rbac::NamedAccount, String> {
    text.parse()
        .map_err(|e: flotilla_agent::Error| e.to_string())
}

impl AgentCli {
    /// Runs the agent, or the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match (self.command, self.run) {
            (Some(AgentCommand::PrintRbac(args)), _) => {
                args.print();
                Ok(())
            }
            (None, Some(run)) => run.run(),
            (None, None) => bail!(
                "flotilla agent needs --hub, --ca-hash, --cluster and --kubeconfig (see --help)"
            ),
        }
    }
}

impl PrintRbacArgs {
    fn print(&self) {
        let objects = flotilla_agent::member_rbac::objects(&self.cluster, &self.service_accounts);
        print!("{}", flotilla_agent::member_rbac::yaml(&objects));
    }
}

/// `flotilla agent --hub URL --token T --ca-hash sha256:HEX --cluster NAME --kubeconfig
/// MEMBER [--data-dir DIR] [--labels k=v,…] [--clusterset SET]`
#[derive(Debug, Parser)]
pub struct AgentArgs {
    /// The hub's URL (`https://HOST:PORT`).
    #[arg(long, value_name = "URL", value_parser = hub_url)]
    pub hub: String,
    /// The bootstrap token (`flotilla token create`); not needed once registered.
    #[arg(long, value_name = "TOKEN", value_parser = bootstrap_token)]
    pub token: Option<BootstrapToken>,
    /// The hub CA's public key hash, `sha256:HEX` (printed by `flotilla token create`).
    #[arg(long, value_name = "sha256:HEX", value_parser = ca_hash)]
    pub ca_hash: String,
    /// The cluster's name on the hub (a DNS label).
    #[arg(long, value_name = "NAME", value_parser = cluster_name)]
    pub cluster: String,
    /// A kubeconfig for the member cluster the agent applies to.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// Where the agent keeps its key, certificate and the hub's CA.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/flotilla/agent")]
    pub data_dir: PathBuf,
    /// The cluster's labels, which placements select on.
    #[arg(long, value_name = "K=V,...", value_parser = labels, default_value = "")]
    pub labels: BTreeMap<String, String>,
    /// The cluster set it belongs to.
    #[arg(long, value_name = "SET", value_parser = cluster_name)]
    pub clusterset: Option<String>,
    /// How often the agent renews its heartbeat Lease on the hub.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub heartbeat_period: Duration,
    /// How often every Work is applied again (drift corrected).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = positive_duration)]
    pub resync_period: Duration,
    /// The hub's name, as the objects it places carry it (the hub's `--name`).
    #[arg(long, value_name = "NAME", default_value = "flotilla-hub")]
    pub hub_name: String,
    /// The lifetime the agent asks for its certificates (`expirationSeconds`; the hub's
    /// default when not given, a year). Each is renewed at 80 % of its lifetime.
    #[arg(long, value_name = "DURATION", value_parser = cert_duration)]
    pub cert_duration: Option<Duration>,
    /// Log format.
    #[arg(long, value_enum, default_value = "plain")]
    pub log_format: LogFormat,
}

fn hub_url(text: &str) -> Result<String, String> {
    flotilla_agent::discovery::host_port(text).map_err(|e| e.to_string())?;
    Ok(text.trim_end_matches('/').to_owned())
}

pub(crate) fn bootstrap_token(text: &str) -> Result<BootstrapToken, String> {
    text.parse()
        .map_err(|e: flotilla_agent::Error| e.to_string())
}

fn ca_hash(text: &str) -> Result<String, String> {
    flotilla_agent::discovery::check_pin(text).map_err(|e| e.to_string())
}

/// A certificate lifetime a request may ask for: 10 minutes or more (the API's minimum
/// `expirationSeconds`, as Kubernetes').
fn cert_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d < Duration::from_secs(600) => Err(format!(
            "{text:?} is shorter than 10 minutes, the shortest certificate a request may ask for"
        )),
        d => Ok(d),
    }
}

pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err(format!("{text:?} must be longer than zero")),
        d => Ok(d),
    }
}

impl TokenArgs {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            TokenCommand::Create(args) => block_on(args.create()),
        }
    }
}

/// A bootstrap token made on the hub: the token, the hub's URL and its CA's pin.
pub(crate) struct Made {
    /// The token.
    pub(crate) token: BootstrapToken,
    /// The hub's URL, as the hub kubeconfig names it.
    pub(crate) url: String,
    /// The pin of the hub kubeconfig's CA (`sha256:HEX`).
    pub(crate) ca_hash: String,
}

/// The hub's URL and its CA's pin (`sha256:HEX`), from the kubeconfig of `config`.
fn pin_of(config: &kube::Config) -> anyhow::Result<(String, String)> {
    let ca = config.root_cert.as_ref().and_then(|c| c.first()).context(
        "the hub kubeconfig has no certificate-authority-data: the agent's --ca-hash cannot be computed",
    )?;
    let ca_hash = flotilla_pki::ca_hash(ca).map_err(anyhow::Error::msg)?;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    Ok((url, ca_hash))
}

/// The URL and CA pin of the hub `hub` reaches, as `flotilla token create` prints them.
pub(crate) async fn hub_pin(hub: &HubAccess) -> anyhow::Result<(String, String)> {
    pin_of(&hub.config().await?)
}

/// Makes a bootstrap token on the hub `hub` reaches.
pub(crate) async fn make_token(
    hub: &HubAccess,
    ttl: Duration,
    auto_approve: bool,
    clusterset: Option<&str>,
) -> anyhow::Result<Made> {
    let config = hub.config().await?;
    let (url, ca_hash) = pin_of(&config)?;
    let client = kube::Client::try_from(config)?;
    let token = BootstrapToken::generate()?;
    let secret = token.secret(jiff::Timestamp::now(), ttl, auto_approve, clusterset)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), flotilla_agent::token::NAMESPACE);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .context("cannot create the bootstrap token's Secret")?;
    if let Some(set) = clusterset {
        crate::join::ensure_cluster_set(&client, set).await?;
    }
    Ok(Made {
        token,
        url,
        ca_hash,
    })
}

/// `flotilla join NAME --pull`: a token for the cluster and its agent's command line.
pub(crate) async fn print_agent_command(join: &crate::join::JoinArgs) -> anyhow::Result<()> {
    let made = make_token(
        &join.hub,
        Duration::from_secs(24 * 3600),
        false,
        join.clusterset.as_deref(),
    )
    .await?;
    let mut command = format!(
        "flotilla agent --hub {} --token {} --ca-hash {} --cluster {} --kubeconfig MEMBER.kubeconfig",
        made.url, made.token, made.ca_hash, join.name
    );
    if !join.labels.is_empty() {
        let labels: Vec<String> = join
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        command.push_str(&format!(" --labels {}", labels.join(",")));
    }
    if let Some(set) = &join.clusterset {
        command.push_str(&format!(" --clusterset {set}"));
    }
    println!("{command}");
    println!("then approve it on the hub: flotilla approve {}", join.name);
    Ok(())
}

impl TokenCreateArgs {
    async fn create(self) -> anyhow::Result<()> {
        let made = make_token(
            &self.hub,
            self.ttl,
            self.auto_approve,
            self.clusterset.as_deref(),
        )
        .await?;
        let set = match &self.clusterset {
            Some(set) => format!(" --clusterset {set}"),
            None => String::new(),
        };
        let (token, url, hash) = (made.token, made.url, made.ca_hash);
        println!("{token}");
        println!(
            "flotilla agent --hub {url} --token {token} --ca-hash {hash} --cluster NAME --kubeconfig MEMBER.kubeconfig{set}"
        );
        Ok(())
    }
}

fn is_decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied") && c.status == "True")
        })
}

impl ApproveArgs {
    /// Approves the cluster's pending certificate requests.
    pub fn run(self) -> anyhow::Result<()> {
        block_on(self.approve())
    }

    async fn approve(self) -> anyhow::Result<()> {
        let client = self.hub.client().await?;
        let csrs: Api<CertificateSigningRequest> = Api::all(client);
        let pending: Vec<_> = csrs
            .list(&ListParams::default())
            .await
            .context("cannot list certificate requests")?
            .items
            .into_iter()
            .filter(|csr| {
                !is_decided(csr) && cluster_request(csr).is_some_and(|r| r.cluster == self.name)
            })
            .collect();
        if pending.is_empty() {
            bail!(
                "cluster {} has no pending certificate request (is its agent running?)",
                self.name
            );
        }
        for csr in pending {
            let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            );
            let mut conditions = csr
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            conditions.push(CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: Some("FlotillaApprove".into()),
                message: Some(format!(
                    "cluster {} approved with flotilla approve",
                    self.name
                )),
                last_update_time: Some(now.clone()),
                last_transition_time: Some(now),
            });
            let patch = serde_json::json!({"status": {"conditions": conditions}});
            csrs.patch_approval(
                &csr.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("cannot approve {}", csr.name_any()))?;
            println!(
                "certificatesigningrequest/{} approved (cluster {})",
                csr.name_any(),
                self.name
            );
        }
        Ok(())
    }
}

impl RevokeArgs {
    /// Revokes the cluster's certificate: its agent's next request gets 401.
    pub fn run(self) -> anyhow::Result<()> {
        block_on(self.revoke())
    }

    async fn revoke(self) -> anyhow::Result<()> {
        let client = self.hub.client().await?;
        let clusters: Api<Cluster> = Api::all(client);
        let Some(cluster) = clusters
            .get_opt(&self.name)
            .await
            .context("cannot reach the hub")?
        else {
            bail!("cluster {} has not joined this hub", self.name);
        };
        if cluster
            .spec
            .access
            .as_ref()
            .and_then(|a| a.pull.as_ref())
            .is_none()
        {
            bail!(
                "cluster {} is not a pull cluster (unjoin it instead)",
                self.name
            );
        }
        // No serial and no request named: no certificate authenticates; no token id: no
        // token auto-approves a new request for it. The time of the last request stays, so that no older
        // approved request is recorded again.
        let patch = serde_json::json!({"metadata": {"annotations": {
            SERIAL_ANNOTATION: "",
            REQUEST_ANNOTATION: "",
            TOKEN_ID_ANNOTATION: "",
            ISSUED_AT_ANNOTATION: cluster.annotations().get(ISSUED_AT_ANNOTATION)
                .cloned().unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().to_string()),
        }}});
        clusters
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context("cannot revoke")?;
        println!(
            "cluster {}: its agent's certificate is revoked; registering it again needs a new certificate request approved",
            self.name
        );
        Ok(())
    }
}

impl AgentArgs {
    /// Registers (unless registered before) and runs the agent until it is revoked.
    pub fn run(self) -> anyhow::Result<()> {
        init_logging(self.log_format);
        // One agent's work is a few requests a period and a couple of watches: one
        // thread does it. A worker thread per core (and each thread's allocator caches)
        // would cost more memory than the agent's own state.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(self.agent())
    }

    async fn agent(self) -> anyhow::Result<()> {
        // The member first: a kubeconfig that does not work registers nothing.
        let kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).with_context(|| {
                format!(
                    "cannot read the member kubeconfig {}",
                    self.kubeconfig.display()
                )
            })?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .context("cannot use the member kubeconfig")?;
        let member = flotilla_agent::lean_client(&config)?;
        tokio::time::timeout(Duration::from_secs(30), member.apiserver_version())
            .await
            .map_err(|_| anyhow::anyhow!("member: no answer from the member cluster within 30s"))?
            .map_err(|e| anyhow::anyhow!("member: the member kubeconfig does not work: {e}"))?;
        let registration = flotilla_agent::register::Registration {
            hub: self.hub.clone(),
            token: self.token,
            ca_hash: self.ca_hash,
            cluster: self.cluster.clone(),
            labels: self.labels,
            cluster_set: self.clusterset,
            data_dir: self.data_dir.clone(),
        };
        let credentials =
            flotilla_agent::register::credentials_for(&registration, self.cert_duration).await?;
        let hub = flotilla_agent::hub_client(
            &self.hub,
            &credentials.ca_pem,
            flotilla_agent::HubAuth::Certificate {
                cert_pem: &credentials.cert_pem,
                key_pem: &credentials.key_pem,
            },
        )
        .await?;
        tracing::info!(cluster = %self.cluster, hub = %self.hub, "agent running");
        // The hub client follows the certificate's renewals.
        let hub = flotilla_agent::renew::SwappableClient::new(hub);
        let renewal = flotilla_agent::renew::Renewal {
            hub: self.hub,
            cluster: self.cluster.clone(),
            data_dir: self.data_dir,
            duration: self.cert_duration,
        };
        let agent = flotilla_agent::pull::Agent::new(
            hub.client(),
            member,
            flotilla_agent::pull::Config {
                cluster: self.cluster,
                hub_name: self.hub_name,
                heartbeat_period: self.heartbeat_period,
                resync_period: self.resync_period,
            },
        );
        tokio::select! {
            ran = agent.run() => ran?,
            renewed = flotilla_agent::renew::run(renewal, credentials, hub) => renewed?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(args: &[&str]) -> Result<AgentArgs, clap::Error> {
        let mut all = vec!["agent"];
        all.extend(args);
        AgentArgs::try_parse_from(all)
    }

    const PIN: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn agent_arguments_are_read_and_bad_ones_refused_with_a_reason() {
        let ok = agent(&[
            "--hub",
            "https://127.0.0.1:6443",
            "--token",
            "abcdef.0123456789abcdef",
            "--ca-hash",
            PIN,
            "--cluster",
            "east",
            "--kubeconfig",
            "m.kubeconfig",
            "--labels",
            "env=prod",
            "--heartbeat-period",
            "2s",
        ])
        .unwrap();
        assert_eq!(ok.cluster, "east");
        assert_eq!(ok.token.unwrap().id, "abcdef");
        assert_eq!(ok.heartbeat_period, Duration::from_secs(2));
        assert_eq!(ok.labels["env"], "prod");
        let base = |replace: (&str, &str)| {
            let mut args = vec![
                ("--hub", "https://127.0.0.1:6443"),
                ("--token", "abcdef.0123456789abcdef"),
                ("--ca-hash", PIN),
                ("--cluster", "east"),
                ("--kubeconfig", "m.kubeconfig"),
            ];
            for arg in &mut args {
                if arg.0 == replace.0 {
                    arg.1 = replace.1;
                }
            }
            let flat: Vec<&str> = args.iter().flat_map(|(k, v)| [*k, *v]).collect();
            agent(&flat).unwrap_err().to_string()
        };
        assert!(base(("--ca-hash", "sha256:abc")).contains("CA hash"));
        assert!(base(("--token", "abcdef.SECRET")).contains("not a bootstrap token"));
        assert!(base(("--cluster", "East_1")).contains("not a valid cluster name"));
        assert!(base(("--hub", "http://hub:6443")).contains("https://"));
        // A token is optional (a registered agent restarts without one).
        assert!(
            agent(&[
                "--hub",
                "https://h:1",
                "--ca-hash",
                PIN,
                "--cluster",
                "e",
                "--kubeconfig",
                "k"
            ])
            .is_ok()
        );
        assert!(
            agent(&[
                "--hub",
                "https://h:1",
                "--ca-hash",
                PIN,
                "--cluster",
                "e",
                "--kubeconfig",
                "k",
                "--heartbeat-period",
                "0"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_agent_or_print_rbac() {
        let cli = |args: &[&str]| {
            let mut all = vec!["agent"];
            all.extend(args);
            AgentCli::try_parse_from(all)
        };
        let run = cli(&[
            "--hub",
            "https://h:1",
            "--ca-hash",
            PIN,
            "--cluster",
            "e",
            "--kubeconfig",
            "k",
        ])
        .unwrap();
        assert!(run.command.is_none() && run.run.is_some());
        let print = cli(&[
            "print-rbac",
            "--cluster",
            "east",
            "--service-account",
            "shop/deployer",
            "--service-account",
            "ops/deployer",
        ])
        .unwrap();
        let Some(AgentCommand::PrintRbac(args)) = print.command else {
            panic!("not print-rbac");
        };
        assert_eq!(args.service_accounts.len(), 2);
        let bad = cli(&[
            "print-rbac",
            "--cluster",
            "east",
            "--service-account",
            "deployer",
        ])
        .unwrap_err()
        .to_string();
        assert!(bad.contains("NAMESPACE/NAME"), "{bad}");
        assert!(cli(&["--hub", "https://h:1", "--ca-hash", PIN]).is_err());
    }

    #[test]
    fn token_arguments() {
        let args = TokenArgs::try_parse_from(["token", "create", "--ttl", "1h", "--auto-approve"])
            .unwrap();
        let TokenCommand::Create(create) = args.command;
        assert_eq!(create.ttl, Duration::from_secs(3600));
        assert!(create.auto_approve);
        assert!(TokenArgs::try_parse_from(["token", "create", "--clusterset", "Bad Set"]).is_err());
    }
}
