//! Serving the API over HTTPS: TLS, the bearer token, health endpoints, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::Api;
use crate::metrics::Metrics;
use crate::object::MAX_REQUEST_BYTES;
use crate::status::ApiError;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Who may call the API.
#[derive(Clone)]
pub struct Auth {
    /// Checks a presented bearer token.
    pub check: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

/// Shared state of the HTTP layer.
#[derive(Clone)]
struct Shared {
    api: Api,
    auth: Auth,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

/// The HTTP application: health endpoints without authentication, everything else behind
/// the bearer token.
pub fn router(api: Api, auth: Auth, ready: Arc<AtomicBool>) -> axum::Router {
    router_with(api, auth, ready, Arc::new(Metrics::new()))
}

/// [`router`] with `metrics` at `/metrics` (to which the caller may have added its own).
pub fn router_with(
    api: Api,
    auth: Auth,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(Shared {
        api,
        auth,
        ready,
        metrics,
    })
}

async fn handle(State(shared): State<Shared>, request: Request) -> Response {
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
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let started = std::time::Instant::now();
        let observe = |code: u16| {
            let (method, query) = (parts.method.as_str(), parts.uri.query());
            shared
                .metrics
                .observe_request(method, path, query, code, started.elapsed());
        };
        if !token.is_some_and(|t| (shared.auth.check)(t)) {
            observe(401);
            return ApiError::unauthorized().into_response();
        }
        if path == "/metrics" {
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
            Err(_) => {
                return ApiError::too_large(format!(
                    "the request body is over the limit of {MAX_REQUEST_BYTES} bytes"
                ))
                .into_response();
            }
        };
        let response = shared
            .api
            .serve(
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
/// lets requests in flight finish (watches end), and returns.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
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
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
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
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                app.clone().oneshot(request.map(Body::new))
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                _ = stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), connection).await;
                }
            }
        });
    }
    info!("shutting down: no new connections; finishing requests in flight");
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
}

/// The API as an in-process HTTP service, for the hub's own controllers: requests go
/// straight to [`Api::serve`] (same routing, admission and watch path as over HTTPS) with
/// no socket, no TLS and no token. `kube::Client::new(local_service(api, metrics), "default")`
/// makes a kube-rs client of it. Its requests count in `metrics` as any client's do, so
/// that `/metrics` shows the load the hub's own controllers put on the API.
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
    tower::service_fn(move |request: axum::http::Request<B>| {
        let (api, metrics) = (api.clone(), metrics.clone());
        async move {
            let (parts, body) = request.into_parts();
            let span =
                info_span!("local request", method = %parts.method, path = %parts.uri.path());
            async move {
                let started = std::time::Instant::now();
                let response = match to_bytes(Body::new(body), MAX_REQUEST_BYTES + 1).await {
                    Ok(body) => {
                        api.serve(
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
