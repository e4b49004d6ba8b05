//! The tokens controller: long-lived ServiceAccount token Secrets, as
//! kube-controller-manager keeps them.
//!
//! ```text
//!  store watch /core/secrets/ (every logical cluster), after a list
//!    type kubernetes.io/service-account-token, annotation kubernetes.io/service-account.name
//!      the ServiceAccount is missing, or not the uid the Secret's annotation names
//!        ─► the Secret is deleted (on its uid)
//!      else token, ca.crt or namespace missing or stale ─► filled: a legacy token (no
//!        expiry: valid while the Secret holds it and the ServiceAccount exists), the
//!        hub's CA, the namespace; annotation kubernetes.io/service-account.uid
//!  store watch /core/serviceaccounts/: a ServiceAccount deleted ─► its token Secrets are
//! ```
//!
//! Every write goes through the API as the server's own user (its watchers, the audit log
//! and managedFields see it); a write that loses a race is left to the watch event of the
//! write that won, which brings the Secret back here.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flotilla_store::{EventKind, KeyValue, Store, WatchEvent};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use tracing::{Instrument, debug, info, info_span, warn};

use super::{Issuer, ObjectRef};
use crate::api::{Api, ROOT_CLUSTER};
use crate::client::Client;
use crate::http::error::{ApiError, Reason};
use crate::registry::keys::{self, Place};

/// The Secret type the controller fills.
pub const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
/// The annotation naming the ServiceAccount.
pub const NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
/// The annotation naming its uid.
pub const UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

/// The field manager of the controller's writes.
const FIELD_MANAGER: &str = "flotilla-tokens-controller";

/// How long to wait before listing and watching again after a failure.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Keeps long-lived token Secrets filled.
pub struct TokensController {
    client: Client,
    store: Arc<dyn Store>,
    issuer: Arc<Issuer>,
    ca_pem: String,
}

/// Why one pass of the controller ended.
#[derive(Debug, thiserror::Error)]
enum Stopped {
    #[error(transparent)]
    Store(#[from] flotilla_store::Error),
    #[error("a store watch ended")]
    WatchEnded,
}

impl TokensController {
    /// A controller writing through `api` (the root logical cluster's, which reaches
    /// every other), reading `store`, signing with `issuer`, giving `ca_pem` as `ca.crt`.
    pub fn new(api: Api, store: Arc<dyn Store>, issuer: Arc<Issuer>, ca_pem: String) -> Self {
        TokensController {
            client: Client::new(api).with_field_manager(FIELD_MANAGER),
            store,
            issuer,
            ca_pem,
        }
    }

    /// Runs until dropped; a failed watch starts over from a fresh list after a pause.
    pub async fn run(self) {
        async {
            loop {
                if let Err(e) = self.follow().await {
                    warn!(error = %e, "the tokens controller starts its watches again");
                    tokio::time::sleep(RESTART_PAUSE).await;
                }
            }
        }
        .instrument(info_span!("tokens controller"))
        .await
    }

    /// Lists then watches Secrets and ServiceAccounts, acting on each change.
    async fn follow(&self) -> Result<(), Stopped> {
        let secrets = keys::resource_prefix_of("", "secrets");
        let accounts = keys::resource_prefix_of("", "serviceaccounts");
        let (listed, revision) = self.store.list_all(&secrets).await?;
        for kv in &listed {
            self.secret_changed(&secrets, kv).await;
        }
        let mut events: BoxStream<'static, (bool, flotilla_store::Result<WatchEvent>)> =
            futures_util::stream::select(
                self.store
                    .watch(&secrets, revision)
                    .await?
                    .map(|e| (true, e)),
                self.store
                    .watch(&accounts, revision)
                    .await?
                    .map(|e| (false, e)),
            )
            .boxed();
        info!(
            secrets = listed.len(),
            "following Secrets and ServiceAccounts"
        );
        while let Some((secret, event)) = events.next().await {
            let event = event?;
            match (secret, event.kind) {
                (true, EventKind::Put) => self.secret_changed(&secrets, &event.kv).await,
                (false, EventKind::Delete) => self.service_account_deleted(&accounts, &event).await,
                _ => {}
            }
        }
        Err(Stopped::WatchEnded)
    }

    /// A Secret was written: fills it, or deletes it when its ServiceAccount is gone.
    async fn secret_changed(&self, prefix: &[u8], kv: &KeyValue) {
        let Some(place) = keys::place(&kv.key, prefix) else {
            return;
        };
        let Some(namespace) = place.namespace else {
            return;
        };
        let Ok(secret) = serde_json::from_slice::<Value>(&kv.value) else {
            return;
        };
        if secret["type"] != TOKEN_SECRET_TYPE || !secret["metadata"]["deletionTimestamp"].is_null()
        {
            return;
        }
        let annotations = &secret["metadata"]["annotations"];
        let Some(account) = annotations[NAME_ANNOTATION]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
        else {
            return;
        };
        let wanted_uid = annotations[UID_ANNOTATION]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let account = account.as_str();
        let account_key = keys::key_of(
            "",
            "serviceaccounts",
            place.cluster,
            Some(namespace),
            account,
        );
        let found = match self.store.get(&account_key, None).await {
            Ok(found) => found,
            Err(e) => {
                warn!(error = %e, "cannot read a ServiceAccount");
                return;
            }
        };
        let uid = found
            .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
            .filter(|sa| sa["metadata"]["deletionTimestamp"].is_null())
            .map(|sa| sa["metadata"]["uid"].as_str().unwrap_or("").to_owned());
        let path = secret_path(&place, namespace);
        match uid {
            Some(uid) if wanted_uid.is_empty() || wanted_uid == uid => {
                let secret = secret.clone();
                self.fill(
                    &path,
                    &place,
                    namespace,
                    secret,
                    ObjectRef {
                        name: account.to_owned(),
                        uid,
                    },
                )
                .await;
            }
            _ => {
                info!(secret = %path, serviceaccount = account,
                    "the ServiceAccount of a token Secret does not exist: deleting the Secret");
                self.delete(&path, secret["metadata"]["uid"].as_str().unwrap_or(""))
                    .await;
            }
        }
    }

    /// Writes what `secret` lacks of its token, CA, namespace and uid annotation.
    async fn fill(
        &self,
        path: &str,
        place: &Place<'_>,
        namespace: &str,
        mut secret: Value,
        account: ObjectRef,
    ) {
        let data = &secret["data"];
        let has = |field: &str, wanted: Option<&str>| match (data[field].as_str(), wanted) {
            (Some(b64), Some(wanted)) => {
                STANDARD.decode(b64).ok().as_deref() == Some(wanted.as_bytes())
            }
            (Some(b64), None) => !b64.is_empty(),
            (None, _) => false,
        };
        let needs_token = !has("token", None);
        let needs_ca = !self.ca_pem.is_empty() && !has("ca.crt", Some(&self.ca_pem));
        let needs_namespace = !has("namespace", None);
        let needs_uid = secret["metadata"]["annotations"][UID_ANNOTATION] != account.uid.as_str();
        if !(needs_token || needs_ca || needs_namespace || needs_uid) {
            return;
        }
        if !secret["data"].is_object() {
            secret["data"] = json!({});
        }
        let name = secret["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if needs_token {
            match self
                .issuer
                .issue_legacy(place.cluster, namespace, &account, &name)
            {
                Ok(token) => secret["data"]["token"] = json!(STANDARD.encode(token)),
                Err(e) => {
                    warn!(secret = %path, error = %e, "cannot sign a token");
                    return;
                }
            }
        }
        if needs_ca {
            secret["data"]["ca.crt"] = json!(STANDARD.encode(&self.ca_pem));
        }
        if needs_namespace {
            secret["data"]["namespace"] = json!(STANDARD.encode(namespace));
        }
        secret["metadata"]["annotations"][UID_ANNOTATION] = json!(account.uid);
        match self.client.replace(path, &secret).await {
            Ok(_) => info!(secret = %path, serviceaccount = %account.name, "token Secret filled"),
            // Written or deleted meanwhile: that write's event comes here again.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {
                debug!(secret = %path, "token Secret changed meanwhile")
            }
            Err(e) => warn!(secret = %path, error = %message(&e), "cannot fill a token Secret"),
        }
    }

    /// A ServiceAccount is gone: so are the token Secrets naming it.
    async fn service_account_deleted(&self, prefix: &[u8], event: &WatchEvent) {
        let Some(place) = keys::place(&event.kv.key, prefix) else {
            return;
        };
        let Some(namespace) = place.namespace else {
            return;
        };
        let uid = event
            .prev_kv
            .as_ref()
            .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
            .and_then(|sa| sa["metadata"]["uid"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let secrets = keys::prefix_of("", "secrets", place.cluster, Some(namespace));
        let Ok((listed, _)) = self.store.list_all(&secrets).await else {
            return;
        };
        for kv in listed {
            let Ok(secret) = serde_json::from_slice::<Value>(&kv.value) else {
                continue;
            };
            let annotations = &secret["metadata"]["annotations"];
            let names_it = secret["type"] == TOKEN_SECRET_TYPE
                && annotations[NAME_ANNOTATION] == place.name
                && (uid.is_empty()
                    || annotations[UID_ANNOTATION]
                        .as_str()
                        .is_none_or(|u| u == uid));
            if names_it
                && let Some(secret_place) =
                    keys::place(&kv.key, &keys::resource_prefix_of("", "secrets"))
            {
                let path = secret_path(&secret_place, namespace);
                info!(secret = %path, serviceaccount = place.name,
                    "the ServiceAccount was deleted: deleting its token Secret");
                self.delete(&path, secret["metadata"]["uid"].as_str().unwrap_or(""))
                    .await;
            }
        }
    }

    /// Deletes the object at `path` if its uid is still `uid`.
    async fn delete(&self, path: &str, uid: &str) {
        let options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
            "preconditions": {"uid": uid}});
        let outcome = self
            .client
            .request(axum::http::Method::DELETE, path)
            .json(&options)
            .result()
            .await;
        match outcome {
            Ok(_) => {}
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {}
            Err(e) => warn!(object = %path, error = %message(&e), "cannot delete"),
        }
    }
}

/// The API path of the Secret at `place`, through its logical cluster.
fn secret_path(place: &Place<'_>, namespace: &str) -> String {
    let cluster = match place.cluster {
        ROOT_CLUSTER => String::new(),
        cluster => format!("/clusters/{cluster}"),
    };
    format!(
        "{cluster}/api/v1/namespaces/{namespace}/secrets/{}",
        place.name
    )
}

fn message(e: &ApiError) -> String {
    if e.message.is_empty() {
        format!("{:?}", e.reason)
    } else {
        e.message.clone()
    }
}
