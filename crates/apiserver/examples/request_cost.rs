//! The cost of one API request against the same call on the bare store, for profiling by
//! instruction count (`valgrind --tool=callgrind`).
//!
//! ```text
//! request_cost <mode> <op> <n>
//!   mode: store (the bench's store calls) | api (Api::serve) | router (the HTTP app, no
//!         socket) | https (TLS over loopback with keep-alive, as `flotilla bench` does)
//!   op:   get | create | update
//! ```
//!
//! Setup is the same whatever `n` is (1,000 ConfigMaps for get and update), so the
//! difference of two runs' counts divided by the difference of their `n` is the cost of
//! one request. `REQUEST_COST_CLIENTS=16` makes the `n` requests (store calls) from that
//! many concurrent connections (tasks), as the benchmark's 16-client phase does;
//! `REQUEST_COST_LINGER=0.5` sets the store's group-commit linger (`Config::linger`).

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::api::ROOT_CLUSTER;
use flotilla_apiserver::auth::AdminToken;
use flotilla_apiserver::http::server;
use flotilla_apiserver::registry::keys;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The allocator the `flotilla` binary uses, so that costs match the shipped hub's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The store under test, for its counts of transactions and writes.
static SQLITE: std::sync::OnceLock<Arc<SqliteStore>> = std::sync::OnceLock::new();

/// Writes per transaction so far (how well concurrent writes were grouped).
fn grouping() -> String {
    let stats = SQLITE.get().map(|s| s.stats()).unwrap_or_default();
    format!(
        "{} writes in {} transactions",
        stats.writes, stats.transactions
    )
}

const OBJECTS: usize = 1_000;
const NAMESPACE: &str = "bench";

fn configmap(name: &str, n: usize) -> Bytes {
    Bytes::from(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"n": n.to_string(), "payload": "x".repeat(1024)}})
        .to_string(),
    )
}

fn name(i: usize) -> String {
    format!("cm-{i:06}")
}

fn key(i: usize) -> Vec<u8> {
    keys::key_of("", "configmaps", ROOT_CLUSTER, Some(NAMESPACE), &name(i))
}

/// One request: method, path, body, the status expected.
type Call = (Method, String, Bytes, StatusCode);

fn call(op: &str, i: usize) -> Call {
    match op {
        "get" => (
            Method::GET,
            format!(
                "/api/v1/namespaces/{NAMESPACE}/configmaps/{}",
                name(i % OBJECTS)
            ),
            Bytes::new(),
            StatusCode::OK,
        ),
        "create" => (
            Method::POST,
            format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
            configmap(&name(OBJECTS + i), 0),
            StatusCode::CREATED,
        ),
        "update" => (
            Method::PUT,
            format!(
                "/api/v1/namespaces/{NAMESPACE}/configmaps/{}",
                name(i % OBJECTS)
            ),
            configmap(&name(i % OBJECTS), i + 1),
            StatusCode::OK,
        ),
        // The HTTP layer alone: no token, no API.
        "healthz" => (
            Method::GET,
            "/healthz".to_owned(),
            Bytes::new(),
            StatusCode::OK,
        ),
        other => panic!("unknown op {other}"),
    }
}

async fn store_op(store: &dyn Store, op: &str, i: usize) {
    match op {
        "get" => {
            let kv = store.get(&key(i % OBJECTS), None).await.unwrap().unwrap();
            serde_json::from_slice::<Value>(&kv.value).unwrap();
        }
        "create" => {
            store
                .create(&key(OBJECTS + i), configmap(&name(OBJECTS + i), 0))
                .await
                .unwrap();
        }
        "update" => {
            let k = key(i % OBJECTS);
            let current = store.get(&k, None).await.unwrap().unwrap();
            store
                .update(
                    &k,
                    configmap(&name(i % OBJECTS), i + 1),
                    current.mod_revision,
                )
                .await
                .unwrap();
        }
        other => panic!("unknown op {other}"),
    }
}

fn headers(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1"));
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    headers
}

fn request(token: &str, (method, uri, body, _): Call) -> axum::http::Request<Full<Bytes>> {
    let mut request = axum::http::Request::builder()
        .method(method)
        .uri(uri)
        .body(Full::new(body))
        .unwrap();
    *request.headers_mut() = headers(token);
    request
}

fn main() {
    // One thread by default (steadier counts); `REQUEST_COST_THREADS=2` runs the benchmark's
    // multi-threaded runtime.
    let threads: usize = std::env::var("REQUEST_COST_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let runtime = match threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    };
    runtime.unwrap().block_on(run());
}

async fn run() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, op, n) = match args.as_slice() {
        [_, mode, op, n] => (mode.clone(), op.clone(), n.parse::<usize>().unwrap()),
        _ => panic!("usage: request_cost store|api|router|https get|create|update N"),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = flotilla_store_sqlite::Config::new(dir.path().join("s.db"));
    if let Some(linger) = std::env::var("REQUEST_COST_LINGER")
        .ok()
        .and_then(|l| l.parse().ok())
    {
        config.linger = linger;
    }
    let sqlite = Arc::new(SqliteStore::open_with(config).await.unwrap());
    let _ = SQLITE.set(sqlite.clone());
    let store: Arc<dyn Store> = sqlite;
    if mode == "store" {
        if op != "create" {
            for i in 0..OBJECTS {
                store.create(&key(i), configmap(&name(i), 0)).await.unwrap();
            }
        }
        let started = std::time::Instant::now();
        let clients = clients();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (store, op) = (store.clone(), op.clone());
            tasks.push(tokio::spawn(async move {
                for i in (c..n).step_by(clients) {
                    store_op(&*store, &op, i).await;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        if std::env::var_os("REQUEST_COST_TIME").is_some() {
            let each = started.elapsed() / u32::try_from(n.max(1)).unwrap_or(u32::MAX);
            eprintln!("{n} store calls, {each:?} each; {}", grouping());
        }
        return;
    }
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
    api.bootstrap().await.unwrap();
    let token = "t0ken".to_owned();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    let setup = |i: usize| {
        (
            Method::POST,
            format!("/api/v1/namespaces/{NAMESPACE}/configmaps"),
            configmap(&name(i), 0),
            StatusCode::CREATED,
        )
    };
    let mut calls: Vec<Call> = vec![(
        Method::POST,
        "/api/v1/namespaces".to_owned(),
        Bytes::from(ns.to_string()),
        StatusCode::CREATED,
    )];
    if op != "create" {
        calls.extend((0..OBJECTS).map(setup));
    }
    let setup_calls = calls.len();
    calls.extend((0..n).map(|i| call(&op, i)));
    match mode.as_str() {
        "api" => {
            let headers = headers(&token);
            for (method, uri, body, code) in calls {
                let response = api.serve(method, &uri, None, &headers, body).await;
                assert_eq!(response.status(), code);
                response.into_body().collect().await.unwrap();
            }
        }
        "router" => {
            let check = token.clone();
            let app = server::router(
                api,
                Arc::new(AdminToken::exactly(check)),
                Arc::new(std::sync::atomic::AtomicBool::new(true)),
            );
            for call in calls {
                let code = call.3;
                let response = app.clone().oneshot(request(&token, call)).await.unwrap();
                assert_eq!(response.status(), code);
                response.into_body().collect().await.unwrap();
            }
        }
        "https" => https(api, dir.path(), calls, setup_calls).await,
        other => panic!("unknown mode {other}"),
    }
}

/// The number of concurrent clients (`REQUEST_COST_CLIENTS`, 1 by default).
fn clients() -> usize {
    std::env::var("REQUEST_COST_CLIENTS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// One HTTPS connection to `address`, and the task driving it.
async fn connect(
    address: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> (Sender, tokio::task::JoinHandle<Result<(), hyper::Error>>) {
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let tls = tokio_rustls::TlsConnector::from(tls)
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

async fn send(sender: &mut Sender, token: &str, call: Call) {
    let code = call.3;
    sender.ready().await.unwrap();
    let response = sender.send_request(request(token, call)).await.unwrap();
    assert_eq!(response.status(), code);
    response.into_body().collect().await.unwrap();
}

async fn https(api: Api, dir: &std::path::Path, calls: Vec<Call>, setup_calls: usize) {
    let identity =
        flotilla_pki::load_or_create(&dir.join("pki"), &["127.0.0.1".to_owned()]).unwrap();
    let check = identity.admin_token.clone();
    let app = server::router(
        api,
        Arc::new(AdminToken::exactly(check)),
        Arc::new(std::sync::atomic::AtomicBool::new(true)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve_tls(
        listener,
        Arc::new(identity.server_config().unwrap()),
        app,
        async move {
            let _ = stopped.await;
        },
    ));
    let tls_config = Arc::new(identity.client_config().unwrap());
    let (mut sender, driver) = connect(address, tls_config.clone()).await;
    let measured = calls.len() - setup_calls;
    let mut calls = calls.into_iter();
    for call in calls.by_ref().take(setup_calls) {
        send(&mut sender, &identity.admin_token, call).await;
    }
    let started = std::time::Instant::now();
    let clients = clients();
    let calls: Vec<Call> = calls.collect();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mine: Vec<Call> = calls.iter().skip(c).step_by(clients).cloned().collect();
        let (address, tls, token) = (address, tls_config.clone(), identity.admin_token.clone());
        tasks.push(tokio::spawn(async move {
            let (mut sender, driver) = connect(address, tls).await;
            for call in mine {
                send(&mut sender, &token, call).await;
            }
            drop(sender);
            let _ = driver.await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    if std::env::var_os("REQUEST_COST_TIME").is_some() {
        let each = started.elapsed() / u32::try_from(measured.max(1)).unwrap_or(u32::MAX);
        eprintln!("{measured} requests, {each:?} each; {}", grouping());
    }
    drop(sender);
    let _ = driver.await;
    let _ = stop.send(());
    let _ = serving.await;
}
