//! Bootstrap tokens: short-lived bearer tokens `ID.SECRET` that let a new member's agent
//! register (create its CSR and its Cluster request) and nothing else, as kube-apiserver's
//! bootstrap token authenticator reads them.
//!
//! ```text
//!  Bearer T ─► [a-z0-9]{6}.[a-z0-9]{16}? (else Missing: another authenticator's token)
//!  ─► the Secret kube-system/bootstrap-token-ID (the store's key index, then its facts
//!     memoised by revision: read once per write of the Secret)
//!     missing, of another type, being deleted, token-id or token-secret not T's,
//!     usage-bootstrap-authentication not "true" ─► Invalid(Revoked)
//!     expiration passed ─► Invalid(Expired)
//!  ─► User system:bootstrap:ID, groups system:bootstrappers + auth-extra-groups
//!     (each system:bootstrappers:…), system:authenticated
//! ```
//!
//! The Secret is read on every request (as ServiceAccount tokens' references are): a
//! token stops working on the first request after its Secret's delete returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use flotilla_store::{Revision, Store};
use serde_json::Value;

use crate::api::{ROOT_CLUSTER, Verdict};
use crate::auth::{AUTHENTICATED, Authenticator, Credentials, Presented, Refusal, UserInfo};
use crate::registry::keys;

/// The namespace bootstrap token Secrets live in.
pub const NAMESPACE: &str = "kube-system";

/// The type of a bootstrap token Secret.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// The prefix of a bootstrap token Secret's name; the token's id follows.
pub const SECRET_PREFIX: &str = "bootstrap-token-";

/// The group every bootstrap token's user is in.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";

/// The prefix of a bootstrap token's user; the token's id follows.
pub const USER_PREFIX: &str = "system:bootstrap:";

/// The most Secrets' facts kept.
const FACTS_ENTRIES: usize = 10_000;

/// The id and secret of a well-formed bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`).
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// What the authenticator reads of a bootstrap token Secret at one revision.
#[derive(Clone, Debug, PartialEq)]
struct Facts {
    of_type: bool,
    deleting: bool,
    token_id: String,
    token_secret: String,
    /// Unix seconds; `None`: never expires. `Err`: unreadable (refused).
    expiration: Result<Option<i64>, String>,
    authentication: bool,
    extra_groups: Vec<String>,
}

impl Facts {
    fn of(json: &[u8]) -> Facts {
        let secret = serde_json::from_slice::<Value>(json).unwrap_or_default();
        // `data` as stored (base64), or `stringData` if a client wrote that.
        let field = |name: &str| -> Option<String> {
            if let Some(b64) = secret["data"][name].as_str() {
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
                return String::from_utf8(bytes).ok();
            }
            secret["stringData"][name].as_str().map(str::to_owned)
        };
        let expiration = match field("expiration") {
            None => Ok(None),
            Some(text) => text
                .parse::<jiff::Timestamp>()
                .map(|t| Some(t.as_second()))
                .map_err(|e| format!("expiration {text:?} is not RFC 3339: {e}")),
        };
        Facts {
            of_type: secret["type"].as_str() == Some(SECRET_TYPE),
            deleting: !secret["metadata"]["deletionTimestamp"].is_null(),
            token_id: field("token-id").unwrap_or_default(),
            token_secret: field("token-secret").unwrap_or_default(),
            expiration,
            authentication: field("usage-bootstrap-authentication").as_deref() == Some("true"),
            extra_groups: field("auth-extra-groups")
                .map(|groups| {
                    groups
                        .split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The user the token `id.secret` is, if these facts allow it at `now`.
    fn user(&self, id: &str, secret: &str, now: i64) -> Result<UserInfo, Refusal> {
        let revoked = |why: &str| Err(Refusal::Revoked(format!("bootstrap token {id}: {why}")));
        if !self.of_type {
            return revoked(&format!("its Secret is not of type {SECRET_TYPE}"));
        }
        if self.deleting {
            return revoked("its Secret is being deleted");
        }
        if self.token_id != id {
            return revoked("its Secret holds another token-id");
        }
        if !constant_time_eq(self.token_secret.as_bytes(), secret.as_bytes()) {
            return revoked("the token-secret does not match");
        }
        match &self.expiration {
            Err(why) => return revoked(why),
            Ok(Some(at)) if now >= *at => return Err(Refusal::Expired),
            Ok(_) => {}
        }
        if !self.authentication {
            return revoked("usage-bootstrap-authentication is not \"true\"");
        }
        if let Some(bad) = self
            .extra_groups
            .iter()
            .find(|g| !g.starts_with(&format!("{BOOTSTRAPPERS}:")))
        {
            return revoked(&format!(
                "auth-extra-groups names {bad:?}, not a {BOOTSTRAPPERS}: group"
            ));
        }
        let mut groups = vec![BOOTSTRAPPERS.to_owned()];
        groups.extend(self.extra_groups.iter().cloned());
        groups.push(AUTHENTICATED.to_owned());
        Ok(UserInfo {
            name: format!("{USER_PREFIX}{id}"),
            groups,
            ..UserInfo::default()
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Authenticates bootstrap tokens against their Secrets in `store` (the root logical
/// cluster's `kube-system`).
pub struct BootstrapTokens {
    store: Arc<dyn Store>,
    facts: Mutex<HashMap<Vec<u8>, (Revision, Facts)>>,
}

impl BootstrapTokens {
    /// Tokens whose Secrets are in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        BootstrapTokens {
            store,
            facts: Mutex::default(),
        }
    }

    async fn check(&self, id: &str, secret: &str) -> Credentials {
        let key = keys::key_of(
            "",
            "secrets",
            ROOT_CLUSTER,
            Some(NAMESPACE),
            &format!("{SECRET_PREFIX}{id}"),
        );
        let gone = || {
            Credentials::Invalid(Refusal::Revoked(format!(
                "bootstrap token {id}: its Secret does not exist"
            )))
        };
        let unreadable = |e: flotilla_store::Error| {
            Credentials::Invalid(Refusal::Revoked(format!(
                "bootstrap token {id}: its Secret cannot be read: {e}"
            )))
        };
        let revision = match self.store.mod_revision(&key).await {
            Ok(Some(revision)) => revision,
            Ok(None) => return gone(),
            Err(e) => return unreadable(e),
        };
        let memo = self
            .facts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|(at, _)| *at == revision)
            .map(|(_, facts)| facts.clone());
        let facts = match memo {
            Some(facts) => facts,
            None => {
                let kv = match self.store.get(&key, None).await {
                    Ok(Some(kv)) => kv,
                    Ok(None) => return gone(),
                    Err(e) => return unreadable(e),
                };
                let facts = Facts::of(&kv.value);
                let mut memo = self.facts.lock().unwrap_or_else(PoisonError::into_inner);
                if memo.len() >= FACTS_ENTRIES {
                    memo.clear();
                }
                memo.insert(key, (kv.mod_revision, facts.clone()));
                facts
            }
        };
        match facts.user(id, secret, jiff::Timestamp::now().as_second()) {
            Ok(user) => Credentials::User(Arc::new(user)),
            Err(refusal) => Credentials::Invalid(refusal),
        }
    }
}

impl Authenticator for BootstrapTokens {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let Some((id, secret)) = presented.bearer.and_then(parse) else {
            return Verdict::Now(Credentials::Missing);
        };
        Verdict::Later(Box::pin(self.check(id, secret)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, header};
    use serde_json::json;

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    fn secret(id: &str, token_secret: &str, expiration: &str, extra: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": format!("{SECRET_PREFIX}{id}"), "namespace": NAMESPACE},
            "data": {"token-id": b64(id), "token-secret": b64(token_secret),
                "expiration": b64(expiration),
                "usage-bootstrap-authentication": b64("true"),
                "auth-extra-groups": b64(extra)}})
    }

    #[test]
    fn only_the_kubernetes_format_is_a_bootstrap_token() {
        assert_eq!(
            parse("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef0",
            "abc-ef.0123456789abcdef",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_secret_names_the_user_until_it_expires_or_is_changed() {
        let now = jiff::Timestamp::now().as_second();
        let later = jiff::Timestamp::from_second(now + 3600)
            .unwrap()
            .to_string();
        let facts = Facts::of(
            secret(
                "abcdef",
                "0123456789abcdef",
                &later,
                "system:bootstrappers:flotilla:auto-approve",
            )
            .to_string()
            .as_bytes(),
        );
        let user = facts.user("abcdef", "0123456789abcdef", now).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:flotilla:auto-approve",
                "system:authenticated"
            ]
        );
        assert!(matches!(
            facts.user("abcdef", "0123456789abcdee", now),
            Err(Refusal::Revoked(_))
        ));
        assert_eq!(
            facts.user("abcdef", "0123456789abcdef", now + 3600),
            Err(Refusal::Expired)
        );
        // Extra groups outside system:bootstrappers: are refused, as kube refuses them.
        let masters = Facts::of(
            secret("abcdef", "0123456789abcdef", &later, "system:masters")
                .to_string()
                .as_bytes(),
        );
        assert!(matches!(
            masters.user("abcdef", "0123456789abcdef", now),
            Err(Refusal::Revoked(_))
        ));
        // Another type of Secret, or one without the authentication usage.
        let mut other = secret("abcdef", "0123456789abcdef", &later, "");
        other["type"] = json!("Opaque");
        assert!(
            Facts::of(other.to_string().as_bytes())
                .user("abcdef", "0123456789abcdef", now)
                .is_err()
        );
        let mut unused = secret("abcdef", "0123456789abcdef", &later, "");
        unused["data"]["usage-bootstrap-authentication"] = json!(b64("false"));
        assert!(
            Facts::of(unused.to_string().as_bytes())
                .user("abcdef", "0123456789abcdef", now)
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_deleted_secret_refuses_the_next_request() {
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let auth = BootstrapTokens::new(store.clone());
        let key = keys::key_of(
            "",
            "secrets",
            ROOT_CLUSTER,
            Some(NAMESPACE),
            "bootstrap-token-abcdef",
        );
        let later = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 3600)
            .unwrap()
            .to_string();
        let value = secret("abcdef", "0123456789abcdef", &later, "").to_string();
        let revision = store.create(&key, value.into_bytes().into()).await.unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abcdef.0123456789abcdef"),
        );
        let presented = Presented::headers(&headers);
        let Credentials::User(user) = auth.authenticate(&presented).await else {
            panic!("the bootstrap token is not accepted");
        };
        assert_eq!(user.name, "system:bootstrap:abcdef");
        // Not a bootstrap token: another authenticator's.
        let mut other = HeaderMap::new();
        other.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer x.y"),
        );
        assert_eq!(
            auth.authenticate(&Presented::headers(&other)).await,
            Credentials::Missing
        );
        store.delete(&key, Some(revision)).await.unwrap();
        assert!(matches!(
            auth.authenticate(&presented).await,
            Credentials::Invalid(Refusal::Revoked(_))
        ));
    }
}
