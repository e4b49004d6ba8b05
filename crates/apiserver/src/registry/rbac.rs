//! Roles and bindings as the registry writes them: defaulted, validated, and refused when
//! they would grant more than their writer holds (Kubernetes' escalation prevention).
//!
//! ```text
//!  write of a Role / ClusterRole / RoleBinding / ClusterRoleBinding
//!    ─► defaults (roleRef.apiGroup, subjects' apiGroup) ─► validation (422; a binding's
//!       roleRef never changes)
//!    ─► only ownerReferences/finalizers changed? system:masters? ─► written
//!    ─► a role: `escalate` on it, or the writer holds every rule it grants (in its
//!       namespace, or cluster-wide for a ClusterRole; an aggregationRule needs all)
//!       a binding: `bind` on the role it names, or the writer holds all that role's rules
//!    ─► else 403: … is attempting to grant RBAC permissions not currently held: …
//! ```

use serde_json::{Value, json};

use crate::api::Api;
use crate::auth::rbac::rule::{self, Rule};
use crate::auth::rbac::{GROUP, Kind};
use crate::auth::{Attributes, Decision, MASTERS};
use crate::http::error::{ApiError, ApiResult, Cause, Reason};
use crate::http::route::Target;
use crate::registry::object::{NameRule, check_name, meta_str};

fn required(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: match detail {
            "" => "Required value".into(),
            detail => format!("Required value: {detail}"),
        },
        field: field.into(),
    }
}

fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {detail}"),
        field: field.into(),
    }
}

fn unsupported(field: &str, value: &str, supported: &[&str]) -> Cause {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ),
        field: field.into(),
    }
}

/// Fills what the API defaults on a binding: the role reference's group, and the group of
/// User and Group subjects.
pub(crate) fn default(kind: Kind, object: &mut Value) {
    if !matches!(kind, Kind::RoleBinding | Kind::ClusterRoleBinding) {
        return;
    }
    if object["roleRef"].is_object()
        && object["roleRef"]["apiGroup"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    {
        object["roleRef"]["apiGroup"] = json!(GROUP);
    }
    for subject in object["subjects"].as_array_mut().into_iter().flatten() {
        if subject["apiGroup"].as_str().unwrap_or("").is_empty()
            && matches!(subject["kind"].as_str(), Some("User" | "Group"))
        {
            subject["apiGroup"] = json!(GROUP);
        }
    }
}

/// Why `object` is not a valid object of `kind` (the stored `old` on an update), as
/// Kubernetes' RBAC validation words it; empty if it is valid.
pub(crate) fn validate(kind: Kind, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    match kind {
        Kind::Role | Kind::ClusterRole => {
            for (i, rule) in object["rules"].as_array().into_iter().flatten().enumerate() {
                validate_rule(
                    rule,
                    kind == Kind::Role,
                    &format!("rules[{i}]"),
                    &mut causes,
                );
            }
            let aggregation = &object["aggregationRule"];
            if kind == Kind::ClusterRole && !aggregation.is_null() {
                let selectors = aggregation["clusterRoleSelectors"].as_array();
                if selectors.is_none_or(Vec::is_empty) {
                    causes.push(required(
                        "aggregationRule.clusterRoleSelectors",
                        "at least one clusterRoleSelector required if aggregationRule is non-nil",
                    ));
                }
                for (i, selector) in selectors.into_iter().flatten().enumerate() {
                    if let Err(why) =
                        crate::registry::selector::LabelSelector::from_object(selector)
                    {
                        let field = format!("aggregationRule.clusterRoleSelectors[{i}]");
                        causes.push(invalid(&field, selector, &why));
                    }
                }
            }
        }
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            let reference = &object["roleRef"];
            let group = reference["apiGroup"].as_str().unwrap_or("");
            if group != GROUP {
                causes.push(unsupported("roleRef.apiGroup", group, &[GROUP]));
            }
            let role_kind = reference["kind"].as_str().unwrap_or("");
            let kinds: &[&str] = match kind {
                Kind::RoleBinding => &["Role", "ClusterRole"],
                _ => &["ClusterRole"],
            };
            if !kinds.contains(&role_kind) {
                causes.push(unsupported("roleRef.kind", role_kind, kinds));
            }
            match reference["name"].as_str().unwrap_or("") {
                "" => causes.push(required("roleRef.name", "")),
                name => {
                    if let Some(problem) = check_name(name, NameRule::PathSegment) {
                        causes.push(invalid("roleRef.name", &json!(name), &problem));
                    }
                }
            }
            let subjects = object["subjects"].as_array().into_iter().flatten();
            for (i, subject) in subjects.enumerate() {
                let namespaced = kind == Kind::RoleBinding;
                validate_subject(subject, namespaced, &format!("subjects[{i}]"), &mut causes);
            }
            if let Some(old) = old
                && old["roleRef"] != object["roleRef"]
            {
                causes.push(invalid(
                    "roleRef",
                    &object["roleRef"],
                    "cannot change roleRef",
                ));
            }
        }
    }
    causes
}

/// Kubernetes' `ValidatePolicyRule`.
fn validate_rule(rule: &Value, namespaced: bool, at: &str, causes: &mut Vec<Cause>) {
    let count = |field: &str| rule[field].as_array().map_or(0, Vec::len);
    if count("verbs") == 0 {
        causes.push(required(
            &format!("{at}.verbs"),
            "verbs must contain at least one value",
        ));
    }
    if count("nonResourceURLs") > 0 {
        let urls = &rule["nonResourceURLs"];
        let field = format!("{at}.nonResourceURLs");
        if namespaced {
            causes.push(invalid(
                &field,
                urls,
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if count("apiGroups") > 0 || count("resources") > 0 || count("resourceNames") > 0 {
            causes.push(invalid(
                &field,
                urls,
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if count("apiGroups") == 0 {
        causes.push(required(
            &format!("{at}.apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if count("resources") == 0 {
        causes.push(required(
            &format!("{at}.resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// Kubernetes' `ValidateRoleBindingSubject`.
fn validate_subject(subject: &Value, namespaced: bool, at: &str, causes: &mut Vec<Cause>) {
    let name = subject["name"].as_str().unwrap_or("");
    if name.is_empty() {
        causes.push(required(&format!("{at}.name"), ""));
    }
    let group = subject["apiGroup"].as_str().unwrap_or("");
    match subject["kind"].as_str().unwrap_or("") {
        "ServiceAccount" => {
            if !name.is_empty()
                && let Some(problem) = check_name(name, NameRule::Subdomain)
            {
                causes.push(invalid(&format!("{at}.name"), &json!(name), &problem));
            }
            if !group.is_empty() {
                causes.push(unsupported(&format!("{at}.apiGroup"), group, &[""]));
            }
            if !namespaced && subject["namespace"].as_str().unwrap_or("").is_empty() {
                causes.push(required(&format!("{at}.namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                causes.push(unsupported(&format!("{at}.apiGroup"), group, &[GROUP]));
            }
        }
        other => causes.push(unsupported(
            &format!("{at}.kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

/// Whether an update changes nothing but what garbage collection changes (owner
/// references, finalizers) and what the server keeps (resourceVersion, managedFields):
/// such writes are not checked for escalation, so that an object can always be deleted.
fn only_gc_fields_change(object: &Value, old: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(meta) = object["metadata"].as_object_mut() {
            for field in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
            ] {
                meta.remove(field);
            }
        }
        object
    };
    strip(object) == strip(old)
}

/// Refuses (403) a write of `object`, of `kind`, to `target` that would grant more than
/// its writer holds, as Kubernetes' RBAC storage does.
pub(crate) async fn check_escalation(
    api: &Api,
    target: &Target,
    kind: Kind,
    object: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    if old.is_some_and(|old| only_gc_fields_change(object, old)) {
        return Ok(());
    }
    let user = &*target.user;
    if user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    let namespace = target.namespace.as_deref().unwrap_or("");
    let name = meta_str(object, "name");
    let allowed = |verb, resource, name| may(api, user, verb, resource, namespace, name);
    let granted: Vec<Rule> = match kind {
        Kind::Role | Kind::ClusterRole => {
            // `escalate` on this role (a create names none: only an unrestricted grant).
            let named = target.name.as_deref().unwrap_or("");
            if allowed("escalate", kind.plural(), named).await {
                return Ok(());
            }
            let aggregates = |o: &Value| !o["aggregationRule"].is_null();
            if kind == Kind::ClusterRole && (aggregates(object) || old.is_some_and(aggregates)) {
                let everything = Rule::everything();
                if held(api, user, namespace, &everything).await.is_err() {
                    return Err(refusal(
                        kind,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
            }
            Rule::all_from_json(&object["rules"], &mut |s| s.into())
        }
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            let reference = &object["roleRef"];
            let role = reference["name"].as_str().unwrap_or("");
            let resource = match reference["kind"].as_str() {
                Some("Role") => "roles",
                _ => "clusterroles",
            };
            if allowed("bind", resource, role).await {
                return Ok(());
            }
            role_rules(api, resource, namespace, role).await?
        }
    };
    held(api, user, namespace, &granted)
        .await
        .map_err(|message| refusal(kind, name, message))
}

/// Whether `user` may do `verb` on the RBAC `resource` object `name` in `namespace`.
async fn may(
    api: &Api,
    user: &crate::auth::UserInfo,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let attributes = Attributes {
        cluster: &api.cluster,
        user,
        verb,
        resource_request: true,
        group: GROUP,
        version: "*",
        resource,
        subresource: "",
        namespace,
        name,
        path: "",
    };
    api.stages.authorizer.authorize(&attributes).await == Decision::Allow
}

/// 403 on writing object `name` of `kind`.
fn refusal(kind: Kind, name: &str, why: String) -> ApiError {
    let what = format!("{}.{GROUP}", kind.plural());
    let message = match name {
        "" => format!("{what} is forbidden: {why}"),
        name => format!("{what} {name:?} is forbidden: {why}"),
    };
    ApiError::new(403, Reason::Forbidden, message).on(GROUP, kind.plural(), name)
}

/// The rules of the role a binding in `namespace` names (404 if there is none).
async fn role_rules(
    api: &Api,
    resource: &str,
    namespace: &str,
    role: &str,
) -> ApiResult<Vec<Rule>> {
    let rt = api.resource(GROUP, "v1", resource)?;
    let (object, _) = api.get(&rt, namespace, role).await?;
    Ok(Rule::all_from_json(&object["rules"], &mut |s| s.into()))
}

/// Whether `user` holds every rule of `granted` in `namespace` (Kubernetes'
/// `ConfirmNoEscalation`); if not, the message naming what it lacks.
async fn held(
    api: &Api,
    user: &crate::auth::UserInfo,
    namespace: &str,
    granted: &[Rule],
) -> Result<(), String> {
    let owner = api
        .stages
        .authorizer
        .rules(user, &api.cluster, namespace)
        .await;
    let missing = match rule::covers(&owner.rules, granted) {
        Ok(()) => return Ok(()),
        Err(missing) => missing,
    };
    let mut message = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        rule::go_quoted(user.groups.iter().map(String::as_str)),
        rule::describe_missing(missing)
    );
    if !owner.errors.is_empty() {
        message.push_str(&format!(
            "; resolution errors: [{}]",
            owner.errors.join(" ")
        ));
    }
    Err(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_bindings_are_validated_as_kubernetes_validates_them() {
        let role = |rules: Value| json!({"metadata": {"name": "r"}, "rules": rules});
        assert!(
            validate(
                Kind::Role,
                &role(json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])),
                None
            )
            .is_empty()
        );
        let fields = |causes: Vec<Cause>| causes.into_iter().map(|c| c.field).collect::<Vec<_>>();
        assert_eq!(
            fields(validate(
                Kind::Role,
                &role(json!([{"apiGroups": [""], "resources": ["pods"]}])),
                None
            )),
            ["rules[0].verbs"]
        );
        assert_eq!(
            fields(validate(
                Kind::Role,
                &role(json!([{"verbs": ["get"]}])),
                None
            )),
            ["rules[0].apiGroups", "rules[0].resources"]
        );
        let urls = json!([{"verbs": ["get"], "nonResourceURLs": ["/x"]}]);
        assert_eq!(
            fields(validate(Kind::Role, &role(urls.clone()), None)),
            ["rules[0].nonResourceURLs"]
        );
        assert!(validate(Kind::ClusterRole, &role(urls), None).is_empty());
        let both = json!([{"verbs": ["get"], "nonResourceURLs": ["/x"], "resources": ["pods"]}]);
        assert_eq!(
            fields(validate(Kind::ClusterRole, &role(both), None)),
            ["rules[0].nonResourceURLs"]
        );
        let mut aggregated = role(json!([]));
        aggregated["aggregationRule"] = json!({"clusterRoleSelectors": []});
        assert_eq!(
            fields(validate(Kind::ClusterRole, &aggregated, None)),
            ["aggregationRule.clusterRoleSelectors"]
        );

        let mut binding = json!({"metadata": {"name": "b"},
            "roleRef": {"kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "ci"}]});
        default(Kind::RoleBinding, &mut binding);
        assert_eq!(binding["roleRef"]["apiGroup"], GROUP);
        assert_eq!(binding["subjects"][0]["apiGroup"], GROUP);
        assert!(binding["subjects"][1].get("apiGroup").is_none());
        assert!(validate(Kind::RoleBinding, &binding, None).is_empty());
        // A ServiceAccount of a ClusterRoleBinding names its namespace.
        assert_eq!(
            fields(validate(Kind::ClusterRoleBinding, &binding, None)),
            ["subjects[1].namespace"]
        );
        let mut to_role = binding.clone();
        to_role["roleRef"]["kind"] = json!("Role");
        assert!(validate(Kind::RoleBinding, &to_role, None).is_empty());
        assert_eq!(
            fields(validate(Kind::ClusterRoleBinding, &to_role, None)),
            ["roleRef.kind", "subjects[1].namespace"]
        );
        // The role a binding names never changes.
        let causes = validate(Kind::RoleBinding, &to_role, Some(&binding));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "roleRef");
        assert!(
            causes[0].message.ends_with("cannot change roleRef"),
            "{}",
            causes[0].message
        );
        let mut odd = binding.clone();
        odd["subjects"] = json!([{"kind": "Robot", "name": "r2"}, {"kind": "User"}]);
        odd["roleRef"]["name"] = json!("a/b");
        assert_eq!(
            fields(validate(Kind::RoleBinding, &odd, None)),
            [
                "roleRef.name",
                "subjects[0].kind",
                "subjects[1].name",
                "subjects[1].apiGroup"
            ]
        );
    }

    #[test]
    fn owner_references_and_finalizers_alone_are_not_an_escalation() {
        let old = json!({"metadata": {"name": "r", "resourceVersion": "3"}, "rules": []});
        let mut gc = old.clone();
        gc["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        gc["metadata"]["resourceVersion"] = json!("4");
        assert!(only_gc_fields_change(&gc, &old));
        let mut more = gc.clone();
        more["rules"] = json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]);
        assert!(!only_gc_fields_change(&more, &old));
    }
}
