//! Certificate renewal, as the kubelet rotates its client certificate: before 80 % of its
//! lifetime, a new key and a CSR made with the current certificate; the hub approves a
//! renewal by the cluster's own identity at once.
//!
//! ```text
//!  agent.crt: obtained (its file's time, or notBefore if later) … notAfter
//!  at obtained + 80 % ─► new key ─► CSR NAME-<key digest> as system:flotilla:cluster:NAME
//!     (CN the same, O system:flotilla:clusters, expirationSeconds = --cert-duration)
//!     hub: registrar approves (AutoApprovedRenewal: requester = CN = a Cluster's pull
//!          identity whose certificate is recorded), signer signs, registrar records the
//!          new serial ─► the old certificate gets 401 from then on
//!  ─► read the CSR, then watch it by name (register::signed; one authenticated stream: the old
//!     certificate's replacement does not cut it) until signed ─► agent.key, agent.crt (0600) ─► the hub client swapped
//!  failures: tried again with backoff (5 s … 5 min) while the certificate lasts
//! ```
//!
//! A request already under way with the old certificate when the hub records the new
//! one gets 401: the agent asks again with the current certificate before it takes a
//! 401 for a revocation ([`crate::pull`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tracing::{Instrument as _, info, info_span, warn};

use crate::register::{Credentials, Files, SIGNER, csr_name, signed, write_private};
use crate::{Error, HubAuth, hub_client};

/// The share of a certificate's lifetime after which it is renewed.
pub const RENEW_AT: f64 = 0.8;

/// A client of the hub whose credentials can be replaced while it is in use: every
/// request goes through the client current when it is sent. Clones share it.
#[derive(Clone)]
pub struct SwappableClient {
    current: Arc<RwLock<kube::Client>>,
}

impl SwappableClient {
    /// Starts with `client`.
    pub fn new(client: kube::Client) -> Self {
        SwappableClient {
            current: Arc::new(RwLock::new(client)),
        }
    }

    /// A client that sends each request through the current client.
    pub fn client(&self) -> kube::Client {
        let current = self.current.clone();
        let default_namespace = self.current().default_namespace().to_owned();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let client = current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            async move { client.send(request).await }
        });
        kube::Client::new(service, default_namespace)
    }

    fn current(&self) -> kube::Client {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sends every later request through `client`.
    pub fn swap(&self, client: kube::Client) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
    }
}

/// What renewing needs.
#[derive(Clone, Debug)]
pub struct Renewal {
    /// `https://HOST:PORT` of the hub.
    pub hub: String,
    /// The cluster's name on the hub.
    pub cluster: String,
    /// Where the key and certificate are kept.
    pub data_dir: PathBuf,
    /// The lifetime asked for (`expirationSeconds`); none: the hub's default.
    pub duration: Option<Duration>,
}

/// When the certificate `cert_pem`, obtained at `obtained` (Unix seconds), is due for
/// renewal (Unix seconds): 80 % into its lifetime, counted from when it was obtained or
/// from its notBefore if later (a signer backdates notBefore by minutes, which would eat
/// a short lifetime).
pub fn renew_at(cert_pem: &str, obtained: i64) -> Result<i64, Error> {
    let (not_before, not_after) = flotilla_pki::certificate_validity(cert_pem.as_bytes())
        .map_err(|e| Error::Input(format!("the agent's certificate: {e}")))?;
    let start = not_before.max(obtained).min(not_after);
    let lifetime = (not_after - start) as f64;
    Ok(start + (lifetime * RENEW_AT) as i64)
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// When the file at `path` was last written (Unix seconds); now if unknown.
fn written_at(path: &Path) -> i64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(now, |d| d.as_secs() as i64)
}

/// Renews the certificate of `credentials` before each one's 80 %, swapping `hub` to the
/// new one each time; runs until the process ends, or fails once the certificate has
/// expired without a renewal.
pub async fn run(
    renewal: Renewal,
    mut credentials: Credentials,
    hub: SwappableClient,
) -> Result<(), Error> {
    let files = Files::in_dir(&renewal.data_dir);
    let mut obtained = written_at(&files.cert);
    let mut backoff = Duration::from_secs(5);
    loop {
        let due = renew_at(&credentials.cert_pem, obtained)?;
        let wait = Duration::from_secs(u64::try_from(due - now()).unwrap_or(0));
        info!(in_seconds = wait.as_secs(), "certificate renewal scheduled");
        tokio::time::sleep(wait).await;
        let span = info_span!("renew", cluster = %renewal.cluster);
        match renew(&renewal, &files, &credentials, &hub.client())
            .instrument(span)
            .await
        {
            Ok(renewed) => {
                let client = hub_client(
                    &renewal.hub,
                    &renewed.ca_pem,
                    HubAuth::Certificate {
                        cert_pem: &renewed.cert_pem,
                        key_pem: &renewed.key_pem,
                    },
                )
                .await?;
                hub.swap(client);
                credentials = renewed;
                obtained = now();
                backoff = Duration::from_secs(5);
                info!("certificate renewed: the hub client uses the new one");
            }
            Err(e) => {
                let (_, not_after) =
                    flotilla_pki::certificate_validity(credentials.cert_pem.as_bytes())
                        .map_err(|e| Error::Input(format!("the agent's certificate: {e}")))?;
                if now() >= not_after {
                    return Err(Error::Hub(format!(
                        "the certificate expired before it could be renewed: {e}"
                    )));
                }
                warn!(error = %e, retry_in = ?backoff, "certificate not renewed; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
                // Due again at once: the loop's wait is zero past the due time.
            }
        }
    }
}

/// One renewal: a new key, a CSR as the current certificate, its certificate once signed.
async fn renew(
    renewal: &Renewal,
    files: &Files,
    current: &Credentials,
    hub: &kube::Client,
) -> Result<Credentials, Error> {
    let key =
        rcgen::KeyPair::generate().map_err(|e| Error::Input(format!("cannot make a key: {e}")))?;
    let key_pem = key.serialize_pem();
    let request = crate::register::cluster_request(&renewal.cluster, &key)?;
    let name = csr_name(&renewal.cluster, key.public_key_pem().as_bytes());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: SIGNER.to_owned(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            expiration_seconds: renewal
                .duration
                .map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(hub.clone());
    csrs.create(&PostParams::default(), &csr).await?;
    info!(csr = %name, "renewal requested");
    // Watched by name (the agent may get, create and watch CSRs, not list them): the
    // approval and the signature come as changes.
    let cert_pem = tokio::time::timeout(Duration::from_secs(120), signed(&csrs, &name))
        .await
        .map_err(|_| Error::Hub(format!("{name} not signed within 120 s")))??;
    // The key first: a certificate is never kept without its key.
    write_private(&files.key, &key_pem)?;
    write_private(&files.cert, &cert_pem)?;
    info!(csr = %name, "renewed certificate kept");
    Ok(Credentials {
        ca_pem: current.ca_pem.clone(),
        cert_pem,
        key_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(not_before: i64, not_after: i64) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.not_before =
            rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_before as u64);
        params.not_after =
            rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after as u64);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn renewal_is_due_at_80_percent_from_when_it_was_obtained() {
        let t = 1_800_000_000;
        // Issued a year long: due at 80 % of it.
        let year = certificate(t, t + 1000);
        assert_eq!(renew_at(&year, t).unwrap(), t + 800);
        // Backdated five minutes for a one-minute lifetime, obtained now: 80 % of the
        // minute, not of 6 minutes (which would be already past).
        let short = certificate(t - 300, t + 60);
        assert_eq!(renew_at(&short, t).unwrap(), t + 48);
        // Obtained before notBefore (a clock ahead): from notBefore.
        assert_eq!(renew_at(&year, t - 50).unwrap(), t + 800);
    }
}
