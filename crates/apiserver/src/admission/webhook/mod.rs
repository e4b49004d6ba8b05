//! Admission webhooks: `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration`
//! (`admissionregistration.k8s.io/v1`), called over HTTPS with an `admission.k8s.io/v1`
//! AdmissionReview, as Kubernetes 1.32 calls them.
//!
//! ```text
//!  write ─► exempt (admissionregistration.k8s.io)? ─► snapshot ─► any webhook's rules?
//!     ─► per webhook: rules ─► objectSelector ─► namespaceSelector ─► matchConditions
//!        (CEL; an error is a failure under failurePolicy) ─► a dry run and side effects
//!        Some/Unknown: 400, not called ─► POST AdmissionReview {request: uid, kind,
//!        resource, subResource, requestKind/Resource/SubResource, name, namespace,
//!        operation, userInfo, object, oldObject, dryRun, options}
//!        ─► within timeoutSeconds: a v1 AdmissionReview answering that uid
//!           allowed: warnings (to the client), auditAnnotations; a mutating webhook's
//!              base64 JSONPatch applied to the object
//!           denied: its status (message, code) is the answer
//!           anything else (down, too slow, garbage, a wrong uid): Fail = 500 with why,
//!              Ignore = the write goes on
//!  mutating: in order, one after another; one with reinvocationPolicy IfNeeded is called
//!     once more when a later webhook changed the object
//!  validating: all at once; the first refusal (in order) is the answer
//! ```

pub(crate) mod client;
pub mod model;

use std::sync::Arc;

use base64::Engine;
use futures_util::future::join_all;
use serde_json::{Value, json};
use tracing::Instrument;

use super::cel;
use super::dynamic::Dynamic;
use super::matching::{Match, Request};
use super::policy::exempt;
use super::policy::model::FailurePolicy;
use super::{Attributes, Mutating, Operation, Validating};
use crate::api::Verdict;
use crate::auth::audit;
use crate::http::error::{ApiError, ApiResult, Cause, Reason};
use model::{SideEffects, Webhook};

/// Why a call did not admit the write.
#[derive(Debug)]
enum Refused {
    /// The webhook could not be called or answered badly: its failurePolicy decides.
    Calling(String),
    /// The webhook refused the write (its Status), or the write cannot be sent to it: the
    /// answer, whatever the failurePolicy.
    Status(ApiError),
}

/// What a webhook that admitted a write said besides.
#[derive(Default)]
struct Admitted {
    /// A mutating webhook's JSON patch.
    patch: Option<Value>,
    warnings: Vec<String>,
    annotations: Vec<(String, String)>,
}

/// The webhooks the snapshot holds that a write's rules match.
fn candidates<'w>(
    hooks: &'w [Arc<Webhook>],
    attributes: &Attributes<'_>,
) -> impl Iterator<Item = (usize, &'w Arc<Webhook>, Match)> {
    hooks.iter().enumerate().filter_map(|(i, hook)| {
        let matched = hook.criteria.as_ref().ok()?.rules_match(attributes)?;
        Some((i, hook, matched))
    })
}

/// Whether a webhook whose rules take the write applies to it: its selectors, then its
/// match conditions (an error in them: a failure under its failurePolicy).
async fn applies(
    hook: &Webhook,
    request: &Request<'_>,
    matched: &Match,
    object: &Value,
    old: Option<&Value>,
) -> Result<bool, Refused> {
    let attributes = request.attributes;
    let criteria = hook
        .criteria
        .as_ref()
        .map_err(|e| Refused::Calling(e.clone()))?;
    if !criteria.object_matches(object, old) {
        return Ok(false);
    }
    match criteria.namespace_matches(request, object).await {
        Ok(true) => {}
        Ok(false) => return Ok(false),
        Err(e) => return Err(Refused::Status(e)),
    }
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let uid = crate::registry::object::new_uid();
    let mut errors = Vec::new();
    // Only the variables the conditions read are made.
    let reads: cel::Reads = hook
        .match_conditions
        .iter()
        .filter_map(|(_, condition)| condition.as_ref().ok())
        .collect();
    let write = super::review::CelWrite {
        attributes,
        object,
        old,
        uid: &uid,
        namespace: None,
        reads,
    };
    let decided = cel::with_base(|base| {
        let mut scope = write.inputs(base, matched);
        if reads.authorizer {
            let authorizer = cel::write_authorizer(attributes, &matched.rt);
            scope.add_variable_from_value("authorizer", authorizer);
        }
        for (name, condition) in &hook.match_conditions {
            let outcome = condition
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|c| c.evaluate_bool(&scope));
            match outcome {
                Ok(true) => {}
                Ok(false) => return Some(false),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        None
    });
    match decided {
        Some(false) => Ok(false),
        _ if errors.is_empty() => Ok(true),
        _ => Err(Refused::Calling(format!(
            "failed to evaluate match conditions: {}",
            errors.join(", ")
        ))),
    }
}

/// Calls `hook` about the write; a dry run is refused (400) by a webhook with side effects.
async fn call(
    hook: &Webhook,
    attributes: &Attributes<'_>,
    matched: &Match,
    object: &Value,
    old: Option<&Value>,
    mutating: bool,
) -> Result<Admitted, Refused> {
    if attributes.dry_run && hook.side_effects == SideEffects::Some {
        return Err(Refused::Status(ApiError::bad_request(format!(
            "admission webhook \"{}\" does not support dry run",
            hook.name
        ))));
    }
    let endpoint = hook
        .endpoint
        .as_ref()
        .map_err(|e| Refused::Calling(e.clone()))?;
    let uid = crate::registry::object::new_uid();
    let mut request = super::review::request(attributes, matched, &uid);
    let shown = |o: &Value| super::review::shown_as(o, matched);
    let (object, old) = match attributes.operation {
        Operation::Create => (shown(object), Value::Null),
        Operation::Update => (shown(object), old.map_or(Value::Null, shown)),
        Operation::Delete => (Value::Null, old.map_or(Value::Null, shown)),
    };
    request["object"] = object;
    request["oldObject"] = old;
    let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": request});
    let body = bytes::Bytes::from(crate::http::json::to_vec(&review));
    let prefix = if mutating {
        "failed to call webhook: "
    } else {
        ""
    };
    let answer = endpoint
        .post(body, hook.timeout)
        .await
        .map_err(|e| Refused::Calling(format!("{prefix}{e}")))?;
    let review: Value = serde_json::from_slice(&answer).map_err(|e| {
        Refused::Calling(format!("{prefix}the answer is not an AdmissionReview: {e}"))
    })?;
    let invalid = |why: String| {
        Refused::Calling(match mutating {
            true => format!("received invalid webhook response: {why}"),
            false => why,
        })
    };
    verify(&review, &uid, mutating).map_err(invalid)?;
    let response = &review["response"];
    let mut admitted = Admitted {
        warnings: response["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        annotations: response["auditAnnotations"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                (
                    format!("{}/{k}", hook.name),
                    v.as_str().unwrap_or("").to_owned(),
                )
            })
            .collect(),
        patch: None,
    };
    if response["allowed"] != true {
        for (key, value) in std::mem::take(&mut admitted.annotations) {
            audit::annotate(key, value);
        }
        return Err(Refused::Status(denial(&hook.name, &response["status"])));
    }
    if let Some(patch) = response["patch"].as_str().filter(|p| !p.is_empty()) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|e| {
                Refused::Calling(format!(
                    "received undecodable patch in webhook response: {e}"
                ))
            })?;
        let patch: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Refused::Calling(format!(
                "received undecodable patch in webhook response: {e}"
            ))
        })?;
        if !patch.is_array() {
            return Err(Refused::Calling(
                "received undecodable patch in webhook response: a JSON patch is an array of operations".into(),
            ));
        }
        admitted.patch = Some(patch);
    }
    Ok(admitted)
}

/// Checks a webhook's answer as Kubernetes does: an `admission.k8s.io/v1` AdmissionReview
/// with a response for `uid`; a patch (with its type, JSONPatch) only from a mutating
/// webhook.
fn verify(review: &Value, uid: &str, mutating: bool) -> Result<(), String> {
    let response = &review["response"];
    if !response.is_object() {
        return Err("webhook response was absent".into());
    }
    let answered = response["uid"].as_str().unwrap_or("");
    if answered != uid {
        return Err(format!("expected response.uid={uid:?}, got {answered:?}"));
    }
    let api_version = review["apiVersion"].as_str().unwrap_or("");
    let kind = review["kind"].as_str().unwrap_or("");
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        let gv = match api_version.split_once('/') {
            Some(_) => api_version.to_owned(),
            None => format!("/{api_version}"),
        };
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {gv}, Kind={kind}"
        ));
    }
    let has_patch = response["patch"].as_str().is_some_and(|p| !p.is_empty());
    let patch_type = &response["patchType"];
    if mutating {
        if has_patch && patch_type.is_null() {
            return Err("webhook returned response.patch but not response.patchType".into());
        }
        if !has_patch && !patch_type.is_null() {
            return Err("webhook returned response.patchType but not response.patch".into());
        }
        if !patch_type.is_null() && patch_type != "JSONPatch" {
            return Err(format!("unsupported patch type {patch_type}"));
        }
    } else {
        if has_patch {
            return Err("validating webhook may not return response.patch".into());
        }
        if !patch_type.is_null() {
            return Err("validating webhook may not return response.patchType".into());
        }
    }
    Ok(())
}

/// A webhook's refusal, as Kubernetes returns it: `admission webhook "NAME" denied the
/// request: MESSAGE` with the webhook's code (400 at least) and reason.
fn denial(name: &str, status: &Value) -> ApiError {
    let denied = format!("admission webhook \"{name}\" denied the request");
    let message = status["message"].as_str().filter(|m| !m.is_empty());
    let reason_text = status["reason"].as_str().filter(|r| !r.is_empty());
    let message = match (message, reason_text) {
        (Some(message), _) => format!("{denied}: {message}"),
        (None, Some(reason)) => format!("{denied}: {reason}"),
        (None, None) => format!("{denied} without explanation"),
    };
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400 && *c < 600)
        .unwrap_or(400);
    let reason = reason_text
        .and_then(Reason::parse)
        .unwrap_or_else(|| reason_of(code));
    let mut error = ApiError::new(code, reason, message);
    let details = &status["details"];
    if details.is_object() {
        let d = error.details.get_or_insert_with(Box::default);
        d.name = details["name"].as_str().map(str::to_owned);
        d.group = details["group"].as_str().map(str::to_owned);
        d.kind = details["kind"].as_str().map(str::to_owned);
        d.causes = details["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| Cause {
                reason: c["reason"].as_str().unwrap_or("").to_owned(),
                message: c["message"].as_str().unwrap_or("").to_owned(),
                field: c["field"].as_str().unwrap_or("").to_owned(),
            })
            .collect();
    }
    error
}

/// The reason a code stands for, for a refusal that gives none Flotilla can name.
fn reason_of(code: u16) -> Reason {
    match code {
        401 => Reason::Unauthorized,
        403 => Reason::Forbidden,
        404 => Reason::NotFound,
        405 => Reason::MethodNotAllowed,
        409 => Reason::Conflict,
        410 => Reason::Expired,
        413 => Reason::RequestEntityTooLarge,
        415 => Reason::UnsupportedMediaType,
        422 => Reason::Invalid,
        408 | 504 => Reason::Timeout,
        500..=599 => Reason::InternalError,
        _ => Reason::BadRequest,
    }
}

/// A failure to call a webhook that fails closed: 500 with why.
fn calling_error(hook: &Webhook, why: &str) -> ApiError {
    let cause = format!("failed calling webhook \"{}\": {why}", hook.name);
    let mut error = ApiError::internal(format!("Internal error occurred: {cause}"));
    error.details = Some(Box::new(crate::http::error::Details {
        causes: vec![Cause {
            reason: String::new(),
            message: cause,
            field: String::new(),
        }],
        ..Default::default()
    }));
    error
}

/// What a refusal means under the webhook's failure policy: the error to answer, or
/// `None` to go on (recorded in the audit event under `failed_open`).
fn under_policy(hook: &Webhook, refused: Refused, failed_open: String) -> Option<ApiError> {
    match refused {
        Refused::Status(e) => Some(e),
        Refused::Calling(why) if hook.failure_policy == FailurePolicy::Ignore => {
            tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook, failing open");
            audit::annotate(failed_open, hook.name.clone());
            None
        }
        Refused::Calling(why) => {
            tracing::warn!(webhook = %hook.name, error = %why, "failed calling webhook, failing closed");
            Some(calling_error(hook, &why))
        }
    }
}

/// The mutating webhooks of the write's logical cluster, as a mutating admission plugin.
pub struct MutatingWebhooks(pub Arc<Dynamic>);

impl Mutating for MutatingWebhooks {
    fn admit<'a>(
        &'a self,
        attributes: &'a Attributes<'a>,
        object: &'a mut Value,
        old: Option<&'a Value>,
    ) -> Verdict<'a, ApiResult<Vec<String>>> {
        if exempt(attributes.rt) {
            return Verdict::Now(Ok(Vec::new()));
        }
        let Some(snapshot) = self.0.snapshot(attributes.cluster()) else {
            return Verdict::Now(Ok(Vec::new()));
        };
        if candidates(&snapshot.mutating, attributes).next().is_none() {
            return Verdict::Now(Ok(Vec::new()));
        }
        let span = tracing::debug_span!("mutating_webhooks",
            resource = %attributes.rt.plural, name = %attributes.name);
        Verdict::Later(Box::pin(
            async move {
                let request = Request::new(attributes);
                let hooks: Vec<_> = candidates(&snapshot.mutating, attributes).collect();
                let mut warnings = Vec::new();
                // Webhooks that may be called again, and whether the object changed since.
                let mut reinvocable: Vec<(usize, bool)> = Vec::new();
                for (i, hook, matched) in &hooks {
                    let called =
                        mutate(hook, *i, 0, &request, matched, object, old, &mut warnings).await?;
                    if called.changed {
                        // Those called before may want to see what it changed.
                        for entry in reinvocable.iter_mut() {
                            entry.1 = true;
                        }
                    }
                    if hook.reinvoke && called.invoked {
                        reinvocable.push((*i, false));
                    }
                }
                for (i, hook, matched) in &hooks {
                    let again = reinvocable.iter().any(|(at, changed)| at == i && *changed);
                    if again {
                        mutate(hook, *i, 1, &request, matched, object, old, &mut warnings).await?;
                    }
                }
                Ok(warnings)
            }
            .instrument(span),
        ))
    }
}

/// Whether a mutating webhook was called, and whether it changed the object.
struct Called {
    invoked: bool,
    changed: bool,
}

/// Calls one mutating webhook if it applies, applying its patch to `object`.
#[allow(clippy::too_many_arguments)]
async fn mutate(
    hook: &Webhook,
    index: usize,
    round: usize,
    request: &Request<'_>,
    matched: &Match,
    object: &mut Value,
    old: Option<&Value>,
    warnings: &mut Vec<String>,
) -> ApiResult<Called> {
    let not_called = Called {
        invoked: false,
        changed: false,
    };
    let attributes = request.attributes;
    let failed_open =
        format!("failed-open.mutation.webhook.admission.k8s.io/round_{round}_index_{index}");
    match applies(hook, request, matched, object, old).await {
        Ok(true) => {}
        Ok(false) => return Ok(not_called),
        Err(refused) => {
            return match under_policy(hook, refused, failed_open) {
                Some(e) => Err(e),
                None => Ok(not_called),
            };
        }
    }
    let admitted = match call(hook, attributes, matched, object, old, true).await {
        Ok(admitted) => admitted,
        Err(refused) => {
            return match under_policy(hook, refused, failed_open) {
                Some(e) => Err(e),
                None => Ok(Called {
                    invoked: true,
                    changed: false,
                }),
            };
        }
    };
    warnings.extend(admitted.warnings);
    for (key, value) in admitted.annotations {
        audit::annotate(key, value);
    }
    let mut changed = false;
    if let Some(patch) = admitted.patch {
        if attributes.operation == Operation::Delete {
            return Err(ApiError::internal(format!(
                "Internal error occurred: admission webhook \"{}\" attempted to modify the object, which is not supported for this operation",
                hook.name
            )));
        }
        let patched = crate::patch::json_patch(object, &patch)
            .map_err(|e| ApiError::internal(format!("Internal error occurred: {}", e.message)))?;
        changed = patched != *object;
        *object = patched;
    }
    let mutation =
        json!({"configuration": hook.configuration, "webhook": hook.name, "mutated": changed});
    audit::annotate(
        format!("mutation.webhook.admission.k8s.io/round_{round}_index_{index}"),
        mutation.to_string(),
    );
    Ok(Called {
        invoked: true,
        changed,
    })
}

/// The validating webhooks of the write's logical cluster, as a validating admission
/// plugin.
pub struct ValidatingWebhooks(pub Arc<Dynamic>);

impl Validating for ValidatingWebhooks {
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
        if candidates(&snapshot.validating, attributes)
            .next()
            .is_none()
        {
            return Verdict::Now(Ok(Vec::new()));
        }
        let span = tracing::debug_span!("validating_webhooks",
            resource = %attributes.rt.plural, name = %attributes.name);
        Verdict::Later(Box::pin(
            async move {
                let request = Request::new(attributes);
                let calls =
                    candidates(&snapshot.validating, attributes).map(|(i, hook, matched)| {
                        let request = &request;
                        async move {
                            let failed_open = format!(
                                "failed-open.validating.webhook.admission.k8s.io/round_0_index_{i}"
                            );
                            let outcome = match applies(hook, request, &matched, object, old).await
                            {
                                Ok(true) => {
                                    call(hook, attributes, &matched, object, old, false).await
                                }
                                Ok(false) => Ok(Admitted::default()),
                                Err(refused) => Err(refused),
                            };
                            match outcome {
                                Ok(admitted) => Ok(admitted),
                                Err(refused) => match under_policy(hook, refused, failed_open) {
                                    Some(e) => Err(e),
                                    None => Ok(Admitted::default()),
                                },
                            }
                        }
                    });
                let mut warnings = Vec::new();
                let mut first = None;
                for outcome in join_all(calls).await {
                    match outcome {
                        Ok(admitted) => {
                            warnings.extend(admitted.warnings);
                            for (key, value) in admitted.annotations {
                                audit::annotate(key, value);
                            }
                        }
                        Err(e) => {
                            first.get_or_insert(e);
                        }
                    }
                }
                match first {
                    Some(e) => Err(e),
                    None => Ok(warnings),
                }
            }
            .instrument(span),
        ))
    }
}

#[cfg(test)]
mod tests;
