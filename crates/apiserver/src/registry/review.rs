//! Reviews (`kubectl auth can-i`, `kubectl auth whoami`, and access reviews for other
//! subjects): answered by the server's authorizer, never stored.
//!
//! ```text
//!  POST selfsubjectaccessreviews            ─► may I? (the request's user)
//!  POST selfsubjectrulesreviews             ─► what may I do in spec.namespace?
//!  POST subjectaccessreviews                ─► may spec.user/groups/extra/uid? (cluster)
//!  POST namespaces/NS/localsubjectaccessreviews ─► the same, in NS only
//!  POST selfsubjectreviews                  ─► who am I?
//!     each answered with status: allowed (denied, reason), or rules (incomplete,
//!     evaluationError), or userInfo; bad specs 422 (a local review outside its
//!     namespace 400)
//! ```

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::api::Api;
use crate::auth::{Attributes, Decision, Rules, UserInfo};
use crate::http::error::{ApiError, ApiResult, Cause};
use crate::http::route::Target;
use crate::registry::resources::ResourceType;

/// The answer to the review `request` made to `target` (its user, its namespace for a
/// local review), decided by `api`'s authorizer in `api`'s logical cluster.
pub(crate) async fn answer(api: &Api, target: &Target, request: &Value) -> ApiResult<Value> {
    let rt = &target.rt;
    let spec = &request["spec"];
    let status = match rt.kind.as_str() {
        "SelfSubjectReview" => json!({"userInfo": target.user.to_json()}),
        "SelfSubjectAccessReview" => {
            check(rt, attribute_causes(spec))?;
            access(api, &target.user, spec).await
        }
        "SubjectAccessReview" => {
            check(rt, subject_causes(spec))?;
            access(api, &subject(spec), spec).await
        }
        "LocalSubjectAccessReview" => {
            let mut causes = subject_causes(spec);
            if !spec["nonResourceAttributes"].is_null() {
                causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: {}: disallowed on this kind of request",
                        spec["nonResourceAttributes"]
                    ),
                    field: "spec.nonResourceAttributes".into(),
                });
            }
            check(rt, causes)?;
            let namespace = target.namespace.as_deref().unwrap_or("");
            let given = |at: &Value| at.as_str().unwrap_or("").to_owned();
            let metadata = given(&request["metadata"]["namespace"]);
            if given(&spec["resourceAttributes"]["namespace"]) != namespace
                || !metadata.is_empty() && metadata != namespace
            {
                return Err(ApiError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {namespace}"
                )));
            }
            access(api, &subject(spec), spec).await
        }
        "SelfSubjectRulesReview" => {
            let namespace = spec["namespace"].as_str().unwrap_or("");
            if namespace.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            let rules = api
                .stages
                .authorizer
                .rules(&target.user, &api.cluster, namespace)
                .await;
            rules_status(rules)
        }
        kind => {
            return Err(ApiError::internal(format!("{kind} is not a review")));
        }
    };
    let mut answer = request.clone();
    answer["apiVersion"] = json!(rt.api_version());
    answer["kind"] = json!(rt.kind);
    if !answer["metadata"].is_object() {
        answer["metadata"] = json!({});
    }
    if let Some(namespace) = target.namespace.as_deref() {
        answer["metadata"]["namespace"] = json!(namespace);
    }
    answer["status"] = status;
    Ok(answer)
}

/// 422 if there are `causes`.
fn check(rt: &ResourceType, causes: Vec<Cause>) -> ApiResult<()> {
    match causes.is_empty() {
        true => Ok(()),
        false => Err(ApiError::invalid(&rt.group, &rt.kind, "", causes)),
    }
}

/// Why an access review's spec names no request, or two.
fn attribute_causes(spec: &Value) -> Vec<Cause> {
    let resource = !spec["resourceAttributes"].is_null();
    let path = !spec["nonResourceAttributes"].is_null();
    let invalid = |field: &str, detail: &str| Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {detail}", spec["nonResourceAttributes"]),
        field: field.into(),
    };
    match (resource, path) {
        (true, true) => vec![invalid(
            "spec.nonResourceAttributes",
            "cannot be specified in combination with resourceAttributes",
        )],
        (false, false) => vec![invalid(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        _ => Vec::new(),
    }
}

/// [`attribute_causes`], and why a review of another subject names none.
fn subject_causes(spec: &Value) -> Vec<Cause> {
    let mut causes = attribute_causes(spec);
    let user = spec["user"].as_str().unwrap_or("");
    let groups = spec["groups"].as_array().map_or(0, Vec::len);
    if user.is_empty() && groups == 0 {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {user:?}: at least one of user or group must be specified"
            ),
            field: "spec.user".into(),
        });
    }
    causes
}

/// The subject a review of another user names (exactly as given: no groups added).
fn subject(spec: &Value) -> UserInfo {
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let extra: BTreeMap<String, Vec<String>> = spec["extra"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), strings(v)))
        .collect();
    UserInfo {
        name: spec["user"].as_str().unwrap_or("").to_owned(),
        uid: spec["uid"].as_str().unwrap_or("").to_owned(),
        groups: strings(&spec["groups"]),
        extra,
    }
}

/// Whether `user` may do what the review's spec asks: its status.
async fn access(api: &Api, user: &UserInfo, spec: &Value) -> Value {
    let text = |at: &Value, field: &str| at[field].as_str().unwrap_or("").to_owned();
    let (resource, path) = (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
    let resource_request = !resource.is_null();
    let at = if resource_request { resource } else { path };
    let [
        verb,
        group,
        version,
        plural,
        subresource,
        namespace,
        name,
        url,
    ] = [
        "verb",
        "group",
        "version",
        "resource",
        "subresource",
        "namespace",
        "name",
        "path",
    ]
    .map(|field| text(at, field));
    let attributes = Attributes {
        cluster: &api.cluster,
        user,
        verb: &verb,
        resource_request,
        group: &group,
        version: &version,
        resource: &plural,
        subresource: &subresource,
        namespace: &namespace,
        name: &name,
        path: &url,
    };
    match api.stages.authorizer.authorize(&attributes).await {
        Decision::Allow => json!({"allowed": true}),
        Decision::NoOpinion => json!({"allowed": false}),
        Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false, "denied": true}),
        Decision::Deny(reason) => json!({"allowed": false, "denied": true, "reason": reason}),
    }
}

/// A rules review's status: the rules on resources, those on paths, whether there may be
/// more, and what could not be resolved.
fn rules_status(rules: Rules) -> Value {
    let list =
        |values: &[std::sync::Arc<str>]| json!(values.iter().map(|v| &**v).collect::<Vec<_>>());
    let mut resource_rules = Vec::new();
    let mut path_rules = Vec::new();
    for rule in &rules.rules {
        if !rule.resources.is_empty() {
            let mut entry = Map::new();
            entry.insert("verbs".into(), list(&rule.verbs));
            for (field, values) in [
                ("apiGroups", &rule.api_groups),
                ("resources", &rule.resources),
                ("resourceNames", &rule.resource_names),
            ] {
                if !values.is_empty() {
                    entry.insert(field.into(), list(values));
                }
            }
            resource_rules.push(Value::Object(entry));
        }
        if !rule.non_resource_urls.is_empty() {
            path_rules.push(json!({"verbs": list(&rule.verbs),
                "nonResourceURLs": list(&rule.non_resource_urls)}));
        }
    }
    let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": path_rules,
        "incomplete": rules.incomplete});
    match rules.errors.as_slice() {
        [] => {}
        [one] => status["evaluationError"] = json!(one),
        all => status["evaluationError"] = json!(format!("[{}]", all.join(", "))),
    }
    status
}
