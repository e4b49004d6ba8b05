//! Bootstrap tokens as Kubernetes defines them: `ID.SECRET` (`[a-z0-9]{6}.[a-z0-9]{16}`),
//! kept in a Secret `kube-system/bootstrap-token-ID` of type
//! `bootstrap.kubernetes.io/token`, which the hub's authenticator reads on every request.
//!
//! ```text
//!  flotilla token create ─► BootstrapToken::generate ─► secret(ttl, auto-approve, set)
//!     data: token-id, token-secret, expiration (RFC 3339), usage-bootstrap-authentication,
//!           auth-extra-groups (system:bootstrappers:flotilla:auto-approve,
//!                              system:bootstrappers:flotilla:clusterset:SET), description
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use flotilla_api::agent::{AUTO_APPROVE_GROUP, CLUSTER_SET_GROUP_PREFIX};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use crate::Error;

/// The namespace bootstrap token Secrets live in.
pub const NAMESPACE: &str = "kube-system";

/// The type of a bootstrap token Secret.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// A bootstrap token: its public id and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    /// `[a-z0-9]{6}`: names the Secret and the user (`system:bootstrap:ID`).
    pub id: String,
    /// `[a-z0-9]{16}`.
    pub secret: String,
}

impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

fn token_part(part: &str, len: usize) -> bool {
    part.len() == len
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

impl std::str::FromStr for BootstrapToken {
    type Err = Error;

    /// `ID.SECRET`, as `kubeadm token` prints it.
    fn from_str(text: &str) -> Result<Self, Error> {
        let bad = || {
            Error::Input(format!(
                "{text:?} is not a bootstrap token: expected 6 and 16 characters of [a-z0-9] joined by '.'"
            ))
        };
        let (id, secret) = text.split_once('.').ok_or_else(bad)?;
        if !token_part(id, 6) || !token_part(secret, 16) {
            return Err(bad());
        }
        Ok(BootstrapToken {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }
}

impl BootstrapToken {
    /// A new token from the system's random number generator.
    pub fn generate() -> Result<Self, Error> {
        use ring::rand::SecureRandom as _;
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let rng = ring::rand::SystemRandom::new();
        let mut bytes = [0u8; 22];
        let mut text = String::with_capacity(22);
        while text.len() < 22 {
            rng.fill(&mut bytes)
                .map_err(|_| Error::Input("no random bytes for a token".into()))?;
            // 252 = 7 × 36: the bytes above it are dropped so that each character is
            // equally likely.
            for b in bytes.iter().filter(|b| **b < 252) {
                if text.len() < 22 {
                    text.push(ALPHABET[usize::from(*b % 36)] as char);
                }
            }
        }
        Ok(BootstrapToken {
            id: text[..6].to_owned(),
            secret: text[6..].to_owned(),
        })
    }

    /// The Secret's name: `bootstrap-token-ID`.
    pub fn secret_name(&self) -> String {
        format!("bootstrap-token-{}", self.id)
    }

    /// The Secret that makes this token valid: for `ttl` from `now` (zero: no expiry),
    /// its clusters approved at once if `auto_approve`, registering into `cluster_set`.
    pub fn secret(
        &self,
        now: jiff::Timestamp,
        ttl: Duration,
        auto_approve: bool,
        cluster_set: Option<&str>,
    ) -> Result<Secret, Error> {
        let mut data = BTreeMap::from([
            ("token-id".to_owned(), self.id.clone()),
            ("token-secret".to_owned(), self.secret.clone()),
            (
                "usage-bootstrap-authentication".to_owned(),
                "true".to_owned(),
            ),
            (
                "description".to_owned(),
                "a flotilla pull agent's registration (flotilla token create)".to_owned(),
            ),
        ]);
        if !ttl.is_zero() {
            let span = jiff::SignedDuration::try_from(ttl)
                .map_err(|e| Error::Input(format!("ttl {ttl:?}: {e}")))?;
            let expires = now
                .checked_add(span)
                .map_err(|e| Error::Input(format!("ttl {ttl:?}: {e}")))?;
            data.insert(
                "expiration".to_owned(),
                expires
                    .round(jiff::Unit::Second)
                    .map_err(|e| Error::Input(e.to_string()))?
                    .to_string(),
            );
        }
        let mut groups = Vec::new();
        if auto_approve {
            groups.push(AUTO_APPROVE_GROUP.to_owned());
        }
        if let Some(set) = cluster_set {
            groups.push(format!("{CLUSTER_SET_GROUP_PREFIX}{set}"));
        }
        if !groups.is_empty() {
            data.insert("auth-extra-groups".to_owned(), groups.join(","));
        }
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name()),
                namespace: Some(NAMESPACE.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "flotilla".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k, ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Secret::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_reads_back_and_its_secret_says_what_it_allows() {
        let token = BootstrapToken::generate().unwrap();
        let text = token.to_string();
        assert_eq!(text.parse::<BootstrapToken>().unwrap(), token);
        assert_ne!(BootstrapToken::generate().unwrap(), token);
        for bad in [
            "abcdef",
            "abcdef.0123456789ABCDEF",
            "abcde.0123456789abcdef",
        ] {
            let e = bad.parse::<BootstrapToken>().unwrap_err().to_string();
            assert!(e.contains("not a bootstrap token"), "{e}");
        }
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let secret = token
            .secret(now, Duration::from_secs(24 * 3600), true, Some("prod"))
            .unwrap();
        assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some(format!("bootstrap-token-{}", token.id).as_str())
        );
        let data = secret.data.unwrap();
        let field = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
        assert_eq!(field("token-id"), token.id);
        assert_eq!(field("expiration"), "2026-01-02T00:00:00Z");
        assert_eq!(field("usage-bootstrap-authentication"), "true");
        assert_eq!(
            field("auth-extra-groups"),
            "system:bootstrappers:flotilla:auto-approve,system:bootstrappers:flotilla:clusterset:prod"
        );
        // No ttl: no expiry; no options: no extra groups.
        let plain = token.secret(now, Duration::ZERO, false, None).unwrap();
        let data = plain.data.unwrap();
        assert!(!data.contains_key("expiration") && !data.contains_key("auth-extra-groups"));
    }
}
