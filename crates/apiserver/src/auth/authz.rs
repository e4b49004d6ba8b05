//! Authorization: whether a user may do what a request asks.
//!
//! ```text
//!  Attributes (cluster, user, verb, group, resource, subresource, namespace, name, path)
//!     ─► Union: PrivilegedGroup (system:masters: Allow) ─► Rbac (Allow or NoOpinion)
//!        the first Allow or Deny wins; NoOpinion asks the next; none at all = 403
//!  rules(user, cluster, namespace) ─► what the user may do there, as rules (self-subject
//!     rules reviews, and the escalation check on roles and bindings)
//! ```

use std::sync::Arc;

use crate::api::Verdict;

use super::UserInfo;
use super::rbac::Rule;
use crate::http::error::{ApiError, Reason};

/// What a request asks, as an authorizer sees it (Kubernetes' `authorizer.Attributes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes<'a> {
    /// The logical cluster asked ([`crate::api::ROOT_CLUSTER`] for the root API): its own
    /// roles and bindings decide.
    pub cluster: &'a str,
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

/// What a user may do in a namespace, as rules (Kubernetes' `RulesFor` of a rule
/// resolver): resource rules and path rules alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    /// The rules that apply.
    pub rules: Vec<Rule>,
    /// Whether the authorizer may allow more than these rules say (it cannot list what it
    /// allows, or some roles could not be read).
    pub incomplete: bool,
    /// What could not be resolved (a binding to a role that does not exist), for the
    /// review's `evaluationError`.
    pub errors: Vec<String>,
}

/// Decides whether a user may do what a request asks. An implementation that must wait
/// (a webhook) answers [`Verdict::Later`]; RBAC from a cache answers [`Verdict::Now`].
pub trait Authorizer: Send + Sync {
    /// The decision on `attributes`.
    fn authorize<'a>(&'a self, attributes: &'a Attributes<'a>) -> Verdict<'a, Decision>;

    /// What `user` may do in `namespace` (`""`: cluster-wide) of logical cluster
    /// `cluster`, as rules. An authorizer that cannot list what it allows answers none,
    /// incomplete (the default).
    fn rules<'a>(
        &'a self,
        _user: &'a UserInfo,
        _cluster: &'a str,
        _namespace: &'a str,
    ) -> Verdict<'a, Rules> {
        Verdict::Now(Rules {
            incomplete: true,
            ..Rules::default()
        })
    }
}

/// Every request is allowed (the simulator's server, where whoever authenticates is the
/// admin).
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize<'a>(&'a self, _: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        Verdict::Now(Decision::Allow)
    }

    fn rules<'a>(&'a self, _: &'a UserInfo, _: &'a str, _: &'a str) -> Verdict<'a, Rules> {
        Verdict::Now(Rules {
            rules: Rule::everything(),
            ..Rules::default()
        })
    }
}

/// Allows everything to the members of one group, before any other authorizer is asked
/// (kube-apiserver's privileged-group authorizer for `system:masters`: the admin token and
/// the server's own loopback requests). No opinion on anyone else. It lists no rules: the
/// group's rules are those its bindings give (`cluster-admin`).
pub struct PrivilegedGroup(pub String);

impl Authorizer for PrivilegedGroup {
    fn authorize<'a>(&'a self, attributes: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        let privileged = attributes.user.groups.contains(&self.0);
        Verdict::Now(match privileged {
            true => Decision::Allow,
            false => Decision::NoOpinion,
        })
    }

    fn rules<'a>(&'a self, _: &'a UserInfo, _: &'a str, _: &'a str) -> Verdict<'a, Rules> {
        Verdict::Now(Rules::default())
    }
}

/// Several authorizers asked in order (kube-apiserver's union): the first that allows or
/// denies decides; when all have no opinion, so has the union. Their rules are the rules
/// of all.
pub struct Union(Vec<Arc<dyn Authorizer>>);

impl Union {
    /// Asks `authorizers` in this order.
    pub fn new(authorizers: Vec<Arc<dyn Authorizer>>) -> Self {
        Union(authorizers)
    }
}

impl Authorizer for Union {
    fn authorize<'a>(&'a self, attributes: &'a Attributes<'a>) -> Verdict<'a, Decision> {
        for (i, authorizer) in self.0.iter().enumerate() {
            match authorizer.authorize(attributes) {
                Verdict::Now(Decision::NoOpinion) => {}
                Verdict::Now(decision) => return Verdict::Now(decision),
                Verdict::Later(first) => {
                    // The rest are asked once this one has answered.
                    return Verdict::Later(Box::pin(async move {
                        match first.await {
                            Decision::NoOpinion => {}
                            decision => return decision,
                        }
                        for authorizer in &self.0[i + 1..] {
                            match authorizer.authorize(attributes).await {
                                Decision::NoOpinion => {}
                                decision => return decision,
                            }
                        }
                        Decision::NoOpinion
                    }));
                }
            }
        }
        Verdict::Now(Decision::NoOpinion)
    }

    fn rules<'a>(
        &'a self,
        user: &'a UserInfo,
        cluster: &'a str,
        namespace: &'a str,
    ) -> Verdict<'a, Rules> {
        Verdict::Later(Box::pin(async move {
            let mut all = Rules::default();
            for authorizer in &self.0 {
                let rules = authorizer.rules(user, cluster, namespace).await;
                all.rules.extend(rules.rules);
                all.incomplete |= rules.incomplete;
                all.errors.extend(rules.errors);
            }
            all
        }))
    }
}

impl<'a> Attributes<'a> {
    /// A request of `user` in logical cluster `cluster` for a path that names no objects
    /// (/metrics, /version, …).
    pub fn path(cluster: &'a str, user: &'a UserInfo, verb: &'a str, path: &'a str) -> Self {
        Attributes {
            cluster,
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

    /// Always answers one decision, later (as a webhook would).
    struct Answers(Decision);

    impl Authorizer for Answers {
        fn authorize<'a>(&'a self, _: &'a Attributes<'a>) -> Verdict<'a, Decision> {
            Verdict::Later(Box::pin(std::future::ready(self.0.clone())))
        }
    }

    #[tokio::test]
    async fn a_union_takes_the_first_allow_or_deny_and_masters_are_allowed_first() {
        let masters = || Arc::new(PrivilegedGroup(crate::auth::MASTERS.to_owned()));
        let union = |rest: Vec<Arc<dyn Authorizer>>| {
            let mut all: Vec<Arc<dyn Authorizer>> = vec![masters()];
            all.extend(rest);
            Union::new(all)
        };
        let admin = UserInfo::admin();
        let jane = UserInfo::new("jane", &[]);
        let decide = async |union: &Union, user: &UserInfo| {
            union
                .authorize(&Attributes::path("root", user, "get", "/x"))
                .await
        };
        let deny_then_allow = union(vec![
            Arc::new(Answers(Decision::NoOpinion)),
            Arc::new(Answers(Decision::Deny("no".into()))),
            Arc::new(AllowAll),
        ]);
        assert_eq!(decide(&deny_then_allow, &admin).await, Decision::Allow);
        assert_eq!(
            decide(&deny_then_allow, &jane).await,
            Decision::Deny("no".into())
        );
        let nothing = union(vec![Arc::new(Answers(Decision::NoOpinion))]);
        assert_eq!(decide(&nothing, &jane).await, Decision::NoOpinion);
        // Rules: everything's from AllowAll; the privileged group lists none.
        let rules = deny_then_allow.rules(&jane, "root", "shop").await;
        assert_eq!(rules.rules, Rule::everything());
        assert!(
            rules.incomplete,
            "an authorizer that cannot list makes it incomplete"
        );
    }

    #[test]
    fn a_refusal_reads_as_kubernetes_words_it() {
        let jane = UserInfo::new("jane", &[]);
        let attributes = Attributes {
            cluster: "root",
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
