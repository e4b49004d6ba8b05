//! Type checking of a ValidatingAdmissionPolicy's expressions against the schemas of the
//! kinds it matches, written into its `status.typeChecking`, as Kubernetes' type-checking
//! controller does.
//!
//! ```text
//!  a policy whose metadata.generation ≠ status.observedGeneration
//!    ─► the kinds its resource rules name (no wildcards; at most 10), its paramKind
//!    ─► each validation's expression and messageExpression, against each kind's schema:
//!       fields read from object / oldObject / params (and list items, by macros) that the
//!       schema does not have; a field compared with a literal of another type
//!       (an expression stored that does not compile: its compilation error)
//!    ─► status: {observedGeneration, typeChecking: {expressionWarnings: [{fieldRef,
//!       warning: "apps/v1, Kind=Deployment: ERROR: <input>:1:13: undefined field …"}]}}
//! ```
//!
//! Warnings never change what the policy does: an expression that reads a field the kind
//! does not have fails when it is evaluated, under the policy's failurePolicy.

use std::sync::{Arc, Weak};
use std::time::Duration;

use kube_cel::cel::IdedExpr;
use kube_cel::cel::common::ast::{Expr, LiteralValue};
use serde_json::{Value, json};

use super::model::Policy;
use crate::admission::cel::{Declarations, Expression};
use crate::admission::dynamic::{Dynamic, GROUP};
use crate::admission::matching::Criteria;
use crate::admission::schema::resolve;
use crate::api::{Api, ROOT_CLUSTER};
use crate::client::Client;
use crate::discovery::openapi;
use crate::http::error::Reason;
use crate::registry::resources::{Registry, ResourceType};

/// At most this many kinds are checked per policy (as upstream).
const MAX_TYPES: usize = 10;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// The field manager of the status the controller writes.
pub(crate) const FIELD_MANAGER: &str = "validatingadmissionpolicy-status-controller";

/// The schema of `rt`'s objects: a CRD version's, or the built-in kind's.
fn schema_of(rt: &ResourceType) -> Option<&Value> {
    match &rt.schema {
        Some(schema) => Some(&schema.0),
        None => openapi::builtin_kind_schema(&rt.group, &rt.version, &rt.kind),
    }
}

/// `group/version, Kind=KIND`, as Kubernetes prints a GroupVersionKind.
fn gvk(rt: &ResourceType) -> String {
    format!("{}/{}, Kind={}", rt.group, rt.version, rt.kind)
}

/// The kinds a policy's rules name, in order of group, version, kind.
fn types_to_check(spec: &Value, registry: &Registry) -> Vec<Arc<ResourceType>> {
    let Ok(criteria) = Criteria::parse(&spec["matchConstraints"], "resourceRules") else {
        return Vec::new();
    };
    let mut types: Vec<Arc<ResourceType>> = Vec::new();
    for rule in &criteria.rules {
        for (group, version, plural) in rule.named_resources() {
            if let Some(rt) = registry.get(&group, &version, &plural)
                && !types.iter().any(|t| Arc::ptr_eq(t, &rt))
            {
                types.push(rt);
            }
        }
    }
    types.sort_by(|a, b| (&a.group, &a.version, &a.kind).cmp(&(&b.group, &b.version, &b.kind)));
    types.truncate(MAX_TYPES);
    types
}

/// The `status.typeChecking.expressionWarnings` of a policy's spec, with the kinds of
/// `registry`.
pub(crate) fn warnings(spec: &Value, registry: &Registry) -> Vec<Value> {
    let types = types_to_check(spec, registry);
    let params = spec["paramKind"]["apiVersion"]
        .as_str()
        .and_then(|api_version| {
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let kind = spec["paramKind"]["kind"].as_str()?;
            registry.by_kind(group, version, kind)
        });
    let params_schema = params.as_deref().and_then(schema_of);
    let names: Vec<String> = spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let declared = Declarations {
        params: !spec["paramKind"].is_null(),
        namespace_object: true,
        authorizer: true,
        variables: Some(&names),
    };
    let mut out = Vec::new();
    for (i, validation) in spec["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["expression", "messageExpression"] {
            let Some(source) = validation[field].as_str().filter(|s| !s.is_empty()) else {
                continue;
            };
            let expression = match Expression::compile(source, declared) {
                Ok(expression) => expression,
                Err(e) => {
                    // Stored before it could be refused: evaluated as a failure.
                    out.push(json!({"fieldRef": format!("spec.validations[{i}].{field}"),
                        "warning": format!("compilation failed: {e}")}));
                    continue;
                }
            };
            let mut blocks = Vec::new();
            for rt in &types {
                let Some(schema) = schema_of(rt) else {
                    continue;
                };
                let mut checker = Checker {
                    source,
                    roots: vec![("object", schema), ("oldObject", schema)],
                    issues: Vec::new(),
                };
                if let Some(params) = params_schema {
                    checker.roots.push(("params", params));
                }
                checker.walk(expression.ast(), &mut Vec::new());
                if !checker.issues.is_empty() {
                    let issues: Vec<String> = checker.issues;
                    blocks.push(format!("{}: {}\n", gvk(rt), issues.join("\n")));
                }
            }
            if !blocks.is_empty() {
                out.push(json!({"fieldRef": format!("spec.validations[{i}].{field}"),
                    "warning": blocks.join("\n")}));
            }
        }
    }
    out
}

/// Walks an expression with the schemas of its roots.
struct Checker<'s> {
    source: &'s str,
    roots: Vec<(&'static str, &'s Value)>,
    issues: Vec<String>,
}

/// What CEL type a schema node is, when it is a scalar.
fn scalar(schema: &Value) -> Option<&'static str> {
    if schema["x-kubernetes-int-or-string"] == true {
        return None;
    }
    match schema["type"].as_str()? {
        "integer" => Some("int"),
        "number" => Some("double"),
        "string" => Some("string"),
        "boolean" => Some("bool"),
        _ => None,
    }
}

fn literal(expr: &IdedExpr) -> Option<&'static str> {
    match &expr.expr {
        Expr::Literal(LiteralValue::Int(_)) => Some("int"),
        Expr::Literal(LiteralValue::UInt(_)) => Some("uint"),
        Expr::Literal(LiteralValue::Double(_)) => Some("double"),
        Expr::Literal(LiteralValue::String(_)) => Some("string"),
        Expr::Literal(LiteralValue::Boolean(_)) => Some("bool"),
        _ => None,
    }
}

fn numeric(t: &str) -> bool {
    matches!(t, "int" | "uint" | "double")
}

impl<'s> Checker<'s> {
    /// The schema of `expr`'s value, when it can be told.
    fn schema(&self, expr: &IdedExpr, bound: &[(String, Option<&'s Value>)]) -> Option<&'s Value> {
        match &expr.expr {
            Expr::Ident(name) => match bound.iter().rev().find(|(n, _)| n == name) {
                Some((_, schema)) => *schema,
                None => self
                    .roots
                    .iter()
                    .find(|(root, _)| root == name)
                    .map(|(_, s)| resolve(s)),
            },
            Expr::Select(select) if !select.test => {
                let parent = self.schema(&select.operand, bound)?;
                field(parent, &select.field)
            }
            Expr::Call(call) if call.func_name == "_[_]" && call.args.len() == 2 => {
                let parent = self.schema(&call.args[0], bound)?;
                let item = parent
                    .get("items")
                    .or_else(|| parent.get("additionalProperties").filter(|a| a.is_object()))?;
                Some(resolve(item))
            }
            _ => None,
        }
    }

    /// Where `needle` first appears in the source as a field (`.name` not followed by
    /// more of an identifier): its 1-based column.
    fn column_of(&self, needle: &str) -> usize {
        let mut from = 0;
        while let Some(at) = self.source[from..].find(needle) {
            let start = from + at;
            let end = start + needle.len();
            let next = self.source[end..].chars().next();
            if !next.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                return start + 1;
            }
            from = end;
        }
        1
    }

    fn issue(&mut self, column: usize, message: String) {
        let line = self.source.lines().next().unwrap_or("");
        self.issues.push(format!(
            "ERROR: <input>:1:{column}: {message}\n | {line}\n | {}^",
            ".".repeat(column.saturating_sub(1))
        ));
    }

    fn walk(&mut self, expr: &IdedExpr, bound: &mut Vec<(String, Option<&'s Value>)>) {
        match &expr.expr {
            Expr::Select(select) => {
                if let Some(parent) = self.schema(&select.operand, bound)
                    && field(parent, &select.field).is_none()
                    && closed(parent)
                {
                    let column = self.column_of(&format!(".{}", select.field));
                    self.issue(column, format!("undefined field '{}'", select.field));
                }
                self.walk(&select.operand, bound);
            }
            Expr::Call(call) => {
                let comparison = matches!(
                    call.func_name.as_str(),
                    "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_"
                );
                if comparison && call.args.len() == 2 {
                    let side = |e: &IdedExpr| {
                        literal(e).or_else(|| self.schema(e, bound).and_then(scalar))
                    };
                    if let (Some(left), Some(right)) = (side(&call.args[0]), side(&call.args[1]))
                        && left != right
                        && !(numeric(left) && numeric(right))
                        && (literal(&call.args[0]).is_none() || literal(&call.args[1]).is_none())
                    {
                        let operator = call.func_name.trim_matches('_');
                        let column = self
                            .source
                            .find(&format!(" {operator} "))
                            .map_or(1, |at| at + 2);
                        self.issue(
                            column,
                            format!(
                                "found no matching overload for '{}' applied to '({left}, {right})'",
                                call.func_name
                            ),
                        );
                    }
                }
                if let Some(target) = &call.target {
                    self.walk(target, bound);
                }
                for arg in &call.args {
                    self.walk(arg, bound);
                }
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range, bound);
                self.walk(&c.accu_init, bound);
                let item = self
                    .schema(&c.iter_range, bound)
                    .and_then(|s| s.get("items"))
                    .map(resolve);
                let before = bound.len();
                bound.push((c.iter_var.clone(), item));
                if let Some(second) = &c.iter_var2 {
                    bound.push((second.clone(), None));
                }
                bound.push((c.accu_var.clone(), None));
                self.walk(&c.loop_cond, bound);
                self.walk(&c.loop_step, bound);
                self.walk(&c.result, bound);
                bound.truncate(before);
            }
            Expr::List(list) => {
                for element in &list.elements {
                    self.walk(element, bound);
                }
            }
            Expr::Map(map) => {
                use kube_cel::cel::common::ast::EntryExpr;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        self.walk(&entry.key, bound);
                        self.walk(&entry.value, bound);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether a schema node lists every field its objects may have.
fn closed(schema: &Value) -> bool {
    schema.get("properties").is_some()
        && schema.get("additionalProperties").is_none()
        && schema["x-kubernetes-preserve-unknown-fields"] != true
        && schema["x-kubernetes-embedded-resource"] != true
}

/// The schema of field `name` of an object node (metadata is ObjectMeta everywhere).
fn field<'s>(schema: &'s Value, name: &str) -> Option<&'s Value> {
    if let Some(property) = schema["properties"].get(name) {
        if name == "metadata" && property.get("properties").is_none() {
            return openapi::builtin_schema(OBJECT_META).map(resolve);
        }
        return Some(resolve(property));
    }
    if name == "metadata" {
        return openapi::builtin_schema(OBJECT_META).map(resolve);
    }
    if matches!(name, "apiVersion" | "kind") {
        return Some(&STRING);
    }
    schema
        .get("additionalProperties")
        .filter(|a| a.is_object())
        .map(resolve)
}

static STRING: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({"type": "string"}));

/// The path of a policy's status, from the root API.
fn status_path(cluster: &str, name: &str) -> String {
    let inside = format!("/apis/{GROUP}/v1/validatingadmissionpolicies/{name}/status");
    match cluster {
        ROOT_CLUSTER => inside,
        cluster => format!("/clusters/{cluster}{inside}"),
    }
}

/// Writes the type checking of each policy whose generation is not yet observed, for as
/// long as dynamic admission lives.
pub(crate) async fn run(dynamic: Weak<Dynamic>, api: Api) {
    let client = Client::new(api.clone()).with_field_manager(FIELD_MANAGER);
    while let Some(due) = Dynamic::due_for_checking(&dynamic).await {
        let mut failed = Vec::new();
        for (cluster, name) in due {
            let Some(policy) = dynamic.upgrade().and_then(|d| d.policy(&cluster, &name)) else {
                continue;
            };
            if let Err(e) = write_status(&api, &client, &cluster, &policy).await {
                tracing::warn!(%cluster, policy = %name, error = %e,
                    "cannot write a policy's type checking; trying again in 1 s");
                failed.push((cluster, name));
            }
        }
        if !failed.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(dynamic) = dynamic.upgrade() {
                for policy in failed {
                    dynamic.retry_check(policy);
                }
            }
        }
    }
}

async fn write_status(
    api: &Api,
    client: &Client,
    cluster: &str,
    policy: &Policy,
) -> Result<(), crate::http::error::ApiError> {
    if policy.observed == Some(policy.generation) {
        return Ok(());
    }
    let view = match cluster {
        ROOT_CLUSTER => api.clone(),
        cluster => match api.logical_cluster(cluster).await {
            Ok(view) => view,
            Err(e) if e.reason == Reason::NotFound => return Ok(()),
            Err(e) => return Err(e),
        },
    };
    let warnings = warnings(&policy.spec, view.registry());
    let checking = match warnings.is_empty() {
        true => json!({"expressionWarnings": null}),
        false => json!({"expressionWarnings": warnings}),
    };
    let patch =
        json!({"status": {"observedGeneration": policy.generation, "typeChecking": checking}});
    match client
        .merge_patch(&status_path(cluster, &policy.name), &patch)
        .await
    {
        Ok(_) => {
            tracing::debug!(%cluster, policy = %policy.name, warnings = warnings.len(), "type checked");
            Ok(())
        }
        Err(e) if e.reason == Reason::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_are_checked_against_the_kinds_they_match() {
        let registry = Registry::builtin();
        let spec = json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments", "deployments/scale"]}]},
        "validations": [
            {"expression": "object.spec.replicas <= int(params.data.max)"},
            {"expression": "object.spec.replica > 1"},
            {"expression": "object.spec.template.spec.containers.all(c, c.imagePullPolicy == 'Always' && c.imag != '')",
             "messageExpression": "'name: ' + object.metadata.nam"},
            {"expression": "object.spec.replicas == 'three'"},
            {"expression": "has(object.metadata.labels) && object.metadata.labels.app == 'web'"},
        ]});
        let warnings = warnings(&spec, &registry);
        let found: Vec<(&str, &str)> = warnings
            .iter()
            .map(|w| {
                (
                    w["fieldRef"].as_str().unwrap(),
                    w["warning"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(found.len(), 4, "{found:#?}");
        assert_eq!(found[0].0, "spec.validations[1].expression");
        assert_eq!(
            found[0].1,
            "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica > 1\n | ...........^\n"
        );
        assert_eq!(found[1].0, "spec.validations[2].expression");
        assert!(
            found[1].1.contains("undefined field 'imag'"),
            "{}",
            found[1].1
        );
        assert_eq!(found[2].0, "spec.validations[2].messageExpression");
        assert!(
            found[2].1.contains("undefined field 'nam'"),
            "{}",
            found[2].1
        );
        assert_eq!(found[3].0, "spec.validations[3].expression");
        assert!(
            found[3]
                .1
                .contains("found no matching overload for '_==_' applied to '(int, string)'"),
            "{}",
            found[3].1
        );
        // A stored expression that does not compile says so.
        let stored = json!({"matchConstraints": spec["matchConstraints"],
            "validations": [{"expression": "object.spec.replicas <"}]});
        let broken = super::warnings(&stored, &registry);
        assert!(
            broken[0]["warning"]
                .as_str()
                .unwrap()
                .starts_with("compilation failed: ERROR: <input>:1:"),
            "{broken:?}"
        );
        // Wildcards name no kind: nothing to check against.
        let wildcard = json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["*"],
            "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "object.nothing"}]});
        assert!(super::warnings(&wildcard, &registry).is_empty());
    }
}
