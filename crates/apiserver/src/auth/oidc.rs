//! OpenID Connect ID tokens, as kube-apiserver's `--oidc-*` flags read them.
//!
//! ```text
//!  Bearer JWT whose iss is --oidc-issuer-url (else not this authenticator's token)
//!   ─► cached? (bounded, never past exp) ─► the User
//!   ─► alg one of --oidc-signing-algs (RS256 by default) ─► the key of its kid:
//!        known ─► verify now
//!        unknown ─► fetch ISSUER/.well-known/openid-configuration ─► jwks_uri ─► keys
//!                   (HTTPS, --oidc-ca-file or the system's roots; at most once per
//!                   10 s, one fetch at a time) ─► verify
//!   ─► signature, iss, aud ∋ --oidc-client-id, exp (none past), nbf (5 min skew)
//!   ─► user: prefix + the username claim (sub by default; email must not be unverified)
//!      groups: groups prefix + each of the groups claim (a string or a list),
//!      system:authenticated
//! ```
//!
//! The username prefix as kube sets it: by default `ISSUER#` for any claim but `email`,
//! none for `email`; `-` means none.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use tracing::{debug, info, warn};

use crate::api::Verdict;
use crate::auth::{AUTHENTICATED, Authenticator, Credentials, Presented, Refusal, UserInfo};

/// The least time between two fetches of the issuer's keys.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// How long a fetch of the issuer's documents may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How far before its `nbf` a token is accepted (go-oidc's skew).
const NOT_BEFORE_SKEW: i64 = 300;

/// How long a verified token is kept without verifying it again.
const CACHE_TTL: Duration = Duration::from_secs(60);
const CACHE_ENTRIES: usize = 10_000;

/// The largest discovery document or key set read.
const MAX_DOCUMENT: usize = 1 << 20;

/// How the hub reads ID tokens of one issuer (`flotilla hub --oidc-…`).
#[derive(Clone, Debug)]
pub struct OidcConfig {
    /// `--oidc-issuer-url`: an `https://` URL; tokens' `iss` must be exactly it.
    pub issuer_url: String,
    /// `--oidc-client-id`: tokens' `aud` must contain it.
    pub client_id: String,
    /// `--oidc-username-claim` (`sub` by default).
    pub username_claim: String,
    /// `--oidc-username-prefix`: `None` for kube's default, `-` for none.
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`: none means no groups from the token.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: String,
    /// `--oidc-ca-file`'s PEM: the CAs the issuer's certificate is checked against
    /// (else the system's).
    pub ca_pem: Option<String>,
    /// `--oidc-signing-algs`.
    pub algorithms: Vec<Algorithm>,
}

impl OidcConfig {
    /// The issuer and client id, every other setting at kube's default.
    pub fn new(issuer_url: impl Into<String>, client_id: impl Into<String>) -> Self {
        OidcConfig {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
            ca_pem: None,
            algorithms: vec![Algorithm::RS256],
        }
    }

    /// The prefix user names get, as kube resolves the default: `ISSUER#` unless the
    /// claim is `email`; `-` is none.
    pub fn resolved_username_prefix(&self) -> String {
        match self.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(prefix) => prefix.to_owned(),
            None if self.username_claim == "email" => String::new(),
            None => format!("{}#", self.issuer_url),
        }
    }
}

/// Why the OIDC authenticator could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The CA file holds no usable certificate.
    #[error("the OIDC CA file holds no usable certificate: {0}")]
    Ca(String),
    /// The system's CAs could not be read.
    #[error("cannot read the system's CA certificates: {0}")]
    Roots(#[from] std::io::Error),
}

/// The issuer's keys, by `kid`.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, DecodingKey>,
    /// Keys without a kid, tried for tokens without one.
    unnamed: Vec<DecodingKey>,
    /// When they were last fetched (or last tried).
    fetched: Option<Instant>,
}

struct Verified {
    user: Arc<UserInfo>,
    exp: i64,
    until: Instant,
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// Authenticates ID tokens of one OpenID Connect issuer.
pub struct Oidc {
    config: OidcConfig,
    username_prefix: String,
    keys: RwLock<Keys>,
    /// One fetch at a time; the others wait for it and use what it got.
    fetching: tokio::sync::Mutex<()>,
    http: HttpClient<Https, Empty<Bytes>>,
    verified: Mutex<HashMap<[u8; 32], Arc<Verified>>>,
}

impl Oidc {
    /// An authenticator for `config`; its keys are fetched when a token first needs them.
    pub fn new(config: OidcConfig) -> Result<Self, OidcError> {
        super::jwt::install();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match &config.ca_pem {
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
                    let cert = cert.map_err(|e| OidcError::Ca(e.to_string()))?;
                    roots.add(cert).map_err(|e| OidcError::Ca(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(OidcError::Ca("no PEM certificate in it".into()));
                }
                let tls = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| OidcError::Ca(e.to_string()))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                builder.with_tls_config(tls)
            }
            None => builder.with_provider_and_native_roots(provider)?,
        };
        let https = builder.https_only().enable_http1().build();
        let http = HttpClient::builder(TokioExecutor::new()).build(https);
        Ok(Oidc {
            username_prefix: config.resolved_username_prefix(),
            config,
            keys: RwLock::default(),
            fetching: tokio::sync::Mutex::new(()),
            http,
            verified: Mutex::default(),
        })
    }

    /// The key for a token with `kid`, if known.
    fn key(&self, kid: Option<&str>) -> Option<Vec<DecodingKey>> {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        match kid {
            Some(kid) => keys.by_kid.get(kid).map(|k| vec![k.clone()]),
            None => {
                let all: Vec<DecodingKey> =
                    keys.by_kid.values().chain(&keys.unnamed).cloned().collect();
                (!all.is_empty()).then_some(all)
            }
        }
    }

    /// Fetches the issuer's keys again, unless they were fetched less than
    /// [`REFRESH_INTERVAL`] ago (then what is known stays).
    async fn refresh(&self) -> Result<(), String> {
        let _one = self.fetching.lock().await;
        let recent = self
            .keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .fetched
            .is_some_and(|at| at.elapsed() < REFRESH_INTERVAL);
        if recent {
            return Ok(());
        }
        self.keys
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .fetched = Some(Instant::now());
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, self.fetch_keys())
            .await
            .map_err(|_| format!("no answer within {} s", FETCH_TIMEOUT.as_secs()))??;
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        keys.by_kid.clear();
        keys.unnamed.clear();
        for jwk in &fetched.keys {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), key);
                }
                None => keys.unnamed.push(key),
            }
        }
        info!(issuer = %self.config.issuer_url, keys = fetched.keys.len(), "OIDC keys fetched");
        Ok(())
    }

    async fn fetch_keys(&self) -> Result<JwkSet, String> {
        let discovery = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer_url.trim_end_matches('/')
        );
        let document: Value = self.get_json(&discovery).await?;
        if document["issuer"] != self.config.issuer_url.as_str() {
            return Err(format!(
                "the discovery document names issuer {}, not {}",
                document["issuer"], self.config.issuer_url
            ));
        }
        let jwks_uri = document["jwks_uri"]
            .as_str()
            .ok_or("the discovery document has no jwks_uri")?;
        let keys: Value = self.get_json(jwks_uri).await?;
        serde_json::from_value(keys).map_err(|e| format!("{jwks_uri}: not a JWK set: {e}"))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let response = self
            .http
            .get(uri)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: {}", response.status()));
        }
        let body = http_body_util::Limited::new(response.into_body(), MAX_DOCUMENT)
            .collect()
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))
    }

    /// Verifies `token` with `keys` at `now` into its user.
    fn verify(
        &self,
        token: &str,
        keys: &[DecodingKey],
        alg: Algorithm,
        now: i64,
    ) -> Result<(UserInfo, i64), Refusal> {
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&self.config.issuer_url]);
        validation.set_audience(&[&self.config.client_id]);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.required_spec_claims = ["exp", "iss", "aud"].map(String::from).into();
        let mut last = Refusal::Signature;
        for key in keys {
            match jsonwebtoken::decode::<Value>(token, key, &validation) {
                Ok(data) => return self.user(&data.claims, now),
                Err(e) => {
                    last = match e.kind() {
                        ErrorKind::InvalidIssuer => Refusal::Issuer,
                        ErrorKind::InvalidAudience => Refusal::Audience,
                        ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => {
                            Refusal::Signature
                        }
                        _ => Refusal::Malformed(e.to_string()),
                    };
                    if last != Refusal::Signature {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    /// The user `claims` name (already verified), and the token's expiry.
    fn user(&self, claims: &Value, now: i64) -> Result<(UserInfo, i64), Refusal> {
        let exp = claims["exp"]
            .as_i64()
            .ok_or_else(|| Refusal::Malformed("exp is not a number".into()))?;
        if now > exp {
            return Err(Refusal::Expired);
        }
        if claims["nbf"]
            .as_i64()
            .is_some_and(|nbf| now + NOT_BEFORE_SKEW < nbf)
        {
            return Err(Refusal::NotYetValid);
        }
        let user = map_claims(&self.config, &self.username_prefix, claims)?;
        Ok((user, exp))
    }

    fn remember(&self, key: [u8; 32], user: Arc<UserInfo>, exp: i64, now: i64) {
        let at = Instant::now();
        let left = Duration::from_secs((exp - now).max(0) as u64);
        let mut cache = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, v| v.until > at);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Arc::new(Verified {
                user,
                exp,
                until: at + CACHE_TTL.min(left),
            }),
        );
    }
}

/// The user of verified `claims` as `config` maps them (`prefix` the resolved username
/// prefix).
pub fn map_claims(config: &OidcConfig, prefix: &str, claims: &Value) -> Result<UserInfo, Refusal> {
    let claim = &config.username_claim;
    let name = claims[claim.as_str()]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Refusal::Claims(format!("no string claim {claim:?}")))?;
    if claim == "email" && claims["email_verified"] == Value::Bool(false) {
        return Err(Refusal::Claims("the email is not verified".into()));
    }
    let mut groups: Vec<String> = match config.groups_claim.as_deref() {
        None => Vec::new(),
        Some(groups) => match &claims[groups] {
            Value::Null => Vec::new(),
            Value::String(one) => vec![format!("{}{one}", config.groups_prefix)],
            Value::Array(many) => many
                .iter()
                .map(|g| g.as_str().map(|g| format!("{}{g}", config.groups_prefix)))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    Refusal::Claims(format!("claim {groups:?} is not a list of strings"))
                })?,
            _ => {
                return Err(Refusal::Claims(format!(
                    "claim {groups:?} is neither a string nor a list"
                )));
            }
        },
    };
    groups.push(AUTHENTICATED.to_owned());
    Ok(UserInfo {
        name: format!("{prefix}{name}"),
        groups,
        ..UserInfo::default()
    })
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

impl Authenticator for Oidc {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let Some(token) = presented.bearer else {
            return Verdict::Now(Credentials::Missing);
        };
        let now = jiff::Timestamp::now().as_second();
        let cache_key = digest(token.as_bytes());
        let cached = self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&cache_key)
            .cloned();
        if let Some(found) = cached
            && found.until > Instant::now()
            && now <= found.exp
        {
            return Verdict::Now(Credentials::User(found.user.clone()));
        }
        // Only tokens that name this issuer are this authenticator's (read unverified).
        let iss = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(token)
            .ok()
            .and_then(|claims| claims["iss"].as_str().map(str::to_owned));
        if iss.as_deref() != Some(self.config.issuer_url.as_str()) {
            return Verdict::Now(Credentials::Missing);
        }
        let header = match jsonwebtoken::decode_header(token) {
            Ok(header) => header,
            Err(e) => return Verdict::Now(Credentials::Invalid(Refusal::Malformed(e.to_string()))),
        };
        if !self.config.algorithms.contains(&header.alg) {
            return Verdict::Now(Credentials::Invalid(Refusal::Malformed(format!(
                "signing algorithm {:?} not accepted",
                header.alg
            ))));
        }
        let finish = move |keys: &[DecodingKey]| match self.verify(token, keys, header.alg, now) {
            Ok((user, exp)) => {
                let user = Arc::new(user);
                self.remember(cache_key, user.clone(), exp, now);
                Credentials::User(user)
            }
            Err(refusal) => Credentials::Invalid(refusal),
        };
        let kid = header.kid.clone();
        if let Some(keys) = self.key(kid.as_deref()) {
            return Verdict::Now(finish(&keys));
        }
        Verdict::Later(Box::pin(async move {
            if let Err(e) = self.refresh().await {
                warn!(issuer = %self.config.issuer_url, error = %e, "cannot fetch the OIDC issuer's keys");
                return Credentials::Invalid(Refusal::Keys(e));
            }
            match self.key(kid.as_deref()) {
                Some(keys) => finish(&keys),
                None => {
                    debug!(kid = ?kid, "no OIDC key with this kid");
                    Credentials::Invalid(Refusal::UnknownKey(kid.unwrap_or_default()))
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests;
