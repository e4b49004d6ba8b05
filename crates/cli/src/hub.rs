//! `flotilla hub`: the hub's API server on its store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use flotilla_apiserver::admission::webhook::model::ServiceAddresses;
use flotilla_apiserver::auth::audit::log::{AuditLog, LogConfig};
use flotilla_apiserver::auth::audit::policy::Policy;
use flotilla_apiserver::auth::oidc::OidcConfig;
use flotilla_apiserver::client::Client;
use flotilla_apiserver::registry::services::{
    CidrError, DEFAULT_NODE_PORT_RANGE, DEFAULT_SERVICE_CIDR, NodePortRange, PortRangeError,
    ServiceCidr,
};
use flotilla_apiserver::{Api, ApiError, Reason};
use tracing::{debug, info};

use crate::access;
use crate::serve::{self, ApiServer, LogFormat, parse_duration};
use flotilla_fleet::runtime::leader::{LeaderConfig, LeaderConfigError, LeaderMetrics, Work};

pub use crate::serve::StoreUrl;

/// `flotilla hub [--data-dir DIR] [--listen ADDR] [--store URL] [--tls-san NAME]…`
#[derive(Debug, Parser)]
pub struct HubArgs {
    /// Where the hub keeps its certificates, token, kubeconfig and (by default) its store.
    #[arg(long, value_name = "DIR", default_value = "flotilla-data")]
    pub data_dir: PathBuf,
    /// The address to serve HTTPS on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// The store: sqlite://PATH (default: sqlite://DIR/hub.db),
    /// postgres://USER:PASS@HOST:PORT/DB?sslmode=disable|prefer|require|verify-ca|verify-full
    /// (sslrootcert=, sslcert=, sslkey= name PEM files), or etcd://HOST:PORT,…[/PREFIX]
    /// (default prefix /flotilla).
    #[arg(long, value_name = "URL")]
    pub store: Option<StoreUrl>,
    /// How long connecting to the store's server may take; the hub gives up at start
    /// after it.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub store_timeout: Duration,
    /// The CA certificate (PEM) of an etcd store's servers; the endpoints are then HTTPS.
    #[arg(long, value_name = "FILE")]
    pub etcd_cafile: Option<PathBuf>,
    /// The client certificate (PEM) the hub presents to etcd; needs --etcd-keyfile.
    #[arg(long, value_name = "FILE")]
    pub etcd_certfile: Option<PathBuf>,
    /// The private key (PEM) of --etcd-certfile.
    #[arg(long, value_name = "FILE")]
    pub etcd_keyfile: Option<PathBuf>,
    /// The log format.
    #[arg(long, value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// How often the store is compacted to the revision of one interval earlier
    /// (`300ms`, `30s`, `5m`, `1h`; `0` never compacts).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub compaction_interval: Duration,
    /// How long an Event is kept after its last write, as kube-apiserver's --event-ttl
    /// (`30s`, `10m`, `1h`; `0` keeps Events for ever). Expired Events are deleted every
    /// quarter of it, at most a minute apart.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub event_ttl: Duration,
    /// The hub's name, written on the objects it places on members.
    #[arg(long, value_name = "NAME", default_value = "flotilla-hub")]
    pub name: String,
    /// How often each member cluster is probed (less often past 2,000 clusters at 10 s:
    /// the hub makes at most 200 probes a second); one that does not answer within it is
    /// not Ready.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub health_period: Duration,
    /// How often every Work is applied again even when nothing changed.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = positive_duration)]
    pub resync_period: Duration,
    /// Start with an empty store even though the data directory held a hub before (its
    /// CA and token are there) and the store file is missing or empty. A store that holds
    /// data is used as it is.
    #[arg(long)]
    pub init: bool,
    /// Do not check the store's pages at start (SQLite's quick_check: about a second per
    /// GiB); a damaged store then fails where the damage is, not at start.
    #[arg(long)]
    pub skip_store_check: bool,
    /// Another DNS name or IP address for the serving certificate the hub issues
    /// (repeatable). The certificate is issued again, by the same CA, when the set changes.
    #[arg(long = "tls-san", value_name = "NAME_OR_IP", value_parser = tls_san)]
    pub tls_sans: Vec<String>,
    /// Serve this certificate (PEM, leaf first, then its chain) instead of one issued by
    /// the hub's CA; needs --tls-private-key-file.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// The URL clients reach the hub at (`https://HOST[:PORT]`), written into
    /// admin.kubeconfig instead of the listening address; its host is added to the
    /// issued certificate's names.
    #[arg(long, value_name = "URL", value_parser = advertise_address)]
    pub advertise_address: Option<String>,
    /// Write an audit log to this file (`-`: standard output), as kube-apiserver's: one
    /// audit.k8s.io/v1 Event per request and stage, as JSON lines. No log without it.
    #[arg(long, value_name = "FILE")]
    pub audit_log_path: Option<PathBuf>,
    /// Which requests the audit log records, and how much of each: an audit.k8s.io/v1
    /// Policy (YAML or JSON). Without it every request is recorded at Metadata.
    #[arg(long, value_name = "FILE")]
    pub audit_policy_file: Option<PathBuf>,
    /// The size in megabytes past which the audit log is rotated (FILE → FILE.1; 0:
    /// never).
    #[arg(long, value_name = "MB", default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// How many rotated audit logs are kept, FILE.1 the newest (0: all of them).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub audit_log_maxbackups: usize,
    /// Where a namespace's Placements may place when no ClusterSetBinding is in it:
    /// `open`, on every cluster (a single team's hub); `bound`, nowhere (each team's
    /// namespace gets the sets the platform team binds to it). A namespace with bindings
    /// reaches the clusters of the sets bound to it either way.
    #[arg(long, value_name = "open|bound", default_value = "open")]
    pub tenancy: flotilla_fleet::tenancy::Tenancy,
    /// The IPv4 range Services' cluster IPs are allocated from, as kube-apiserver's
    /// --service-cluster-ip-range (its network address and a prefix from /12 to /29). The
    /// first address is kept (a cluster's `kubernetes` Service has it); each logical
    /// cluster allocates from the whole range. Members allocate their own.
    #[arg(long, value_name = "CIDR", default_value = DEFAULT_SERVICE_CIDR, value_parser = service_cidr)]
    pub service_cidr: ServiceCidr,
    /// The ports NodePort and LoadBalancer Services' node ports are allocated from, as
    /// kube-apiserver's --service-node-port-range (FIRST-LAST, or BASE+SIZE); each logical
    /// cluster allocates from the whole range. Members allocate their own.
    #[arg(long, value_name = "RANGE", default_value = DEFAULT_NODE_PORT_RANGE, value_parser = node_port_range)]
    pub service_node_port_range: NodePortRange,
    /// The issuer of the ServiceAccount tokens the hub issues (their `iss`, and the
    /// audience the API accepts): by default the advertise address, else
    /// https://<listen address>. Its discovery documents are served at
    /// /.well-known/openid-configuration and /openid/v1/jwks.
    #[arg(long, value_name = "URL")]
    pub service_account_issuer: Option<String>,
    /// The longest lifetime of a token a TokenRequest gets (`24h`, …); longer requests
    /// are shortened to it. None by default, as kube-apiserver.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub service_account_max_token_expiration: Option<Duration>,
    /// Authenticate ID tokens of this OpenID Connect issuer (https://…); needs
    /// --oidc-client-id.
    #[arg(long, value_name = "URL")]
    pub oidc_issuer_url: Option<String>,
    /// The client id ID tokens must be issued for (their `aud`).
    #[arg(long, value_name = "ID")]
    pub oidc_client_id: Option<String>,
    /// The claim that names the user.
    #[arg(long, value_name = "CLAIM", default_value = "sub")]
    pub oidc_username_claim: String,
    /// Put before every OIDC user name: by default ISSUER# for claims other than
    /// `email`; `-` for none.
    #[arg(long, value_name = "PREFIX")]
    pub oidc_username_prefix: Option<String>,
    /// The claim that lists the user's groups (a string or a list of strings).
    #[arg(long, value_name = "CLAIM")]
    pub oidc_groups_claim: Option<String>,
    /// Put before every OIDC group name.
    #[arg(long, value_name = "PREFIX")]
    pub oidc_groups_prefix: Option<String>,
    /// The CA certificates (PEM) the OIDC issuer's serving certificate is checked
    /// against (by default the system's).
    #[arg(long, value_name = "FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// The signing algorithms accepted in ID tokens (comma-separated).
    #[arg(
        long,
        value_name = "ALGS",
        default_value = "RS256",
        value_delimiter = ','
    )]
    pub oidc_signing_algs: Vec<String>,
    /// How long a controller Lease (`flotilla-fleet`, `flotilla-apiserver-controllers` in
    /// flotilla-system) holds without renewal before another hub replica may take it.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = positive_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the replica leading a group of controllers keeps them running without
    /// renewing its Lease; below --leader-elect-lease-duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often a replica tries to take a Lease, and its holder renews it; below
    /// --leader-elect-renew-deadline.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = positive_duration)]
    pub leader_elect_retry_period: Duration,
    /// Where an admission webhook given as a Service is reached (repeatable): the hub runs
    /// no Services, so a webhook's `service: {namespace, name, port, path}` is called at
    /// https://NAME.NAMESPACE.svc:PORT/PATH (its certificate must be valid for
    /// NAME.NAMESPACE.svc) by connecting to HOST[:PORT] given here. A webhook whose
    /// Service has no address fails as one that is down, under its failurePolicy.
    #[arg(long = "webhook-service", value_name = "NAMESPACE/NAME=HOST[:PORT]", value_parser = webhook_service)]
    pub webhook_services: Vec<String>,
}

/// A `--service-cidr`: an IPv4 network address and its prefix.
fn service_cidr(text: &str) -> Result<ServiceCidr, String> {
    text.parse().map_err(|e: CidrError| e.to_string())
}

/// A `--service-node-port-range`: FIRST-LAST.
fn node_port_range(text: &str) -> Result<NodePortRange, String> {
    text.parse().map_err(|e: PortRangeError| e.to_string())
}

/// A `--webhook-service`: `NAMESPACE/NAME=HOST[:PORT]`.
fn webhook_service(text: &str) -> Result<String, String> {
    ServiceAddresses::new().add(text)?;
    Ok(text.to_owned())
}

/// The algorithms `--oidc-signing-algs` may name (kube-apiserver's: asymmetric only).
const OIDC_ALGORITHMS: [&str; 8] = [
    "RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "PS384", "PS512",
];

/// A `--tls-san`: a DNS name or an IP address.
fn tls_san(text: &str) -> Result<String, String> {
    flotilla_pki::normalize_host(text).map_err(|e| e.to_string())
}

/// An `--advertise-address`: `https://HOST[:PORT]`, a trailing `/` dropped.
fn advertise_address(text: &str) -> Result<String, String> {
    let url = text.strip_suffix('/').unwrap_or(text);
    let bad = |why: &str| format!("invalid URL {text:?}: {why}; expected https://HOST[:PORT]");
    let Some(authority) = url.strip_prefix("https://") else {
        return Err(bad("it must start with https://"));
    };
    if authority.contains(['/', '?', '#', '@']) {
        return Err(bad("it must not have a path, query or user"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').ok_or_else(|| bad("an unclosed ["))?,
        None if authority.matches(':').count() > 1 => {
            return Err(bad("an IPv6 address goes in brackets"));
        }
        None => authority
            .split_once(':')
            .map_or((authority, ""), |(host, port)| (host, port)),
    };
    let port = port.strip_prefix(':').unwrap_or(port);
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !port.is_empty() && port.parse::<u16>().is_err() {
        return Err(bad("the port is not a number"));
    }
    flotilla_pki::normalize_host(host).map_err(|e| bad(&e.to_string()))?;
    Ok(url.to_owned())
}

/// A duration that is not zero.
fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("invalid duration {text:?}: it must be above zero")),
        d => Ok(d),
    }
}

impl HubArgs {
    /// Flag combinations clap does not check; each refusal is one line.
    fn validate(&self) -> anyhow::Result<()> {
        match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(_), None) => anyhow::bail!("--tls-cert-file needs --tls-private-key-file"),
            (None, Some(_)) => anyhow::bail!("--tls-private-key-file needs --tls-cert-file"),
            (Some(_), Some(_)) if !self.tls_sans.is_empty() => anyhow::bail!(
                "--tls-san names go into the certificate the hub issues; with --tls-cert-file \
                 the certificate is yours: put the names in it"
            ),
            _ => {}
        }
        let etcd_files = self.etcd_cafile.is_some()
            || self.etcd_certfile.is_some()
            || self.etcd_keyfile.is_some();
        if etcd_files && !matches!(self.store, Some(StoreUrl::Etcd(_))) {
            anyhow::bail!(
                "--etcd-cafile, --etcd-certfile and --etcd-keyfile need --store etcd://…"
            );
        }
        if self.etcd_certfile.is_some() != self.etcd_keyfile.is_some() {
            anyhow::bail!("--etcd-certfile and --etcd-keyfile go together");
        }
        if let Err(e) = self.leader_config().check() {
            let e = match e {
                LeaderConfigError::RenewNotBelowLease => {
                    "--leader-elect-renew-deadline must be shorter than \
                     --leader-elect-lease-duration"
                }
                LeaderConfigError::RetryNotBelowRenew => {
                    "--leader-elect-retry-period must be shorter than \
                     --leader-elect-renew-deadline"
                }
                LeaderConfigError::LeaseTooShort => {
                    "--leader-elect-lease-duration must be at least 1s"
                }
                LeaderConfigError::Zero => "--leader-elect-retry-period must be above zero",
            };
            anyhow::bail!("{e}");
        }
        if self.audit_policy_file.is_some() && self.audit_log_path.is_none() {
            anyhow::bail!("--audit-policy-file needs --audit-log-path");
        }
        if self.audit_log_maxsize.checked_mul(1 << 20).is_none() {
            anyhow::bail!(
                "--audit-log-maxsize {} is too large: it is in megabytes",
                self.audit_log_maxsize
            );
        }
        self.validate_identities()
    }

    /// The ServiceAccount and OIDC flags; each refusal is one line.
    fn validate_identities(&self) -> anyhow::Result<()> {
        if let Some(issuer) = &self.service_account_issuer {
            let url = issuer.strip_prefix("https://");
            if issuer.contains(':') && url.is_none_or(|rest| rest.is_empty()) {
                anyhow::bail!(
                    "--service-account-issuer {issuer:?} must be an https:// URL (or a name \
                     without a colon)"
                );
            }
            if issuer.is_empty() {
                anyhow::bail!("--service-account-issuer must not be empty");
            }
        }
        if let Some(max) = self.service_account_max_token_expiration
            && max < Duration::from_secs(3600)
        {
            anyhow::bail!("--service-account-max-token-expiration must be at least 1h");
        }
        match (&self.oidc_issuer_url, &self.oidc_client_id) {
            (Some(_), None) => anyhow::bail!("--oidc-issuer-url needs --oidc-client-id"),
            (None, Some(_)) => anyhow::bail!("--oidc-client-id needs --oidc-issuer-url"),
            (Some(url), Some(id)) => {
                let host = url.strip_prefix("https://").unwrap_or("");
                if host.is_empty() || host.contains(['?', '#']) {
                    anyhow::bail!(
                        "--oidc-issuer-url {url:?} must be an https:// URL without query or fragment"
                    );
                }
                if id.is_empty() {
                    anyhow::bail!("--oidc-client-id must not be empty");
                }
            }
            (None, None) => {
                let set = [
                    ("--oidc-groups-claim", self.oidc_groups_claim.is_some()),
                    (
                        "--oidc-username-prefix",
                        self.oidc_username_prefix.is_some(),
                    ),
                    ("--oidc-groups-prefix", self.oidc_groups_prefix.is_some()),
                    ("--oidc-ca-file", self.oidc_ca_file.is_some()),
                ];
                if let Some((flag, _)) = set.iter().find(|(_, set)| *set) {
                    anyhow::bail!("{flag} needs --oidc-issuer-url");
                }
            }
        }
        if self.oidc_username_claim.is_empty() {
            anyhow::bail!("--oidc-username-claim must not be empty");
        }
        if let Some(bad) = self
            .oidc_signing_algs
            .iter()
            .find(|alg| !OIDC_ALGORITHMS.contains(&alg.as_str()))
        {
            anyhow::bail!(
                "--oidc-signing-algs: {bad:?} is not one of {}",
                OIDC_ALGORITHMS.join(", ")
            );
        }
        Ok(())
    }

    /// Who besides the admin may use the hub; `url` is where clients reach it (the
    /// default issuer). An unreadable OIDC CA file is one line.
    fn identities(&self, url: &str) -> anyhow::Result<serve::Identities> {
        let oidc = match (&self.oidc_issuer_url, &self.oidc_client_id) {
            (Some(issuer), Some(client)) => {
                let ca_pem = match &self.oidc_ca_file {
                    Some(file) => Some(std::fs::read_to_string(file).with_context(|| {
                        format!("cannot read --oidc-ca-file {}", file.display())
                    })?),
                    None => None,
                };
                let algorithms = self
                    .oidc_signing_algs
                    .iter()
                    .map(|alg| alg.parse::<jsonwebtoken::Algorithm>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| anyhow::anyhow!("--oidc-signing-algs: {e}"))?;
                Some(OidcConfig {
                    username_claim: self.oidc_username_claim.clone(),
                    username_prefix: self.oidc_username_prefix.clone(),
                    groups_claim: self.oidc_groups_claim.clone(),
                    groups_prefix: self.oidc_groups_prefix.clone().unwrap_or_default(),
                    ca_pem,
                    algorithms,
                    ..OidcConfig::new(issuer.trim_end_matches('/'), client)
                })
            }
            _ => None,
        };
        Ok(serve::Identities {
            issuer: self
                .service_account_issuer
                .clone()
                .unwrap_or_else(|| url.to_owned()),
            max_token_expiration: self
                .service_account_max_token_expiration
                .map(|d| d.as_secs() as i64),
            oidc,
        })
    }

    /// The audit policy: `--audit-policy-file`'s, or every request at Metadata; `None`
    /// without `--audit-log-path`. A policy that cannot be read is one line.
    fn audit_policy(&self) -> anyhow::Result<Option<Policy>> {
        if self.audit_log_path.is_none() {
            return Ok(None);
        }
        let policy = match &self.audit_policy_file {
            Some(file) => Policy::load(file)?,
            None => Policy::metadata(),
        };
        Ok(Some(policy))
    }

    /// The audit log's file and rotation.
    fn audit_log_config(&self, path: &std::path::Path) -> LogConfig {
        LogConfig {
            max_size: self.audit_log_maxsize << 20,
            max_backups: self.audit_log_maxbackups,
            ..LogConfig::new(path)
        }
    }

    /// The durations of the controllers' leader election.
    fn leader_config(&self) -> LeaderConfig {
        LeaderConfig {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        }
    }

    /// How the server opens its store and serving certificate.
    fn open_options(&self) -> serve::OpenOptions {
        serve::OpenOptions {
            init: self.init,
            skip_store_check: self.skip_store_check,
            tls_sans: self.tls_sans.clone(),
            tls_files: self
                .tls_cert_file
                .clone()
                .zip(self.tls_private_key_file.clone()),
            advertise: self.advertise_address.clone(),
            store_timeout: self.store_timeout,
            etcd_tls: flotilla_store_etcd::TlsFiles {
                ca: self.etcd_cafile.clone(),
                cert: self.etcd_certfile.clone(),
                key: self.etcd_keyfile.clone(),
            },
        }
    }

    /// Serves until SIGTERM or SIGINT.
    pub fn run(self) -> anyhow::Result<()> {
        self.validate()?;
        // Read before anything is opened: a bad policy changes nothing.
        let policy = self.audit_policy()?;
        serve::init_logging(self.log_format);
        // A connection per member cluster (its drift watch) besides the clients' own.
        let files = crate::limits::raise_open_files(crate::limits::SERVING);
        info!(before = files.before, now = files.now, "open-file limit");
        serve::block_on(self.serve(policy))
    }

    async fn serve(self, policy: Option<Policy>) -> anyhow::Result<()> {
        let store = self
            .store
            .clone()
            .unwrap_or_else(|| StoreUrl::Sqlite(self.data_dir.join("hub.db")));
        let options = self.open_options();
        let mut server =
            ApiServer::open("hub", &self.data_dir, self.listen, &store, &options).await?;
        server.api = server
            .api
            .clone()
            .with_service_cidr(self.service_cidr)
            .with_node_port_range(self.service_node_port_range);
        info!(cidr = %self.service_cidr, node_ports = %self.service_node_port_range,
            "service cluster IPs and node ports");
        // Before the hub's own first requests, which are recorded as any other.
        if let (Some(policy), Some(log)) = (policy, &self.audit_log_path) {
            let audit = AuditLog::open(policy, self.audit_log_config(log))?;
            info!(path = %log.display(), "audit log");
            server.audit_with(Arc::new(audit));
        }
        server.authorize_with_rbac(Vec::new()).await?;
        let identities = self.identities(&server.url)?;
        server.identities(identities)?;
        // Dynamic admission after the built-in plugins, among them: a ClusterSetBinding
        // needs `bind` on its set, as the server's authorizer (RBAC, set just above)
        // decides.
        let mut services = ServiceAddresses::new();
        for mapping in &self.webhook_services {
            services.add(mapping).map_err(anyhow::Error::msg)?;
        }
        let builtin = access::admission(&server.api);
        server.admit_dynamically(builtin, services).await?;
        install_fleet_api(&server.api).await?;
        // Before the controllers start: their identity's roles, the system namespace, the
        // `default` ClusterSet; then the controller's reads follow the CRDs.
        let groups = access::install(&server.api).await?;
        access::keep_template_reads(server.api.clone(), groups);
        let metrics = flotilla_fleet::runtime::Metrics::default();
        let leader_metrics = LeaderMetrics::default();
        let registry = Arc::get_mut(&mut server.metrics)
            .context("the hub's metrics are shared before serving")?
            .registry_mut();
        metrics.register(registry);
        // An SQLite store is locked to one process, so there is no other replica to elect
        // against: the loops simply run, with no Lease renewed every retry period.
        let elected = !matches!(store, StoreUrl::Sqlite(_));
        if elected {
            leader_metrics.register(registry);
        }
        // The fleet controllers use the API in-process, as their own user, through the
        // same authorization, routing, admission and watch paths as any client, and count
        // in its request metrics.
        let client = kube::Client::new(
            flotilla_apiserver::http::server::local_service_as(
                server.api.clone(),
                server.metrics.clone(),
                access::controller_user(),
            ),
            "default",
        );
        let config = flotilla_fleet::runtime::Config {
            hub: self.name.clone(),
            health_period: self.health_period,
            resync_period: self.resync_period,
            tenancy: self.tenancy,
            ..flotilla_fleet::runtime::Config::default()
        };
        // Pull agents' registration (auto-approval, each approved cluster's RBAC), as the
        // server itself: it writes roles no controller holds.
        let loopback = kube::Client::new(
            flotilla_apiserver::http::server::local_service_as(
                server.api.clone(),
                server.metrics.clone(),
                flotilla_apiserver::auth::UserInfo::loopback(),
            ),
            "default",
        );
        if elected {
            server.elect_with(self.election(loopback.clone(), leader_metrics));
        }
        let registrar = loopback;
        let fleet: Vec<Work> = vec![
            Arc::new(move || {
                Box::pin(flotilla_fleet::runtime::run(
                    client.clone(),
                    config.clone(),
                    metrics.clone(),
                ))
            }),
            Arc::new(move || Box::pin(flotilla_agent::registrar::run(registrar.clone()))),
        ];
        server.run_elected(FLEET_LEASE, fleet);
        server.compact_every(self.compaction_interval);
        server.expire_events_after(self.event_ttl);
        server.serve().await
    }
}

/// The Lease of the fleet controllers and the pull agents' registrar, in flotilla-system.
pub const FLEET_LEASE: &str = "flotilla-fleet";

impl HubArgs {
    /// This replica's part in the elections: Leases in the hub's system namespace, written
    /// as the server itself (`client`), under an identity unique to the process.
    fn election(&self, client: kube::Client, metrics: LeaderMetrics) -> serve::Election {
        let identity = flotilla_fleet::runtime::leader::unique_identity();
        info!(%identity, lease_duration = ?self.leader_elect_lease_duration, "leader election");
        serve::Election {
            client,
            namespace: flotilla_fleet::runtime::Config::default().system_namespace,
            identity,
            config: self.leader_config(),
            metrics,
        }
    }
}

/// Installs the fleet API's CustomResourceDefinitions (`flotilla_api::crds`) through the
/// API, as any client would: created when missing, replaced when their spec differs (a new
/// binary), left alone otherwise. Each must come out established; any failure is one line.
pub(crate) async fn install_fleet_api(api: &Api) -> anyhow::Result<()> {
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    // The hub's own writes are owned by field manager `flotilla`.
    let client = Client::new(api.clone()).with_field_manager("flotilla");
    let mut changed = 0;
    for crd in flotilla_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let fail = |why: &str| anyhow::anyhow!("cannot install the fleet API: CRD {name}: {why}");
        let mut desired = serde_json::to_value(&crd)?;
        // The server defaults listKind; set it here so an unchanged spec compares equal.
        let names = &mut desired["spec"]["names"];
        if names["listKind"].is_null() {
            names["listKind"] = format!("{}List", names["kind"].as_str().unwrap_or("")).into();
        }
        let path = format!("{CRDS}/{name}");
        let message = |e: &ApiError| match e.message.as_str() {
            "" => "no reason given".to_owned(),
            message => message.to_owned(),
        };
        let current = match client.get(&path).await {
            Ok(current) => Some(current),
            Err(e) if e.reason == Reason::NotFound => None,
            Err(e) => return Err(fail(&format!("cannot read it: {}", message(&e)))),
        };
        let (reply, action) = match current {
            None => (client.create(CRDS, &desired).await, "installed"),
            Some(current) if !current["metadata"]["deletionTimestamp"].is_null() => {
                return Err(fail(
                    "it is being deleted; start the hub again once it is gone",
                ));
            }
            Some(current) if current["spec"] == desired["spec"] => (Ok(current), "unchanged"),
            Some(current) => {
                desired["metadata"]["resourceVersion"] =
                    current["metadata"]["resourceVersion"].clone();
                (client.replace(&path, &desired).await, "updated")
            }
        };
        let reply = reply.map_err(|e| fail(&format!("not {action}: {}", message(&e))))?;
        let conditions = reply["status"]["conditions"].as_array();
        let established = conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if !established {
            let why = conditions
                .into_iter()
                .flatten()
                .find(|c| c["status"] == "False")
                .and_then(|c| c["message"].as_str())
                .unwrap_or("not established");
            return Err(fail(&format!("not served: {why}")));
        }
        if action == "unchanged" {
            debug!(crd = %name, "CRD unchanged");
        } else {
            info!(crd = %name, "CRD {action}");
            changed += 1;
        }
    }
    info!(changed, "fleet API ready");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Args, Command};

    fn parse(args: &[&str]) -> Result<HubArgs, clap::Error> {
        let mut argv = vec!["flotilla", "hub"];
        argv.extend_from_slice(args);
        Args::try_parse_from(argv).map(|a| match a.command {
            Command::Hub(h) => *h,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn defaults() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.data_dir, PathBuf::from("flotilla-data"));
        assert_eq!(args.listen, "127.0.0.1:6443".parse().unwrap());
        assert_eq!(args.store, None);
        assert_eq!(args.log_format, LogFormat::Plain);
        assert_eq!(args.compaction_interval, Duration::from_secs(300));
        assert_eq!(args.event_ttl, Duration::from_secs(3600));
        assert_eq!(args.tenancy, flotilla_fleet::tenancy::Tenancy::Open);
    }

    #[test]
    fn leader_election_durations() {
        let args = parse(&[]).unwrap();
        assert_eq!(
            args.leader_config(),
            flotilla_fleet::runtime::leader::LeaderConfig::default()
        );
        args.validate().unwrap();
        let args = parse(&[
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=500ms",
        ])
        .unwrap();
        args.validate().unwrap();
        assert_eq!(
            args.leader_config().retry_period,
            Duration::from_millis(500)
        );
        for (flags, refusal) in [
            (
                [
                    "--leader-elect-lease-duration=10s",
                    "--leader-elect-renew-deadline=10s",
                ],
                "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration",
            ),
            (
                [
                    "--leader-elect-renew-deadline=2s",
                    "--leader-elect-retry-period=2s",
                ],
                "--leader-elect-retry-period must be shorter than --leader-elect-renew-deadline",
            ),
        ] {
            let e = parse(&flags).unwrap().validate().unwrap_err().to_string();
            assert_eq!(e, refusal);
        }
        let e = parse(&["--leader-elect-retry-period=0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("it must be above zero"), "{e}");
    }

    #[test]
    fn tenancy_flag() {
        use flotilla_fleet::tenancy::Tenancy;
        let tenancy = |text: &str| parse(&["--tenancy", text]).map(|a| a.tenancy);
        assert_eq!(tenancy("bound").unwrap(), Tenancy::Bound);
        assert_eq!(tenancy("open").unwrap(), Tenancy::Open);
        let e = tenancy("closed").unwrap_err().to_string();
        assert!(e.contains("expected open or bound"), "{e}");
    }

    #[test]
    fn event_ttls() {
        let ttl = |text: &str| parse(&[&format!("--event-ttl={text}")]).map(|a| a.event_ttl);
        assert_eq!(ttl("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(ttl("90m").unwrap(), Duration::from_secs(5400));
        assert_eq!(ttl("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(ttl("0").unwrap(), Duration::ZERO);
        for bad in ["1", "1h30m", "-1h", "1d", ""] {
            let e = ttl(bad).unwrap_err().to_string();
            assert!(e.contains("invalid"), "{bad}: {e}");
        }
    }

    #[test]
    fn compaction_intervals() {
        let interval = |text: &str| {
            parse(&[&format!("--compaction-interval={text}")]).map(|a| a.compaction_interval)
        };
        assert_eq!(interval("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(interval("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(interval("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(interval("0").unwrap(), Duration::ZERO);
        for bad in ["5", "m", "1.5s", "-1s", "10d", "99999999999999999999h"] {
            let e = interval(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid duration") || e.contains("invalid value"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn store_urls() {
        let args = parse(&["--store", "sqlite:///var/lib/hub.db"]).unwrap();
        assert_eq!(args.store, Some(StoreUrl::Sqlite("/var/lib/hub.db".into())));
        let args = parse(&["--store", "postgres://hub:pw@db:5432/hub?sslmode=require"]).unwrap();
        assert_eq!(
            args.store,
            Some(StoreUrl::Postgres(
                "postgres://hub:pw@db:5432/hub?sslmode=require".into()
            ))
        );
        let args = parse(&["--store", "etcd://e1:2379,e2:2379/hubs/a"]).unwrap();
        assert_eq!(
            args.store,
            Some(StoreUrl::Etcd("etcd://e1:2379,e2:2379/hubs/a".into()))
        );
        assert_eq!(args.store_timeout, Duration::from_secs(10));
        let e = parse(&["--store", "postgres://db/hub?sslmode=maybe"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslmode=maybe"), "{e}");
        let e = parse(&["--store", "etcd://e1"]).unwrap_err().to_string();
        assert!(e.contains("HOST:PORT"), "{e}");
        let e = parse(&["--store", "mysql://x"]).unwrap_err().to_string();
        assert!(e.contains("unknown store URL"), "{e}");
        assert!(parse(&["--store", "sqlite://"]).is_err());
        assert!(parse(&["--store-timeout", "0"]).is_err());
        let e = parse(&["--etcd-cafile", "/ca.pem"])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("need --store etcd://"), "{e}");
        let e = parse(&["--store", "etcd://e:2379", "--etcd-certfile", "/c.pem"])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("go together"), "{e}");
    }

    #[test]
    fn tls_flags() {
        let args = parse(&[
            "--tls-san",
            "Hub.Example.test",
            "--tls-san=10.0.0.7",
            "--tls-san",
            "[fd00::1]",
            "--advertise-address",
            "https://hub.example.test:7443/",
        ])
        .unwrap();
        assert_eq!(args.tls_sans, ["hub.example.test", "10.0.0.7", "fd00::1"]);
        assert_eq!(
            args.advertise_address.as_deref(),
            Some("https://hub.example.test:7443")
        );
        args.validate().unwrap();
        let options = args.open_options();
        assert_eq!(options.tls_sans.len(), 3);
        assert!(options.tls_files.is_none());
        let args = parse(&[
            "--tls-cert-file",
            "c.pem",
            "--tls-private-key-file",
            "k.pem",
        ])
        .unwrap();
        args.validate().unwrap();
        assert_eq!(
            args.open_options().tls_files,
            Some(("c.pem".into(), "k.pem".into()))
        );
        for url in ["https://[::1]:6443", "https://127.0.0.1", "https://h"] {
            assert!(parse(&["--advertise-address", url]).is_ok(), "{url}");
        }
    }

    #[test]
    fn bad_tls_flags_are_refused_in_one_line() {
        let invalid = |args: &[&str]| {
            let e = parse(args).unwrap().validate().unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        assert_eq!(
            invalid(&["--tls-cert-file", "c.pem"]),
            "--tls-cert-file needs --tls-private-key-file"
        );
        assert_eq!(
            invalid(&["--tls-private-key-file", "k.pem"]),
            "--tls-private-key-file needs --tls-cert-file"
        );
        let e = invalid(&[
            "--tls-cert-file=c",
            "--tls-private-key-file=k",
            "--tls-san=a.example",
        ]);
        assert!(e.contains("put the names in it"), "{e}");
        let e = parse(&["--tls-san", "not a name"]).unwrap_err().to_string();
        assert!(e.contains("neither a DNS name nor an IP address"), "{e}");
        for (url, why) in [
            ("http://h:1", "must start with https://"),
            ("https://h:1/api", "must not have a path"),
            ("https://h:port", "not a number"),
            ("https://:6443", "no host"),
            ("https://::1:6443", "in brackets"),
            ("https://[::1:6443", "unclosed"),
            ("https://a b", "neither a DNS name"),
        ] {
            let e = parse(&["--advertise-address", url])
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn audit_flags() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.audit_log_path, None);
        assert_eq!(args.audit_policy_file, None);
        assert_eq!(
            args.audit_policy().unwrap(),
            None,
            "no log without the flag"
        );
        let args = parse(&[
            "--audit-log-path",
            "/var/log/hub/audit.log",
            "--audit-log-maxsize=5",
            "--audit-log-maxbackups",
            "3",
        ])
        .unwrap();
        args.validate().unwrap();
        assert_eq!(args.audit_policy().unwrap(), Some(Policy::metadata()));
        let config = args.audit_log_config(args.audit_log_path.as_deref().unwrap());
        assert_eq!(config.path, PathBuf::from("/var/log/hub/audit.log"));
        assert_eq!((config.max_size, config.max_backups), (5 << 20, 3));
        let defaults = parse(&["--audit-log-path=-"]).unwrap();
        let config = defaults.audit_log_config(std::path::Path::new("-"));
        assert_eq!((config.max_size, config.max_backups), (100 << 20, 10));
        for bad in [
            &["--audit-log-maxsize=-1"][..],
            &["--audit-log-maxbackups=x"][..],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_audit_flags_and_policies_are_refused_in_one_line() {
        let e = parse(&["--audit-policy-file", "p.yaml"])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--audit-policy-file needs --audit-log-path");
        let e = parse(&["--audit-log-path=a", "--audit-log-maxsize=99999999999999"])
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("too large"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        let policy_flag = policy.to_str().unwrap();
        let refused = |text: Option<&str>| {
            match text {
                Some(text) => std::fs::write(&policy, text).unwrap(),
                None => {
                    let _ = std::fs::remove_file(&policy);
                }
            }
            let args = parse(&["--audit-log-path=a", "--audit-policy-file", policy_flag]).unwrap();
            args.validate().unwrap();
            let e = format!("{:#}", args.audit_policy().unwrap_err());
            assert!(!e.contains('\n'), "{e}");
            e
        };
        let e = refused(Some(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Most\n",
        ));
        assert_eq!(
            e,
            format!(
                "invalid audit policy {}: rules[0]: unknown level \"Most\": expected None, \
                 Metadata, Request or RequestResponse",
                policy.display()
            )
        );
        let e = refused(Some(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  userz: [a]\n",
        ));
        assert!(e.contains("unknown field"), "{e}");
        let e = refused(None);
        assert!(e.starts_with("cannot read the audit policy"), "{e}");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Request}]\n",
        )
        .unwrap();
        let args = parse(&["--audit-log-path=a", "--audit-policy-file", policy_flag]).unwrap();
        let read = args.audit_policy().unwrap().unwrap();
        assert_ne!(read, Policy::metadata());
    }

    #[test]
    fn identity_flags() {
        let args = parse(&[]).unwrap();
        let identities = args.identities("https://hub.example:6443").unwrap();
        assert_eq!(identities.issuer, "https://hub.example:6443");
        assert_eq!(identities.max_token_expiration, None);
        assert!(identities.oidc.is_none());
        let args = parse(&[
            "--service-account-issuer=https://issuer.example",
            "--service-account-max-token-expiration=48h",
            "--oidc-issuer-url=https://accounts.example/",
            "--oidc-client-id=flotilla",
            "--oidc-groups-claim=groups",
            "--oidc-username-prefix=-",
            "--oidc-groups-prefix=oidc:",
            "--oidc-signing-algs=RS256,ES256",
        ])
        .unwrap();
        args.validate().unwrap();
        let identities = args.identities("https://ignored").unwrap();
        assert_eq!(identities.issuer, "https://issuer.example");
        assert_eq!(identities.max_token_expiration, Some(48 * 3600));
        let oidc = identities.oidc.unwrap();
        assert_eq!(oidc.issuer_url, "https://accounts.example");
        assert_eq!(oidc.client_id, "flotilla");
        assert_eq!(oidc.username_claim, "sub");
        assert_eq!(oidc.resolved_username_prefix(), "");
        assert_eq!(oidc.groups_claim.as_deref(), Some("groups"));
        assert_eq!(oidc.groups_prefix, "oidc:");
        assert_eq!(
            oidc.algorithms,
            [
                jsonwebtoken::Algorithm::RS256,
                jsonwebtoken::Algorithm::ES256
            ]
        );
    }

    #[test]
    fn bad_identity_flags_are_refused_in_one_line() {
        let invalid = |args: &[&str]| {
            let e = parse(args).unwrap().validate().unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        assert_eq!(
            invalid(&["--oidc-issuer-url=https://a.example"]),
            "--oidc-issuer-url needs --oidc-client-id"
        );
        assert_eq!(
            invalid(&["--oidc-client-id=x"]),
            "--oidc-client-id needs --oidc-issuer-url"
        );
        assert!(
            invalid(&["--oidc-issuer-url=http://a.example", "--oidc-client-id=x"])
                .contains("must be an https:// URL")
        );
        assert_eq!(
            invalid(&["--oidc-groups-claim=groups"]),
            "--oidc-groups-claim needs --oidc-issuer-url"
        );
        assert_eq!(
            invalid(&["--oidc-ca-file=ca.pem"]),
            "--oidc-ca-file needs --oidc-issuer-url"
        );
        assert!(invalid(&["--oidc-signing-algs=HS256"]).contains("not one of"));
        assert!(
            invalid(&["--service-account-issuer=http://x"]).contains("must be an https:// URL")
        );
        assert_eq!(
            invalid(&["--service-account-max-token-expiration=30m"]),
            "--service-account-max-token-expiration must be at least 1h"
        );
        // An OIDC CA file that cannot be read: one line, naming it.
        let args = parse(&[
            "--oidc-issuer-url=https://a.example",
            "--oidc-client-id=x",
            "--oidc-ca-file=/nonexistent/ca.pem",
        ])
        .unwrap();
        args.validate().unwrap();
        let e = format!("{:#}", args.identities("https://h").unwrap_err());
        assert!(
            e.starts_with("cannot read --oidc-ca-file /nonexistent/ca.pem"),
            "{e}"
        );
    }

    #[test]
    fn store_flags() {
        let args = parse(&[]).unwrap();
        assert!(!args.init && !args.skip_store_check);
        let options = parse(&["--init", "--skip-store-check"])
            .unwrap()
            .open_options();
        assert!(options.init && options.skip_store_check);
    }

    #[test]
    fn the_service_range_is_an_ipv4_network_of_kube_apiservers_sizes() {
        let default = parse(&[]).unwrap().service_cidr;
        assert_eq!(default.to_string(), "10.96.0.0/12");
        let set = parse(&["--service-cidr=172.20.0.0/16"])
            .unwrap()
            .service_cidr;
        assert_eq!(set.to_string(), "172.20.0.0/16");
        for (bad, why) in [
            ("10.96.0.0", "is not an IPv4 CIDR"),
            ("fd00::/108", "is not an IPv4 CIDR"),
            ("10.0.0.0/8", "the prefix must be between /12 and /29"),
            ("10.96.0.1/12", "did you mean 10.96.0.0/12?"),
        ] {
            let e = parse(&["--service-cidr", bad]).unwrap_err().to_string();
            assert!(e.contains("invalid value") && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_node_port_range_is_kube_apiservers() {
        let default = parse(&[]).unwrap().service_node_port_range;
        assert_eq!(default.to_string(), "30000-32767");
        let set = parse(&["--service-node-port-range=31000-31099"])
            .unwrap()
            .service_node_port_range;
        assert_eq!(set.to_string(), "31000-31099");
        for bad in ["31000-x", "30000-", "0-10", "32767-30000", "30000-70000"] {
            let e = parse(&["--service-node-port-range", bad])
                .unwrap_err()
                .to_string();
            assert!(e.contains("invalid value"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bad_listen_address_is_refused() {
        let e = parse(&["--listen", "localhost"]).unwrap_err().to_string();
        assert!(e.contains("invalid value 'localhost'"), "{e}");
        assert!(parse(&["--listen", "0.0.0.0:7443", "--log-format", "json"]).is_ok());
        assert!(parse(&["--log-format", "xml"]).is_err());
    }
}
