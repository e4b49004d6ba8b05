//! ValidatingAdmissionPolicies and their bindings: defaulted and validated as they are
//! written (422 as Kubernetes words it), compiled once per change as the index reads them.
//!
//! ```text
//!  write ─► default (failurePolicy Fail, matchPolicy Equivalent, empty selectors, scope *)
//!        ─► validate (rules, selectors, CEL that compiles, reasons, actions) ─► stored
//!  store watch ─► Policy::compile / Binding::compile: every expression compiled once; a
//!        part that cannot be used (a stored expression that no longer compiles) is kept
//!        as its error, evaluated as a failure under the policy's failurePolicy
//! ```

use serde_json::{Value, json};

use crate::admission::cel::{Declarations, Expression, Reads};
use crate::admission::matching::Criteria;
use crate::admission::validation::{
    Causes, check_enum, check_expression, check_match_conditions, check_rule, check_selector,
    default_field, is_cel_identifier, is_qualified_name, items, text,
};
use crate::http::error::{Cause, Reason};
use crate::registry::selector::LabelSelector;

/// What a failure to evaluate does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    /// The write is refused (the default).
    Fail,
    /// The failure is ignored.
    Ignore,
}

impl FailurePolicy {
    pub(crate) fn parse(value: &Value) -> FailurePolicy {
        match value.as_str() {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        }
    }
}

/// A compiled expression, or why it cannot be used.
pub(crate) type Compiled = Result<Expression, String>;

fn compile(source: &str, declared: Declarations<'_>) -> Compiled {
    Expression::compile(source, declared).map_err(|e| format!("compilation error: {e}"))
}

/// One of a policy's `validations`.
#[derive(Debug)]
pub(crate) struct Validation {
    pub(crate) expression: Compiled,
    pub(crate) source: String,
    pub(crate) message: String,
    pub(crate) message_expression: Option<Compiled>,
    /// The reason (and code) of a refusal: Invalid (422) unless given.
    pub(crate) reason: Reason,
}

/// A compiled ValidatingAdmissionPolicy.
#[derive(Debug)]
pub(crate) struct Policy {
    pub(crate) name: String,
    pub(crate) generation: i64,
    pub(crate) failure_policy: FailurePolicy,
    /// `matchConstraints`; `Err`: they cannot be read (the policy matches nothing).
    pub(crate) criteria: Result<Criteria, String>,
    /// `paramKind`: apiVersion and kind.
    pub(crate) param_kind: Option<(String, String)>,
    pub(crate) match_conditions: Vec<(String, Compiled)>,
    pub(crate) variables: Vec<(String, Compiled)>,
    pub(crate) validations: Vec<Validation>,
    pub(crate) audit_annotations: Vec<(String, Compiled)>,
    /// Which of a write's variables its expressions read (only those are made: the
    /// namespace is even read from the store only then).
    pub(crate) reads: Reads,
    /// The spec as stored: type checking reads it, and a change of status alone does not
    /// compile it again.
    pub(crate) spec: Value,
    /// `status.observedGeneration`.
    pub(crate) observed: Option<i64>,
}

impl Policy {
    /// Compiles a stored policy.
    pub(crate) fn compile(object: &Value) -> Policy {
        let spec = &object["spec"];
        let params = !spec["paramKind"].is_null();
        let mut names: Vec<String> = Vec::new();
        let mut variables = Vec::new();
        for variable in items(&spec["variables"]) {
            let name = text(&variable["name"]).to_owned();
            let declared = Declarations {
                params,
                namespace_object: true,
                authorizer: true,
                variables: Some(&names),
            };
            variables.push((
                name.clone(),
                compile(text(&variable["expression"]), declared),
            ));
            names.push(name);
        }
        let declared = Declarations {
            params,
            namespace_object: true,
            authorizer: true,
            variables: Some(&names),
        };
        let match_conditions = items(&spec["matchConditions"])
            .iter()
            .map(|c| {
                (
                    text(&c["name"]).to_owned(),
                    compile(text(&c["expression"]), declared),
                )
            })
            .collect();
        let validations = items(&spec["validations"])
            .iter()
            .map(|v| Validation {
                expression: compile(text(&v["expression"]), declared),
                source: text(&v["expression"]).to_owned(),
                message: text(&v["message"]).trim().to_owned(),
                message_expression: v["messageExpression"]
                    .as_str()
                    .filter(|m| !m.is_empty())
                    .map(|m| compile(m, declared)),
                reason: v["reason"]
                    .as_str()
                    .and_then(Reason::parse)
                    .unwrap_or(Reason::Invalid),
            })
            .collect();
        let audit_annotations = items(&spec["auditAnnotations"])
            .iter()
            .map(|a| {
                (
                    text(&a["key"]).to_owned(),
                    compile(text(&a["valueExpression"]), declared),
                )
            })
            .collect();
        let param_kind = params.then(|| {
            (
                text(&spec["paramKind"]["apiVersion"]).to_owned(),
                text(&spec["paramKind"]["kind"]).to_owned(),
            )
        });
        let mut policy = Policy {
            name: text(&object["metadata"]["name"]).to_owned(),
            generation: object["metadata"]["generation"].as_i64().unwrap_or(1),
            failure_policy: FailurePolicy::parse(&spec["failurePolicy"]),
            criteria: Criteria::parse(&spec["matchConstraints"], "resourceRules"),
            param_kind,
            match_conditions,
            variables,
            validations,
            audit_annotations,
            reads: Reads::default(),
            spec: spec.clone(),
            observed: object["status"]["observedGeneration"].as_i64(),
        };
        policy.reads = policy.expressions().collect();
        policy
    }

    /// Every expression that compiled.
    pub(crate) fn expressions(&self) -> impl Iterator<Item = &Expression> {
        fn of(c: &Compiled) -> Option<&Expression> {
            c.as_ref().ok()
        }
        self.variables
            .iter()
            .filter_map(move |(_, c)| of(c))
            .chain(self.match_conditions.iter().filter_map(move |(_, c)| of(c)))
            .chain(self.validations.iter().flat_map(move |v| {
                of(&v.expression)
                    .into_iter()
                    .chain(v.message_expression.as_ref().and_then(of))
            }))
            .chain(
                self.audit_annotations
                    .iter()
                    .filter_map(move |(_, c)| of(c)),
            )
    }
}

/// What a binding does with a failed validation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Actions {
    pub(crate) deny: bool,
    pub(crate) warn: bool,
    pub(crate) audit: bool,
}

/// Where a binding's parameters come from.
#[derive(Debug)]
pub(crate) struct ParamRef {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny`.
    pub(crate) deny_when_missing: bool,
}

/// A compiled ValidatingAdmissionPolicyBinding.
#[derive(Debug)]
pub(crate) struct Binding {
    pub(crate) name: String,
    pub(crate) policy: String,
    pub(crate) param_ref: Option<ParamRef>,
    /// `matchResources`, if given (else: everything the policy matches).
    pub(crate) criteria: Option<Result<Criteria, String>>,
    pub(crate) actions: Actions,
    /// `validationActions` as written (for the audit annotation).
    pub(crate) action_names: Vec<String>,
}

impl Binding {
    /// Compiles a stored binding.
    pub(crate) fn compile(object: &Value) -> Binding {
        let spec = &object["spec"];
        let action_names: Vec<String> = items(&spec["validationActions"])
            .iter()
            .map(|a| text(a).to_owned())
            .collect();
        let has = |name: &str| action_names.iter().any(|a| a == name);
        let param_ref = (!spec["paramRef"].is_null()).then(|| {
            let p = &spec["paramRef"];
            ParamRef {
                name: p["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned),
                namespace: p["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned),
                selector: (!p["selector"].is_null())
                    .then(|| LabelSelector::from_object(&p["selector"]).unwrap_or_default()),
                deny_when_missing: p["parameterNotFoundAction"] == "Deny",
            }
        });
        Binding {
            name: text(&object["metadata"]["name"]).to_owned(),
            policy: text(&spec["policyName"]).to_owned(),
            param_ref,
            criteria: (!spec["matchResources"].is_null())
                .then(|| Criteria::parse(&spec["matchResources"], "resourceRules")),
            actions: Actions {
                deny: has("Deny"),
                warn: has("Warn"),
                audit: has("Audit"),
            },
            action_names,
        }
    }
}

/// Fills what the API defaults on `matchResources` / `matchConstraints`.
fn default_match_resources(match_resources: &mut Value) {
    if !match_resources.is_object() {
        return;
    }
    default_field(match_resources, "namespaceSelector", json!({}));
    default_field(match_resources, "objectSelector", json!({}));
    default_field(match_resources, "matchPolicy", json!("Equivalent"));
    for field in ["resourceRules", "excludeResourceRules"] {
        if let Some(rules) = match_resources[field].as_array_mut() {
            for rule in rules {
                default_field(rule, "scope", json!("*"));
            }
        }
    }
}

/// Fills what the API defaults on a policy.
pub(crate) fn default_policy(object: &mut Value) {
    let spec = &mut object["spec"];
    if !spec.is_object() {
        return;
    }
    default_field(spec, "failurePolicy", json!("Fail"));
    default_match_resources(&mut spec["matchConstraints"]);
}

/// Fills what the API defaults on a binding.
pub(crate) fn default_binding(object: &mut Value) {
    let spec = &mut object["spec"];
    if !spec.is_object() {
        return;
    }
    default_match_resources(&mut spec["matchResources"]);
}

const REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
];

fn check_match_resources(causes: &mut Causes, field: &str, m: &Value, rules_required: bool) {
    if !m.is_object() {
        causes.required(field, "");
        return;
    }
    let rules = items(&m["resourceRules"]);
    if rules_required && rules.is_empty() {
        causes.required(&format!("{field}.resourceRules"), "");
    }
    for (i, rule) in rules.iter().enumerate() {
        check_rule(causes, &format!("{field}.resourceRules[{i}]"), rule, true);
    }
    for (i, rule) in items(&m["excludeResourceRules"]).iter().enumerate() {
        check_rule(
            causes,
            &format!("{field}.excludeResourceRules[{i}]"),
            rule,
            true,
        );
    }
    check_selector(
        causes,
        &format!("{field}.namespaceSelector"),
        &m["namespaceSelector"],
    );
    check_selector(
        causes,
        &format!("{field}.objectSelector"),
        &m["objectSelector"],
    );
    check_enum(
        causes,
        &format!("{field}.matchPolicy"),
        &m["matchPolicy"],
        &["Exact", "Equivalent"],
    );
}

/// Why a policy cannot be stored, as 422 causes.
pub(crate) fn validate_policy(object: &Value) -> Vec<Cause> {
    let mut causes = Causes::default();
    let spec = &object["spec"];
    check_enum(
        &mut causes,
        "spec.failurePolicy",
        &spec["failurePolicy"],
        &["Fail", "Ignore"],
    );
    let params = !spec["paramKind"].is_null();
    if params {
        let kind = &spec["paramKind"];
        let api_version = text(&kind["apiVersion"]);
        if api_version.is_empty() {
            causes.required("spec.paramKind.apiVersion", "");
        } else if api_version.split('/').count() > 2 || api_version.split('/').any(str::is_empty) {
            causes.invalid(
                "spec.paramKind.apiVersion",
                &kind["apiVersion"],
                "must be a valid group/version",
            );
        }
        if text(&kind["kind"]).is_empty() {
            causes.required("spec.paramKind.kind", "");
        }
    }
    check_match_resources(
        &mut causes,
        "spec.matchConstraints",
        &spec["matchConstraints"],
        true,
    );
    let mut names: Vec<String> = Vec::new();
    for (i, variable) in items(&spec["variables"]).iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let name = text(&variable["name"]);
        if name.is_empty() {
            causes.required(&format!("{at}.name"), "");
        } else if !is_cel_identifier(name) {
            causes.invalid(
                &format!("{at}.name"),
                &variable["name"],
                "name is not a valid CEL identifier",
            );
        } else if names.iter().any(|n| n == name) {
            causes.duplicate(&format!("{at}.name"), &variable["name"]);
        }
        let declared = Declarations {
            params,
            namespace_object: true,
            authorizer: true,
            variables: Some(&names),
        };
        check_expression(
            &mut causes,
            &format!("{at}.expression"),
            &variable["expression"],
            declared,
        );
        names.push(name.to_owned());
    }
    let declared = Declarations {
        params,
        namespace_object: true,
        authorizer: true,
        variables: Some(&names),
    };
    check_match_conditions(
        &mut causes,
        "spec.matchConditions",
        &spec["matchConditions"],
        declared,
    );
    let validations = items(&spec["validations"]);
    let annotations = items(&spec["auditAnnotations"]);
    if validations.is_empty() && annotations.is_empty() {
        causes.required(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        );
    }
    for (i, validation) in validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        check_expression(
            &mut causes,
            &format!("{at}.expression"),
            &validation["expression"],
            declared,
        );
        if text(&validation["message"]).contains('\n') {
            causes.invalid(
                &format!("{at}.message"),
                &validation["message"],
                "message must not contain line breaks",
            );
        }
        if let Some(source) = validation["messageExpression"].as_str()
            && !source.trim().is_empty()
        {
            check_expression(
                &mut causes,
                &format!("{at}.messageExpression"),
                &validation["messageExpression"],
                declared,
            );
        }
        check_enum(
            &mut causes,
            &format!("{at}.reason"),
            &validation["reason"],
            REASONS,
        );
    }
    let mut keys = Vec::new();
    for (i, annotation) in annotations.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        let key = text(&annotation["key"]);
        if key.is_empty() {
            causes.required(&format!("{at}.key"), "");
        } else if !is_qualified_name(&format!("{}/{key}", text(&object["metadata"]["name"]))) {
            causes.invalid(
                &format!("{at}.key"),
                &annotation["key"],
                "policy name and key must form a valid qualified name",
            );
        } else if keys.contains(&key) {
            causes.duplicate(&format!("{at}.key"), &annotation["key"]);
        }
        keys.push(key);
        check_expression(
            &mut causes,
            &format!("{at}.valueExpression"),
            &annotation["valueExpression"],
            declared,
        );
    }
    causes.0
}

/// Why a binding cannot be stored, as 422 causes.
pub(crate) fn validate_binding(object: &Value) -> Vec<Cause> {
    let mut causes = Causes::default();
    let spec = &object["spec"];
    if text(&spec["policyName"]).is_empty() {
        causes.required("spec.policyName", "");
    }
    let param_ref = &spec["paramRef"];
    if !param_ref.is_null() {
        let named = !text(&param_ref["name"]).is_empty();
        let selected = !param_ref["selector"].is_null();
        match (named, selected) {
            (true, true) => causes.forbidden(
                "spec.paramRef.name",
                "name and selector are mutually exclusive",
            ),
            (false, false) => {
                causes.required("spec.paramRef", "one of name or selector must be specified")
            }
            _ => {}
        }
        if selected {
            check_selector(
                &mut causes,
                "spec.paramRef.selector",
                &param_ref["selector"],
            );
        }
        let action = &param_ref["parameterNotFoundAction"];
        if action.is_null() {
            causes.required("spec.paramRef.parameterNotFoundAction", "");
        } else {
            check_enum(
                &mut causes,
                "spec.paramRef.parameterNotFoundAction",
                action,
                &["Allow", "Deny"],
            );
        }
    }
    let actions = items(&spec["validationActions"]);
    if actions.is_empty() {
        causes.required("spec.validationActions", "");
    }
    let mut seen = Vec::new();
    for (i, action) in actions.iter().enumerate() {
        let at = format!("spec.validationActions[{i}]");
        check_enum(&mut causes, &at, action, &["Deny", "Warn", "Audit"]);
        if seen.contains(&action) {
            causes.duplicate(&at, action);
        }
        seen.push(action);
    }
    if seen.iter().any(|a| *a == "Deny") && seen.iter().any(|a| *a == "Warn") {
        causes.invalid(
            "spec.validationActions",
            &spec["validationActions"],
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        );
    }
    if !spec["matchResources"].is_null() {
        check_match_resources(
            &mut causes,
            "spec.matchResources",
            &spec["matchResources"],
            false,
        );
    }
    causes.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "max-replicas"}, "spec": spec})
    }

    fn rules() -> Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{} {}", c.field, c.reason))
            .collect()
    }

    #[test]
    fn a_policy_is_defaulted_and_validated_as_kubernetes_does() {
        let mut valid = policy(
            json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": rules(),
            "variables": [{"name": "max", "expression": "int(params.data.max)"}],
            "validations": [{"expression": "object.spec.replicas <= variables.max",
                "messageExpression": "'at most ' + string(variables.max)", "reason": "Forbidden"}]}),
        );
        default_policy(&mut valid);
        assert_eq!(valid["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            valid["spec"]["matchConstraints"]["matchPolicy"],
            "Equivalent"
        );
        assert_eq!(
            valid["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert_eq!(
            valid["spec"]["matchConstraints"]["namespaceSelector"],
            json!({})
        );
        assert_eq!(validate_policy(&valid), []);

        let bad = policy(json!({"failurePolicy": "Sometimes",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["MUTATE"], "resources": ["deployments"]}],
                "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "variables": [{"name": "max-replicas", "expression": "1"}],
            "validations": [{"expression": "object.spec.replicas <="},
                {"expression": "params.max > 1", "reason": "Teapot"},
                {"expression": "variables.unknown"}]}));
        assert_eq!(
            fields(&validate_policy(&bad)),
            [
                "spec.failurePolicy FieldValueNotSupported",
                "spec.matchConstraints.resourceRules[0].operations[0] FieldValueNotSupported",
                "spec.matchConstraints.namespaceSelector FieldValueInvalid",
                "spec.variables[0].name FieldValueInvalid",
                "spec.validations[0].expression FieldValueInvalid",
                "spec.validations[1].expression FieldValueInvalid",
                "spec.validations[1].reason FieldValueNotSupported",
                "spec.validations[2].expression FieldValueInvalid",
            ]
        );
        let causes = validate_policy(&bad);
        assert!(
            causes[5]
                .message
                .contains("undeclared reference to 'params'"),
            "{}",
            causes[5].message
        );
        let empty = policy(json!({"matchConstraints": rules()}));
        assert_eq!(
            fields(&validate_policy(&empty)),
            ["spec.validations FieldValueRequired"]
        );
        let unmatched = policy(json!({"validations": [{"expression": "true"}]}));
        assert_eq!(
            fields(&validate_policy(&unmatched)),
            ["spec.matchConstraints FieldValueRequired"]
        );
    }

    #[test]
    fn a_binding_is_validated_as_kubernetes_does() {
        let binding = |spec: Value| {
            json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "b"}, "spec": spec})
        };
        let valid = binding(
            json!({"policyName": "p", "validationActions": ["Deny", "Audit"],
            "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
        );
        assert_eq!(validate_binding(&valid), []);
        let compiled = Binding::compile(&valid);
        assert_eq!(
            compiled.actions,
            Actions {
                deny: true,
                warn: false,
                audit: true
            }
        );
        assert!(compiled.param_ref.unwrap().deny_when_missing);
        let bad = binding(
            json!({"validationActions": ["Deny", "Warn", "Deny", "Shout"],
            "paramRef": {"name": "x", "selector": {}}}),
        );
        assert_eq!(
            fields(&validate_binding(&bad)),
            [
                "spec.policyName FieldValueRequired",
                "spec.paramRef.name FieldValueForbidden",
                "spec.paramRef.parameterNotFoundAction FieldValueRequired",
                "spec.validationActions[2] FieldValueDuplicate",
                "spec.validationActions[3] FieldValueNotSupported",
                "spec.validationActions FieldValueInvalid",
            ]
        );
    }

    #[test]
    fn a_stored_expression_that_does_not_compile_is_kept_as_its_error() {
        let stored = policy(json!({"matchConstraints": rules(),
            "validations": [{"expression": "object.spec.replicas <="}, {"expression": "true"}]}));
        let compiled = Policy::compile(&stored);
        let error = compiled.validations[0].expression.as_ref().unwrap_err();
        assert!(
            error.starts_with("compilation error: ERROR: <input>:1:"),
            "{error}"
        );
        assert!(compiled.validations[1].expression.is_ok());
        assert_eq!(compiled.failure_policy, FailurePolicy::Fail);
    }
}
