//! Serving the API over HTTPS: TLS, authentication, health endpoints, bounds on slow
//! and idle connections, graceful shutdown.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulConnection;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::Api;
use crate::auth::{Attributes, Authenticator, Credentials, Presented, UserInfo};
use crate::http::error::ApiError;
use crate::http::metrics::Metrics;
use crate::registry::object::MAX_REQUEST_BYTES;

/// How long a connection may take at each step before [`serve_tls_with`] closes it. The
/// defaults are kube-apiserver's: its secure serving sets Go's `ReadHeaderTimeout` to 32 s
/// (which Go also applies to the TLS handshake) and `IdleTimeout` to 90 s, and its
/// `--request-timeout` is 60 s. Without them, a client that opens connections and sends a
/// byte now and then holds a task and a socket each for as long as it likes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// The TLS handshake, from accept.
    pub handshake: Duration,
    /// A request's headers: for a connection's first request from the end of the
    /// handshake, for a later one from its first byte. The connection is closed after it.
    pub headers: Duration,
    /// A request's body, from its headers to its last byte: answered with a 408 after it
    /// (and the connection closed, its unread body in the way of the next request).
    pub body: Duration,
    /// A keep-alive connection with no request, from the end of the last answer. The
    /// connection is closed after it.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: Duration::from_secs(32),
            headers: Duration::from_secs(32),
            body: Duration::from_secs(60),
            idle: Duration::from_secs(90),
        }
    }
}

/// The address a request came from (the audit log's `sourceIPs`).
#[derive(Clone, Copy, Debug)]
struct Peer(std::net::IpAddr);

/// The client certificate chain the connection's TLS handshake verified, leaf first.
#[derive(Clone, Debug)]
struct ClientCertificates(Arc<[CertificateDer<'static>]>);

/// Shared state of the HTTP layer, behind one `Arc`: axum clones a router's state for
/// every request (twice), and a clone of this struct itself would count up and down each
/// `Arc` the API holds — eighteen atomic operations on lines that two cores take turns to
/// own, each way, for every request.
struct Shared {
    api: Api,
    authenticator: Arc<dyn Authenticator>,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

/// The HTTP application: health endpoints without authentication, everything else
/// authenticated by `authenticator`, then through the API's stages.
pub fn router(
    api: Api,
    authenticator: Arc<dyn Authenticator>,
    ready: Arc<AtomicBool>,
) -> axum::Router {
    router_with(api, authenticator, ready, Arc::new(Metrics::new()))
}

/// [`router`] with `metrics` at `/metrics` (to which the caller may have added its own).
pub fn router_with(
    api: Api,
    authenticator: Arc<dyn Authenticator>,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) -> axum::Router {
    axum::Router::new()
        .fallback(handle)
        .with_state(Arc::new(Shared {
            api,
            authenticator,
            ready,
            metrics,
        }))
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let span = info_span!("request", method = %parts.method, path = %parts.uri.path());
    async move {
        let path = parts.uri.path();
        match path {
            "/healthz" | "/livez" => return text(StatusCode::OK, "ok"),
            "/readyz" => {
                return if shared.ready.load(Ordering::Acquire) {
                    text(StatusCode::OK, "ok")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "not ready")
                };
            }
            _ => {}
        }
        let started = std::time::Instant::now();
        let observe = |code: u16| {
            let (method, query) = (parts.method.as_str(), parts.uri.query());
            shared
                .metrics
                .observe_request(method, path, query, code, started.elapsed());
        };
        // `/version` is public on a cluster (system:public-info-viewer): clients ask it
        // before they authenticate, and so are the ServiceAccount issuer's discovery
        // documents (system:service-account-issuer-discovery), which other systems read
        // to verify the hub's tokens. As there, a token that is presented must be valid:
        // a wrong one is refused on every path (`flotilla join` checks credentials so).
        let public = is_public(path);
        let presented = Presented::new(
            &parts.headers,
            parts
                .extensions
                .get::<ClientCertificates>()
                .map(|chain| &*chain.0),
        );
        let user = match shared.authenticator.authenticate(&presented).await {
            Credentials::User(user) => user,
            Credentials::Missing if public => Arc::new(UserInfo::anonymous()),
            Credentials::Missing => {
                observe(401);
                return unauthorized(&shared, &parts, "no credentials");
            }
            Credentials::Invalid(refusal) => {
                observe(401);
                info!(reason = %refusal, "credentials refused");
                return unauthorized(&shared, &parts, &refusal.to_string());
            }
        };
        if path == "/metrics" {
            let user = match shared.api.acting_as(user, path, &parts.headers).await {
                Ok(user) => user,
                Err(refused) => {
                    observe(refused.code);
                    return refused.into_response();
                }
            };
            let attributes = Attributes::path(crate::api::ROOT_CLUSTER, &user, "get", path);
            if let Err(refused) = shared.api.authorize(&attributes).await {
                observe(refused.code);
                return refused.into_response();
            }
            let cache = shared.api.watch_cache();
            let revision = shared.api.revision().await.unwrap_or_default();
            let text = shared
                .metrics
                .render(cache.watchers(), cache.store_watches(), revision);
            let mut response = (StatusCode::OK, text).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            return response;
        }
        let body = match to_bytes(body, MAX_REQUEST_BYTES + 1).await {
            Ok(body) => body,
            Err(e) => {
                let error = match timed_out(&e) {
                    Some(timeout) => ApiError::new(
                        408,
                        crate::http::error::Reason::Timeout,
                        BodyTimedOut(timeout).to_string(),
                    ),
                    None => ApiError::too_large(format!(
                        "the request body is over the limit of {MAX_REQUEST_BYTES} bytes"
                    )),
                };
                observe(error.code);
                return error.into_response();
            }
        };
        let peer = parts.extensions.get::<Peer>().map(|peer| peer.0);
        let response = shared
            .api
            .handle_from(
                peer,
                user,
                parts.method.clone(),
                path,
                parts.uri.query(),
                &parts.headers,
                body,
            )
            .await;
        observe(response.status().as_u16());
        debug!(status = response.status().as_u16(), "answered");
        response
    }
    .instrument(span)
    .await
}

/// Paths a request without credentials may read (as `system:anonymous`).
fn is_public(path: &str) -> bool {
    let path = path.strip_suffix('/').unwrap_or(path);
    matches!(
        path,
        "/version" | "/.well-known/openid-configuration" | "/openid/v1/jwks"
    )
}

/// The 401 for a request whose credentials are missing or refused for `reason`, which
/// the client is not told (kube's `Unauthorized` Status) and the audit log is.
fn unauthorized(shared: &Shared, parts: &axum::http::request::Parts, reason: &str) -> Response {
    let error = ApiError::unauthorized();
    let body = bytes::Bytes::from(serde_json::to_vec(&error.status()).unwrap_or_default());
    crate::auth::audit::unauthenticated(
        &*shared.api.stages.audit,
        parts.extensions.get::<Peer>().map(|peer| peer.0),
        &parts.method,
        parts.uri.path(),
        parts.uri.query(),
        &parts.headers,
        reason,
        body,
    );
    error.into_response()
}

fn text(code: StatusCode, body: &'static str) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// How long [`serve_tls`] waits before accepting again after an error that would repeat
/// at once (out of file descriptors or memory), rather than spinning on it.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether, and how long, to pause after `accept` failed with `error`: not when one
/// client's connection failed before it was accepted (the next one is unaffected); for
/// anything else, such as the process's open-file limit, [`ACCEPT_PAUSE`] — another
/// `accept` at once would fail the same way, burning a core and filling the log.
fn accept_pause(error: &std::io::Error) -> Option<std::time::Duration> {
    use std::io::ErrorKind;
    match error.kind() {
        ErrorKind::ConnectionAborted
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionRefused
        | ErrorKind::Interrupted
        | ErrorKind::WouldBlock => None,
        _ => Some(ACCEPT_PAUSE),
    }
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, then stops accepting,
/// lets requests in flight finish (watches end), and returns. Connections are bounded by
/// [`Timeouts::default`].
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    serve_tls_with(listener, tls, app, Timeouts::default(), shutdown).await;
}

/// [`serve_tls`] with connections bounded by `timeouts`.
pub async fn serve_tls_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    timeouts: Timeouts,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let acceptor = TlsAcceptor::from(tls);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (socket, peer): (_, SocketAddr) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    let Some(pause) = accept_pause(&e) else {
                        debug!(error = %e, "a connection failed before it was accepted");
                        continue;
                    };
                    warn!(error = %e, "accept failed; pausing {} ms", pause.as_millis());
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(pause) => continue,
                    }
                }
            },
        };
        // Connections that have ended leave the set (their tasks are done).
        while connections.try_join_next().is_some() {}
        // Answers and watch events leave when written, not after the client's delayed
        // ack of the previous segment (Nagle: up to ~40 ms each).
        if let Err(e) = socket.set_nodelay(true) {
            debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let app = app.clone();
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            // A client that never finishes its handshake does not hold a connection.
            let tls = match tokio::time::timeout(timeouts.handshake, acceptor.accept(socket)).await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let tls_alpn_is_h2 = tls.get_ref().1.alpn_protocol() == Some(flotilla_pki::ALPN_H2);
            let certificates = tls.get_ref().1.peer_certificates().map(|chain| {
                ClientCertificates(chain.iter().map(|c| c.clone().into_owned()).collect())
            });
            let activity = Arc::new(Activity::new());
            let io = TokioIo::new(Watched {
                io: tls,
                activity: activity.clone(),
            });
            let requests = activity.clone();
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let answering = requests.answering();
                    let mut request =
                        request.map(|body| Body::new(Deadline::new(body, timeouts.body)));
                    request.extensions_mut().insert(Peer(peer.ip()));
                    if let Some(certificates) = &certificates {
                        request.extensions_mut().insert(certificates.clone());
                    }
                    let response = app.clone().oneshot(request);
                    async move {
                        let response = response.await?;
                        Ok::<_, std::convert::Infallible>(response.map(|body| Answer {
                            body,
                            _answering: answering,
                        }))
                    }
                },
            );
            // HTTP/2 when the client asked for it in the handshake (client-go does: all
            // of a process's watches and requests share one connection), HTTP/1.1 otherwise.
            if tls_alpn_is_h2 {
                let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                http2.max_concurrent_streams(MAX_STREAMS);
                let connection = http2.serve_connection(io, service);
                drive(connection, true, &activity, &timeouts, &mut stopped, peer).await;
            } else {
                let connection =
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service);
                drive(connection, false, &activity, &timeouts, &mut stopped, peer).await;
            }
        });
    }
    info!("shutting down: no new connections; finishing requests in flight");
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
}

/// The most requests one HTTP/2 connection may have under way at once (Go's server
/// default); a client that needs more opens another connection.
const MAX_STREAMS: u32 = 250;

/// How long a connection told to finish (the server stopping, or an HTTP/2 connection's
/// bound reached) may take over what it has under way before it is closed.
const FINISHING: Duration = Duration::from_secs(5);

/// Serves `connection` until it ends, it has waited too long for a request's headers or
/// idled too long, or the server stops (finished gracefully, for at most [`FINISHING`]).
/// At a bound an HTTP/1.1 connection is dropped (closed: no request is under way), and an
/// HTTP/2 one (`goaway`) is told to go away first, as Go's server does: a client that
/// opens a stream as the bound ends learns that the server never took it (and sends it
/// again on a new connection) instead of losing it to the close.
async fn drive<C>(
    connection: C,
    goaway: bool,
    activity: &Activity,
    timeouts: &Timeouts,
    stopped: &mut tokio::sync::watch::Receiver<bool>,
    peer: SocketAddr,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    tokio::pin!(connection);
    let finish = tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                debug!(%peer, error = %e, "connection ended with an error");
            }
            false
        }
        () = activity.expired(timeouts) => {
            debug!(%peer, "closing a connection idle or slow to send its headers");
            goaway
        }
        _ = stopped.changed() => true,
    };
    if finish {
        connection.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(FINISHING, connection).await;
    }
}

/// Where a connection stands between requests, for its [`Timeouts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's headers since then (the handshake's end, or the
    /// request's first byte).
    Headers(Instant),
    /// No request and nothing read since then (the last answer's end).
    Idle(Instant),
    /// This many requests being answered (their headers read, their answers not yet
    /// all handed over): no bound here; the body's is [`Deadline`], a watch's its own.
    Answering(usize),
}

/// One connection's [`Phase`].
struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    /// A connection whose handshake has just ended, waiting for its first request.
    fn new() -> Self {
        Activity {
            phase: Mutex::new(Phase::Headers(Instant::now())),
        }
    }

    fn update(&self, next: impl FnOnce(Phase) -> Phase) {
        let mut phase = self
            .phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *phase = next(*phase);
    }

    /// Bytes arrived: on an idle connection, a request has begun.
    fn read(&self) {
        self.update(|phase| match phase {
            Phase::Idle(_) => Phase::Headers(Instant::now()),
            phase => phase,
        });
    }

    /// A request's headers have been read; it is being answered until the guard drops.
    fn answering(self: &Arc<Self>) -> Answering {
        self.update(|phase| match phase {
            Phase::Answering(n) => Phase::Answering(n + 1),
            Phase::Headers(_) | Phase::Idle(_) => Phase::Answering(1),
        });
        Answering(self.clone())
    }

    fn deadline(&self, timeouts: &Timeouts) -> Option<Instant> {
        match *self
            .phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Phase::Headers(since) => Some(since + timeouts.headers),
            Phase::Idle(since) => Some(since + timeouts.idle),
            Phase::Answering(_) => None,
        }
    }

    /// Completes when the connection has waited too long for headers, or idled too long.
    ///
    /// It wakes on a clock, never per request: each wake-up checks the phase then. It
    /// looks again at the phase's deadline, and at most one headers bound later (a request
    /// that begins on an idle connection, or after an answer, is bounded from its first
    /// byte), so every bound is kept to the instant. (Woken
    /// at each change, as it was, the connection's task ran three more times per request:
    /// a GET from one client took 0.110 ms at p50 instead of 0.046.)
    async fn expired(&self, timeouts: &Timeouts) {
        loop {
            match self.deadline(timeouts) {
                Some(deadline) if deadline <= Instant::now() => return,
                // An idle connection's request may begin at any moment, its headers
                // bounded from then: look again within that bound.
                Some(deadline) => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + timeouts.headers)).await;
                }
                None => tokio::time::sleep(timeouts.headers.min(timeouts.idle)).await,
            }
        }
    }
}

/// A request being answered: its connection is idle again when this drops (when hyper
/// has taken the answer's last bytes, or the connection is gone).
struct Answering(Arc<Activity>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.update(|phase| match phase {
            Phase::Answering(n) if n > 1 => Phase::Answering(n - 1),
            _ => Phase::Idle(Instant::now()),
        });
    }
}

/// A connection's stream, telling its [`Activity`] when bytes arrive.
struct Watched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// An answer's body, holding its request's [`Answering`] until hyper is done with it.
struct Answer {
    body: Body,
    _answering: Answering,
}

impl hyper::body::Body for Answer {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// A request body that fails with [`BodyTimedOut`] if it has not all arrived by its
/// deadline.
struct Deadline {
    body: hyper::body::Incoming,
    timeout: Duration,
    at: Instant,
    /// Set on the first wait: most bodies are there at once, and need no timer.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Deadline {
    fn new(body: hyper::body::Incoming, timeout: Duration) -> Self {
        Deadline {
            body,
            timeout,
            at: Instant::now() + timeout,
            sleep: None,
        }
    }
}

impl hyper::body::Body for Deadline {
    type Data = bytes::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let at = this.at;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// A request body did not arrive within [`Timeouts::body`].
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s", .0.as_secs_f64())]
struct BodyTimedOut(Duration);

/// The bound, if reading a request body failed because it passed it.
fn timed_out(error: &axum::Error) -> Option<Duration> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = next {
        if let Some(BodyTimedOut(timeout)) = error.downcast_ref() {
            return Some(*timeout);
        }
        next = error.source();
    }
    None
}

/// The API as an in-process HTTP service for the server itself, its requests running as
/// the loopback user ([`UserInfo::loopback`], in `system:masters`): [`local_service_as`]
/// of that user.
pub fn local_service<B>(
    api: Api,
    metrics: Arc<Metrics>,
) -> impl tower::Service<
    axum::http::Request<B>,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<Output = Result<Response, std::convert::Infallible>> + Send,
> + Clone
+ Send
+ 'static
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    local_service_as(api, metrics, UserInfo::loopback())
}

/// The API as an in-process HTTP service whose requests run as `user`, for the hub's own
/// controllers (each with an identity of its own, authorized as any client is): requests
/// go straight to [`Api::handle`] (same audit, authorization, routing, admission and
/// watch path as over HTTPS) with no socket, no TLS and no token.
/// `kube::Client::new(local_service_as(api, metrics, user), "default")` makes a kube-rs
/// client of it. Its requests count in `metrics` as any client's do, so that `/metrics`
/// shows the load the hub's own controllers put on the API.
///
/// ```text
///  kube::Client ─► local_service_as(user) ─► Api::handle(user, …) ─► audit ─► authorize
///                                            (as user) ─► admission ─► registry
/// ```
pub fn local_service_as<B>(
    api: Api,
    metrics: Arc<Metrics>,
    user: Arc<UserInfo>,
) -> impl tower::Service<
    axum::http::Request<B>,
    Response = Response,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<Output = Result<Response, std::convert::Infallible>> + Send,
> + Clone
+ Send
+ 'static
where
    B: axum::body::HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    tower::service_fn(move |request: axum::http::Request<B>| {
        let (api, metrics, user) = (api.clone(), metrics.clone(), user.clone());
        async move {
            let (parts, body) = request.into_parts();
            let span = info_span!("local request", method = %parts.method,
                path = %parts.uri.path(), user = %user.name);
            async move {
                let started = std::time::Instant::now();
                let response = match to_bytes(Body::new(body), MAX_REQUEST_BYTES + 1).await {
                    Ok(body) => {
                        api.handle(
                            user,
                            parts.method.clone(),
                            parts.uri.path(),
                            parts.uri.query(),
                            &parts.headers,
                            body,
                        )
                        .await
                    }
                    Err(_) => ApiError::too_large(format!(
                        "the request body is over the limit of {MAX_REQUEST_BYTES} bytes"
                    ))
                    .into_response(),
                };
                metrics.observe_request(
                    parts.method.as_str(),
                    parts.uri.path(),
                    parts.uri.query(),
                    response.status().as_u16(),
                    started.elapsed(),
                );
                Ok(response)
            }
            .instrument(span)
            .await
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_in_process_service_runs_as_the_user_it_is_built_for() {
        let store: Arc<dyn flotilla_store::Store> =
            Arc::new(flotilla_store_memory::MemoryStore::new());
        let api = Api::new(store, Arc::new(crate::Registry::builtin()), "127.0.0.1");
        let whoami = |service: tower::util::BoxCloneService<
            axum::http::Request<Body>,
            Response,
            std::convert::Infallible,
        >| async move {
            let request =
                axum::http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(Body::from(
                        r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
                    ))
                    .unwrap();
            let response = service.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
            let review: serde_json::Value = serde_json::from_slice(&body).unwrap();
            review["status"]["userInfo"].clone()
        };
        let metrics = Arc::new(Metrics::new());
        let controller = Arc::new(UserInfo::new(
            "system:flotilla:fleet-controller",
            &["system:authenticated"],
        ));
        let own = whoami(tower::util::BoxCloneService::new(local_service_as(
            api.clone(),
            metrics.clone(),
            controller,
        )))
        .await;
        assert_eq!(
            own,
            serde_json::json!({"username": "system:flotilla:fleet-controller",
                "groups": ["system:authenticated"]})
        );
        let loopback = whoami(tower::util::BoxCloneService::new(local_service(
            api, metrics,
        )))
        .await;
        assert_eq!(loopback["username"], crate::auth::LOOPBACK_USER);
        assert_eq!(
            loopback["groups"],
            serde_json::json!(["system:masters", "system:authenticated"])
        );
    }

    #[test]
    fn running_out_of_descriptors_pauses_accepting_but_a_failed_client_does_not() {
        // EMFILE and ENFILE: the process's and the system's open-file limits.
        for errno in [24, 23] {
            let error = std::io::Error::from_raw_os_error(errno);
            assert_eq!(accept_pause(&error), Some(ACCEPT_PAUSE), "{error}");
        }
        // ECONNABORTED, ECONNRESET: one client gave up between SYN and accept.
        for errno in [103, 104] {
            let error = std::io::Error::from_raw_os_error(errno);
            assert_eq!(accept_pause(&error), None, "{error}");
        }
    }
}
