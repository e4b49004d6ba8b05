//! Impersonation: acting as another user (`Impersonate-User`, `Impersonate-Group`, …).
//!
//! ```text
//!  headers ─► Impersonate-User: NAME            impersonate users NAME
//!             (system:serviceaccount:NS:SA)     impersonate serviceaccounts SA in NS
//!             Impersonate-Group: G (repeatable) impersonate groups G
//!             Impersonate-Uid: UID              impersonate uids UID (authentication.k8s.io)
//!             Impersonate-Extra-KEY: V          impersonate userextras/KEY V (same group)
//!     each asked of the authorizer as the authenticated user; any refusal = 403
//!  ─► the user acted as: NAME, its groups (a service account's own when none are given)
//!     + system:authenticated (system:unauthenticated for system:anonymous), uid, extra
//! ```
//!
//! As kube-apiserver's `WithImpersonation`: the user acted as runs every later stage
//! (authorization, admission, the managedFields manager); the audit log records both.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::Verdict;
use axum::http::HeaderMap;

use super::{ANONYMOUS_USER, AUTHENTICATED, Attributes, Authorizer, Decision, UNAUTHENTICATED};
use super::{UserInfo, serviceaccount};
use crate::http::error::{ApiError, ApiResult};

/// The header naming the user to act as.
pub const USER_HEADER: &str = "impersonate-user";
/// The header naming a group to act in (repeatable).
pub const GROUP_HEADER: &str = "impersonate-group";
/// The header naming the uid to act with.
pub const UID_HEADER: &str = "impersonate-uid";
/// The prefix of headers naming an extra value (`Impersonate-Extra-<key>`).
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// Turns the authenticated user into the one the request acts as. An implementation that
/// honours the headers asks `authorizer` whether the user may impersonate (verb
/// `impersonate` on users, groups, …) in logical cluster `cluster` and refuses with 403
/// otherwise.
pub trait Impersonation: Send + Sync {
    /// The user the request acts as.
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        cluster: &'a str,
        headers: &'a HeaderMap,
        authorizer: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>>;
}

/// Impersonation headers are not read: every request acts as its authenticated user
/// (the simulator's server, which has one user).
pub struct IgnoreHeaders;

impl Impersonation for IgnoreHeaders {
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        _: &'a str,
        _: &'a HeaderMap,
        _: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>> {
        Verdict::Now(Ok(user))
    }
}

/// The impersonation headers honoured as kube-apiserver honours them.
pub struct Headers;

/// One thing a request asks to act as, and what the authorizer is asked for it.
#[derive(Debug)]
struct Asked<'h> {
    group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: &'h str,
    name: &'h str,
}

impl Impersonation for Headers {
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        cluster: &'a str,
        headers: &'a HeaderMap,
        authorizer: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>> {
        if !headers
            .keys()
            .any(|name| name.as_str().starts_with("impersonate-"))
        {
            return Verdict::Now(Ok(user));
        }
        Verdict::Later(Box::pin(async move {
            let Some((acting, asked)) = read(headers)? else {
                return Ok(user);
            };
            for asked in &asked {
                let attributes = Attributes {
                    cluster,
                    user: &user,
                    verb: "impersonate",
                    resource_request: true,
                    group: asked.group,
                    version: "",
                    resource: asked.resource,
                    subresource: &asked.subresource,
                    namespace: asked.namespace,
                    name: asked.name,
                    path: "",
                };
                match authorizer.authorize(&attributes).await {
                    Decision::Allow => {}
                    Decision::Deny(reason) => return Err(attributes.forbidden(&reason)),
                    Decision::NoOpinion => return Err(attributes.forbidden("")),
                }
            }
            tracing::debug!(user = %user.name, acting = %acting.name, "impersonating");
            Ok(Arc::new(acting))
        }))
    }
}

/// The user the headers ask to act as, and each thing to be allowed for it (`None` when
/// they ask nothing: an empty `Impersonate-User` alone); 400 for headers that ask for
/// groups, a uid or extras without a user, or that are not text.
fn read(headers: &HeaderMap) -> ApiResult<Option<(UserInfo, Vec<Asked<'_>>)>> {
    let mut asked = Vec::new();
    let mut acting = UserInfo::default();
    let name = match headers.get(USER_HEADER) {
        Some(value) => text(value)?,
        None => "",
    };
    let mut groups_given = false;
    if !name.is_empty() {
        acting.name = name.to_owned();
        match serviceaccount::split(name) {
            Some((namespace, account)) => asked.push(Asked {
                group: "",
                resource: "serviceaccounts",
                subresource: String::new(),
                namespace,
                name: account,
            }),
            None => asked.push(Asked {
                group: "",
                resource: "users",
                subresource: String::new(),
                namespace: "",
                name,
            }),
        }
    }
    for value in headers.get_all(GROUP_HEADER) {
        let group = text(value)?;
        groups_given = true;
        acting.groups.push(group.to_owned());
        asked.push(Asked {
            group: "",
            resource: "groups",
            subresource: String::new(),
            namespace: "",
            name: group,
        });
    }
    if let Some(value) = headers.get(UID_HEADER) {
        let uid = text(value)?;
        acting.uid = uid.to_owned();
        asked.push(Asked {
            group: "authentication.k8s.io",
            resource: "uids",
            subresource: String::new(),
            namespace: "",
            name: uid,
        });
    }
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (header, value) in headers {
        let Some(key) = header.as_str().strip_prefix(EXTRA_PREFIX) else {
            continue;
        };
        let key = percent_decoded(key);
        let value = text(value)?;
        extra.entry(key.clone()).or_default().push(value.to_owned());
        asked.push(Asked {
            group: "authentication.k8s.io",
            resource: "userextras",
            subresource: key,
            namespace: "",
            name: value,
        });
    }
    acting.extra = extra;
    if asked.is_empty() {
        return Ok(None);
    }
    if name.is_empty() {
        let what: Vec<String> = asked
            .iter()
            .map(|a| format!("{} {:?}", a.resource, a.name))
            .collect();
        return Err(ApiError::bad_request(format!(
            "requested impersonation of {} without impersonating a user",
            what.join(", ")
        )));
    }
    if !groups_given && let Some((namespace, _)) = serviceaccount::split(name) {
        acting.groups = serviceaccount::groups(namespace);
    }
    if name == ANONYMOUS_USER {
        if !acting.groups.iter().any(|g| g == UNAUTHENTICATED) {
            acting.groups.push(UNAUTHENTICATED.to_owned());
        }
    } else if !acting
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        acting.groups.push(AUTHENTICATED.to_owned());
    }
    Ok(Some((acting, asked)))
}

/// A header's value as text (400 if it is not).
fn text(value: &axum::http::HeaderValue) -> ApiResult<&str> {
    value
        .to_str()
        .map_err(|_| ApiError::bad_request("an impersonation header is not text"))
}

/// An extra's key as a header carries it: percent-encoded, so that keys with characters a
/// header name cannot hold (`/`) can be named.
fn percent_decoded(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(Some(high)), Some(Some(low))) = (
                bytes.get(i + 1).map(|b| hex(*b)),
                bytes.get(i + 2).map(|b| hex(*b)),
            )
        {
            out.push((high * 16 + low) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    fn acting(pairs: &[(&str, &str)]) -> Option<UserInfo> {
        read(&headers(pairs)).unwrap().map(|(user, _)| user)
    }

    #[test]
    fn the_groups_of_the_user_acted_as_are_those_kubernetes_gives() {
        assert_eq!(acting(&[("impersonate-user", "")]), None);
        let groups = |pairs: &[(&str, &str)]| acting(pairs).unwrap().groups;
        assert_eq!(groups(&[("impersonate-user", "alice")]), [AUTHENTICATED]);
        assert_eq!(
            groups(&[("impersonate-user", ANONYMOUS_USER)]),
            [UNAUTHENTICATED]
        );
        assert_eq!(
            groups(&[
                ("impersonate-user", "alice"),
                ("impersonate-group", UNAUTHENTICATED)
            ]),
            [UNAUTHENTICATED]
        );
        // Groups given for a service account are its groups.
        assert_eq!(
            groups(&[
                ("impersonate-user", "system:serviceaccount:shop:ci"),
                ("impersonate-group", "g")
            ]),
            ["g", AUTHENTICATED]
        );
        let service_account = headers(&[
            ("impersonate-user", "system:serviceaccount:shop:ci"),
            ("impersonate-uid", "u"),
        ]);
        let (_, asked) = read(&service_account).unwrap().unwrap();
        let asked: Vec<String> = asked
            .iter()
            .map(|a| format!("{}/{} {} {}", a.group, a.resource, a.namespace, a.name))
            .collect();
        assert_eq!(
            asked,
            ["/serviceaccounts shop ci", "authentication.k8s.io/uids  u"]
        );
        for alone in [
            &[("impersonate-group", "g")][..],
            &[("impersonate-uid", "u")],
            &[("impersonate-extra-scopes", "s")],
        ] {
            let refused = read(&headers(alone)).map(|_| ()).unwrap_err();
            assert_eq!(refused.code, 400, "{alone:?}");
        }
    }
}
