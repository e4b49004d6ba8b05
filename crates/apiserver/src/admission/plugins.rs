//! The built-in admission plugins (a kind's schema, applied to what is written), and two
//! a server configures: [`RequirePermission`] (writing one resource needs a further
//! permission on the object one of its fields names) and [`RequireGrants`] (writing one
//! resource that carries RBAC grants needs `bind`/`escalate` on the roles it grants).

use std::sync::Arc;

use crate::api::Verdict;
use crate::auth::{self, Authorizer, Decision};
use serde_json::Value;

use super::schema::{self, Schema, Structural};
use super::{Attributes, Mutating, Operation, Validating};
use crate::http::error::Cause;
use crate::http::error::{ApiError, ApiResult};
use crate::registry::object::meta_str;

fn ready<'a, T>(value: T) -> Verdict<'a, T> {
    Verdict::Now(value)
}

/// Whether the request writes an object (anything but a delete).
pub(super) fn writes(attributes: &Attributes<'_>) -> bool {
    attributes.operation != Operation::Delete
}

/// Drops the fields the kind's schema does not know (a built-in kind's Go type, a custom
/// resource's structural schema); `fieldValidation` makes them a 400, warnings, or nothing.
pub struct Prune;

impl Mutating for Prune {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if !writes(attributes) {
            return ready(Ok(Vec::new()));
        }
        let unknown = match Schema::for_type(attributes.rt) {
            Some(schema) => schema.prune(object),
            None => Vec::new(),
        };
        ready(schema::judge(unknown, attributes.field_validation))
    }
}

/// Fills in a custom resource's schema defaults.
pub struct Defaults;

impl Mutating for Defaults {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if writes(attributes)
            && let Some(structural) = Structural::for_type(attributes.rt)
        {
            structural.default(object);
        }
        ready(Ok(Vec::new()))
    }
}

/// The name a 422 names: the object's, or its `generateName` before it has one.
fn shown_name(object: &Value) -> &str {
    match meta_str(object, "name") {
        "" => meta_str(object, "generateName"),
        name => name,
    }
}

fn refuse(
    attributes: &Attributes<'_>,
    object: &Value,
    causes: Vec<Cause>,
) -> ApiResult<Vec<String>> {
    if causes.is_empty() {
        return Ok(Vec::new());
    }
    let rt = attributes.rt;
    Err(ApiError::invalid(
        &rt.group,
        &rt.kind,
        shown_name(object),
        causes,
    ))
}

/// Refuses a custom resource that breaks its structural schema (422 naming every field).
pub struct StructuralSchema;

impl Validating for StructuralSchema {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        _: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let causes = match Structural::for_type(attributes.rt) {
            Some(structural) if writes(attributes) => structural.validate(object),
            _ => Vec::new(),
        };
        ready(refuse(attributes, object, causes))
    }
}

/// Refuses a custom resource that breaks its schema's `x-kubernetes-validations` (CEL
/// rules, with `oldSelf` on an update). Runs only on an object the schema admits.
pub struct Rules;

impl Validating for Rules {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let causes = match Structural::for_type(attributes.rt) {
            Some(structural) if writes(attributes) => structural.rules(object, old),
            _ => Vec::new(),
        };
        ready(refuse(attributes, object, causes))
    }
}

/// A permission on another object, which [`RequirePermission`] asks the authorizer for:
/// `verb` on `group`/`resource` (and `subresource`), on the object named by the written
/// object's field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    /// The verb (`bind`, `create`, `use`, …).
    pub verb: String,
    /// The API group of the object the permission is on.
    pub group: String,
    /// Its resource (plural).
    pub resource: String,
    /// A subresource (`bind` in `clustersets/bind`), or `""`.
    pub subresource: String,
    /// Whether that object lives in the written object's namespace (else it is
    /// cluster-scoped).
    pub namespaced: bool,
}

impl Permission {
    /// `verb` on the cluster-scoped `group`/`resource` (`resource/subresource` names a
    /// subresource).
    pub fn cluster_scoped(verb: &str, group: &str, resource: &str) -> Self {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Permission {
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespaced: false,
        }
    }
}

/// Writing (creating, updating or deleting) objects of one resource needs a permission on
/// the object one of their fields names, besides the write's own: the pattern of RBAC's
/// `bind` on a role a binding grants, and of OCM's `clustersets/bind` on the set a
/// ManagedClusterSetBinding binds. Any one of [`RequirePermission::any_of`] suffices;
/// without one the write is a 403 in Kubernetes' words and nothing is written.
///
/// ```text
///  write of group/resource (not a subresource: status writes pass)
///     └─ name = object[field] ─► authorizer: (user, verb, group, resource/sub, name)
///            any Allow ─► admitted      none ─► 403 Forbidden, nothing written
/// ```
///
/// The server configures what it needs (the hub: a ClusterSetBinding needs `bind` on its
/// ClusterSet); this plugin knows no kind of its own. It asks the same authorizer requests
/// are authorized by, and must be built with it (after the server's stages are set).
pub struct RequirePermission {
    /// The API group of the resource written.
    pub group: String,
    /// The resource written (plural).
    pub resource: String,
    /// The JSON pointer of the field naming the object the permission is on
    /// (`/spec/clusterSet`).
    pub field: String,
    /// The permissions, any one of which lets the write through.
    pub any_of: Vec<Permission>,
    authorizer: Arc<dyn Authorizer>,
}

impl RequirePermission {
    /// Writing `group`/`resource` needs one of `any_of` on the object named at `field`,
    /// as `authorizer` decides.
    pub fn new(
        authorizer: Arc<dyn Authorizer>,
        group: &str,
        resource: &str,
        field: &str,
        any_of: Vec<Permission>,
    ) -> Self {
        RequirePermission {
            group: group.to_owned(),
            resource: resource.to_owned(),
            field: field.to_owned(),
            any_of,
            authorizer,
        }
    }

    /// Whether this plugin checks `attributes`' write: one of its resource, not of a
    /// subresource (a controller writing status needs no grant).
    fn applies(&self, attributes: &Attributes<'_>) -> bool {
        attributes.rt.group == self.group
            && attributes.rt.plural == self.resource
            && attributes.subresource.is_empty()
    }

    /// Asks for each permission in turn on `target`; `Ok` at the first allowed, else the
    /// 403 naming the first.
    async fn check(&self, attributes: &Attributes<'_>, target: &str) -> ApiResult<Vec<String>> {
        let user = attributes.user;
        for permission in &self.any_of {
            let asked = self.asked(attributes, permission, target);
            if self.authorizer.authorize(&asked).await == Decision::Allow {
                return Ok(Vec::new());
            }
        }
        let Some(first) = self.any_of.first() else {
            return Ok(Vec::new());
        };
        let asked = self.asked(attributes, first, target);
        let written = match self.group.as_str() {
            "" => self.resource.clone(),
            group => format!("{}.{group}", self.resource),
        };
        let scope = match attributes.namespace {
            "" => String::new(),
            ns => format!(" in the namespace \"{ns}\""),
        };
        let name = attributes.name;
        let why = format!("it is needed to write {written} \"{name}\"{scope}");
        tracing::debug!(user = %user.name, %written, %target, "write refused: permission missing");
        Err(asked.forbidden(&why).on(&self.group, &self.resource, name))
    }

    /// The authorizer's attributes for `permission` on `target`, asked for the writer.
    fn asked<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        permission: &'a Permission,
        target: &'a str,
    ) -> auth::Attributes<'a> {
        auth::Attributes {
            user: attributes.user,
            cluster: attributes.cluster,
            verb: &permission.verb,
            resource_request: true,
            group: &permission.group,
            version: "",
            resource: &permission.resource,
            subresource: &permission.subresource,
            namespace: if permission.namespaced {
                attributes.namespace
            } else {
                ""
            },
            name: target,
            path: "",
        }
    }
}

impl Validating for RequirePermission {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if !self.applies(attributes) {
            return ready(Ok(Vec::new()));
        }
        // A deletion names its target in the object deleted.
        let named = match attributes.operation {
            Operation::Delete => old.unwrap_or(object),
            _ => object,
        };
        let Some(target) = named.pointer(&self.field).and_then(Value::as_str) else {
            let field = self.field.trim_start_matches('/').replace('/', ".");
            let cause = Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field,
            };
            return ready(refuse(attributes, object, vec![cause]));
        };
        Verdict::Later(Box::pin(self.check(attributes, target)))
    }
}

/// The RBAC API group, whose roles a [`RequireGrants`] write names.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Writing objects of one resource that carry RBAC grants for a namespace — a list of
/// role bindings and a list of roles, which a controller writes there as RoleBindings
/// and Roles with its own wider rights (the hub's ComputeNamespace) — needs what writing
/// those grants directly would: `bind` on each role bound, `escalate` for each Role
/// defined, in that namespace. Otherwise the object would be a way around RBAC's
/// escalation check. A 403 naming the first role refused; nothing written.
///
/// ```text
///  create / update of group/resource (not a subresource: status writes pass)
///     ├─ each binding in object[bindings] whose roleRef is new (not in the old object):
///     │     bind on clusterroles NAME (kind ClusterRole) or roles NAME (kind Role)
///     └─ each role in object[roles] new or changed: escalate on roles NAME
///        (all asked in namespace object[namespace]) ─► any Deny ─► 403
/// ```
///
/// Unlike RBAC's own check there is no second way through by holding every rule of the
/// role: the grant is asked for as such. A deletion needs nothing (it grants nothing);
/// neither does an update that leaves the grants as they were (a controller's finalizer).
/// `system:masters` passes, as the authorizer allows it everything.
pub struct RequireGrants {
    /// The API group of the resource written.
    pub group: String,
    /// The resource written (plural).
    pub resource: String,
    /// The JSON pointer of its list of bindings, each with a `roleRef`
    /// (`/spec/roleBindings`).
    pub bindings: String,
    /// The JSON pointer of its list of roles, each with a `name` (`/spec/roles`).
    pub roles: String,
    /// The JSON pointer of the name of the namespace the grants are made in
    /// (`/metadata/name`).
    pub namespace: String,
    authorizer: Arc<dyn Authorizer>,
}

/// One grant a [`RequireGrants`] write asks for: `verb` on RBAC `resource` `name`.
struct Grant {
    verb: &'static str,
    resource: &'static str,
    name: String,
}

impl RequireGrants {
    /// Writing `group`/`resource` needs the grants its `bindings` and `roles` lists make
    /// in the namespace named at `namespace`, as `authorizer` decides.
    pub fn new(
        authorizer: Arc<dyn Authorizer>,
        group: &str,
        resource: &str,
        bindings: &str,
        roles: &str,
        namespace: &str,
    ) -> Self {
        RequireGrants {
            group: group.to_owned(),
            resource: resource.to_owned(),
            bindings: bindings.to_owned(),
            roles: roles.to_owned(),
            namespace: namespace.to_owned(),
            authorizer,
        }
    }

    /// The grants `object` makes that `old` did not make the same way.
    fn grants(&self, object: &Value, old: Option<&Value>) -> Vec<Grant> {
        let list = |object: Option<&Value>, at: &str| -> Vec<Value> {
            object
                .and_then(|o| o.pointer(at))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let role_of = |binding: &Value| {
            let reference = &binding["roleRef"];
            let resource = match reference["kind"].as_str() {
                Some("Role") => "roles",
                _ => "clusterroles",
            };
            (
                resource,
                reference["name"].as_str().unwrap_or("").to_owned(),
            )
        };
        let bound_before: Vec<_> = list(old, &self.bindings).iter().map(role_of).collect();
        let mut grants: Vec<Grant> = list(Some(object), &self.bindings)
            .iter()
            .map(role_of)
            .filter(|role| !bound_before.contains(role))
            .map(|(resource, name)| Grant {
                verb: "bind",
                resource,
                name,
            })
            .collect();
        let roles_before = list(old, &self.roles);
        grants.extend(
            list(Some(object), &self.roles)
                .into_iter()
                .filter(|role| !roles_before.contains(role))
                .map(|role| Grant {
                    verb: "escalate",
                    resource: "roles",
                    name: role["name"].as_str().unwrap_or("").to_owned(),
                }),
        );
        let mut seen = std::collections::BTreeSet::new();
        grants.retain(|g| seen.insert((g.verb, g.resource, g.name.clone())));
        grants
    }

    /// Asks for each of `grants` in `namespace`; the 403 naming the first refused.
    async fn check(
        &self,
        attributes: &Attributes<'_>,
        namespace: String,
        grants: Vec<Grant>,
    ) -> ApiResult<Vec<String>> {
        for grant in &grants {
            let asked = auth::Attributes {
                user: attributes.user,
                cluster: attributes.cluster,
                verb: grant.verb,
                resource_request: true,
                group: RBAC_GROUP,
                version: "",
                resource: grant.resource,
                subresource: "",
                namespace: &namespace,
                name: &grant.name,
                path: "",
            };
            if self.authorizer.authorize(&asked).await == Decision::Allow {
                continue;
            }
            let written = match self.group.as_str() {
                "" => self.resource.clone(),
                group => format!("{}.{group}", self.resource),
            };
            let name = attributes.name;
            let why = format!("it is needed to write {written} \"{name}\", which grants it");
            tracing::debug!(user = %attributes.user.name, %written, role = %grant.name, verb = grant.verb, "write refused: grant missing");
            return Err(asked.forbidden(&why).on(&self.group, &self.resource, name));
        }
        Ok(Vec::new())
    }
}

impl Validating for RequireGrants {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        let applies = attributes.rt.group == self.group
            && attributes.rt.plural == self.resource
            && attributes.subresource.is_empty()
            && writes(attributes);
        if !applies {
            return ready(Ok(Vec::new()));
        }
        let grants = self.grants(object, old);
        if grants.is_empty() {
            return ready(Ok(Vec::new()));
        }
        let namespace = object
            .pointer(&self.namespace)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Verdict::Later(Box::pin(self.check(attributes, namespace, grants)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn asked(grants: &[Grant]) -> Vec<String> {
        grants
            .iter()
            .map(|g| format!("{} {} {}", g.verb, g.resource, g.name))
            .collect()
    }

    #[test]
    fn the_grants_asked_for_are_those_new_or_changed() {
        let plugin = RequireGrants::new(
            Arc::new(crate::auth::AllowAll),
            "flotilla.io",
            "computenamespaces",
            "/spec/roleBindings",
            "/spec/roles",
            "/metadata/name",
        );
        let binding = |name: &str, kind: &str, role: &str| json!({"name": name, "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": role}});
        let reader = json!({"name": "reader", "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]});
        let object = json!({"metadata": {"name": "team-a"}, "spec": {
            "roleBindings": [binding("e", "ClusterRole", "edit"), binding("r", "Role", "reader"),
                             binding("e2", "ClusterRole", "edit")],
            "roles": [reader]}});
        assert_eq!(
            asked(&plugin.grants(&object, None)),
            [
                "bind clusterroles edit",
                "bind roles reader",
                "escalate roles reader"
            ]
        );
        // Nothing new (a finalizer added): nothing asked.
        assert!(plugin.grants(&object, Some(&object)).is_empty());
        // A new role bound, a role's rules changed: those alone.
        let mut changed = object.clone();
        changed["spec"]["roleBindings"][0] = binding("e", "ClusterRole", "cluster-admin");
        changed["spec"]["roles"][0]["rules"][0]["verbs"] = json!(["*"]);
        assert_eq!(
            asked(&plugin.grants(&changed, Some(&object))),
            ["bind clusterroles cluster-admin", "escalate roles reader"]
        );
        // A subject added to a binding of the same role: nothing (bind is on the role).
        let mut more = object.clone();
        more["spec"]["roleBindings"][0]["subjects"] = json!([{"kind": "Group", "name": "x"}]);
        assert!(plugin.grants(&more, Some(&object)).is_empty());
    }
}
