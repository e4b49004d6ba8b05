//! The signer of `kubernetes.io/kube-apiserver-client` CertificateSigningRequests: what
//! kube-controller-manager's csrsigning controller does for that signer, with the hub's
//! CA.
//!
//! ```text
//!  store watch /certificates.k8s.io/certificatesigningrequests/ (every logical cluster),
//!  after a list ─► a request of this signer, Approved, not Denied or Failed, without a
//!  certificate:
//!     usages ⊆ {client auth, digital signature, key encipherment} with client auth,
//!     a key the CA signs for (RSA, ECDSA P-256/P-384, Ed25519)
//!       no  ─► condition Failed (reason SignerValidationFailure), no certificate
//!       yes ─► status.certificate: the CA-signed certificate (the request's subject,
//!              clientAuth; spec.expirationSeconds, else a year; never past the CA)
//!  written through the status subresource as the server's own user
//! ```

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flotilla_pki::{CertificateRequest, HubIdentity};
use flotilla_store::{EventKind, KeyValue, Store};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::{Api, ROOT_CLUSTER};
use crate::client::Client;
use crate::http::error::Reason;
use crate::registry::certificates::{self, FAILED, KUBE_APISERVER_CLIENT};
use crate::registry::keys;
use crate::registry::object;

/// A certificate's lifetime when the request names none (kube-controller-manager's
/// `--cluster-signing-duration` default).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// The usages a client certificate of this signer may have; `client auth` is required.
const ALLOWED_USAGES: [&str; 3] = ["client auth", "digital signature", "key encipherment"];

const FIELD_MANAGER: &str = "flotilla-csr-signer";
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Signs approved client certificate requests with the hub's CA.
pub struct Signer {
    client: Client,
    store: Arc<dyn Store>,
    identity: Arc<HubIdentity>,
}

/// What to do with one request.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Not this signer's, not approved, denied, failed or signed already.
    Nothing,
    /// Refused, for this reason.
    Fail(String),
    /// Signed: this certificate (PEM).
    Issue(String),
}

impl Signer {
    /// A signer writing through `api` (the root logical cluster's), reading `store`,
    /// signing with `identity`'s CA.
    pub fn new(api: Api, store: Arc<dyn Store>, identity: Arc<HubIdentity>) -> Self {
        Signer {
            client: Client::new(api).with_field_manager(FIELD_MANAGER),
            store,
            identity,
        }
    }

    /// Runs until dropped; a failed watch starts over from a fresh list after a pause.
    pub async fn run(self) {
        async {
            loop {
                if let Err(e) = self.follow().await {
                    warn!(error = %e, "the CSR signer starts its watch again");
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
            }
        }
        .instrument(info_span!("csr signer"))
        .await
    }

    async fn follow(&self) -> Result<(), flotilla_store::Error> {
        let prefix = keys::resource_prefix_of(certificates::GROUP, "certificatesigningrequests");
        let (listed, revision) = self.store.list_all(&prefix).await?;
        for kv in &listed {
            self.changed(&prefix, kv).await;
        }
        let mut events = self.store.watch(&prefix, revision).await?;
        info!("following CertificateSigningRequests");
        while let Some(event) = events.next().await {
            let event = event?;
            if event.kind == EventKind::Put {
                self.changed(&prefix, &event.kv).await;
            }
        }
        Ok(())
    }

    /// What to do with `csr`.
    fn decide(&self, csr: &Value) -> Decision {
        let status = &csr["status"];
        let signed = status["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty());
        if csr["spec"]["signerName"] != KUBE_APISERVER_CLIENT
            || signed
            || !certificates::has_condition(csr, "Approved")
            || certificates::has_condition(csr, "Denied")
            || certificates::has_condition(csr, FAILED)
        {
            return Decision::Nothing;
        }
        let usages: Vec<&str> = csr["spec"]["usages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(refused) = usages.iter().find(|u| !ALLOWED_USAGES.contains(u)) {
            return Decision::Fail(format!("invalid usage for client certificate: {refused}"));
        }
        if !usages.contains(&"client auth") {
            return Decision::Fail(
                "missing required usage for client certificate: client auth".into(),
            );
        }
        let Some(pem) = certificates::request_pem(csr) else {
            return Decision::Fail("the request is not base64".into());
        };
        let request = match CertificateRequest::parse(&pem) {
            Ok(request) => request,
            Err(e) => return Decision::Fail(e.to_string()),
        };
        let lifetime = csr["spec"]["expirationSeconds"]
            .as_u64()
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        match self.identity.sign_client_certificate(&request, lifetime) {
            Ok(certificate) => Decision::Issue(certificate),
            Err(flotilla_pki::client::SignError::Key(why)) => Decision::Fail(why),
            Err(e) => {
                warn!(error = %e, "the CA cannot sign");
                Decision::Nothing
            }
        }
    }

    async fn changed(&self, prefix: &[u8], kv: &KeyValue) {
        let Some(place) = keys::place(&kv.key, prefix) else {
            return;
        };
        let Ok(mut csr) = serde_json::from_slice::<Value>(&kv.value) else {
            return;
        };
        let decision = self.decide(&csr);
        let name = place.name;
        match &decision {
            Decision::Nothing => return,
            Decision::Fail(why) => {
                info!(csr = name, cluster = place.cluster, reason = %why, "refusing to sign");
                let now = object::now();
                let mut conditions = csr["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                conditions.push(json!({
                    "type": FAILED,
                    "status": "True",
                    "reason": "SignerValidationFailure",
                    "message": why,
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                }));
                csr["status"]["conditions"] = json!(conditions);
            }
            Decision::Issue(certificate) => {
                info!(csr = name, cluster = place.cluster, "signed");
                csr["status"]["certificate"] = json!(STANDARD.encode(certificate));
            }
        }
        csr["metadata"]["resourceVersion"] = json!(kv.mod_revision.get().to_string());
        let cluster = match place.cluster {
            ROOT_CLUSTER => String::new(),
            cluster => format!("/clusters/{cluster}"),
        };
        let path = format!(
            "{cluster}/apis/{}/v1/certificatesigningrequests/{name}/status",
            certificates::GROUP
        );
        match self.client.replace(&path, &csr).await {
            Ok(_) => {}
            // Changed or deleted meanwhile: that change comes here again.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {
                debug!(csr = name, "changed meanwhile")
            }
            Err(e) => warn!(csr = name, error = %e.message, "cannot write a signed request"),
        }
    }
}
