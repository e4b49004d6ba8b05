//! Authentication: who a request is from, read from its credentials.
//!
//! ```text
//!  Presented (headers, the client certificate chain) ─► Chain: each authenticator in turn
//!     x509::ClientCertificates  the chain verified against the hub CA: CN, O
//!     AdminToken                the admin bearer token
//!     serviceaccount::Tokens    ServiceAccount JWTs of this hub's issuer
//!     oidc::Oidc                ID tokens of an OIDC issuer (--oidc-issuer-url)
//!     bootstrap::BootstrapTokens `ID.SECRET` tokens of kube-system's bootstrap Secrets
//!  ─► User (the first wins) | Missing (none presented) | Invalid(Refusal) (401; the
//!     refusal goes to the log and the audit log, never to the client)
//! ```

use std::sync::Arc;

use crate::api::Verdict;
use axum::http::{HeaderMap, header};
use rustls::pki_types::CertificateDer;

use super::UserInfo;

/// What a request presents to show who it is from: its headers (a bearer token) and the
/// client certificate chain its TLS handshake verified, leaf first.
///
/// The bearer token is read out of the headers once, when the request is presented: every
/// token authenticator of a [`Chain`] asks for it, and reading it checks each of its bytes
/// (a ServiceAccount token is most of a kilobyte).
#[derive(Clone, Copy, Debug)]
pub struct Presented<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The verified client certificate chain, if the client sent one.
    pub certificates: Option<&'a [CertificateDer<'static>]>,
    /// The bearer token of the `Authorization` header ([`bearer`] of `headers`).
    pub bearer: Option<&'a str>,
}

impl<'a> Presented<'a> {
    /// A request with `headers` and, if the client sent one, the verified `certificates`.
    pub fn new(
        headers: &'a HeaderMap,
        certificates: Option<&'a [CertificateDer<'static>]>,
    ) -> Self {
        Presented {
            headers,
            certificates,
            bearer: bearer(headers),
        }
    }

    /// A request with `headers` and no client certificate.
    pub fn headers(headers: &'a HeaderMap) -> Self {
        Self::new(headers, None)
    }
}

/// What a request's credentials say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Valid: the request is from this user.
    User(Arc<UserInfo>),
    /// None were presented.
    Missing,
    /// Some were presented and are not valid: the request is refused (401) whatever it
    /// asks, public paths included.
    Invalid(Refusal),
}

/// Why presented credentials are not valid. The client is told only that it is not
/// authorized (kube's `Unauthorized` Status); this goes to the log and the audit log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A bearer token no authenticator recognises as its own.
    #[error("the bearer token is not one this server accepts")]
    UnknownToken,
    /// Not a well-formed token (not a JWT, claims missing or of the wrong type).
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The signature does not verify with the issuer's keys.
    #[error("the token's signature does not verify")]
    Signature,
    /// No key of the issuer has the token's key id.
    #[error("the issuer has no key {0:?}")]
    UnknownKey(String),
    /// Past its expiry.
    #[error("the token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// An issuer this server does not accept tokens of.
    #[error("the token's issuer is not accepted")]
    Issuer,
    /// None of the token's audiences is one this server accepts.
    #[error("the token's audiences are not accepted")]
    Audience,
    /// What the token was issued for is gone or was replaced.
    #[error("the token has been revoked: {0}")]
    Revoked(String),
    /// A token of one logical cluster used in another.
    #[error("the token is bound to logical cluster {bound:?}, not {requested:?}")]
    Cluster {
        /// The cluster the token was issued in.
        bound: String,
        /// The cluster the request's path names.
        requested: String,
    },
    /// The token's claims do not name a user as the server is set up to read them.
    #[error("the token's claims are not accepted: {0}")]
    Claims(String),
    /// The client certificate does not verify against the hub's CA.
    #[error("the client certificate does not verify: {0}")]
    Certificate(String),
    /// The issuer's keys could not be had (an OIDC issuer that does not answer).
    #[error("the issuer's keys cannot be fetched: {0}")]
    Keys(String),
}

impl Refusal {
    /// Whether `self` says more than `other` about why the request is refused: any
    /// authenticator's own refusal says more than "no one accepts this token".
    fn says_more_than(&self, other: &Refusal) -> bool {
        *other == Refusal::UnknownToken && *self != Refusal::UnknownToken
    }
}

/// The refusal to keep of `kept` and `new`.
fn keep(kept: Option<Refusal>, new: Refusal) -> Option<Refusal> {
    match kept {
        Some(kept) if !new.says_more_than(&kept) => Some(kept),
        _ => Some(new),
    }
}

/// Reads who a request is from. An implementation that must wait (a webhook, an OIDC
/// issuer's keys) answers [`Verdict::Later`]; one that knows at once costs nothing more.
/// An authenticator that does not recognise the kind of credential presented (a token
/// not of its issuer, no certificate) answers [`Credentials::Missing`], so that a
/// [`Chain`] asks the next one.
pub trait Authenticator: Send + Sync {
    /// The user of a request that presents `presented`.
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials>;
}

/// Several authenticators asked in order, as kube-apiserver's union authenticator: the
/// first that names a user wins; when none does, the request is [`Credentials::Invalid`]
/// if any found its credentials invalid (with the refusal that says most), else
/// [`Credentials::Missing`].
pub struct Chain(Vec<Arc<dyn Authenticator>>);

impl Chain {
    /// Asks `authenticators` in this order.
    pub fn new(authenticators: Vec<Arc<dyn Authenticator>>) -> Self {
        Chain(authenticators)
    }
}

impl Authenticator for Chain {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let mut refused: Option<Refusal> = None;
        let outcome = |refused: Option<Refusal>| match refused {
            Some(refusal) => Credentials::Invalid(refusal),
            None => Credentials::Missing,
        };
        for (i, authenticator) in self.0.iter().enumerate() {
            match authenticator.authenticate(presented) {
                Verdict::Now(Credentials::User(user)) => {
                    return Verdict::Now(Credentials::User(user));
                }
                Verdict::Now(Credentials::Invalid(refusal)) => refused = keep(refused, refusal),
                Verdict::Now(Credentials::Missing) => {}
                Verdict::Later(first) => {
                    // The rest are asked once this one has answered.
                    return Verdict::Later(Box::pin(async move {
                        match first.await {
                            Credentials::User(user) => return Credentials::User(user),
                            Credentials::Invalid(refusal) => refused = keep(refused, refusal),
                            Credentials::Missing => {}
                        }
                        for authenticator in &self.0[i + 1..] {
                            match authenticator.authenticate(presented).await {
                                Credentials::User(user) => return Credentials::User(user),
                                Credentials::Invalid(refusal) => refused = keep(refused, refusal),
                                Credentials::Missing => {}
                            }
                        }
                        outcome(refused)
                    }));
                }
            }
        }
        Verdict::Now(outcome(refused))
    }
}

/// The token of an `Authorization` header's value, if it is a bearer token: the scheme
/// is case-insensitive (RFC 9110 §11.1), as Kubernetes reads it, and may be followed by
/// any run of spaces. A value with a byte that is not visible ASCII (or a tab) is no
/// bearer token, as `HeaderValue::to_str` would have it.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    if !visible_ascii(value) {
        return None;
    }
    // Visible ASCII is UTF-8: this only finds so, a word at a time.
    let value = std::str::from_utf8(value).ok()?;
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether every byte is visible ASCII or a tab (what `HeaderValue::to_str` accepts),
/// checked without stopping at the first that is not, so that the compiler checks many
/// bytes at once: a ServiceAccount token is most of a kilobyte, read on every request.
fn visible_ascii(bytes: &[u8]) -> bool {
    bytes.iter().fold(true, |all, &b| {
        all & (matches!(b, 0x20..=0x7e) | (b == b'\t'))
    })
}

/// The hub's admin bearer token: a token `check` accepts is the admin
/// ([`UserInfo::admin`]); any other is invalid. In a [`Chain`] the others are asked
/// after it, and a bearer token that none of them accepts stays invalid (401), as
/// kube-apiserver refuses a token no token authenticator accepts.
pub struct AdminToken {
    check: Box<dyn Fn(&str) -> bool + Send + Sync>,
    admin: Arc<UserInfo>,
}

impl AdminToken {
    /// Accepts the tokens `check` accepts.
    pub fn new(check: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        AdminToken {
            check: Box::new(check),
            admin: Arc::new(UserInfo::admin()),
        }
    }

    /// Accepts exactly `token`.
    pub fn exactly(token: impl Into<String>) -> Self {
        let token = token.into();
        Self::new(move |t| t == token)
    }

    fn read(&self, token: Option<&str>) -> Credentials {
        match token {
            Some(token) if (self.check)(token) => Credentials::User(self.admin.clone()),
            Some(_) => Credentials::Invalid(Refusal::UnknownToken),
            None => Credentials::Missing,
        }
    }
}

impl Authenticator for AdminToken {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        Verdict::Now(self.read(presented.bearer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_bearer_token_is_read_as_to_str_reads_the_header() {
        let long = format!("Bearer {}", "eyJhbGciOiJFUzI1NiJ9.".repeat(40));
        // (A header value holds no control byte but the tab: obs-text is what to_str refuses.)
        let values: [&[u8]; 9] = [
            b"Bearer abc",
            b"bearer \t abc \t",
            b"BEARER a b",
            b"Basic abc",
            b"Bearer ",
            b"Bearer ab\xc3\xa9",
            b"Bearer \x80abc",
            b"\tBearer abc",
            long.as_bytes(),
        ];
        for value in values {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                HeaderValue::from_bytes(value).unwrap(),
            );
            // What the header reads as with `to_str`, then split as `bearer` splits it.
            let expected = headers[header::AUTHORIZATION]
                .to_str()
                .ok()
                .and_then(|v| v.trim_start().split_once([' ', '\t']))
                .map(|(scheme, token)| (scheme, token.trim()))
                .filter(|(scheme, token)| {
                    scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()
                })
                .map(|(_, token)| token);
            assert_eq!(bearer(&headers), expected, "{value:?}");
            assert_eq!(Presented::headers(&headers).bearer, expected);
        }
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn the_admin_token_is_the_admin_and_any_other_token_is_invalid() {
        let auth = AdminToken::exactly("s3cret");
        assert_eq!(
            auth.read(bearer(&with("bearer  s3cret"))),
            Credentials::User(Arc::new(UserInfo::admin()))
        );
        assert_eq!(
            auth.read(bearer(&with("Bearer wrong"))),
            Credentials::Invalid(Refusal::UnknownToken)
        );
        assert_eq!(auth.read(bearer(&HeaderMap::new())), Credentials::Missing);
        assert_eq!(
            auth.read(bearer(&with("Basic czNjcmV0"))),
            Credentials::Missing
        );
    }

    /// Accepts one token as one user; refuses `expired` as expired; no opinion on any
    /// other.
    struct Token(&'static str, &'static str);

    impl Authenticator for Token {
        fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
            let credentials = match presented.bearer {
                Some(token) if token == self.0 => {
                    Credentials::User(Arc::new(UserInfo::new(self.1, &[])))
                }
                Some("expired") => Credentials::Invalid(Refusal::Expired),
                _ => Credentials::Missing,
            };
            // Answer later, as an authenticator that must wait would.
            Verdict::Later(Box::pin(std::future::ready(credentials)))
        }
    }

    #[tokio::test]
    async fn a_chain_takes_the_first_user_and_refuses_a_token_nobody_accepts() {
        let chain = Chain::new(vec![
            Arc::new(AdminToken::exactly("admin")),
            Arc::new(Token("sa", "system:serviceaccount:shop:ci")),
            Arc::new(Token("sa", "second")),
        ]);
        let chain = &chain;
        let ask = |value: &str| {
            let headers = if value.is_empty() {
                HeaderMap::new()
            } else {
                with(value)
            };
            async move {
                let presented = Presented::headers(&headers);
                chain.authenticate(&presented).await
            }
        };
        assert_eq!(
            ask("Bearer admin").await,
            Credentials::User(Arc::new(UserInfo::admin()))
        );
        let Credentials::User(user) = ask("Bearer sa").await else {
            panic!("the second authenticator's token is not accepted");
        };
        assert_eq!(user.name, "system:serviceaccount:shop:ci");
        assert_eq!(
            ask("Bearer nobody").await,
            Credentials::Invalid(Refusal::UnknownToken)
        );
        // The refusal that says why is kept over "no one accepts it".
        assert_eq!(
            ask("Bearer expired").await,
            Credentials::Invalid(Refusal::Expired)
        );
        assert_eq!(ask("").await, Credentials::Missing);
    }
}
