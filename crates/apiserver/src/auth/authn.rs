//! Authentication: who a request is from, read from its credentials.

use std::sync::Arc;

use crate::api::Verdict;
use axum::http::{HeaderMap, header};
use rustls::pki_types::CertificateDer;

use super::UserInfo;

/// What a request presents to show who it is from: its headers (a bearer token) and the
/// client certificate chain its TLS handshake verified, leaf first.
#[derive(Clone, Copy, Debug)]
pub struct Presented<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The verified client certificate chain, if the client sent one.
    pub certificates: Option<&'a [CertificateDer<'static>]>,
}

impl<'a> Presented<'a> {
    /// A request with `headers` and no client certificate.
    pub fn headers(headers: &'a HeaderMap) -> Self {
        Presented {
            headers,
            certificates: None,
        }
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
    Invalid,
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
/// if any found its credentials invalid, else [`Credentials::Missing`].
pub struct Chain(Vec<Arc<dyn Authenticator>>);

impl Chain {
    /// Asks `authenticators` in this order.
    pub fn new(authenticators: Vec<Arc<dyn Authenticator>>) -> Self {
        Chain(authenticators)
    }
}

impl Authenticator for Chain {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        let mut invalid = false;
        for (i, authenticator) in self.0.iter().enumerate() {
            match authenticator.authenticate(presented) {
                Verdict::Now(Credentials::User(user)) => {
                    return Verdict::Now(Credentials::User(user));
                }
                Verdict::Now(Credentials::Invalid) => invalid = true,
                Verdict::Now(Credentials::Missing) => {}
                Verdict::Later(first) => {
                    // The rest are asked once this one has answered.
                    return Verdict::Later(Box::pin(async move {
                        match first.await {
                            Credentials::User(user) => return Credentials::User(user),
                            Credentials::Invalid => invalid = true,
                            Credentials::Missing => {}
                        }
                        for authenticator in &self.0[i + 1..] {
                            match authenticator.authenticate(presented).await {
                                Credentials::User(user) => return Credentials::User(user),
                                Credentials::Invalid => invalid = true,
                                Credentials::Missing => {}
                            }
                        }
                        if invalid {
                            Credentials::Invalid
                        } else {
                            Credentials::Missing
                        }
                    }));
                }
            }
        }
        Verdict::Now(if invalid {
            Credentials::Invalid
        } else {
            Credentials::Missing
        })
    }
}

/// The token of an `Authorization` header's value, if it is a bearer token: the scheme
/// is case-insensitive (RFC 9110 §11.1), as Kubernetes reads it, and may be followed by
/// any run of spaces.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim_start().split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
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

    fn read(&self, headers: &HeaderMap) -> Credentials {
        match bearer(headers) {
            Some(token) if (self.check)(token) => Credentials::User(self.admin.clone()),
            Some(_) => Credentials::Invalid,
            None => Credentials::Missing,
        }
    }
}

impl Authenticator for AdminToken {
    fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
        Verdict::Now(self.read(presented.headers))
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
    fn the_admin_token_is_the_admin_and_any_other_token_is_invalid() {
        let auth = AdminToken::exactly("s3cret");
        assert_eq!(
            auth.read(&with("bearer  s3cret")),
            Credentials::User(Arc::new(UserInfo::admin()))
        );
        assert_eq!(auth.read(&with("Bearer wrong")), Credentials::Invalid);
        assert_eq!(auth.read(&HeaderMap::new()), Credentials::Missing);
        assert_eq!(auth.read(&with("Basic czNjcmV0")), Credentials::Missing);
    }

    /// Accepts one token as one user; no opinion on any other.
    struct Token(&'static str, &'static str);

    impl Authenticator for Token {
        fn authenticate<'a>(&'a self, presented: &'a Presented<'a>) -> Verdict<'a, Credentials> {
            let credentials = match bearer(presented.headers) {
                Some(token) if token == self.0 => {
                    Credentials::User(Arc::new(UserInfo::new(self.1, &[])))
                }
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
        assert_eq!(ask("Bearer nobody").await, Credentials::Invalid);
        assert_eq!(ask("").await, Credentials::Missing);
    }
}
