//! Slow and idle connections are closed by the server (a handshake that never ends,
//! headers or a body that trickle, a keep-alive connection with nothing to ask), while
//! other clients are served meanwhile and a watch in progress is left alone; a watch
//! without `timeoutSeconds` ends on its own; the bearer scheme in any case; `/version`
//! without a token. Over real TLS sockets to a real server, with bounds of a second or
//! two; every wait is a poll with a deadline far beyond them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use axum::http::{Method, Request, StatusCode, header};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::auth::AdminToken;
use flotilla_apiserver::client::Client;
use flotilla_apiserver::http::server::{self, Timeouts};
use flotilla_store::Store;
use flotilla_store_memory::MemoryStore;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long a test waits for what a bound of a second or two should bring about.
const PATIENCE: Duration = Duration::from_secs(20);

/// A bound no test reaches.
const NEVER: Duration = Duration::from_secs(3600);

/// Bounds that never end a connection; each test shortens the one it is about.
fn patient() -> Timeouts {
    Timeouts {
        handshake: NEVER,
        headers: NEVER,
        body: NEVER,
        idle: NEVER,
    }
}

struct Hub {
    address: std::net::SocketAddr,
    tls: TlsConnector,
    token: String,
    _stop: tokio::sync::oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start(timeouts: Timeouts) -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let identity = flotilla_pki::load_or_create(dir.path(), &["127.0.0.1".to_owned()]).unwrap();
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
        api.bootstrap().await.unwrap();
        let check = identity.admin_token.clone();
        let auth = Arc::new(AdminToken::exactly(check));
        let app = server::router(api, auth, Arc::new(AtomicBool::new(true)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server_tls = Arc::new(identity.server_config().unwrap());
        tokio::spawn(server::serve_tls_with(
            listener,
            server_tls,
            app,
            timeouts,
            async move {
                let _ = stopped.await;
            },
        ));
        Hub {
            address,
            tls: TlsConnector::from(Arc::new(identity.client_config().unwrap())),
            token: identity.admin_token.clone(),
            _stop: stop,
            _dir: dir,
        }
    }

    /// A TLS connection, handshake done, nothing sent.
    async fn connect(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        self.tls.connect(name, tcp).await.unwrap()
    }

    /// An HTTP/1.1 client over a connection of its own, and the task driving the
    /// connection (it ends when the server closes it).
    async fn client(&self) -> (SendRequest<Full<Bytes>>, tokio::task::JoinHandle<()>) {
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(self.connect().await))
                .await
                .unwrap();
        let driving = tokio::spawn(async move {
            let _ = connection.await;
        });
        (sender, driving)
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Value,
    ) -> Request<Full<Bytes>> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let body = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        request.body(Full::new(body)).unwrap()
    }

    /// One request on `sender`'s connection: the status and the whole body.
    async fn send(
        sender: &mut SendRequest<Full<Bytes>>,
        request: Request<Full<Bytes>>,
    ) -> (StatusCode, Bytes) {
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    /// One request on a connection of its own, with this `Authorization` header.
    async fn call(
        &self,
        method: Method,
        path: &str,
        authorization: Option<&str>,
        body: Value,
    ) -> (StatusCode, Bytes) {
        let (mut sender, _driving) = self.client().await;
        Hub::send(&mut sender, self.request(method, path, authorization, body)).await
    }

    /// A watch of the default namespace's ConfigMaps, as the admin, lasting 10 minutes.
    fn configmaps_watch(&self) -> Request<Full<Bytes>> {
        self.request(
            Method::GET,
            "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600",
            Some(&self.bearer()),
            Value::Null,
        )
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

/// Reads the watch's next event from `events`: it must be the ADDED of `name`.
async fn next_added(events: &mut hyper::body::Incoming, name: &str) {
    let frame = tokio::time::timeout(PATIENCE, events.frame())
        .await
        .expect("no watch event")
        .expect("the watch ended")
        .expect("the watch's connection failed");
    let event: Value = serde_json::from_slice(frame.data_ref().unwrap()).unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some(name)),
        "{event}"
    );
}

/// Reads `stream` until the server closes it (end of stream, or a reset); what it sent
/// before. Panics if the server keeps it open for [`PATIENCE`].
async fn closed_by_server(stream: &mut (impl tokio::io::AsyncRead + Unpin), what: &str) -> Vec<u8> {
    let mut received = Vec::new();
    let closing = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    if tokio::time::timeout(PATIENCE, closing).await.is_err() {
        panic!("the server kept {what} open for {} s", PATIENCE.as_secs());
    }
    received
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_is_closed() {
    let hub = Hub::start(Timeouts {
        handshake: Duration::from_secs(1),
        ..patient()
    })
    .await;
    let mut silent = TcpStream::connect(hub.address).await.unwrap();
    let sent = closed_by_server(&mut silent, "a connection with no TLS handshake").await;
    assert!(sent.is_empty(), "{sent:?}");
    // The server still serves.
    let (status, _) = hub
        .call(Method::GET, "/api", Some(&hub.bearer()), Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn slow_headers_are_closed_while_other_clients_are_served() {
    let hub = Hub::start(Timeouts {
        headers: Duration::from_secs(2),
        ..patient()
    })
    .await;
    // 50 connections each sending part of a request's headers, and one sending nothing
    // after its handshake.
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut stream = hub.connect().await;
        stream
            .write_all(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .unwrap();
        stream.flush().await.unwrap();
        slow.push(stream);
    }
    let mut silent = hub.connect().await;
    // Meanwhile, other clients are served.
    for _ in 0..3 {
        let (status, body) = hub
            .call(
                Method::GET,
                "/api/v1/namespaces",
                Some(&hub.bearer()),
                Value::Null,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
    }
    // A keep-alive connection that has had an answer: its next request's headers are
    // bounded too (the idle bound here is an hour).
    let mut again = hub.connect().await;
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"ok") {
        let n = tokio::time::timeout(PATIENCE, again.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    again.write_all(b"GET /api HTTP/1.1\r\n").await.unwrap();
    again.flush().await.unwrap();

    for (i, stream) in slow.iter_mut().enumerate() {
        let sent = closed_by_server(stream, &format!("slow-header connection {i}")).await;
        assert!(sent.is_empty(), "{:?}", String::from_utf8_lossy(&sent));
    }
    closed_by_server(&mut silent, "a connection silent after its handshake").await;
    let sent = closed_by_server(&mut again, "a second request's slow headers").await;
    assert!(sent.is_empty(), "{:?}", String::from_utf8_lossy(&sent));
}

#[tokio::test]
async fn a_slow_body_is_answered_408_and_its_connection_closed() {
    let hub = Hub::start(Timeouts {
        body: Duration::from_secs(1),
        ..patient()
    })
    .await;
    let mut stream = hub.connect().await;
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"kind\":",
        hub.token
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    let answer = closed_by_server(&mut stream, "a connection with a slow body").await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let status: Value =
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap();
    assert_eq!(
        (
            status["kind"].as_str(),
            status["code"].as_u64(),
            status["reason"].as_str()
        ),
        (Some("Status"), Some(408), Some("Timeout")),
        "{status}"
    );
    // Nothing was created.
    let (status, body) = hub
        .call(
            Method::GET,
            "/api/v1/namespaces/default/configmaps",
            Some(&hub.bearer()),
            Value::Null,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(list["items"], json!([]), "{list}");
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_one_answering_a_watch_is_not() {
    let hub = Hub::start(Timeouts {
        headers: Duration::from_secs(1),
        idle: Duration::from_secs(1),
        ..patient()
    })
    .await;
    // A watch, on a connection of its own.
    let (mut watcher, _watching) = hub.client().await;
    let response = watcher.send_request(hub.configmaps_watch()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = response.into_body();

    // A connection that asks once, then nothing: the server closes it.
    let (mut idle, idling) = hub.client().await;
    let (status, _) = Hub::send(
        &mut idle,
        hub.request(Method::GET, "/healthz", None, Value::Null),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::timeout(PATIENCE, idling)
        .await
        .expect("the server kept an idle keep-alive connection open")
        .unwrap();

    // The watch began before that connection's answer, so it has been open longer than
    // the idle and header bounds: it is still open, and gets the next change.
    let (status, body) = hub
        .call(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some(&hub.bearer()),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    next_added(&mut events, "later").await;
}

/// An HTTP/2 client over a connection of its own that offered only `h2` in its
/// handshake, and the task driving the connection (it ends when the server closes it,
/// with what the connection ended with).
async fn http2_client(
    hub: &Hub,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let dir = hub._dir.path();
    let identity = flotilla_pki::load_or_create(dir, &["127.0.0.1".to_owned()]).unwrap();
    let mut config = identity.client_config().unwrap();
    config.alpn_protocols = vec![flotilla_pki::ALPN_H2.to_vec()];
    let tcp = TcpStream::connect(hub.address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(flotilla_pki::ALPN_H2));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    let driving = tokio::spawn(connection);
    (sender, driving)
}

#[tokio::test]
async fn over_http2_a_watch_and_requests_share_one_connection_told_to_go_away_once_idle() {
    let hub = Hub::start(Timeouts {
        headers: Duration::from_secs(1),
        idle: Duration::from_secs(1),
        ..patient()
    })
    .await;
    let (mut sender, driving) = http2_client(&hub).await;
    let watch = sender.send_request(hub.configmaps_watch()).await.unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    assert_eq!(watch.version(), hyper::Version::HTTP_2);
    let mut events = watch.into_body();
    // Requests on the same connection while the watch is open: each answered, and each
    // change reaches the watch.
    for name in ["first", "second"] {
        let request = hub.request(
            Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some(&hub.bearer()),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        );
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(status, StatusCode::CREATED, "{body:?}");
        next_added(&mut events, name).await;
    }
    assert!(
        !driving.is_finished(),
        "the connection ended while a watch was open"
    );
    // The watch ends (its stream reset): nothing is under way, and at the idle bound the
    // server tells the client to go away, then closes the connection: the client's
    // connection ends cleanly, not cut.
    drop(events);
    let ended = tokio::time::timeout(PATIENCE, driving)
        .await
        .expect("the server kept an idle HTTP/2 connection open")
        .unwrap();
    assert!(ended.is_ok(), "the connection was cut: {ended:?}");
}

#[tokio::test]
async fn a_watch_without_timeout_seconds_ends_after_the_minimum_request_timeout_to_twice_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
        .with_min_request_timeout(Duration::from_secs(1));
    api.bootstrap().await.unwrap();
    let client = Client::new(api);
    // No timeoutSeconds, and timeoutSeconds=0 (which kube-apiserver takes as none).
    for query in ["watch=1", "watch=1&timeoutSeconds=0"] {
        let response = client
            .request(Method::GET, "/api/v1/namespaces/default/configmaps")
            .query(query)
            .response()
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let body = tokio::time::timeout(
            PATIENCE,
            axum::body::to_bytes(response.into_body(), usize::MAX),
        )
        .await
        .unwrap_or_else(|_| panic!("{query}: the watch lasted over {} s", PATIENCE.as_secs()))
        .unwrap();
        assert!(body.is_empty(), "{query}: {body:?}");
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_accepted_in_any_case() {
    let hub = Hub::start(Timeouts::default()).await;
    let token = &hub.token;
    for authorization in [
        format!("Bearer {token}"),
        format!("bearer {token}"),
        format!("BEARER {token}"),
        format!("bEaReR  {token}"),
    ] {
        let (status, body) = hub
            .call(Method::GET, "/api", Some(&authorization), Value::Null)
            .await;
        assert_eq!(status, StatusCode::OK, "{authorization}: {body:?}");
    }
    for authorization in [
        format!("Basic {token}"),
        format!("Bearer{token}"),
        format!("Bearer x{token}"),
        "Bearer ".to_owned(),
    ] {
        let (status, body) = hub
            .call(Method::GET, "/api", Some(&authorization), Value::Null)
            .await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{authorization}: {body:?}"
        );
    }
}

#[tokio::test]
async fn version_answers_without_a_token_and_the_api_does_not() {
    let hub = Hub::start(Timeouts::default()).await;
    for path in ["/version", "/version/"] {
        let (status, body) = hub.call(Method::GET, path, None, Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body:?}");
        let version: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            version["gitVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with('v')),
            "{version}"
        );
        // A token that is presented must be valid, on public paths too.
        let (status, body) = hub
            .call(Method::GET, path, Some("Bearer wrong"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body:?}");
    }
    for path in [
        "/api",
        "/apis",
        "/api/v1/namespaces",
        "/openapi/v3",
        "/metrics",
        "/versions",
    ] {
        let (status, body) = hub.call(Method::GET, path, None, Value::Null).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body:?}");
        let (status, body) = hub
            .call(Method::GET, path, Some("Bearer wrong"), Value::Null)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body:?}");
    }
    let (status, _) = hub
        .call(Method::GET, "/api", Some(&hub.bearer()), Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
}
