//! `examples/platform`'s referential-integrity webhook: what CEL cannot see, because it
//! spans objects. A `Tier` must name a `Platform` that exists; a `Platform` that a `Tier`
//! still names cannot be deleted. The hub calls it (a ValidatingWebhookConfiguration,
//! `AdmissionReview` v1 over HTTPS with the `caBundle` this server writes out) and it
//! reads the hub with its own kubeconfig.
//!
//! ```text
//!  kubectl apply Tier ─► hub admission ─► POST /validate (AdmissionReview) ─► GET Platform
//!  kubectl delete Platform ─► hub ─► POST /validate ─► LIST Tiers naming it
//!                                       ◄─ allowed, or denied with why (403)
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A certificate could not be made.
    #[error("certificate: {0}")]
    Certificate(String),
    /// The listening socket or the CA file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The API group of the example's kinds.
pub const GROUP: &str = "example.flotilla.io";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), plural)
}

/// A client of the hub from the kubeconfig at `path`.
pub async fn client(path: &Path) -> Result<kube::Client, Error> {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// Whether the request `review` asks for keeps the Platforms and Tiers referring to
/// what exists: `None` if so, the reason if not.
async fn refusal(hub: &kube::Client, request: &Value) -> Result<Option<String>, kube::Error> {
    let kind = request["kind"]["kind"].as_str().unwrap_or_default();
    let operation = request["operation"].as_str().unwrap_or_default();
    let name = request["name"].as_str().unwrap_or_default();
    match (kind, operation) {
        ("Tier", "CREATE" | "UPDATE") => {
            let platform = request["object"]["spec"]["platform"]
                .as_str()
                .unwrap_or_default();
            let platforms: Api<DynamicObject> =
                Api::all_with(hub.clone(), &resource("Platform", "platforms"));
            Ok(match platforms.get_opt(platform).await? {
                Some(_) => None,
                None => Some(format!(
                    "Tier {name} refers to Platform {platform}, which does not exist"
                )),
            })
        }
        ("Platform", "DELETE") => {
            let tiers: Api<DynamicObject> = Api::all_with(hub.clone(), &resource("Tier", "tiers"));
            let naming: Vec<String> = tiers
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|t| t.data["spec"]["platform"] == name)
                .filter_map(|t| t.metadata.name)
                .collect();
            Ok((!naming.is_empty()).then(|| {
                format!(
                    "Platform {name} is still referred to by Tier {}",
                    naming.join(", ")
                )
            }))
        }
        _ => Ok(None),
    }
}

/// The AdmissionReview answering `review`: allowed, or denied (403) with why. A hub that
/// cannot be read denies (500): the webhook cannot vouch for what it did not see.
pub async fn answer(hub: &kube::Client, review: &Value) -> Value {
    let request = &review["request"];
    let response = match refusal(hub, request).await {
        Ok(None) => json!({"uid": request["uid"], "allowed": true}),
        Ok(Some(why)) => json!({"uid": request["uid"], "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": why}}),
        Err(e) => json!({"uid": request["uid"], "allowed": false,
            "status": {"code": 500, "reason": "InternalError",
                "message": format!("the platform webhook could not read the hub: {e}")}}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// A CA and a server certificate it issued for 127.0.0.1: (the CA's PEM, for the
/// configuration's `caBundle`; the server's TLS settings).
pub fn certificates() -> Result<(String, rustls::ServerConfig), Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let bad = |e: rcgen::Error| Error::Certificate(e.to_string());
    let ca_key = KeyPair::generate().map_err(bad)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(bad)?;
    ca.distinguished_name
        .push(DnType::CommonName, "platform webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(bad)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().map_err(bad)?;
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .map_err(bad)?
        .signed_by(&key, &issuer)
        .map_err(bad)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
        .map_err(|e| Error::Certificate(e.to_owned()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Certificate(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .map_err(|e| Error::Certificate(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca_cert.pem(), config))
}

/// Serves `POST /validate` on `listen` with new certificates (the CA's PEM written to
/// `ca_file`) until `shutdown` completes; reads the hub with `hub`. Returns the address
/// it listens on once bound, through `bound`.
pub async fn serve(
    listen: SocketAddr,
    hub: kube::Client,
    ca_file: &Path,
    bound: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), Error> {
    let (ca_pem, tls) = certificates()?;
    std::fs::write(ca_file, ca_pem)?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    bound(listener.local_addr()?);
    let app = axum::Router::new().route(
        "/validate",
        axum::routing::post(move |body: bytes::Bytes| {
            let hub = hub.clone();
            async move {
                let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                axum::Json(answer(&hub, &review).await)
            }
        }),
    );
    flotilla_apiserver::http::server::serve_tls(listener, Arc::new(tls), app, shutdown).await;
    Ok(())
}
