//! Authorization: whether a user may do what a request asks.

use crate::api::Verdict;

use super::UserInfo;
use crate::http::error::{ApiError, Reason};

/// What a request asks, as an authorizer sees it (Kubernetes' `authorizer.Attributes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes<'a> {
    /// Who asks.
    pub user: &'a UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`
    /// on a resource; the lowercase HTTP method (`get`, `post`, …) on any other path.
    pub verb: &'a str,
    /// Whether the request is for objects (else for a path: discovery, OpenAPI, /version,
    /// /metrics).
    pub resource_request: bool,
    /// The API group (`""` for the core group).
    pub group: &'a str,
    /// The version.
    pub version: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// The subresource (`status`, `scale`), or `""`.
    pub subresource: &'a str,
    /// The namespace, or `""` for a cluster-scoped object or a list across namespaces.
    pub namespace: &'a str,
    /// The object's name, or `""` for a collection.
    pub name: &'a str,
    /// The request's path.
    pub path: &'a str,
}

/// An authorizer's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The request may go on.
    Allow,
    /// It may not; the reason is given to the client.
    Deny(String),
    /// This authorizer has no opinion (a chain asks the next one; at the end it is denied).
    NoOpinion,
}

/// Decides whether a user may do what a request asks. An implementation that must wait
/// (a webhook) answers [`Verdict::Later`]; RBAC from a cache answers [`Verdict::Now`].
pub trait Authorizer: Send + Sync {
    /// The decision on `attributes`.
    fn authorize<'a>(&'a self, attributes: &'a Attributes<'a>) -> Verdict<'a, Decision>;
}

/// Every request is allowed (today's server: whoever authenticates is the admin).
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize<'a>(&'a self, _: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        Verdict::Now(Decision::Allow)
    }
}

impl<'a> Attributes<'a> {
    /// A request of `user` for a path that names no objects (/metrics, /version, …).
    pub fn path(user: &'a UserInfo, verb: &'a str, path: &'a str) -> Self {
        Attributes {
            user,
            verb,
            resource_request: false,
            group: "",
            version: "",
            resource: "",
            subresource: "",
            namespace: "",
            name: "",
            path,
        }
    }

    /// The 403 for a request refused, worded as Kubernetes words it:
    /// `pods "web" is forbidden: User "jane" cannot get resource "pods" in API group ""
    /// in the namespace "default": <reason>`.
    pub fn forbidden(&self, reason: &str) -> ApiError {
        let user = &self.user.name;
        let verb = self.verb;
        let because = match reason {
            "" => String::new(),
            reason => format!(": {reason}"),
        };
        if !self.resource_request {
            let path = self.path;
            return ApiError::new(
                403,
                Reason::Forbidden,
                format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\"{because}"),
            );
        }
        let qualified = match self.group {
            "" => self.resource.to_owned(),
            group => format!("{}.{group}", self.resource),
        };
        let what = match self.name {
            "" => qualified,
            name => format!("{qualified} \"{name}\""),
        };
        let resource = match self.subresource {
            "" => self.resource.to_owned(),
            sub => format!("{}/{sub}", self.resource),
        };
        let scope = match self.namespace {
            "" => "at the cluster scope".to_owned(),
            ns => format!("in the namespace \"{ns}\""),
        };
        let group = self.group;
        ApiError::new(
            403,
            Reason::Forbidden,
            format!(
                "{what} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}{because}"
            ),
        )
        .on(self.group, self.resource, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_kubernetes_words_it() {
        let jane = UserInfo::new("jane", &[]);
        let attributes = Attributes {
            user: &jane,
            verb: "delete",
            resource_request: true,
            group: "apps",
            version: "v1",
            resource: "deployments",
            subresource: "",
            namespace: "web",
            name: "front",
            path: "/apis/apps/v1/namespaces/web/deployments/front",
        };
        let error = attributes.forbidden("");
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            "deployments.apps \"front\" is forbidden: User \"jane\" cannot delete resource \"deployments\" in API group \"apps\" in the namespace \"web\""
        );
        let path = Attributes {
            resource_request: false,
            verb: "get",
            path: "/metrics",
            ..attributes
        };
        assert_eq!(
            path.forbidden("no").message,
            "forbidden: User \"jane\" cannot get path \"/metrics\": no"
        );
    }
}
