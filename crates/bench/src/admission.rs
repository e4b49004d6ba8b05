//! The admission scenario: what admission adds to a create, side by side in one run: no
//! policies, 20 ValidatingAdmissionPolicies that do not match, 5 that do, one matching
//! validating webhook on loopback; and built-in kinds' validation and defaulting, on and
//! off.
//!
//! ```text
//!  client tasks ── HTTPS keep-alive ──► one hub (in process, SQLite, dynamic admission)
//!     /clusters/none/…      nothing configured
//!     /clusters/vap20/…     20 policies + bindings on Deployments (a ConfigMap create
//!                           matches none of them)
//!     /clusters/vap5/…      5 policies + bindings on ConfigMap creates (CEL evaluated)
//!     /clusters/webhook/…   1 validating webhook on ConfigMap creates ── HTTPS (its pool,
//!                           connections reused) ──► a webhook server on loopback
//!  creates of 1 KiB ConfigMaps at 16 clients
//!               ──► two more hubs (in process, each on its own SQLite store, the same
//!                   chain but for the built-in kinds' plugins)
//!     builtin       the built-in chain (decode, defaults, validation of built-in kinds)
//!     builtin-off   without those three (`Admission::without_builtin_kinds`)
//!  creates of a ~1 KiB nginx Deployment at 16 clients
//!     builtin-off-defaulted
//!                   the builtin-off hub sent the Deployment as `builtin` stores it (its
//!                   defaults already set), so that both store the same object
//!  the seven in turn, round after round (so that what drifts over the run — the stores'
//!  sizes, the machine — falls on all alike)
//! ```
//!
//! Targets: 20 non-matching policies within 5 % of none at p50, 5 matching within 25 %, the
//! webhook adding less than 2 ms at p50; built-in validation and defaulting adding at most
//! 10 % to a Deployment create's p50. That is measured two ways: builtin over builtin-off
//! (the object as sent: `builtin` then stores ~30 more fields, and its managed fields, the
//! stored JSON and the answer carry them), and builtin over builtin-off-defaulted (the same
//! object stored by both: what the chain itself costs).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::admission::Admission;
use flotilla_apiserver::admission::dynamic::Dynamic;
use flotilla_apiserver::admission::webhook::model::ServiceAddresses;
use flotilla_apiserver::auth::AdminToken;
use flotilla_apiserver::client::Client;
use flotilla_apiserver::http::server;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_rustls::TlsConnector;

use crate::api::{Target, api_samples, io};
use crate::plot::Chart;
use crate::{Error, Latency, Row, ratio};

/// The configurations, in the order they run in each round: four logical clusters of one
/// hub (ConfigMap creates), then two hubs of their own (Deployment creates).
pub const CONFIGURATIONS: [&str; 7] = [
    "none",
    "vap20",
    "vap5",
    "webhook",
    "builtin",
    "builtin-off",
    "builtin-off-defaulted",
];

/// The logical clusters of the first hub.
const CLUSTERS: [&str; 4] = ["none", "vap20", "vap5", "webhook"];

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the hub's files go (a temporary directory inside it).
    pub dir: PathBuf,
    /// Fewer creates, for a smoke run.
    pub quick: bool,
    /// Concurrent clients.
    pub clients: usize,
    /// Creates per configuration in each round.
    pub per_round: usize,
    /// Rounds (each runs the configurations in turn).
    pub rounds: usize,
}

impl Options {
    /// The full run: 16 clients, 5 rounds of 1,000 creates per configuration.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Options {
            dir: dir.into(),
            quick: false,
            clients: 16,
            per_round: 1_000,
            rounds: 5,
        }
    }

    /// A smoke run: 2 rounds of 200.
    pub fn quick(dir: impl Into<PathBuf>) -> Self {
        Options {
            quick: true,
            per_round: 200,
            rounds: 2,
            ..Options::new(dir)
        }
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({"quick": self.quick, "clients": self.clients, "per_round": self.per_round,
            "rounds": self.rounds})
    }
}

/// One configuration's creates.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// One of [`CONFIGURATIONS`].
    pub configuration: &'static str,
    /// Every create.
    pub latency: Latency,
    /// Creates per second (over its phases).
    pub rate: f64,
    /// The median of each round.
    pub rounds_p50_ms: Vec<f64>,
}

/// The results of the admission scenario.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Concurrent clients.
    pub clients: usize,
    /// Each configuration, in [`CONFIGURATIONS`] order.
    pub measured: Vec<Measured>,
    /// How many reviews the webhook answered (every create of its configuration).
    pub webhook_calls: usize,
}

impl Report {
    fn of(&self, configuration: &str) -> &Measured {
        self.measured
            .iter()
            .find(|m| m.configuration == configuration)
            .unwrap_or(&self.measured[0])
    }

    /// p50 of `configuration` over p50 without policies.
    pub fn p50_ratio(&self, configuration: &str) -> f64 {
        ratio(
            self.of(configuration).latency.p50_ms,
            self.of("none").latency.p50_ms,
        )
    }

    /// A Deployment create's p50 with the built-in kinds' plugins over without.
    pub fn builtin_ratio(&self) -> f64 {
        ratio(
            self.of("builtin").latency.p50_ms,
            self.of("builtin-off").latency.p50_ms,
        )
    }

    /// A Deployment create's p50 with the built-in kinds' plugins over without, both storing
    /// the same (defaulted) object: the chain's own cost.
    pub fn builtin_chain_ratio(&self) -> f64 {
        ratio(
            self.of("builtin").latency.p50_ms,
            self.of("builtin-off-defaulted").latency.p50_ms,
        )
    }

    /// What the webhook adds to the p50, in milliseconds.
    pub fn webhook_added_ms(&self) -> f64 {
        self.of("webhook").latency.p50_ms - self.of("none").latency.p50_ms
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "clients": self.clients,
            "configurations": self.measured.iter().map(|m| json!({
                "configuration": m.configuration, "create": m.latency.json(),
                "per_second": m.rate, "rounds_p50_ms": m.rounds_p50_ms,
                "p50_ratio_to_none": self.p50_ratio(m.configuration),
                "p99_ratio_to_none": ratio(m.latency.p99_ms, self.of("none").latency.p99_ms),
            })).collect::<Vec<_>>(),
            "webhook_added_p50_ms": self.webhook_added_ms(),
            "builtin_p50_ratio_to_builtin_off": self.builtin_ratio(),
            "builtin_p50_ratio_to_builtin_off_defaulted": self.builtin_chain_ratio(),
            "webhook_calls": self.webhook_calls,
        })
    }

    /// A one-screen summary.
    pub fn table(&self) -> String {
        let mut out = format!(
            "admission: creates at {} clients, HTTPS keep-alive (1 KiB ConfigMaps; \
             builtin*: ~1 KiB Deployments, ratios to none are across kinds)\n",
            self.clients
        );
        out.push_str("  configuration   p50 ms    p99 ms    creates/s  p50/none  p99/none\n");
        let none = self.of("none").latency;
        for m in &self.measured {
            out.push_str(&format!(
                "  {:<14} {:>7.3}  {:>8.3}  {:>9.0}  {:>7.3}×  {:>7.3}×\n",
                m.configuration,
                m.latency.p50_ms,
                m.latency.p99_ms,
                m.rate,
                ratio(m.latency.p50_ms, none.p50_ms),
                ratio(m.latency.p99_ms, none.p99_ms),
            ));
        }
        out.push_str(&format!(
            "  the webhook adds {:.3} ms at p50 ({} reviews answered)\n",
            self.webhook_added_ms(),
            self.webhook_calls
        ));
        out.push_str(&format!(
            "  built-in validation and defaulting: Deployment create p50 with them / without {:.3}×\n",
            self.builtin_ratio()
        ));
        out.push_str(&format!(
            "  the same, both storing the defaulted object (the chain's own cost) {:.3}×\n",
            self.builtin_chain_ratio()
        ));
        out
    }

    /// The chart: each configuration's p50 round by round.
    pub fn charts(&self) -> Vec<(&'static str, Chart)> {
        let mut chart = Chart::new(
            &format!("create p50 at {} clients, by round", self.clients),
            "round",
            "milliseconds",
        );
        for m in &self.measured {
            let points = m
                .rounds_p50_ms
                .iter()
                .enumerate()
                .map(|(i, p50)| ((i + 1) as f64, *p50))
                .collect();
            chart = chart.line(m.configuration, points);
        }
        vec![("latency", chart)]
    }

    /// The summary rows, each against its target.
    pub fn summary(&self) -> Vec<Row> {
        vec![
            Row::new(
                "admission",
                format!(
                    "create p50, 20 non-matching VAPs / none ({} clients)",
                    self.clients
                ),
                format!("{:.3}×", self.p50_ratio("vap20")),
                "≤ 1.05×",
            ),
            Row::new(
                "admission",
                format!(
                    "create p50, 5 matching VAPs / none ({} clients)",
                    self.clients
                ),
                format!("{:.3}×", self.p50_ratio("vap5")),
                "≤ 1.25×",
            ),
            Row::new(
                "admission",
                "create p50 added by a matching webhook (loopback)",
                format!("{:.3} ms", self.webhook_added_ms()),
                "< 2 ms",
            ),
            Row::new(
                "admission",
                format!(
                    "Deployment create p50, built-in validation and defaulting on / off ({} clients)",
                    self.clients
                ),
                format!("{:.3}×", self.builtin_ratio()),
                "≤ 1.10×",
            ),
            Row::new(
                "admission",
                format!(
                    "the same, both storing the defaulted Deployment ({} clients)",
                    self.clients
                ),
                format!("{:.3}×", self.builtin_chain_ratio()),
                "≤ 1.10×",
            ),
        ]
    }
}

fn progress(text: &str) {
    eprintln!("admission: {text}…");
}

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}})
}

const VAPS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

/// The five validations the matching policies make, one each: what teams write.
const MATCHING: [&str; 5] = [
    "object.metadata.name.size() <= 63",
    "!has(object.data) || object.data.size() <= 16",
    "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)",
    "!object.metadata.name.startsWith('kube-')",
    "!has(object.data) || !('password' in object.data)",
];

/// Configures one logical cluster.
async fn configure(
    client: &Client,
    cluster: &str,
    webhook: &str,
    ca_bundle: &str,
) -> Result<(), Error> {
    let at = |path: &str| format!("/clusters/{cluster}{path}");
    let fail = |e: flotilla_apiserver::ApiError| crate::check(cluster, e);
    client
        .create(
            &at("/api/v1/namespaces"),
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}),
        )
        .await
        .map_err(fail)?;
    match cluster {
        "vap20" => {
            for i in 0..20 {
                let name = format!("deployments-{i:02}");
                let spec = json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"],
                    "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                    "validations": [{"expression": format!("object.spec.replicas <= {}", 10 + i)}]});
                client
                    .create(&at(VAPS), &policy(&name, spec))
                    .await
                    .map_err(fail)?;
                client
                    .create(&at(BINDINGS), &binding(&name))
                    .await
                    .map_err(fail)?;
            }
        }
        "vap5" => {
            for (i, expression) in MATCHING.iter().enumerate() {
                let name = format!("configmaps-{i}");
                let spec = json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
                    "validations": [{"expression": expression}]});
                client
                    .create(&at(VAPS), &policy(&name, spec))
                    .await
                    .map_err(fail)?;
                client
                    .create(&at(BINDINGS), &binding(&name))
                    .await
                    .map_err(fail)?;
            }
        }
        "webhook" => {
            let configuration = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench"},
                "webhooks": [{"name": "bench.flotilla.io", "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": webhook, "caBundle": ca_bundle},
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["configmaps"]}]}]});
            client
                .create(
                    &at("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"),
                    &configuration,
                )
                .await
                .map_err(fail)?;
        }
        _ => {}
    }
    Ok(())
}

/// The webhook server: allows every review (answering its uid); counts them.
fn webhook_app(calls: Arc<AtomicUsize>) -> axum::Router {
    axum::Router::new().fallback(move |body: Bytes| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::Relaxed);
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": true}})
            .to_string()
        }
    })
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"payload": "x".repeat(1024)}})
}

/// A realistic nginx Deployment (~950 bytes of JSON as sent): labels, an annotation, a pod
/// template with a port, resources, probes, an environment variable and a volume, none of
/// its defaults set (defaulting adds about as much again).
pub fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "web",
            "app.kubernetes.io/part-of": "shop", "team": "storefront"},
            "annotations": {"example.com/owner": "storefront@example.com"}},
        "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "web",
                "app.kubernetes.io/part-of": "shop"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27.3",
                    "ports": [{"name": "http", "containerPort": 80}],
                    "env": [{"name": "NGINX_ENTRYPOINT_QUIET_LOGS", "value": "1"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 5},
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"},
                        "initialDelaySeconds": 10},
                    "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/nginx"}]}],
                    "volumes": [{"name": "cache", "emptyDir": {}}]}}}})
}

/// What a configuration creates.
#[derive(Clone, Copy)]
enum Body {
    ConfigMap,
    /// [`deployment`] as sent.
    Deployment,
    /// [`deployment`] as the built-in chain stores it.
    Defaulted,
}

/// [`deployment`] as the hub with the built-in chain stores it, without what the server
/// sets (identity, timestamps, managed fields, status): what a client sending every default
/// itself would send. Checked to carry more than the object as sent.
async fn defaulted_deployment(api: &Api) -> Result<Value, Error> {
    let sent = deployment("defaulted");
    let mut stored = Client::new(api.clone())
        .create("/apis/apps/v1/namespaces/bench/deployments", &sent)
        .await
        .map_err(|e| crate::check("builtin", e))?;
    stored["metadata"] = json!({
        "name": "defaulted",
        "labels": stored["metadata"]["labels"].clone(),
        "annotations": stored["metadata"]["annotations"].clone(),
    });
    if let Some(object) = stored.as_object_mut() {
        object.remove("status");
    }
    let size = |v: &Value| v.to_string().len();
    if size(&stored) <= size(&sent) {
        return Err(Error::Check(format!(
            "the built-in chain stored the Deployment with no defaults ({} bytes as sent, {} stored)",
            size(&sent),
            size(&stored)
        )));
    }
    Ok(stored)
}

/// A hub served in this process over HTTPS, and how to stop it.
struct Served {
    target: Target,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<()>,
}

/// A hub in this process on its own SQLite store under `dir`, with dynamic admission
/// after `builtin`, serving the `bench` namespace over HTTPS with `identity`.
async fn start_hub(
    dir: &std::path::Path,
    identity: &flotilla_pki::HubIdentity,
    builtin: Admission,
) -> Result<(Api, Served), Error> {
    std::fs::create_dir_all(dir)?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("hub.db")).await?);
    let dynamic = Dynamic::start(store.clone(), ServiceAddresses::new())
        .await
        .map_err(io)?;
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
        .with_admission(builtin.with_dynamic(dynamic));
    api.bootstrap().await.map_err(io)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let app = server::router(
        api.clone(),
        Arc::new(AdminToken::exactly(identity.admin_token.clone())),
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    let server_tls = Arc::new(identity.server_config().map_err(io)?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve_tls(listener, server_tls, app, async move {
        let _ = stopped.await;
    }));
    let target = Target {
        address,
        tls: TlsConnector::from(Arc::new(identity.client_config().map_err(io)?)),
        token: identity.admin_token.clone(),
        padding: 0,
    };
    Ok((
        api,
        Served {
            target,
            stop,
            serving,
        },
    ))
}

impl Served {
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.serving.await;
    }
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    std::fs::create_dir_all(&options.dir)?;
    let scratch = tempfile::tempdir_in(&options.dir)?;
    let identity =
        flotilla_pki::load_or_create(scratch.path(), &["127.0.0.1".to_owned()]).map_err(io)?;

    // The webhook server, on loopback with a certificate of the same CA.
    let calls = Arc::new(AtomicUsize::new(0));
    let server_tls = Arc::new(identity.server_config().map_err(io)?);
    let webhook_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let webhook_url = format!("https://{}/validate", webhook_listener.local_addr()?);
    let (stop_webhook, webhook_stopped) = tokio::sync::oneshot::channel::<()>();
    let webhook_serving = tokio::spawn(server::serve_tls(
        webhook_listener,
        server_tls.clone(),
        webhook_app(calls.clone()),
        async move {
            let _ = webhook_stopped.await;
        },
    ));
    let ca_bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&identity.ca_cert_pem)
    };

    // The hubs: the first with four logical clusters, then one per built-in configuration.
    let (api, hub) =
        start_hub(&scratch.path().join("hub"), &identity, Admission::builtin()).await?;
    let (builtin_api, builtin_hub) = start_hub(
        &scratch.path().join("builtin"),
        &identity,
        Admission::builtin(),
    )
    .await?;
    let (bare_api, bare_hub) = start_hub(
        &scratch.path().join("builtin-off"),
        &identity,
        Admission::without_builtin_kinds(),
    )
    .await?;
    let target = hub.target.clone();

    progress("configuring four logical clusters and two hubs");
    for (name, api) in [("builtin", &builtin_api), ("builtin-off", &bare_api)] {
        Client::new(api.clone())
            .create(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}}),
            )
            .await
            .map_err(|e| crate::check(name, e))?;
    }
    let defaulted = Arc::new(defaulted_deployment(&builtin_api).await?);
    let client = Client::new(api.clone());
    for cluster in CLUSTERS {
        client
            .create(
                "/apis/tenancy.flotilla.io/v1alpha1/logicalclusters",
                &json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "LogicalCluster",
                    "metadata": {"name": cluster}}),
            )
            .await
            .map_err(|e| crate::check(cluster, e))?;
        configure(&client, cluster, &webhook_url, &ca_bundle).await?;
    }

    // The configurations are in force: a create each would refuse is refused.
    let mut admin = target.open().await?;
    let refused = [
        (
            "vap5",
            configmap("kube-refused"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("none", configmap("kube-allowed"), StatusCode::CREATED),
    ];
    for (cluster, object, code) in refused {
        admin
            .expect(
                Method::POST,
                &format!("/clusters/{cluster}/api/v1/namespaces/bench/configmaps"),
                Some(Bytes::from(object.to_string())),
                code,
            )
            .await?;
    }
    // The built-in plugins run on one hub and not on the other: a Service port of 70000
    // is refused there and stored here.
    let wide = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "wide"},
        "spec": {"ports": [{"port": 70000}]}});
    for (hub, code) in [
        (&builtin_hub, StatusCode::UNPROCESSABLE_ENTITY),
        (&bare_hub, StatusCode::CREATED),
    ] {
        hub.target
            .open()
            .await?
            .expect(
                Method::POST,
                "/api/v1/namespaces/bench/services",
                Some(Bytes::from(wide.to_string())),
                code,
            )
            .await?;
    }

    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); CONFIGURATIONS.len()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); CONFIGURATIONS.len()];
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); CONFIGURATIONS.len()];
    let before = calls.load(Ordering::Relaxed);
    for round in 0..options.rounds {
        for (c, cluster) in CONFIGURATIONS.iter().enumerate() {
            progress(&format!(
                "round {}/{}: {} creates in {cluster}, {} clients",
                round + 1,
                options.rounds,
                options.per_round,
                options.clients
            ));
            let offset = round * options.per_round;
            const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/bench/deployments";
            let (at, path, kind) = match *cluster {
                "builtin" => (
                    &builtin_hub.target,
                    DEPLOYMENTS.to_owned(),
                    Body::Deployment,
                ),
                "builtin-off" => (&bare_hub.target, DEPLOYMENTS.to_owned(), Body::Deployment),
                "builtin-off-defaulted" => {
                    (&bare_hub.target, DEPLOYMENTS.to_owned(), Body::Defaulted)
                }
                _ => (
                    &target,
                    format!("/clusters/{cluster}/api/v1/namespaces/bench/configmaps"),
                    Body::ConfigMap,
                ),
            };
            let defaulted = defaulted.clone();
            let create = move |i: usize| {
                let name = format!("bench-{:06}", offset + i);
                let body = match kind {
                    Body::Deployment => deployment(&name),
                    Body::ConfigMap => configmap(&name),
                    Body::Defaulted => {
                        // On the builtin-off hub too: names of its own, of the same length.
                        let mut object = (*defaulted).clone();
                        object["metadata"]["name"] = json!(format!("dflt-{:07}", offset + i));
                        object
                    }
                };
                (
                    Method::POST,
                    path.clone(),
                    Some(Bytes::from(body.to_string())),
                    StatusCode::CREATED,
                )
            };
            let (all, rate) = api_samples(at, options.clients, options.per_round, create).await?;
            rounds[c].push(Latency::of(all.clone()).p50_ms);
            rates[c].push(rate);
            samples[c].extend(all);
        }
    }
    let webhook_calls = calls.load(Ordering::Relaxed) - before;
    let expected = options.rounds * options.per_round;
    if webhook_calls != expected {
        return Err(Error::Check(format!(
            "the webhook answered {webhook_calls} reviews, not one per create ({expected})"
        )));
    }
    for served in [hub, builtin_hub, bare_hub] {
        served.stop().await;
    }
    let _ = stop_webhook.send(());
    let _ = webhook_serving.await;

    let measured = CONFIGURATIONS
        .iter()
        .enumerate()
        .map(|(c, configuration)| Measured {
            configuration,
            latency: Latency::of(std::mem::take(&mut samples[c])),
            rate: rates[c].iter().sum::<f64>() / rates[c].len().max(1) as f64,
            rounds_p50_ms: rounds[c].clone(),
        })
        .collect();
    Ok(Report {
        clients: options.clients,
        measured,
        webhook_calls,
    })
}
