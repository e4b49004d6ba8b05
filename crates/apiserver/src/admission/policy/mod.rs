//! ValidatingAdmissionPolicy: CEL validations of writes, bound to what they apply to by
//! bindings, as Kubernetes 1.32 evaluates them.
//!
//! ```text
//!  write ─► exempt (admissionregistration.k8s.io)? ─► snapshot of the cluster's policies
//!     ─► any policy's rules take it? (no: nothing read, nothing allocated)
//!     ─► per policy (by name): matchConstraints (rules, object and namespace selectors)
//!        ─► per binding (by name): matchResources ─► params (paramKind + paramRef: by
//!           name or selector; none found: parameterNotFoundAction)
//!        ─► per param: matchConditions ─► variables ─► validations (message,
//!           messageExpression, reason) ─► auditAnnotations
//!     ─► per failed validation, the binding's validationActions: Deny (the first denial
//!        is the answer: 422 or its reason's code), Warn (a Warning header), Audit (the
//!        audit event's annotation); an expression that cannot be evaluated (or a policy
//!        or binding that cannot be used) is a failure under the policy's failurePolicy
//! ```

pub(crate) mod model;
pub(crate) mod typecheck;

use std::sync::Arc;

use kube_cel::cel::{Context, Value as Cel};
use serde_json::{Value, json};
use tracing::Instrument;

use super::cel;
use super::dynamic::{Dynamic, GROUP, Hook};
use super::matching::{Match, Request};
use super::review::CelWrite;
use super::{Attributes, Validating};
use crate::api::Verdict;
use crate::auth::audit;
use crate::http::error::{ApiError, ApiResult, Cause, Reason};
use crate::registry::resources::ResourceType;
use model::{Binding, Compiled, FailurePolicy, Policy};

/// The audit annotation a binding with the Audit action records a failure under.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// The longest message a messageExpression may give, and an audit annotation's value.
const MAX_MESSAGE: usize = 5 * 1024;
const MAX_ANNOTATION: usize = 10 * 1024;

/// Whether `rt` is one of the admission configurations, which no policy or webhook is
/// asked about (so that none can lock the administrator out).
pub(crate) fn exempt(rt: &ResourceType) -> bool {
    rt.group == GROUP
}

/// The ValidatingAdmissionPolicies of the write's logical cluster, as a validating
/// admission plugin.
pub struct Policies(pub Arc<Dynamic>);

impl Validating for Policies {
    fn validate<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if exempt(attributes.rt) {
            return Verdict::Now(Ok(Vec::new()));
        }
        let Some(snapshot) = self.0.snapshot(attributes.cluster()) else {
            return Verdict::Now(Ok(Vec::new()));
        };
        let taken = snapshot.policies.iter().any(|hook| {
            hook.policy
                .criteria
                .as_ref()
                .is_ok_and(|c| c.rules_match(attributes).is_some())
        });
        if !taken {
            return Verdict::Now(Ok(Vec::new()));
        }
        Verdict::Later(Box::pin(
            async move {
                let outcome = evaluate(&snapshot.policies, attributes, object, old).await?;
                outcome.conclude(attributes)
            }
            .instrument(tracing::debug_span!("validating_admission_policies",
            resource = %attributes.rt.plural, name = %attributes.name)),
        ))
    }
}

/// One policy, binding and param to evaluate.
struct Invocation<'h> {
    policy: &'h Policy,
    binding: &'h Binding,
    matched: Match,
    params: Option<Value>,
}

/// A failed validation (or a failure to evaluate) as a binding's actions take it.
struct Failure {
    message: String,
    reason: Reason,
    /// The validation's index (for the audit annotation).
    index: usize,
}

/// A refusal: the policy and binding, the message and the reason.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Reason,
}

/// What the policies decided about a write.
#[derive(Default)]
struct Outcome {
    denials: Vec<Denial>,
    warnings: Vec<String>,
    /// Audit annotations, in order (the first value of a key wins, as in Kubernetes).
    annotations: Vec<(String, String)>,
}

impl Outcome {
    fn annotate(&mut self, key: String, value: String) {
        if !self.annotations.iter().any(|(k, _)| *k == key) {
            self.annotations.push((key, value));
        }
    }

    /// A configuration that cannot be used: a refusal under `Fail`, nothing under
    /// `Ignore`.
    fn configuration_error(&mut self, policy: &Policy, binding: Option<&Binding>, why: &str) {
        if policy.failure_policy == FailurePolicy::Ignore {
            return;
        }
        let what = if binding.is_some() {
            "binding"
        } else {
            "policy"
        };
        self.denials.push(Denial {
            policy: policy.name.clone(),
            binding: binding.map(|b| b.name.clone()),
            message: format!("failed to configure {what}: {why}"),
            reason: Reason::Invalid,
        });
    }

    /// The answer: the first refusal, or the warnings; audit annotations recorded either
    /// way.
    fn conclude(self, attributes: &Attributes<'_>) -> ApiResult<Vec<String>> {
        for (key, value) in self.annotations {
            audit::annotate(key, value);
        }
        match self.denials.into_iter().next() {
            Some(denial) => Err(refusal(attributes, &denial)),
            None => Ok(self.warnings),
        }
    }
}

/// The code of a refusal's reason.
fn code(reason: Reason) -> u16 {
    match reason {
        Reason::Unauthorized => 401,
        Reason::Forbidden => 403,
        Reason::RequestEntityTooLarge => 413,
        _ => 422,
    }
}

/// A refusal as Kubernetes words it: `deployments.apps "web" is forbidden:
/// ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MESSAGE`, with its
/// reason and code and the message as the one cause.
fn refusal(attributes: &Attributes<'_>, denial: &Denial) -> ApiError {
    let text = match &denial.binding {
        Some(binding) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
            denial.policy, denial.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            denial.policy, denial.message
        ),
    };
    let rt = attributes.rt;
    let what = match rt.group.as_str() {
        "" => rt.plural.clone(),
        group => format!("{}.{group}", rt.plural),
    };
    let message = match attributes.name {
        "" => format!("{what} is forbidden: {text}"),
        name => format!("{what} \"{name}\" is forbidden: {text}"),
    };
    let mut error = ApiError::new(code(denial.reason), denial.reason, message).on(
        &rt.group,
        &rt.plural,
        attributes.name,
    );
    if let Some(details) = &mut error.details {
        details.causes.push(Cause {
            reason: String::new(),
            message: text,
            field: String::new(),
        });
    }
    error
}

/// Every policy that applies, evaluated.
async fn evaluate(
    hooks: &[Hook],
    attributes: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> ApiResult<Outcome> {
    let request = Request::new(attributes);
    let mut outcome = Outcome::default();
    let mut invocations = Vec::new();
    for hook in hooks {
        let policy = &*hook.policy;
        let Ok(criteria) = &policy.criteria else {
            continue;
        };
        let Some(matched) = criteria.matches(&request, object, old).await? else {
            continue;
        };
        for binding in &hook.bindings {
            let applies = match &binding.criteria {
                None => true,
                Some(Err(why)) => {
                    outcome.configuration_error(policy, Some(binding), why);
                    false
                }
                Some(Ok(criteria)) => criteria.matches(&request, object, old).await?.is_some(),
            };
            if !applies {
                continue;
            }
            match params(policy, binding, attributes).await {
                Ok(params) => invocations.extend(params.into_iter().map(|params| Invocation {
                    policy,
                    binding,
                    matched: matched.clone(),
                    params,
                })),
                Err(why) => outcome.configuration_error(policy, Some(binding), &why),
            }
        }
    }
    if invocations.is_empty() {
        return Ok(outcome);
    }
    // A Namespace written has no namespace object (as in Kubernetes).
    let of_namespace = attributes.rt.group.is_empty() && attributes.rt.plural == "namespaces";
    // The write's variables are made once for every invocation, and only those read.
    let reads = invocations
        .iter()
        .fold(cel::Reads::default(), |reads, i| reads | i.policy.reads);
    let namespace = match reads.namespace_object {
        true if !of_namespace => request.namespace().await?.map(namespace_object),
        _ => None,
    };
    let uid = crate::registry::object::new_uid();
    let write = CelWrite {
        attributes,
        object,
        old,
        uid: &uid,
        namespace: namespace.as_ref(),
        reads,
    };
    cel::with_base(|base| {
        let mut own: Option<Context<'_>> = None;
        for invocation in &invocations {
            let converted;
            let scope = if invocation.matched.converted {
                converted = write.inputs(base, &invocation.matched);
                &converted
            } else {
                own.get_or_insert_with(|| write.inputs(base, &invocation.matched))
            };
            run(invocation, scope, attributes, &mut outcome);
        }
    });
    Ok(outcome)
}

/// What `namespaceObject` shows of a namespace: its metadata (without managed fields),
/// spec and status, as Kubernetes does.
fn namespace_object(namespace: &Value) -> Cel {
    let mut shown = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": namespace["metadata"], "spec": namespace["spec"], "status": namespace["status"]});
    if let Some(meta) = shown["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    cel::value(&shown)
}

/// Evaluates one invocation into `outcome`.
fn run(
    invocation: &Invocation<'_>,
    inputs: &Context<'_>,
    attributes: &Attributes<'_>,
    outcome: &mut Outcome,
) {
    let policy = invocation.policy;
    let binding = invocation.binding;
    let mut scope = inputs.new_inner_scope();
    if policy.reads.params {
        scope.add_variable_from_value(
            "params",
            invocation.params.as_ref().map_or(Cel::Null, cel::value),
        );
    }
    if policy.reads.authorizer {
        let authorizer = cel::write_authorizer(attributes, &invocation.matched.rt);
        scope.add_variable_from_value("authorizer", authorizer);
    }
    let variables = Variables::bind(policy, &mut scope);
    let fail = policy.failure_policy == FailurePolicy::Fail;

    // Match conditions: any false skips the invocation; errors (with none false) are a
    // failure under the failure policy.
    let mut errors = Vec::new();
    for (_, condition) in &policy.match_conditions {
        match variables.evaluate_bool(condition, &scope) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => errors.push(e),
        }
    }
    let mut failures = Vec::new();
    if !errors.is_empty() {
        if !fail {
            return;
        }
        failures.push(Failure {
            message: errors.join(", "),
            reason: Reason::Invalid,
            index: 0,
        });
    }
    if failures.is_empty() {
        for (index, validation) in policy.validations.iter().enumerate() {
            match variables.evaluate_bool(&validation.expression, &scope) {
                Ok(true) => {}
                Ok(false) => failures.push(Failure {
                    message: message(validation, &variables, &scope),
                    reason: validation.reason,
                    index,
                }),
                Err(e) if fail => failures.push(Failure {
                    message: e,
                    reason: Reason::Invalid,
                    index,
                }),
                Err(_) => {}
            }
        }
    }
    for failure in failures {
        let actions = binding.actions;
        if actions.deny {
            outcome.denials.push(Denial {
                policy: policy.name.clone(),
                binding: Some(binding.name.clone()),
                message: failure.message.clone(),
                reason: failure.reason,
            });
        }
        if actions.warn {
            outcome.warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                policy.name, binding.name, failure.message
            ));
        }
        if actions.audit {
            let value = json!([{"message": failure.message, "policy": policy.name,
                "binding": binding.name, "expressionIndex": failure.index,
                "validationActions": binding.action_names}]);
            outcome.annotate(VALIDATION_FAILURE_ANNOTATION.to_owned(), value.to_string());
        }
    }
    for (key, expression) in &policy.audit_annotations {
        match variables.evaluate(expression, &scope) {
            Ok(Cel::String(value)) => {
                let value = value.trim();
                if value.is_empty() {
                    continue;
                }
                let value = truncate(value, MAX_ANNOTATION);
                let key = format!("{}/{key}", policy.name);
                match outcome.annotations.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, existing)) => {
                        if !existing.split(", ").any(|v| v == value) {
                            existing.push_str(", ");
                            existing.push_str(value);
                        }
                    }
                    None => outcome.annotations.push((key, value.to_owned())),
                }
            }
            Ok(Cel::Null) => {}
            Ok(other) if fail => outcome.denials.push(Denial {
                policy: policy.name.clone(),
                binding: Some(binding.name.clone()),
                message: format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    expression.as_ref().map_or("", |e| e.source()),
                    other.type_of()
                ),
                reason: Reason::Invalid,
            }),
            Err(e) if fail => outcome.denials.push(Denial {
                policy: policy.name.clone(),
                binding: Some(binding.name.clone()),
                message: e,
                reason: Reason::Invalid,
            }),
            _ => {}
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A failed validation's message: its messageExpression's (a string, trimmed, one line,
/// at most 5 KiB), else its message, else `failed expression: EXPRESSION`.
fn message(validation: &model::Validation, variables: &Variables, scope: &Context<'_>) -> String {
    if let Some(expression) = &validation.message_expression {
        match variables.evaluate(expression, scope) {
            Ok(Cel::String(text)) => {
                let text = text.trim();
                if !text.is_empty() && text.len() <= MAX_MESSAGE && !text.contains('\n') {
                    return text.to_owned();
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "a messageExpression could not be evaluated"),
        }
    }
    if !validation.message.is_empty() {
        return validation.message.clone();
    }
    format!("failed expression: {}", validation.source.trim())
}

/// A policy's variables for one invocation: those its expressions read, evaluated in
/// order (each may read those before it), bound in the scope as `variables`.
struct Variables {
    /// Each variable that could not be evaluated, and why.
    failed: Vec<(String, String)>,
}

impl Variables {
    fn bind(policy: &Policy, scope: &mut Context<'_>) -> Variables {
        fn read<'p>(needed: &mut Vec<&'p str>, e: &'p cel::Expression) {
            for v in e.variables() {
                if !needed.contains(&v.as_str()) {
                    needed.push(v);
                }
            }
        }
        let mut needed: Vec<&str> = Vec::new();
        for expression in
            policy
                .match_conditions
                .iter()
                .map(|(_, c)| c)
                .chain(policy.validations.iter().flat_map(|v| {
                    std::iter::once(&v.expression).chain(v.message_expression.as_ref())
                }))
                .chain(policy.audit_annotations.iter().map(|(_, c)| c))
                .flatten()
        {
            read(&mut needed, expression);
        }
        // A variable reads only those before it: walking back finds every one needed.
        for (name, compiled) in policy.variables.iter().rev() {
            if needed.contains(&name.as_str())
                && let Ok(e) = compiled
            {
                read(&mut needed, e);
            }
        }
        let mut values: Vec<(&str, Cel)> = Vec::new();
        let mut failed = Vec::new();
        if !needed.is_empty() {
            scope.add_variable_from_value("variables", cel::map(Vec::new()));
        }
        for (name, compiled) in &policy.variables {
            if !needed.contains(&name.as_str()) {
                continue;
            }
            let value = match compiled {
                Ok(e) => match e
                    .variables()
                    .iter()
                    .find_map(|v| failed.iter().find(|(f, _): &&(String, String)| f == v))
                {
                    Some((v, why)) => Err(format!(
                        "composited variable \"{v}\" fails to evaluate: {why}"
                    )),
                    None => e.evaluate(scope),
                },
                Err(e) => Err(e.clone()),
            };
            match value {
                Ok(value) => {
                    values.push((name, value));
                    scope.add_variable_from_value("variables", cel::map(values.iter().cloned()));
                }
                Err(why) => failed.push((name.clone(), why)),
            }
        }
        Variables { failed }
    }

    /// Evaluates `expression`, or says which variable it reads could not be.
    fn evaluate(&self, expression: &Compiled, scope: &Context<'_>) -> Result<Cel, String> {
        let expression = expression.as_ref().map_err(Clone::clone)?;
        self.check(expression)?;
        expression.evaluate(scope).map_err(|e| {
            format!(
                "expression '{}' resulted in error: {e}",
                expression.source()
            )
        })
    }

    fn evaluate_bool(&self, expression: &Compiled, scope: &Context<'_>) -> Result<bool, String> {
        let expression = expression.as_ref().map_err(Clone::clone)?;
        self.check(expression)?;
        expression.evaluate_bool(scope)
    }

    fn check(&self, expression: &cel::Expression) -> Result<(), String> {
        for v in expression.variables() {
            if let Some((name, why)) = self.failed.iter().find(|(f, _)| f == v) {
                return Err(format!(
                    "composited variable \"{name}\" fails to evaluate: {why}"
                ));
            }
        }
        Ok(())
    }
}

/// The params a binding evaluates its policy with: `[None]` without `paramKind` or
/// `paramRef`; the object named, or those selected; none found: nothing to evaluate
/// (`Allow`) or an error (`Deny`).
async fn params(
    policy: &Policy,
    binding: &Binding,
    attributes: &Attributes<'_>,
) -> Result<Vec<Option<Value>>, String> {
    let (Some((api_version, kind)), Some(reference)) = (&policy.param_kind, &binding.param_ref)
    else {
        return Ok(vec![None]);
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let api = attributes.api;
    let Some(rt) = api.registry().by_kind(group, version, kind) else {
        return Err(format!(
            "paramKind kind `{api_version}, Kind={kind}` not known"
        ));
    };
    let namespace = match (rt.namespaced, &reference.namespace) {
        (false, Some(_)) => {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        (false, None) => String::new(),
        (true, Some(namespace)) => namespace.clone(),
        (true, None) if !attributes.namespace.is_empty() => attributes.namespace.to_owned(),
        (true, None) => {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
        }
    };
    let found: Vec<Value> = match (&reference.name, &reference.selector) {
        (Some(name), _) => match api.get(&rt, &namespace, name).await {
            Ok((object, _)) => vec![object],
            Err(e) if e.reason == Reason::NotFound => Vec::new(),
            Err(e) => return Err(e.message),
        },
        (None, Some(selector)) => api
            .select(&rt, &namespace, selector)
            .await
            .map_err(|e| e.message)?,
        (None, None) => return Err("one of name or selector must be provided".into()),
    };
    if found.is_empty() && reference.deny_when_missing {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(found.into_iter().map(Some).collect())
}

#[cfg(test)]
pub(crate) mod tests;
