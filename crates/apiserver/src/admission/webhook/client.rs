//! Calling a webhook: one pooled HTTPS client per trust setup (hyper, rustls), connections
//! kept alive and reused; each call bounded by the webhook's timeout.
//!
//! ```text
//!  Trust (caBundle or the system's roots, server name) ─► Client (pool) ─┐
//!  Endpoint: URL shown in errors, URI connected to ─────────────────────┴─► POST JSON
//!     ─► 200 + body within the timeout, or why not (in Kubernetes' words: `Post "URL": …`)
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The most a webhook's answer may hold.
const MAX_RESPONSE_BYTES: usize = 6 << 20;

/// Whom a client trusts and verifies the server as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Trust {
    /// The caBundle's certificates (DER); `None`: the system's roots.
    pub(crate) ca: Option<Vec<Vec<u8>>>,
    /// The name the server's certificate must hold, when it is not the URL's host (a
    /// service reference: `NAME.NAMESPACE.svc`).
    pub(crate) server_name: Option<String>,
}

/// A pooled HTTPS client.
#[derive(Clone)]
pub(crate) struct Client(
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Client {
    /// A client for `trust`, or why one cannot be made (no usable root).
    pub(crate) fn new(trust: &Trust) -> Result<Client, String> {
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match &trust.ca {
            Some(certificates) => {
                let mut roots = rustls::RootCertStore::empty();
                for der in certificates {
                    roots
                        .add(rustls::pki_types::CertificateDer::from(der.clone()))
                        .map_err(|e| format!("caBundle: {e}"))?;
                }
                let config = rustls::ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                builder.with_tls_config(config)
            }
            None => builder
                .with_provider_and_native_roots(provider())
                .map_err(|e| format!("no system root certificates: {e}"))?,
        };
        let builder = builder.https_only();
        let builder = match &trust.server_name {
            Some(name) => {
                let name = rustls::pki_types::ServerName::try_from(name.clone())
                    .map_err(|e| format!("invalid server name {name:?}: {e}"))?;
                builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
            }
            None => builder,
        };
        let connector = builder.enable_http1().build();
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(Client(client))
    }
}

/// Where a webhook is called.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The URL as the configuration names it (with `?timeout=`), for messages.
    pub(crate) url: String,
    /// The URI connected to (a service reference: its address).
    pub(crate) uri: hyper::Uri,
    pub(crate) client: Client,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Endpoint").field(&self.url).finish()
    }
}

impl Endpoint {
    /// POSTs `body` (JSON) and returns the answer's body, within `timeout`; why not, in
    /// the words Kubernetes' client uses (`Post "URL": …`).
    pub(crate) async fn post(&self, body: Bytes, timeout: Duration) -> Result<Bytes, String> {
        let failed = |why: String| format!("Post \"{}\": {why}", self.url);
        let request = hyper::Request::post(self.uri.clone())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(body))
            .map_err(|e| failed(e.to_string()))?;
        let call = async {
            let response = self
                .client
                .0
                .request(request)
                .await
                .map_err(|e| failed(chain(&e)))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| failed(format!("reading the answer: {e}")))?
                .to_bytes();
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned();
                return Err(failed(format!(
                    "the server responded with the status code {} ({text:?})",
                    status.as_u16()
                )));
            }
            Ok(body)
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(failed("context deadline exceeded".into())),
        }
    }
}

/// An error and its sources, `: `-separated.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}
