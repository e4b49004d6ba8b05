//! Authentication: who a request is from, read from its credentials.

use std::sync::Arc;

use crate::api::Verdict;
use axum::http::{HeaderMap, header};

use super::UserInfo;

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
pub trait Authenticator: Send + Sync {
    /// The user of a request with these headers.
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> Verdict<'a, Credentials>;
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
/// ([`UserInfo::admin`]); any other is invalid.
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
    fn authenticate<'a>(&'a self, headers: &'a HeaderMap) -> Verdict<'a, Credentials> {
        Verdict::Now(self.read(headers))
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
}
