//! The api scenario: the hub's API over HTTPS against the bare store underneath it, with
//! the same operations and the same concurrency, in one run.
//!
//! ```text
//!  client tasks ── HTTPS keep-alive (one connection each) ──► Api over SqliteStore (a.db)
//!  the same tasks ── the same HTTPS ──► the floor: token, decode, store, echo (floor.db)
//!  the same tasks ───────────── direct calls ───────────────► SqliteStore (b.db)
//!  create / get / update at 1, 16, 64 clients; LIST of the 64-client namespace;
//!  N watchers (own connections) vs N store watches: delay from sending a write to receipt
//! ```
//!
//! The floor is the least any API server could do for a create over the same transport:
//! check the token, decode the body, one store write, send the object back. It tells the
//! cost of the connection (client, TLS, loopback TCP, HTTP) from the API's own. (GETs have
//! no such floor: the API answers them from its watch cache, faster than a store read.)

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::api::ROOT_CLUSTER;
use flotilla_apiserver::auth::AdminToken;
use flotilla_apiserver::http::server;
use flotilla_apiserver::registry::keys;
use flotilla_store::{ListOptions, Revision, Store};
use flotilla_store_sqlite::SqliteStore;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::harness::LoneHub;
use crate::{Error, Latency};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the databases and the hub's files go (a temporary directory inside it).
    pub dir: PathBuf,
    /// Fewer operations and watchers, for a smoke run.
    pub quick: bool,
    /// The client counts to measure at.
    pub clients: Vec<usize>,
    /// Objects created per client count (the LIST measures the last namespace).
    pub objects: usize,
    /// Concurrent watchers in the fan-out measurement.
    pub watchers: usize,
    /// Writes the watchers must all receive.
    pub watch_events: usize,
    /// The `flotilla` binary, to measure an idle hub's memory in a process of its own.
    pub hub_binary: Option<PathBuf>,
}

impl Options {
    /// The full run under `dir`: 1/16/64 clients, 10,000 objects, 1,000 watchers.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Options {
            dir: dir.into(),
            quick: false,
            clients: vec![1, 16, 64],
            objects: 10_000,
            watchers: 1_000,
            watch_events: 50,
            hub_binary: None,
        }
    }

    /// A smoke run: 2,000 objects, 100 watchers.
    pub fn quick(dir: impl Into<PathBuf>) -> Self {
        Options {
            quick: true,
            objects: 2_000,
            watchers: 100,
            watch_events: 20,
            ..Options::new(dir)
        }
    }
}

/// One operation at one concurrency, through the API and on the store.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// `create`, `get`, `update`.
    pub op: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Through the API.
    pub api: Latency,
    /// API operations per second.
    pub api_rate: f64,
    /// On the bare store.
    pub store: Latency,
    /// Store operations per second.
    pub store_rate: f64,
    /// Through the floor server, and its operations per second (creates only).
    pub floor: Option<(Latency, f64)>,
}

/// The results of the api scenario.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Every operation at every client count.
    pub ops: Vec<Comparison>,
    /// Objects in the listed namespace.
    pub list_items: usize,
    /// A LIST through the API, median of the repetitions.
    pub list_api: Latency,
    /// The same list on the store.
    pub list_store: Latency,
    /// Watchers in the fan-out.
    pub watchers: usize,
    /// Writes each watcher received.
    pub watch_events: usize,
    /// From sending a write to each API watcher's receipt of its event.
    pub watch_api: Latency,
    /// From the write to each store watcher's receipt.
    pub watch_store: Latency,
    /// Resident memory of an idle hub process right after start, in MiB (if measured).
    pub idle_rss_mib: Option<f64>,
}

fn ratio(api: f64, store: f64) -> f64 {
    if store > 0.0 { api / store } else { f64::NAN }
}

impl Report {
    /// As JSON.
    pub fn json(&self) -> Value {
        json!({
            "ops": self.ops.iter().map(|c| json!({
                "op": c.op, "clients": c.clients,
                "api": c.api.json(), "api_per_second": c.api_rate,
                "store": c.store.json(), "store_per_second": c.store_rate,
                "p50_ratio": ratio(c.api.p50_ms, c.store.p50_ms), "p99_ratio": ratio(c.api.p99_ms, c.store.p99_ms),
                "floor": c.floor.as_ref().map(|(floor, rate)| json!({
                    "latency": floor.json(), "per_second": rate,
                    "p50_ratio_to_store": ratio(floor.p50_ms, c.store.p50_ms),
                    "p99_ratio_to_store": ratio(floor.p99_ms, c.store.p99_ms),
                    "api_p50_ratio_to_floor": ratio(c.api.p50_ms, floor.p50_ms),
                })),
            })).collect::<Vec<_>>(),
            "list": {"items": self.list_items, "api": self.list_api.json(), "store": self.list_store.json(),
                "ratio": ratio(self.list_api.p50_ms, self.list_store.p50_ms)},
            "watch": {"watchers": self.watchers, "events": self.watch_events,
                "api": self.watch_api.json(), "store": self.watch_store.json()},
            "idle_rss_mib": self.idle_rss_mib,
        })
    }

    /// A one-screen summary.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "api: HTTPS (TLS 1.3, keep-alive) to the hub vs the same calls on its store\n",
        );
        out.push_str("  op      clients   api p50/p99 ms      store p50/p99 ms    api/s      store/s    p50 ratio p99 ratio\n");
        for c in &self.ops {
            out.push_str(&format!(
                "  {:<7} {:>7}   {:>7.3} / {:<8.3}  {:>7.3} / {:<8.3}  {:>8.0}  {:>8.0}   {:>6.2}    {:>6.2}\n",
                c.op, c.clients, c.api.p50_ms, c.api.p99_ms, c.store.p50_ms, c.store.p99_ms, c.api_rate, c.store_rate,
                ratio(c.api.p50_ms, c.store.p50_ms), ratio(c.api.p99_ms, c.store.p99_ms),
            ));
        }
        out.push_str("  the floor over the same HTTPS (token, decode, one store write, echo):\n");
        out.push_str(
            "  op      clients   floor p50/p99 ms    floor/s    floor/store p50  api/floor p50\n",
        );
        for c in &self.ops {
            let Some((floor, rate)) = &c.floor else {
                continue;
            };
            out.push_str(&format!(
                "  {:<7} {:>7}   {:>7.3} / {:<8.3}  {:>8.0}   {:>6.2}           {:>6.2}\n",
                c.op,
                c.clients,
                floor.p50_ms,
                floor.p99_ms,
                rate,
                ratio(floor.p50_ms, c.store.p50_ms),
                ratio(c.api.p50_ms, floor.p50_ms),
            ));
        }
        out.push_str(&format!(
            "  LIST of {} objects: api {:.1} ms, store {:.1} ms (median; ratio {:.2})\n",
            self.list_items,
            self.list_api.p50_ms,
            self.list_store.p50_ms,
            ratio(self.list_api.p50_ms, self.list_store.p50_ms)
        ));
        out.push_str(&format!(
            "  {} watchers × {} writes, send → receipt: api p50 {:.2} ms p99 {:.2} ms max {:.2} ms; store watches p50 {:.2} ms p99 {:.2} ms\n",
            self.watchers, self.watch_events, self.watch_api.p50_ms, self.watch_api.p99_ms, self.watch_api.max_ms,
            self.watch_store.p50_ms, self.watch_store.p99_ms
        ));
        match self.idle_rss_mib {
            Some(rss) => out.push_str(&format!("  idle hub process RSS: {rss:.1} MiB\n")),
            None => out.push_str("  idle hub process RSS: not measured (no hub binary given)\n"),
        }
        out
    }
}

/// One HTTPS connection to the hub, and the `Authorization` header every request of it
/// sends: made once, as a client library does (kube-rs keeps the header value it was
/// configured with and clones it into each request), so that a request's client-side work
/// does not grow with the token's length (a ServiceAccount token is most of a kilobyte, the
/// admin's 43 bytes) beyond sending it.
pub(crate) struct Connection {
    sender: SendRequest<Full<Bytes>>,
    authorization: HeaderValue,
    /// A header no one reads, sent with every request (see [`Target::padding`]).
    padding: Option<HeaderValue>,
}

/// The header that carries [`Target::padding`].
pub(crate) const PADDING_HEADER: &str = "x-flotilla-bench-padding";

/// Where connections go, and the bearer token they present.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) address: std::net::SocketAddr,
    pub(crate) tls: TlsConnector,
    pub(crate) token: String,
    /// Bytes of a header no one reads ([`PADDING_HEADER`]) sent with every request: the
    /// admin sending as many bytes as a service account does, without being one.
    pub(crate) padding: usize,
}

pub(crate) fn io(e: impl std::fmt::Display) -> Error {
    Error::Check(format!("http: {e}"))
}

impl Target {
    async fn connect(
        &self,
    ) -> Result<
        (
            Connection,
            hyper::client::conn::http1::Connection<
                TokioIo<tokio_rustls::client::TlsStream<TcpStream>>,
                Full<Bytes>,
            >,
        ),
        Error,
    > {
        let tcp = TcpStream::connect(self.address).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(io)?;
        let tls = self.tls.connect(name, tcp).await?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(io)?;
        let mut authorization =
            HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(io)?;
        authorization.set_sensitive(true);
        let padding = (self.padding > 0)
            .then(|| HeaderValue::from_str(&"p".repeat(self.padding)))
            .transpose()
            .map_err(io)?;
        Ok((
            Connection {
                sender,
                authorization,
                padding,
            },
            connection,
        ))
    }

    pub(crate) async fn open(&self) -> Result<Connection, Error> {
        let (connection, driver) = self.connect().await?;
        tokio::spawn(async move {
            let _ = driver.await;
        });
        Ok(connection)
    }
}

impl Connection {
    fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
        content_type: &str,
    ) -> Result<Request<Full<Bytes>>, Error> {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1")
            .header(hyper::header::AUTHORIZATION, self.authorization.clone());
        if let Some(padding) = &self.padding {
            request = request.header(PADDING_HEADER, padding.clone());
        }
        request
            .header("content-type", content_type)
            .header("accept", "application/json")
            .body(Full::new(body.unwrap_or_default()))
            .map_err(io)
    }

    pub(crate) async fn call(
        &mut self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
    ) -> Result<(StatusCode, Bytes), Error> {
        let request = self.request(method, uri, body, "application/json")?;
        // A new connection is usable only once its driver has run: wait for it.
        self.sender.ready().await.map_err(io)?;
        let response = self.sender.send_request(request).await.map_err(io)?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(io)?.to_bytes();
        Ok((status, body))
    }

    pub(crate) async fn expect(
        &mut self,
        method: Method,
        uri: &str,
        body: Option<Bytes>,
        code: StatusCode,
    ) -> Result<Bytes, Error> {
        let (status, body) = self.call(method, uri, body).await?;
        if status != code {
            return Err(Error::Check(format!(
                "{uri}: {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        Ok(body)
    }
}

fn configmap(namespace: &str, name: &str, size: usize, n: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
        "data": {"n": n.to_string(), "payload": "x".repeat(size)}})
}

fn store_key(namespace: &str, name: &str) -> Vec<u8> {
    keys::key_of("", "configmaps", ROOT_CLUSTER, Some(namespace), name)
}

/// One API request of a phase: method, URI, body, the status expected.
pub(crate) type Call = (Method, String, Option<Bytes>, StatusCode);

/// `total` API requests from `clients` connections at once (request `i` made by
/// `make(i)`); every latency and the overall rate.
pub(crate) async fn api_phase<M>(
    target: &Target,
    clients: usize,
    total: usize,
    make: M,
) -> Result<(Latency, f64), Error>
where
    M: Fn(usize) -> Call + Send + Sync + Clone + 'static,
{
    let (samples, rate) = api_samples(target, clients, total, make).await?;
    Ok((Latency::of(samples), rate))
}

/// [`api_phase`]'s samples themselves, and the rate.
pub(crate) async fn api_samples<M>(
    target: &Target,
    clients: usize,
    total: usize,
    make: M,
) -> Result<(Vec<std::time::Duration>, f64), Error>
where
    M: Fn(usize) -> Call + Send + Sync + Clone + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut connection = target.open().await?;
        let (barrier, make) = (barrier.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut samples = Vec::new();
            for i in (c..total).step_by(clients) {
                let (method, uri, body, code) = make(i);
                let started = Instant::now();
                connection.expect(method, &uri, body, code).await?;
                samples.push(started.elapsed());
            }
            Ok::<_, Error>(samples)
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut samples = Vec::with_capacity(total);
    for task in tasks {
        samples.extend(task.await??);
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    Ok((samples, rate))
}

type StoreOp = Arc<
    dyn Fn(Arc<dyn Store>, usize) -> futures_util::future::BoxFuture<'static, Result<(), Error>>
        + Send
        + Sync,
>;

/// The same shape on the bare store.
async fn store_phase(
    store: &Arc<dyn Store>,
    clients: usize,
    total: usize,
    op: StoreOp,
) -> Result<(Latency, f64), Error> {
    let barrier = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (barrier, op, store) = (barrier.clone(), op.clone(), store.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut samples = Vec::new();
            for i in (c..total).step_by(clients) {
                let started = Instant::now();
                op(store.clone(), i).await?;
                samples.push(started.elapsed());
            }
            Ok::<_, Error>(samples)
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut samples = Vec::with_capacity(total);
    for task in tasks {
        samples.extend(task.await??);
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    Ok((Latency::of(samples), rate))
}

/// The floor server's app over `store`: a bearer token check, then `POST
/// /api/v1/namespaces/{ns}/configmaps` decodes the body, stores it as sent under the key
/// the API would use and sends it back.
fn floor(store: Arc<dyn Store>, token: &str) -> axum::Router {
    let expected = format!("Bearer {token}");
    axum::Router::new().fallback(
        move |method: Method, uri: hyper::Uri, headers: hyper::HeaderMap, body: Bytes| {
            let (store, expected) = (store.clone(), expected.clone());
            async move {
                let authorized = headers
                    .get(hyper::header::AUTHORIZATION)
                    .is_some_and(|value| value.as_bytes() == expected.as_bytes());
                if !authorized {
                    return (StatusCode::UNAUTHORIZED, Bytes::new());
                }
                match floor_call(&*store, &method, uri.path(), body).await {
                    Ok(answer) => answer,
                    Err(e) => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        Bytes::from(e.to_string()),
                    ),
                }
            }
        },
    )
}

/// One request to the floor server: a create.
async fn floor_call(
    store: &dyn Store,
    method: &Method,
    path: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes), Error> {
    let namespace = path
        .strip_prefix("/api/v1/namespaces/")
        .and_then(|rest| rest.strip_suffix("/configmaps"))
        .filter(|namespace| *method == Method::POST && !namespace.contains('/'))
        .ok_or_else(|| Error::Check(format!("the floor serves no {method} {path}")))?;
    let object: Value = serde_json::from_slice(&body).map_err(io)?;
    let name = object["metadata"]["name"]
        .as_str()
        .ok_or_else(|| Error::Check("an object without a name".into()))?;
    store
        .create(&store_key(namespace, name), body.clone())
        .await?;
    Ok((StatusCode::CREATED, body))
}

/// A pseudo-random index below `n` for request `i` (the same sequence on both sides).
fn pick(i: usize, n: usize) -> usize {
    (i.wrapping_mul(2_654_435_761) ^ (i >> 3)) % n.max(1)
}

fn progress(text: &str) {
    eprintln!("api: {text}…");
}

/// Runs the scenario.
pub async fn run(options: &Options) -> Result<Report, Error> {
    std::fs::create_dir_all(&options.dir)?;
    let scratch = tempfile::tempdir_in(&options.dir)?;
    let value_size = 1024;
    let mut report = Report {
        watchers: options.watchers,
        watch_events: options.watch_events,
        ..Report::default()
    };

    // The hub, in process, over TLS on a free port; and the bare store beside it.
    let hub_store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(scratch.path().join("api.db")).await?);
    let bare: Arc<dyn Store> = Arc::new(SqliteStore::open(scratch.path().join("store.db")).await?);
    let identity =
        flotilla_pki::load_or_create(scratch.path(), &["127.0.0.1".to_owned()]).map_err(io)?;
    let api = Api::new(hub_store, Arc::new(Registry::builtin()), "127.0.0.1");
    api.bootstrap().await.map_err(io)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let token = identity.admin_token.clone();
    let client_tls = Arc::new(identity.client_config().map_err(io)?);
    let server_tls = Arc::new(identity.server_config().map_err(io)?);
    let check = identity.admin_token.clone();
    let auth = Arc::new(AdminToken::exactly(check));
    let app = server::router(
        api.clone(),
        auth,
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve_tls(
        listener,
        server_tls.clone(),
        app,
        async move {
            let _ = stopped.await;
        },
    ));
    let floor_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let floor_target = Target {
        address: floor_listener.local_addr()?,
        tls: TlsConnector::from(client_tls.clone()),
        token: token.clone(),
        padding: 0,
    };
    let floor_store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(scratch.path().join("floor.db")).await?);
    let (stop_floor, floor_stopped) = tokio::sync::oneshot::channel::<()>();
    let floor_serving = tokio::spawn(server::serve_tls(
        floor_listener,
        server_tls.clone(),
        floor(floor_store, &token),
        async move {
            let _ = floor_stopped.await;
        },
    ));
    let target = Target {
        address,
        tls: TlsConnector::from(client_tls),
        token,
        padding: 0,
    };

    let mut admin = target.open().await?;
    let namespaces = options
        .clients
        .iter()
        .map(|c| format!("bench-{c}"))
        .chain(["watch".to_owned()]);
    for namespace in namespaces {
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
        admin
            .expect(
                Method::POST,
                "/api/v1/namespaces",
                Some(Bytes::from(body.to_string())),
                StatusCode::CREATED,
            )
            .await?;
    }

    for &clients in &options.clients {
        let total = options.objects;
        let namespace = format!("bench-{clients}");
        let name = |i: usize| format!("cm-{i:06}");

        progress(&format!("create, {clients} clients"));
        let ns = namespace.clone();
        let create = move |i| {
            let body = configmap(&ns, &name(i), value_size, 0).to_string();
            (
                Method::POST,
                format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(Bytes::from(body)),
                StatusCode::CREATED,
            )
        };
        let (api_lat, api_rate) = api_phase(&target, clients, total, create.clone()).await?;
        let floor = api_phase(&floor_target, clients, total, create).await?;
        let ns = namespace.clone();
        let (store_lat, store_rate) = store_phase(
            &bare,
            clients,
            total,
            Arc::new(move |store, i| {
                let key = store_key(&ns, &name(i));
                let value = Bytes::from(configmap(&ns, &name(i), value_size, 0).to_string());
                Box::pin(async move {
                    store
                        .create(&key, value)
                        .await
                        .map(drop)
                        .map_err(Error::from)
                })
            }),
        )
        .await?;
        report.ops.push(Comparison {
            op: "create",
            clients,
            api: api_lat,
            api_rate,
            store: store_lat,
            store_rate,
            floor: Some(floor),
        });

        progress(&format!("get, {clients} clients"));
        let ns = namespace.clone();
        let get = move |i| {
            (
                Method::GET,
                format!(
                    "/api/v1/namespaces/{ns}/configmaps/{}",
                    name(pick(i, total))
                ),
                None,
                StatusCode::OK,
            )
        };
        let (api_lat, api_rate) = api_phase(&target, clients, total, get).await?;
        let ns = namespace.clone();
        let (store_lat, store_rate) = store_phase(
            &bare,
            clients,
            total,
            Arc::new(move |store, i| {
                let key = store_key(&ns, &name(pick(i, total)));
                Box::pin(async move {
                    let found = store.get(&key, None).await?;
                    // Decode it as the API does, so both sides do the work a read needs.
                    let kv = found
                        .ok_or_else(|| Error::Check("a benchmark object is missing".into()))?;
                    serde_json::from_slice::<Value>(&kv.value).map_err(io)?;
                    Ok(())
                })
            }),
        )
        .await?;
        report.ops.push(Comparison {
            op: "get",
            clients,
            api: api_lat,
            api_rate,
            store: store_lat,
            store_rate,
            floor: None,
        });

        progress(&format!("update, {clients} clients"));
        // Each client updates its own objects (no conflicts): unconditional PUTs.
        let ns = namespace.clone();
        let (api_lat, api_rate) = api_phase(&target, clients, total, move |i| {
            // Every update changes the object (one that changes nothing is not written).
            let body = configmap(&ns, &name(i), value_size, i + 1).to_string();
            (
                Method::PUT,
                format!("/api/v1/namespaces/{ns}/configmaps/{}", name(i)),
                Some(Bytes::from(body)),
                StatusCode::OK,
            )
        })
        .await?;
        let ns = namespace.clone();
        let (store_lat, store_rate) = store_phase(
            &bare,
            clients,
            total,
            Arc::new(move |store, i| {
                let key = store_key(&ns, &name(i));
                let value = Bytes::from(configmap(&ns, &name(i), value_size, i + 1).to_string());
                Box::pin(async move {
                    let current = store
                        .get(&key, None)
                        .await?
                        .ok_or_else(|| Error::Check("a benchmark object is missing".into()))?;
                    store
                        .update(&key, value, current.mod_revision)
                        .await
                        .map(drop)
                        .map_err(Error::from)
                })
            }),
        )
        .await?;
        report.ops.push(Comparison {
            op: "update",
            clients,
            api: api_lat,
            api_rate,
            store: store_lat,
            store_rate,
            floor: None,
        });
    }

    // LIST of the namespace the most clients filled.
    let last = format!("bench-{}", options.clients.last().copied().unwrap_or(1));
    progress(&format!("LIST of {} objects", options.objects));
    let reps = if options.quick { 3 } else { 7 };
    let mut api_samples = Vec::new();
    let mut store_samples = Vec::new();
    for _ in 0..reps {
        let started = Instant::now();
        let body = admin
            .expect(
                Method::GET,
                &format!("/api/v1/namespaces/{last}/configmaps"),
                None,
                StatusCode::OK,
            )
            .await?;
        api_samples.push(started.elapsed());
        let list: Value = serde_json::from_slice(&body).map_err(io)?;
        report.list_items = list["items"].as_array().map_or(0, Vec::len);
        let started = Instant::now();
        let page = bare
            .list(
                &keys::prefix_of("", "configmaps", ROOT_CLUSTER, Some(&last)),
                ListOptions::default(),
            )
            .await?;
        let decoded: Vec<Value> = page
            .kvs
            .iter()
            .map(|kv| serde_json::from_slice(&kv.value))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        store_samples.push(started.elapsed());
        if decoded.len() != report.list_items {
            return Err(Error::Check(format!(
                "the API listed {} objects, the store {}",
                report.list_items,
                decoded.len()
            )));
        }
    }
    report.list_api = Latency::of(api_samples);
    report.list_store = Latency::of(store_samples);

    progress(&format!("{} watchers", options.watchers));
    report.watch_api = watch_fan_out(&target, &api, &mut admin, options).await?;
    report.watch_store = store_fan_out(&bare, options).await?;

    let _ = stop.send(());
    let _ = stop_floor.send(());
    drop(admin);
    let _ = serving.await;
    let _ = floor_serving.await;

    if let Some(binary) = &options.hub_binary {
        progress("idle hub process");
        report.idle_rss_mib = Some(idle_rss(binary, &scratch.path().join("idle")).await?);
    }
    Ok(report)
}

/// `watchers` API watches on one namespace, each on its own connection; then writes. The
/// delay from sending each write to every watcher's receipt of its event.
async fn watch_fan_out(
    target: &Target,
    api: &Api,
    admin: &mut Connection,
    options: &Options,
) -> Result<Latency, Error> {
    let list = admin
        .expect(
            Method::GET,
            "/api/v1/namespaces/watch/configmaps",
            None,
            StatusCode::OK,
        )
        .await?;
    let list: Value = serde_json::from_slice(&list).map_err(io)?;
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let before = api.watch_cache().watchers();
    let mut tasks = Vec::new();
    for _ in 0..options.watchers {
        let connection = target.open().await?;
        let uri = format!("/api/v1/namespaces/watch/configmaps?watch=true&resourceVersion={from}");
        let events = options.watch_events;
        tasks.push(tokio::spawn(async move {
            let mut connection = connection;
            let request = connection.request(Method::GET, &uri, None, "application/json")?;
            connection.sender.ready().await.map_err(io)?;
            let response = connection.sender.send_request(request).await.map_err(io)?;
            let mut body = response.into_body();
            let mut buffer = Vec::new();
            let mut received = Vec::with_capacity(events);
            while received.len() < events {
                let Some(frame) = body.frame().await else {
                    return Err(Error::Check("a watch ended early".into()));
                };
                let Ok(data) = frame.map_err(io)?.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    let event: Value = serde_json::from_slice(&line).map_err(io)?;
                    if event["type"] == "ADDED" {
                        let n: usize = event["object"]["data"]["n"]
                            .as_str()
                            .unwrap_or("0")
                            .parse()
                            .unwrap_or(0);
                        received.push((n, Instant::now()));
                    }
                }
            }
            Ok::<_, Error>(received)
        }));
    }
    // Every watch is registered before the first write.
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.watch_cache().watchers() < before + options.watchers {
        if Instant::now() > deadline {
            return Err(Error::Check("the watchers did not all register".into()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut sent = Vec::new();
    for n in 0..options.watch_events {
        let body = configmap("watch", &format!("w-{n}"), 1024, n).to_string();
        let started = Instant::now();
        admin
            .expect(
                Method::POST,
                "/api/v1/namespaces/watch/configmaps",
                Some(Bytes::from(body)),
                StatusCode::CREATED,
            )
            .await?;
        sent.push(started);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut delays = Vec::new();
    for task in tasks {
        for (n, at) in task.await?? {
            delays.push(at.saturating_duration_since(sent[n]));
        }
    }
    if delays.len() != options.watchers * options.watch_events {
        return Err(Error::Check(format!(
            "{} receipts, expected {}",
            delays.len(),
            options.watchers * options.watch_events
        )));
    }
    Ok(Latency::of(delays))
}

/// The same fan-out on the bare store: `watchers` store watches, then the same writes.
async fn store_fan_out(store: &Arc<dyn Store>, options: &Options) -> Result<Latency, Error> {
    let prefix = keys::prefix_of("", "configmaps", ROOT_CLUSTER, Some("watch"));
    let from: Revision = store.current_revision().await?;
    let mut tasks = Vec::new();
    for _ in 0..options.watchers {
        let mut stream = store.watch(&prefix, from).await?;
        let events = options.watch_events;
        tasks.push(tokio::spawn(async move {
            let mut received = Vec::with_capacity(events);
            while received.len() < events {
                let event = stream
                    .next()
                    .await
                    .ok_or_else(|| Error::Check("a store watch ended".into()))??;
                let object: Value = serde_json::from_slice(&event.kv.value).map_err(io)?;
                let n: usize = object["data"]["n"]
                    .as_str()
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0);
                received.push((n, Instant::now()));
            }
            Ok::<_, Error>(received)
        }));
    }
    let mut sent = Vec::new();
    for n in 0..options.watch_events {
        let value = Bytes::from(configmap("watch", &format!("w-{n}"), 1024, n).to_string());
        let started = Instant::now();
        store
            .create(&store_key("watch", &format!("w-{n}")), value)
            .await?;
        sent.push(started);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut delays = Vec::new();
    for task in tasks {
        for (n, at) in task.await?? {
            delays.push(at.saturating_duration_since(sent[n]));
        }
    }
    Ok(Latency::of(delays))
}

/// Starts `flotilla hub` in a process of its own, waits until it serves, and reads its
/// resident memory once it is idle.
async fn idle_rss(binary: &Path, dir: &Path) -> Result<f64, Error> {
    LoneHub::start(binary, dir).await?.idle_rss_mib().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tiny_run_measures_every_operation_and_every_receipt() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            dir: dir.path().to_owned(),
            quick: true,
            clients: vec![1, 4],
            objects: 40,
            watchers: 5,
            watch_events: 3,
            hub_binary: None,
        };
        let report = run(&options).await.unwrap();
        let ops: Vec<(&str, usize)> = report.ops.iter().map(|c| (c.op, c.clients)).collect();
        assert_eq!(
            ops,
            [
                ("create", 1),
                ("get", 1),
                ("update", 1),
                ("create", 4),
                ("get", 4),
                ("update", 4)
            ]
        );
        for c in &report.ops {
            assert_eq!((c.api.samples, c.store.samples), (40, 40), "{}", c.op);
            assert!(c.api_rate > 0.0 && c.store_rate > 0.0);
            // The floor serves creates; every one answered as expected.
            let floor = c.floor.as_ref().map(|(latency, _)| latency.samples);
            assert_eq!(floor, (c.op == "create").then_some(40), "{}", c.op);
        }
        assert_eq!(report.list_items, 40);
        assert_eq!(report.watch_api.samples, 15);
        assert_eq!(report.watch_store.samples, 15);
        let json = report.json();
        assert_eq!(json["ops"].as_array().unwrap().len(), 6);
        assert_eq!(json["watch"]["watchers"], 5);
        assert!(report.table().contains("LIST of 40 objects"));
        assert!(
            json["ops"][0]["floor"]["api_p50_ratio_to_floor"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        assert!(json["ops"][1]["floor"].is_null());
    }
}
