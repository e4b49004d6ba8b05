//! What `flotilla hub` and `flotilla sim` share: logging, durations on the command line,
//! and an API server over its store (SQLite, PostgreSQL or etcd), served over HTTPS until
//! SIGTERM or SIGINT.
//!
//! ```text
//!  ApiServer::open(role, DIR, ADDR, store URL, options)  data dir (0700, files the
//!        │        process creates 0600: umask 077); the store (SQLite: its lock
//!        │        first, then its pages checked; an empty store where a server was
//!        │        refused without --init); a shared store's hub identity (CA, token,
//!        │        signing key: crate::identity) into DIR; then the TLS identity
//!        │        (flotilla-pki): issued
//!        │        for ADDR + --tls-san + --advertise-address, or the user's own files;
//!        │        Api + its initial namespaces
//!        ├─ identities(…) (the hub): ServiceAccount tokens, client certificates, OIDC
//!        ├─ the role's own set-up through `api` (the hub's CRDs, the sim's clusters)
//!        ├─ compact_every(interval), expire_events_after(ttl): the server's own loops
//!        ├─ elect_with(Election) (the hub): loops run under Leases; run_elected(lease, …)
//!        └─ serve(): bind ADDR, DIR/admin.kubeconfig, the authenticators (admin token
//!           alone, or with identities: x509, admin, ServiceAccount, OIDC) and their
//!           controllers (token Secrets, CSR signer); the own loops under
//!           APISERVER_LEASE (at once without an election); HTTPS until a signal, which
//!           cancels the elected loops and releases their Leases
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::admission::Admission;
use flotilla_apiserver::admission::dynamic::Dynamic;
use flotilla_apiserver::admission::webhook::model::ServiceAddresses;
use flotilla_apiserver::auth::bootstrap::BootstrapTokens;
use flotilla_apiserver::auth::oidc::{Oidc, OidcConfig};
use flotilla_apiserver::auth::rbac::Rbac;
use flotilla_apiserver::auth::serviceaccount::{Issuer, Tokens, controller::TokensController};
use flotilla_apiserver::auth::signer::Signer;
use flotilla_apiserver::auth::x509::ClientCertificates;
use flotilla_apiserver::auth::{AdminToken, Audit, Authenticator, Chain, Stages};
use flotilla_apiserver::http::server;
use flotilla_fleet::runtime::leader::{Elector, LeaderConfig, LeaderMetrics, Work};
use flotilla_pki::HubIdentity;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use tracing::info;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Plain,
    /// One JSON object per line.
    Json,
}

/// A duration written as a number and a unit (`ms`, `s`, `m`, `h`), or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| {
        format!("invalid duration {text:?}: expected a number and a unit, e.g. 30s or 5m")
    })?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: the unit must be ms, s, m or h"
            ));
        }
    };
    number
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {text:?}: too long"))
}

/// Sets up `tracing` output (RUST_LOG filters; info by default).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: a log file or a journal gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs `serve` on a multi-threaded runtime.
pub fn block_on<F: Future<Output = anyhow::Result<()>>>(serve: F) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve)
}

/// Where a server keeps its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `sqlite://PATH`: the embedded store in one file.
    Sqlite(PathBuf),
    /// `postgres://…` (or `postgresql://`): a PostgreSQL database.
    Postgres(String),
    /// `etcd://HOST:PORT,…[/PREFIX]`: a prefix of an etcd cluster.
    Etcd(String),
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        match url.split_once("://") {
            Some(("sqlite", path)) if !path.is_empty() => Ok(StoreUrl::Sqlite(PathBuf::from(path))),
            Some(("sqlite", _)) => {
                Err("sqlite:// needs a file path, e.g. sqlite://flotilla-data/hub.db".into())
            }
            Some(("postgres" | "postgresql", _)) => {
                flotilla_store_postgres::url::parse(url).map_err(|e| e.to_string())?;
                Ok(StoreUrl::Postgres(url.to_owned()))
            }
            Some(("etcd", _)) => {
                flotilla_store_etcd::Config::from_url(url).map_err(|e| e.to_string())?;
                Ok(StoreUrl::Etcd(url.to_owned()))
            }
            _ => Err(format!(
                "unknown store URL {:?}; expected sqlite://PATH, postgres://… or etcd://HOST:PORT",
                flotilla_store_postgres::url::redact(url)
            )),
        }
    }
}

impl std::fmt::Display for StoreUrl {
    /// The URL without a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreUrl::Postgres(url) => f.write_str(&flotilla_store_postgres::url::redact(url)),
            StoreUrl::Etcd(url) => f.write_str(url),
        }
    }
}

/// A Kubernetes-compatible API server over a store, set up but not yet serving.
pub struct ApiServer {
    /// The API of the root logical cluster.
    pub api: Api,
    /// The store under it.
    pub store: Arc<dyn Store>,
    /// Where clients reach it: `https://HOST:PORT`.
    pub url: String,
    /// What `/metrics` shows; more can be registered (`Arc::get_mut`) until it is shared.
    pub metrics: Arc<flotilla_apiserver::http::metrics::Metrics>,
    role: &'static str,
    identity: HubIdentity,
    listen: SocketAddr,
    data_dir: PathBuf,
    store_url: StoreUrl,
    /// Who besides the admin may use the server (the hub's [`ApiServer::identities`]).
    identities: Option<Authentication>,
    /// The server's own background loops that must not run twice at once over one store
    /// (compaction, Event expiry, the token Secrets controller, the CSR signer).
    loops: Vec<Work>,
    /// How loops are elected among replicas (the hub's); without it they run at once.
    election: Option<Election>,
    /// Turns true on SIGTERM or SIGINT: electors stop their work and release their Leases.
    stop: tokio::sync::watch::Sender<bool>,
    /// The electors started, awaited (briefly) at shutdown for their release.
    electors: Vec<tokio::task::JoinHandle<()>>,
}

/// The Lease of the API server's own loops (compaction, Event expiry, token Secrets, CSR
/// signing), in the hub's system namespace.
pub const APISERVER_LEASE: &str = "flotilla-apiserver-controllers";

/// How a server's replicas elect who runs each group of loops: one
/// `coordination.k8s.io/v1` Lease per group in `namespace`, written through `client`.
pub struct Election {
    /// The in-process client the electors write their Leases through.
    pub client: kube::Client,
    /// Where the Leases are.
    pub namespace: String,
    /// This replica's holder identity (unique per process).
    pub identity: String,
    /// Lease duration, renew deadline, retry period.
    pub config: LeaderConfig,
    /// `flotilla_leader{lease}` and its transitions on `/metrics`.
    pub metrics: LeaderMetrics,
}

/// Who may use `flotilla hub` besides its admin: ServiceAccount tokens of `issuer`,
/// client certificates of the hub's CA, and ID tokens of an OIDC issuer if configured.
#[derive(Clone, Debug)]
pub struct Identities {
    /// `--service-account-issuer`: the `iss` of the tokens the hub issues.
    pub issuer: String,
    /// `--service-account-max-token-expiration` in seconds, if set.
    pub max_token_expiration: Option<i64>,
    /// `--oidc-*`.
    pub oidc: Option<OidcConfig>,
}

/// The authenticators [`Identities`] become, and the issuer their controllers sign with.
struct Authentication {
    issuer: Arc<Issuer>,
    oidc: Option<Arc<Oidc>>,
}

/// How [`ApiServer::open`] treats the store and the serving certificate.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Accept a missing or empty store file in a data directory where a server existed
    /// before (its CA and token are there): start over with an empty store.
    pub init: bool,
    /// Skip SQLite's `quick_check` of the store's pages at open.
    pub skip_store_check: bool,
    /// More names and addresses for the serving certificate the CA issues.
    pub tls_sans: Vec<String>,
    /// A serving certificate (chain) and key of the user's own, instead of one issued.
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// The URL the admin kubeconfig points at (`https://HOST[:PORT]`) instead of the
    /// listening address; its host is added to the issued certificate's names.
    pub advertise: Option<String>,
    /// How long connecting to a store's server may take (PostgreSQL, etcd); zero: 10 s.
    pub store_timeout: Duration,
    /// The TLS files of an etcd store.
    pub etcd_tls: flotilla_store_etcd::TlsFiles,
}

/// Whether a store file holds nothing: missing or 0 bytes, and no write-ahead log with
/// anything in it either.
fn store_is_empty(path: &Path) -> bool {
    let empty = |p: &Path| std::fs::metadata(p).map_or(true, |m| m.len() == 0);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    empty(path) && empty(Path::new(&wal))
}

impl ApiServer {
    /// Creates `data_dir`, opens the store file (taking its lock before any other file is
    /// touched, so that a second server on the same directory changes nothing), loads (or
    /// creates) the TLS identity there and creates the initial namespaces. `role` (`hub`,
    /// `sim`) names the server in messages.
    ///
    /// A missing or empty store where the directory shows a server existed before is
    /// refused unless `options.init`; a store with damaged pages is refused unless
    /// `options.skip_store_check`.
    pub async fn open(
        role: &'static str,
        data_dir: &Path,
        listen: SocketAddr,
        store_url: &StoreUrl,
        options: &OpenOptions,
    ) -> anyhow::Result<ApiServer> {
        private_data_dir(data_dir)?;
        let store = open_store(role, data_dir, store_url, options).await?;
        let host = if listen.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            listen.ip().to_string()
        };
        let sans: Vec<String>;
        let serving = match &options.tls_files {
            Some((cert, key)) => flotilla_pki::ServingCert::Files { cert, key },
            None => {
                let hosts = std::iter::once(host.clone())
                    .chain(options.tls_sans.iter().cloned())
                    .chain(options.advertise.as_deref().and_then(url_host));
                sans = hosts.collect();
                flotilla_pki::ServingCert::Issued(&sans)
            }
        };
        if !matches!(store_url, StoreUrl::Sqlite(_)) {
            // Replicas may share this store: one identity for all, kept in it.
            crate::identity::share_through_store(&*store, &store_url.to_string(), data_dir).await?;
        }
        let identity = flotilla_pki::load_or_create_with(data_dir, serving)
            .with_context(|| format!("cannot set up the {role}'s certificates"))?;
        let url = match (&options.advertise, listen.ip()) {
            (Some(url), _) => url.clone(),
            (None, std::net::IpAddr::V6(_)) => format!("https://[{host}]:{}", listen.port()),
            (None, std::net::IpAddr::V4(_)) => format!("https://{host}:{}", listen.port()),
        };
        let api = Api::new(
            store.clone(),
            Arc::new(Registry::builtin()),
            format!("{host}:{}", listen.port()),
        );
        api.bootstrap()
            .await
            .map_err(|e| anyhow::anyhow!("cannot set up the initial namespaces: {e}"))?;
        Ok(ApiServer {
            metrics: Arc::new(flotilla_apiserver::http::metrics::Metrics::new()),
            api,
            store,
            url,
            role,
            identity,
            listen,
            data_dir: data_dir.to_owned(),
            store_url: store_url.clone(),
            identities: None,
            loops: Vec::new(),
            election: None,
            stop: tokio::sync::watch::channel(false).0,
            electors: Vec::new(),
        })
    }

    /// Authenticates ServiceAccount tokens, client certificates of the CA and (when
    /// configured) OIDC ID tokens besides the admin token; issues ServiceAccount tokens
    /// (`serviceaccounts/token`, long-lived token Secrets) and signs approved client
    /// certificate requests. Call before the API is cloned for in-process clients.
    pub fn identities(&mut self, identities: Identities) -> anyhow::Result<()> {
        let issuer = Issuer::new(identities.issuer, &self.identity.service_account_key_pem)
            .context("cannot load the ServiceAccount signing key")?
            .with_max_expiration(identities.max_token_expiration);
        let issuer = Arc::new(issuer);
        let oidc = match identities.oidc {
            Some(config) => Some(Arc::new(
                Oidc::new(config).context("cannot set up OIDC authentication")?,
            )),
            None => None,
        };
        self.api = self.api.clone().with_service_account_issuer(issuer.clone());
        info!(issuer = %issuer.issuer(), oidc = oidc.is_some(), "ServiceAccount tokens, client certificates");
        self.identities = Some(Authentication { issuer, oidc });
        Ok(())
    }

    /// The CA a kubeconfig for this server embeds: none (the system's) for a serving
    /// certificate of the user's own.
    fn kubeconfig_ca(&self) -> &str {
        if self.identity.own_serving_cert {
            ""
        } else {
            &self.identity.ca_cert_pem
        }
    }

    /// Writes a kubeconfig for `server` (this server's URL, or a logical cluster's under
    /// it) with the admin token, unless `path` already holds exactly that.
    pub fn write_kubeconfig(&self, name: &str, server: &str, path: &Path) -> anyhow::Result<()> {
        let kubeconfig = flotilla_pki::Kubeconfig {
            name,
            server,
            ca_pem: self.kubeconfig_ca(),
            token: &self.identity.admin_token,
        };
        if std::fs::read(path).is_ok_and(|current| current == kubeconfig.render().as_bytes()) {
            return Ok(());
        }
        kubeconfig.write(path)?;
        Ok(())
    }

    /// Records every request through `audit` (an audit log), the server's own included;
    /// the other stages are kept.
    pub fn audit_with(&mut self, audit: Arc<dyn Audit>) {
        let stages = Stages {
            audit,
            ..(*self.api.stages()).clone()
        };
        self.api = self.api.clone().with_stages(stages);
    }

    /// Authorizes requests by RBAC, as kube-apiserver with `--authorization-mode=RBAC`:
    /// `system:masters` (the admin token, the server's own requests) may do everything,
    /// anyone else what the roles and bindings of the logical cluster allow; impersonation
    /// headers are honoured. Returns once every role and binding is read and the default
    /// roles (Kubernetes' and `extra`, the hub's own) are created or reconciled: the
    /// server serves no request before.
    pub async fn authorize_with_rbac(
        &mut self,
        extra: Vec<serde_json::Value>,
    ) -> anyhow::Result<()> {
        let rbac = Rbac::start(self.store.clone(), extra).await?;
        self.api = self.api.clone().authorize_with_rbac(rbac);
        self.api
            .bootstrap_rbac()
            .await
            .map_err(|e| anyhow::anyhow!("cannot set up the default RBAC roles: {e}"))?;
        info!("authorization: system:masters, then RBAC");
        Ok(())
    }

    /// Admits writes also through what is configured in the API, as kube-apiserver does:
    /// mutating webhooks, ValidatingAdmissionPolicies and validating webhooks of each
    /// logical cluster. Webhooks given as a `service` are reached at `services`. Returns
    /// once every configuration is read; each policy's type checking is written into its
    /// status from then on.
    pub async fn admit_dynamically(
        &mut self,
        builtin: Admission,
        services: ServiceAddresses,
    ) -> anyhow::Result<()> {
        let dynamic = Dynamic::start(self.store.clone(), services).await?;
        let admission = builtin.with_dynamic(dynamic.clone());
        self.api = self.api.clone().with_admission(admission);
        dynamic.check_types_through(&self.api);
        info!(
            "admission: built-in plugins, then mutating webhooks; ValidatingAdmissionPolicies, validating webhooks"
        );
        Ok(())
    }

    /// Compacts the store every `interval` to the revision of one interval earlier
    /// (never if it is zero); on one replica at a time.
    pub fn compact_every(&mut self, interval: Duration) {
        if !interval.is_zero() {
            let store = self.store.clone();
            self.loops.push(Arc::new(move || {
                Box::pin(flotilla_apiserver::gc::compaction::run(
                    store.clone(),
                    interval,
                ))
            }));
        }
    }

    /// Deletes every Event not written for `ttl`, looking every quarter of it (at most a
    /// minute apart); never if it is zero. On one replica at a time.
    pub fn expire_events_after(&mut self, ttl: Duration) {
        if !ttl.is_zero() {
            let store = self.store.clone();
            self.loops.push(Arc::new(move || {
                Box::pin(flotilla_apiserver::gc::events::run(store.clone(), ttl))
            }));
        }
    }

    /// Elects the loops given to [`ApiServer::run_elected`] (and the server's own, at
    /// [`ApiServer::serve`]) by Lease among the replicas over the same store.
    pub fn elect_with(&mut self, election: Election) {
        self.election = Some(election);
    }

    /// Runs `loops` while this replica holds Lease `lease` (at once without
    /// [`ApiServer::elect_with`]): cancelled when it is lost, started again when it is
    /// won back, the Lease released on SIGTERM or SIGINT.
    pub fn run_elected(&mut self, lease: &str, loops: Vec<Work>) {
        let elector = start_elected(self.election.as_ref(), &self.stop, lease, loops);
        self.electors.extend(elector);
    }

    /// Listens, writes `DIR/admin.kubeconfig` and serves HTTPS until SIGTERM or SIGINT.
    pub async fn serve(mut self) -> anyhow::Result<()> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("cannot listen on {}", self.listen))?;
        let kubeconfig = self.data_dir.join("admin.kubeconfig");
        flotilla_pki::Kubeconfig {
            name: "flotilla",
            server: &self.url,
            ca_pem: self.kubeconfig_ca(),
            token: &self.identity.admin_token,
        }
        .write(&kubeconfig)?;
        let tls = Arc::new(self.identity.server_config()?);
        let identity = Arc::new(self.identity);
        let admin = identity.clone();
        let admin: Arc<dyn Authenticator> =
            Arc::new(AdminToken::new(move |token| admin.is_admin_token(token)));
        let auth: Arc<dyn Authenticator> = match self.identities.take() {
            None => admin,
            Some(Authentication { issuer, oidc }) => {
                // kube-apiserver's order: client certificates, then bearer tokens.
                let mut chain: Vec<Arc<dyn Authenticator>> = vec![
                    Arc::new(
                        ClientCertificates::new(identity.client_ca()?)
                            .with_cluster_check(self.store.clone()),
                    ),
                    admin,
                    Arc::new(Tokens::new(issuer.clone(), self.store.clone())),
                    Arc::new(BootstrapTokens::new(self.store.clone())),
                ];
                if let Some(oidc) = oidc {
                    chain.push(oidc);
                }
                let ca = match identity.own_serving_cert {
                    true => String::new(),
                    false => identity.ca_cert_pem.clone(),
                };
                let (api, store) = (self.api.clone(), self.store.clone());
                self.loops.push(Arc::new(move || {
                    let controller = TokensController::new(
                        api.clone(),
                        store.clone(),
                        issuer.clone(),
                        ca.clone(),
                    );
                    Box::pin(controller.run())
                }));
                let (api, store, signing) =
                    (self.api.clone(), self.store.clone(), identity.clone());
                self.loops.push(Arc::new(move || {
                    Box::pin(Signer::new(api.clone(), store.clone(), signing.clone()).run())
                }));
                Arc::new(Chain::new(chain))
            }
        };
        let loops = std::mem::take(&mut self.loops);
        let elector = start_elected(self.election.as_ref(), &self.stop, APISERVER_LEASE, loops);
        self.electors.extend(elector);
        let ready = Arc::new(AtomicBool::new(false));
        let app = server::router_with(self.api, auth, ready.clone(), self.metrics);
        ready.store(true, Ordering::Release);
        let role = self.role;
        info!(url = %self.url, kubeconfig = %kubeconfig.display(), store = %self.store_url, "{role} serving");
        // On the signal the electors release their Leases at once, while the server
        // drains its connections.
        let stop = self.stop;
        let signal = async move {
            shutdown_signal().await;
            let _ = stop.send(true);
        };
        server::serve_tls(listener, tls, app, signal).await;
        let released = futures_util::future::join_all(self.electors);
        if tokio::time::timeout(Duration::from_secs(5), released)
            .await
            .is_err()
        {
            tracing::warn!("leases not released within 5s; they expire by themselves");
        }
        info!("{role} stopped");
        Ok(())
    }
}

/// Starts the elector of Lease `lease` running `loops` (stopped by `stop`), or without
/// `election` the loops themselves.
fn start_elected(
    election: Option<&Election>,
    stop: &tokio::sync::watch::Sender<bool>,
    lease: &str,
    loops: Vec<Work>,
) -> Option<tokio::task::JoinHandle<()>> {
    let Some(election) = election else {
        for work in loops {
            tokio::spawn(work());
        }
        return None;
    };
    let elector = Elector::new(
        election.client.clone(),
        &election.namespace,
        lease,
        &election.identity,
        election.config,
        election.metrics.clone(),
    );
    let work: Work = Arc::new(move || {
        let running: Vec<_> = loops.iter().map(|work| work()).collect();
        Box::pin(async move {
            futures_util::future::join_all(running).await;
        })
    });
    Some(tokio::spawn(elector.run(work, stop.subscribe())))
}

/// Creates `dir` (and its parents) readable by this user alone, and makes every file the
/// process creates from now on so too (umask 077): the store and its write-ahead log,
/// shared memory and lock files, kubeconfigs, keys. A directory that exists with more
/// open permissions is closed to others; store files an earlier version left readable
/// are too.
fn private_data_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let mode = std::fs::metadata(dir)
        .with_context(|| format!("cannot read the data directory {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        info!(dir = %dir.display(), "closing the data directory to other users (mode 0700)");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot change the mode of {}", dir.display()))?;
    }
    Ok(())
}

/// Closes the store's files (the database, its write-ahead log, shared memory and lock)
/// to other users where an earlier run left them open.
fn private_store_files(store: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut name = store.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.permissions().mode() & 0o077 != 0
        {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// Opens the server's store: SQLite (its lock first; an empty store where a server
/// existed before is refused without `--init`), PostgreSQL or etcd (within the store
/// timeout: an unreachable server is one line naming it).
async fn open_store(
    role: &str,
    data_dir: &Path,
    url: &StoreUrl,
    options: &OpenOptions,
) -> anyhow::Result<Arc<dyn Store>> {
    let started = std::time::Instant::now();
    let timeout = match options.store_timeout {
        Duration::ZERO => Duration::from_secs(10),
        timeout => timeout,
    };
    let store: Arc<dyn Store> = match url {
        StoreUrl::Sqlite(path) => {
            let existed = [flotilla_pki::CA_CERT_FILE, flotilla_pki::ADMIN_TOKEN_FILE]
                .iter()
                .all(|file| data_dir.join(file).exists());
            if existed && !options.init && store_is_empty(path) {
                let state = if path.exists() { "empty" } else { "missing" };
                anyhow::bail!(
                    "the store {} is {state}, but {} held a {role} before (its CA and token are \
                     there): refusing to start it empty; restore the store, or pass --init to \
                     start over with an empty one",
                    path.display(),
                    data_dir.display()
                );
            }
            let config = flotilla_store_sqlite::Config {
                check_pages: !options.skip_store_check,
                ..flotilla_store_sqlite::Config::new(path)
            };
            let store = match SqliteStore::open_with(config).await {
                Ok(store) => Arc::new(store),
                Err(e) => return Err(store_open_error(role, data_dir, e)),
            };
            // Under its lock: a second server on the directory touches nothing.
            private_store_files(path);
            store
        }
        StoreUrl::Postgres(text) => {
            let config = flotilla_store_postgres::Config {
                connect_timeout: timeout,
                ..flotilla_store_postgres::Config::new(text.clone())
            };
            let open = flotilla_store_postgres::PostgresStore::open_with(config);
            Arc::new(within(timeout, url, open).await?)
        }
        StoreUrl::Etcd(text) => {
            let config = flotilla_store_etcd::Config {
                timeout,
                tls: options.etcd_tls.clone(),
                ..flotilla_store_etcd::Config::from_url(text)?
            };
            let open = flotilla_store_etcd::EtcdStore::open_with(config);
            Arc::new(within(timeout, url, open).await?)
        }
    };
    info!(
        store = %url,
        seconds = started.elapsed().as_secs_f64(),
        checked = !options.skip_store_check,
        "store open"
    );
    Ok(store)
}

/// A store's open, given up a little after `timeout` whatever the backend does.
async fn within<S>(
    timeout: Duration,
    url: &StoreUrl,
    open: impl Future<Output = flotilla_store::Result<S>>,
) -> anyhow::Result<S> {
    match tokio::time::timeout(timeout + Duration::from_secs(1), open).await {
        Ok(Ok(store)) => Ok(store),
        Ok(Err(e)) => Err(anyhow::Error::from(e)),
        Err(_) => anyhow::bail!("cannot open store {url}: no answer within {timeout:?}"),
    }
}

/// The store's open error as one line, with what to do about it.
fn store_open_error(role: &str, data_dir: &Path, e: flotilla_store::Error) -> anyhow::Error {
    use flotilla_store::OpenFailure;
    let hint = match &e {
        flotilla_store::Error::Open {
            reason: OpenFailure::Locked,
            ..
        } => format!(
            "is another flotilla {role} serving {}? Nothing was changed",
            data_dir.display()
        ),
        flotilla_store::Error::Open {
            reason: OpenFailure::Corrupt,
            ..
        } if role == "hub" => "restore it from a backup (--skip-store-check serves it \
             unchecked, failing where the damage is)"
            .to_owned(),
        _ => return anyhow::Error::from(e),
    };
    anyhow::anyhow!("{:#}; {hint}", anyhow::Error::from(e))
}

/// The host of an `https://HOST[:PORT]` URL (an IPv6 address without brackets).
pub fn url_host(url: &str) -> Option<String> {
    let authority = url.strip_prefix("https://")?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM"),
        _ = int.recv() => info!("SIGINT"),
    }
}
