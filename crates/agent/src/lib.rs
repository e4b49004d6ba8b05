//! The pull agent: a member's side of pull mode, and the hub's side of its registration.
//! The hub holds no member credentials; the agent holds a certificate that lets it read
//! only its own cluster's Works.
//!
//! ```text
//!  member side (flotilla agent)                      hub side (flotilla hub)
//!  ─────────────────────────────                     ───────────────────────
//!  discovery: the hub's CA from the TLS handshake,
//!     pinned by --ca-hash sha256:HEX
//!  register (bootstrap token, user system:bootstrap:ID):
//!     key (0600 in the data dir) ─► Cluster NAME (spec.access.pull) ─────► registrar:
//!     CSR CN system:flotilla:cluster:NAME, O system:flotilla:clusters        auto-approve
//!     ◄─ certificate once approved (flotilla approve, kubectl certificate    (the token's
//!        approve, or at once for an --auto-approve token)                     group, its own
//!                                                                            Cluster only);
//!                                                                            on approval: the
//!                                                                            serial recorded,
//!                                                                            the agent's RBAC
//!  pull (its certificate only):                                              (owned by the
//!     watch Works in flotilla-cluster-NAME ─► delivery::Member::sync         Cluster)
//!        ─► works/status                                                  cluster health:
//!     heartbeat Lease every period; facts (version, allocatable) ─►       Ready from the
//!        clusters/status                                                  Lease's renewals
//!     401 (revoked, unjoined) ─► stop: nothing more applied
//! ```
//!
//! The crate depends on delivery, api and pki, never on the API server: the hub's side
//! uses a `kube::Client` (in-process in the hub) as any controller does.

pub mod discovery;
pub mod member_rbac;
pub mod pull;
pub mod register;
pub mod registrar;
pub mod renew;
pub mod token;

use std::path::Path;

/// Errors of the agent and of the hub's registration side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input (a flag, a token, a URL): said in one line.
    #[error("{0}")]
    Input(String),
    /// The hub cannot be reached or answered unexpectedly.
    #[error("hub: {0}")]
    Hub(String),
    /// No certificate the hub presents matches the pinned CA hash.
    #[error("the hub's CA does not match --ca-hash {pinned} (the hub presents {})", presented.join(", "))]
    CaHash {
        /// The pin given.
        pinned: String,
        /// The hashes of the certificates the hub presented.
        presented: Vec<String>,
    },
    /// The hub refused the bootstrap token (401): expired, deleted or unknown.
    #[error("the hub refuses the bootstrap token (401): it is expired, deleted or unknown")]
    TokenRefused,
    /// The hub refused the agent's certificate (401): revoked, or its cluster is gone.
    #[error(
        "the hub refuses this agent's certificate (401): it was revoked or the cluster was removed"
    )]
    Revoked,
    /// The cluster's certificate request was denied or failed.
    #[error("the certificate request {name} was {outcome}: {message}")]
    NotApproved {
        /// The CSR.
        name: String,
        /// `denied` or `failed`.
        outcome: String,
        /// Its condition's message.
        message: String,
    },
    /// The member cluster cannot be used.
    #[error("member: {0}")]
    Member(String),
    /// A file of the data directory.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A request to the hub failed.
    #[error("hub: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    fn file(path: &Path, source: std::io::Error) -> Self {
        Error::File {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Whether `e` is the API server's 401.
pub fn is_unauthorized(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401)
}

/// How a client authenticates to the hub.
pub enum HubAuth<'a> {
    /// A bearer token (the bootstrap token).
    Token(&'a str),
    /// A client certificate and its key (PEM).
    Certificate {
        /// The certificate.
        cert_pem: &'a str,
        /// Its key.
        key_pem: &'a str,
    },
}

/// A client of the hub at `url`, verifying it against `ca_pem` alone.
pub async fn hub_client(url: &str, ca_pem: &str, auth: HubAuth<'_>) -> Result<kube::Client, Error> {
    use base64::Engine as _;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let user = match auth {
        HubAuth::Token(token) => serde_json::json!({"token": token}),
        HubAuth::Certificate { cert_pem, key_pem } => serde_json::json!({
            "client-certificate-data": b64(cert_pem),
            "client-key-data": b64(key_pem),
        }),
    };
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "hub", "cluster": {"server": url,
            "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": "agent", "user": user}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "agent"}}],
        "current-context": "hub",
    });
    let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(kubeconfig)
        .map_err(|e| Error::Input(format!("a kubeconfig for the hub: {e}")))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| Error::Input(format!("a client of the hub at {url}: {e}")))?;
    hub_client_for(&config)
}

/// The client [`hub_client`] makes, for a configuration of the hub the caller has (the
/// bench's stand-ins for agents).
pub fn hub_client_for(config: &kube::Config) -> Result<kube::Client, Error> {
    client(config, Some(HUB_READ_BUFFER))
}

/// The most a connection of an agent's hub client buffers of what it reads: hyper's
/// smallest, 8 KiB. Its default lets the buffer grow to 400 KiB as reads fill it, and a
/// watch's connection kept the 16 KiB one burst had grown it to (a thousand agents in a
/// simulator: 8 MiB). The hub's answers have small headers; bodies stream through in
/// pieces of this size.
const HUB_READ_BUFFER: usize = 8 * 1024;

/// TLS sessions an agent's hub client keeps for resumption: it talks to one server.
/// (rustls' default keeps 256, allocated up front: ~25 KiB per client.)
const RESUMED_SESSIONS: usize = 2;

/// Idle connections an agent's client keeps for a server that speaks only HTTP/1.1: its
/// watch holds one busy, the heartbeat, status writes and reports take turns on another.
/// More at once (a burst of status writes) are opened and closed after use. (Over HTTP/2,
/// as the hub speaks it, the watch and every request share one connection.)
const IDLE_CONNECTIONS: usize = 1;

/// How long an HTTP/2 connection may be silent before it is pinged (client-go's
/// `ReadIdleTimeout`).
const PING_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a ping may go unanswered before its connection is closed (client-go's
/// `PingTimeout`).
const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a connection to the hub may take to open.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A client for `config` (the hub's, or the member's for `flotilla agent`) that holds
/// what one agent needs and nothing more, instead of
/// `kube::Client::try_from` (a session cache for 256 servers, unbounded idle
/// connections, a tracing layer on every request): at 1,000 agents in one simulator
/// these add up. The same TLS checks (the CA of `config` alone, its client identity)
/// and authentication.
///
/// ```text
///  kube::Client ─► base URI ─► auth (a bearer token, exec, …) ─► hyper pool
///     (HTTP/2 if the server offers it: one connection for the watch and every request,
///     pinged after PING_AFTER of silence; else HTTP/1.1, ≤ IDLE_CONNECTIONS idle)
///     ─► rustls (the pinned CA, the client certificate, RESUMED_SESSIONS sessions)
///     ─► TCP (no Nagle delay, CONNECT_TIMEOUT)
/// ```
pub fn lean_client(config: &kube::Config) -> Result<kube::Client, Error> {
    client(config, None)
}

/// [`lean_client`], its connections' read buffers at most `read_buffer` bytes (hyper's
/// default, 400 KiB, if none).
fn client(config: &kube::Config, read_buffer: Option<usize>) -> Result<kube::Client, Error> {
    use kube::client::ConfigExt as _;
    let mut tls = config.rustls_client_config()?;
    tls.resumption = rustls::client::Resumption::in_memory_sessions(RESUMED_SESSIONS);
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    // A request's head and body leave at once, not the body after a delayed ack.
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let mut builder =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    builder
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .timer(hyper_util::rt::TokioTimer::new())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        // A connection whose server has gone silent is found out (and its watch
        // restarted) within a minute, as client-go does.
        .http2_keep_alive_interval(PING_AFTER)
        .http2_keep_alive_timeout(PING_TIMEOUT);
    if let Some(most) = read_buffer {
        builder.http1_max_buf_size(most);
    }
    let pool: hyper_util::client::legacy::Client<_, kube::client::Body> = builder.build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(tower::BoxError::from)
        .service(pool);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}
