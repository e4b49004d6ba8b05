//! ServiceAccount tokens, as Kubernetes issues and checks them.
//!
//! ```text
//!  POST …/serviceaccounts/NAME/token (TokenRequest) ─► Issuer::issue ─► ES256 JWT
//!     iss, sub system:serviceaccount:NS:NAME, aud, exp, iat, nbf, jti,
//!     kubernetes.io {namespace, serviceaccount {name, uid}, secret|pod {name, uid}, node},
//!     flotilla.io {cluster}: valid only in the logical cluster it was issued in
//!  Secret type kubernetes.io/service-account-token ─► controller::run fills it
//!     (legacy claims, iss kubernetes/serviceaccount, no exp: valid while the Secret
//!      holds it and the ServiceAccount exists)
//!  /.well-known/openid-configuration, /openid/v1/jwks ─► Issuer::discovery, ::jwks
//!
//!  Bearer JWT ─► authenticator::Tokens: iss ours? (else not its token) ─► signature,
//!     exp/nbf (60 s leeway), aud ∩ API audiences ─► cached (bounded, until exp)
//!     ─► every request: the ServiceAccount (and bound Secret/Pod) still exist with the
//!        uids in the token, asked of the store's key index (a delete or a re-create is
//!        seen by the first request after it) ─► User system:serviceaccount:NS:NAME
//! ```

pub mod authenticator;
pub mod controller;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use super::Refusal;
use super::jwt::{KeyError, SigningKey};

pub use authenticator::Tokens;

/// The issuer of the tokens long-lived token Secrets hold (kube's legacy issuer).
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// The group of every ServiceAccount.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// The prefix of every ServiceAccount's user name.
pub const USER_PREFIX: &str = "system:serviceaccount:";

/// The extra of a token's user naming the logical cluster it was issued in.
pub const CLUSTER_EXTRA: &str = "authentication.flotilla.io/cluster-name";

/// The extra naming the credential: `JTI=<the token's jti>`.
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";

/// The extras of a Pod-bound token.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// See [`POD_NAME_EXTRA`].
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// The extras of a token bound to a Pod on a Node, or to a Node.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// See [`NODE_NAME_EXTRA`].
pub const NODE_UID_EXTRA: &str = "authentication.kubernetes.io/node-uid";

/// The shortest lifetime a TokenRequest may ask for (kube's `MinTokenAgeSec`).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest (kube's validation: 2^32 seconds).
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// A TokenRequest's lifetime when it names none.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// How far `exp` and `nbf` may be off (go-jose's default leeway, which kube uses).
pub const LEEWAY_SECONDS: i64 = 60;

/// `system:serviceaccount:NS:NAME`.
pub fn user_name(namespace: &str, name: &str) -> String {
    format!("{USER_PREFIX}{namespace}:{name}")
}

/// The namespace and name of the service account `user` names, if it names one (a valid
/// namespace and a valid account name, as Kubernetes' `SplitUsername` requires).
pub fn split(user: &str) -> Option<(&str, &str)> {
    use crate::registry::object::{NameRule, check_name};
    let (namespace, name) = user.strip_prefix(USER_PREFIX)?.split_once(':')?;
    let valid = !name.contains(':')
        && check_name(namespace, NameRule::Label).is_none()
        && check_name(name, NameRule::Subdomain).is_none();
    valid.then_some((namespace, name))
}

/// The groups a service account of `namespace` is in (besides `system:authenticated`).
pub fn groups(namespace: &str) -> Vec<String> {
    vec![
        ALL_SERVICE_ACCOUNTS.to_owned(),
        format!("{ALL_SERVICE_ACCOUNTS}:{namespace}"),
    ]
}

/// The name and uid of an object a token refers to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Its name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The ServiceAccount's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The ServiceAccount.
    #[serde(default)]
    pub serviceaccount: ObjectRef,
    /// The Secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The Pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The Node the token (or its Pod) is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
}

/// The `flotilla.io` claim: where the token was issued.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlotillaClaims {
    /// The logical cluster.
    pub cluster: String,
}

/// A ServiceAccount token's claims: a bound token's, or a legacy one's (the
/// `kubernetes.io/serviceaccount/…` claims, no `exp`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The issuer.
    pub iss: String,
    /// `system:serviceaccount:NS:NAME`.
    pub sub: String,
    /// Who the token is for (a string or a list in a JWT).
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub aud: Vec<String>,
    /// Expiry (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Issued at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    /// Not before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    /// The token's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<String>,
    /// A bound token's references.
    #[serde(
        rename = "kubernetes.io",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub kubernetes: Option<KubernetesClaims>,
    /// Where it was issued.
    #[serde(
        rename = "flotilla.io",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub flotilla: Option<FlotillaClaims>,
    /// A legacy token's namespace.
    #[serde(
        rename = "kubernetes.io/serviceaccount/namespace",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_namespace: Option<String>,
    /// A legacy token's Secret.
    #[serde(
        rename = "kubernetes.io/serviceaccount/secret.name",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_secret_name: Option<String>,
    /// A legacy token's ServiceAccount.
    #[serde(
        rename = "kubernetes.io/serviceaccount/service-account.name",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_service_account_name: Option<String>,
    /// A legacy token's ServiceAccount's uid.
    #[serde(
        rename = "kubernetes.io/serviceaccount/service-account.uid",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub legacy_service_account_uid: Option<String>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(d)? {
        None => Vec::new(),
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
    })
}

/// What a bound token is issued for.
#[derive(Clone, Debug, Default)]
pub struct Grant {
    /// The logical cluster.
    pub cluster: String,
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount.
    pub service_account: ObjectRef,
    /// A Secret it is bound to.
    pub secret: Option<ObjectRef>,
    /// A Pod it is bound to.
    pub pod: Option<ObjectRef>,
    /// A Node it is bound to (or its Pod's).
    pub node: Option<ObjectRef>,
    /// Its audiences.
    pub audiences: Vec<String>,
    /// Its lifetime in seconds.
    pub expiration_seconds: i64,
}

/// The hub's token issuer: its name (`iss`), the audiences its API accepts, its key.
#[derive(Debug)]
pub struct Issuer {
    issuer: String,
    audiences: Vec<String>,
    key: SigningKey,
    max_expiration_seconds: Option<i64>,
}

impl Issuer {
    /// Issues as `issuer` (a URL) with the key in `key_pem`; the API's audiences are
    /// the issuer alone (kube's `--api-audiences` default).
    pub fn new(issuer: impl Into<String>, key_pem: &str) -> Result<Self, KeyError> {
        let issuer = issuer.into();
        Ok(Issuer {
            audiences: vec![issuer.clone()],
            issuer,
            key: SigningKey::from_pem(key_pem)?,
            max_expiration_seconds: None,
        })
    }

    /// Shortens longer TokenRequests to `seconds` (kube's
    /// `--service-account-max-token-expiration`; by default there is no bound but
    /// validation's 2^32 seconds).
    pub fn with_max_expiration(mut self, seconds: Option<i64>) -> Self {
        self.max_expiration_seconds = seconds;
        self
    }

    /// The `iss` of the tokens it issues.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences the API accepts, and gives a TokenRequest that names none.
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    /// The bound on a TokenRequest's lifetime, if any.
    pub fn max_expiration_seconds(&self) -> Option<i64> {
        self.max_expiration_seconds
    }

    /// A bound token for `grant`, issued at `now` (Unix seconds), and its claims.
    pub fn issue(&self, grant: &Grant, now: i64) -> Result<(String, Claims), String> {
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: user_name(&grant.namespace, &grant.service_account.name),
            aud: grant.audiences.clone(),
            exp: Some(now + grant.expiration_seconds),
            iat: Some(now),
            nbf: Some(now),
            jti: Some(uuid::Uuid::new_v4().to_string()),
            kubernetes: Some(KubernetesClaims {
                namespace: grant.namespace.clone(),
                serviceaccount: grant.service_account.clone(),
                secret: grant.secret.clone(),
                pod: grant.pod.clone(),
                node: grant.node.clone(),
            }),
            flotilla: Some(FlotillaClaims {
                cluster: grant.cluster.clone(),
            }),
            ..Claims::default()
        };
        let token = self.key.sign(&claims).map_err(|e| e.to_string())?;
        Ok((token, claims))
    }

    /// A legacy token for the Secret `secret` of ServiceAccount `service_account` in
    /// `namespace` of logical cluster `cluster`: no expiry, no audience.
    pub fn issue_legacy(
        &self,
        cluster: &str,
        namespace: &str,
        service_account: &ObjectRef,
        secret: &str,
    ) -> Result<String, String> {
        let claims = Claims {
            iss: LEGACY_ISSUER.to_owned(),
            sub: user_name(namespace, &service_account.name),
            flotilla: Some(FlotillaClaims {
                cluster: cluster.to_owned(),
            }),
            legacy_namespace: Some(namespace.to_owned()),
            legacy_secret_name: Some(secret.to_owned()),
            legacy_service_account_name: Some(service_account.name.clone()),
            legacy_service_account_uid: Some(service_account.uid.clone()),
            ..Claims::default()
        };
        self.key.sign(&claims).map_err(|e| e.to_string())
    }

    /// Whether `token` names this issuer (or the legacy one) as its issuer: read without
    /// verifying, only to tell tokens of other issuers (OIDC) apart, as kube does.
    pub fn is_ours(&self, token: &str) -> bool {
        #[derive(Deserialize)]
        struct Iss {
            #[serde(default)]
            iss: String,
        }
        match jsonwebtoken::dangerous::insecure_decode::<Iss>(token) {
            Ok(data) => data.claims.iss == self.issuer || data.claims.iss == LEGACY_ISSUER,
            Err(_) => false,
        }
    }

    /// `token`'s claims once its signature, issuer, times (at `now`) and audiences check
    /// out. A legacy token has no expiry or audience; its other checks are the
    /// authenticator's.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, Refusal> {
        super::jwt::install();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let claims =
            match jsonwebtoken::decode::<Claims>(token, self.key.decoding_key(), &validation) {
                Ok(data) => data.claims,
                Err(e) => {
                    return Err(match e.kind() {
                        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => {
                            Refusal::Signature
                        }
                        _ => Refusal::Malformed(e.to_string()),
                    });
                }
            };
        if claims.iss != self.issuer && claims.iss != LEGACY_ISSUER {
            return Err(Refusal::Issuer);
        }
        if claims.exp.is_some_and(|exp| now > exp + LEEWAY_SECONDS) {
            return Err(Refusal::Expired);
        }
        if claims.nbf.is_some_and(|nbf| now + LEEWAY_SECONDS < nbf) {
            return Err(Refusal::NotYetValid);
        }
        if claims.iss == LEGACY_ISSUER {
            // Legacy tokens are for the API alone.
            return Ok(claims);
        }
        if claims.exp.is_none() {
            return Err(Refusal::Malformed("a bound token without exp".into()));
        }
        if !claims.aud.iter().any(|aud| self.audiences.contains(aud)) {
            return Err(Refusal::Audience);
        }
        Ok(claims)
    }

    /// `/.well-known/openid-configuration`, as kube-apiserver serves it.
    pub fn discovery(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": self.jwks_uri(),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// Where the keys are: the issuer's scheme and host with `/openid/v1/jwks`.
    pub fn jwks_uri(&self) -> String {
        let origin = match self.issuer.find("://") {
            Some(scheme) => {
                let rest = &self.issuer[scheme + 3..];
                let host = rest.find('/').map_or(rest, |slash| &rest[..slash]);
                format!("{}://{host}", &self.issuer[..scheme])
            }
            None => self.issuer.clone(),
        };
        format!("{origin}/openid/v1/jwks")
    }

    /// `/openid/v1/jwks`: the public key as a JWK set.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.jwk()]})
    }
}

#[cfg(test)]
mod tests;
