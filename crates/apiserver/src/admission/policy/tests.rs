//! ValidatingAdmissionPolicies through the API: an in-process server over the memory store,
//! with dynamic admission fed by its store watch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use flotilla_store::Store;
use serde_json::{Value, json};

use crate::Api;
use crate::admission::Admission;
use crate::admission::dynamic::Dynamic;
use crate::admission::webhook::model::ServiceAddresses;
use crate::api::Verdict;
use crate::auth::{Attributes as AuthzAttributes, Authorizer, Decision, Stages, UserInfo};
use crate::client::{Client, Reply};
use crate::http::error::{ApiError, Reason};
use crate::registry::resources::Registry;

pub(crate) const VAPS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
pub(crate) const BINDINGS: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// Allows everything, except deleting a resource's objects without naming one (what a
/// policy's `authorizer` check below asks) to anyone but the server itself.
struct NoDeletes;

impl Authorizer for NoDeletes {
    fn authorize<'a>(&'a self, a: &'a AuthzAttributes<'a>) -> Verdict<'a, Decision> {
        Verdict::Now(match a.verb {
            "delete" if a.name.is_empty() && a.user.name != crate::auth::LOOPBACK_USER => {
                Decision::Deny(format!("{} may not delete", a.user.name))
            }
            _ => Decision::Allow,
        })
    }
}

/// A server with dynamic admission, and a client of it.
pub(crate) async fn server() -> (Api, Client) {
    server_with(ServiceAddresses::new()).await
}

/// [`server`] reaching webhook services at `services`.
pub(crate) async fn server_with(services: ServiceAddresses) -> (Api, Client) {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let dynamic = Dynamic::start(store.clone(), services).await.unwrap();
    let stages = Stages {
        authorizer: Arc::new(NoDeletes),
        ..Stages::default()
    };
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
        .with_stages(stages)
        .with_admission(Admission::builtin().with_dynamic(dynamic.clone()));
    api.bootstrap().await.unwrap();
    dynamic.check_types_through(&api);
    let client = Client::new(api.clone());
    (api, client)
}

pub(crate) fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn policy(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name}, "spec": spec})
}

fn deployments_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
}

async fn create(client: &Client, path: &str, object: &Value) -> Reply {
    client.request(Method::POST, path).json(object).send().await
}

fn warnings(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

/// The policy `max-replicas` (replicas at most the `max` of its ConfigMap param), bound
/// by `max-replicas` to the ConfigMap `limits` with the given actions.
async fn max_replicas(client: &Client, actions: Value, missing: &str) {
    client
        .create(VAPS, &policy("max-replicas", json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": deployments_rule(),
            "variables": [{"name": "max", "expression": "int(params.data.max)"}],
            "validations": [{"expression": "object.spec.replicas <= variables.max",
                "messageExpression": "'replicas ' + string(object.spec.replicas) + ' above ' + string(variables.max)",
                "reason": "Forbidden"}]})))
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "max-replicas",
                json!({"policyName": "max-replicas",
            "validationActions": actions,
            "paramRef": {"name": "limits", "parameterNotFoundAction": missing}}),
            ),
        )
        .await
        .unwrap();
}

async fn limits(client: &Client, max: i64) {
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "limits"}, "data": {"max": max.to_string()}});
    client
        .create("/api/v1/namespaces/default/configmaps", &configmap)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_param_limited_write_is_denied_with_its_message_expression_and_nothing_is_stored() {
    let (_, client) = server().await;
    max_replicas(&client, json!(["Deny"]), "Deny").await;

    // No param yet: the binding cannot be used, and it denies.
    let e = client
        .create(DEPLOYMENTS, &deployment("web", 3))
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason), (422, Reason::Invalid));
    assert_eq!(
        e.message,
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );

    limits(&client, 5).await;
    client
        .create(DEPLOYMENTS, &deployment("web", 3))
        .await
        .unwrap();
    let e = client
        .create(DEPLOYMENTS, &deployment("big", 7))
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason), (403, Reason::Forbidden));
    assert_eq!(
        e.message,
        "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: replicas 7 above 5"
    );
    let details = e.details.unwrap();
    assert_eq!(
        (
            details.group.as_deref(),
            details.kind.as_deref(),
            details.name.as_deref()
        ),
        (Some("apps"), Some("deployments"), Some("big"))
    );
    assert_eq!(
        details.causes[0].message,
        "ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas' denied request: replicas 7 above 5"
    );
    let gone = client.get(&format!("{DEPLOYMENTS}/big")).await.unwrap_err();
    assert_eq!(gone.reason, Reason::NotFound);
    // Updates too, patches included.
    let patch = json!({"spec": {"replicas": 9}});
    let e = client
        .merge_patch(&format!("{DEPLOYMENTS}/web"), &patch)
        .await
        .unwrap_err();
    assert!(e.message.ends_with("replicas 9 above 5"), "{}", e.message);
    // The policy does not apply to other resources.
    client
        .create(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_missing_param_is_ignored_with_allow_and_params_may_be_selected() {
    let (_, client) = server().await;
    client
        .create(
            VAPS,
            &policy(
                "max",
                json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <= int(params.data.max)",
                "message": "too many replicas"}]}),
            ),
        )
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "max",
                json!({"policyName": "max",
            "validationActions": ["Deny"],
            "paramRef": {"selector": {"matchLabels": {"limit": "replicas"}},
                "parameterNotFoundAction": "Allow"}}),
            ),
        )
        .await
        .unwrap();
    client
        .create(DEPLOYMENTS, &deployment("a", 50))
        .await
        .unwrap();
    // Every param selected is evaluated: the strictest decides.
    for (name, max) in [("loose", 10), ("strict", 4)] {
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"limit": "replicas"}}, "data": {"max": max.to_string()}});
        client
            .create("/api/v1/namespaces/default/configmaps", &configmap)
            .await
            .unwrap();
    }
    client
        .create(DEPLOYMENTS, &deployment("b", 4))
        .await
        .unwrap();
    let e = client
        .create(DEPLOYMENTS, &deployment("c", 5))
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("denied request: too many replicas"),
        "{}",
        e.message
    );
    assert_eq!(e.code, 422);
}

#[tokio::test]
async fn warn_stores_the_object_with_a_warning_and_audit_annotates_the_event() {
    use crate::auth::audit::log::{AuditLog, LogConfig};
    use crate::auth::audit::policy::Policy as AuditPolicy;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let (api, _) = server().await;
    let audit = AuditLog::open(AuditPolicy::metadata(), LogConfig::new(&log)).unwrap();
    let stages = Stages {
        audit: Arc::new(audit),
        ..(*api.stages()).clone()
    };
    let client = Client::new(api.with_stages(stages));
    max_replicas(&client, json!(["Warn", "Audit"]), "Deny").await;
    limits(&client, 2).await;
    let reply = create(&client, DEPLOYMENTS, &deployment("web", 3)).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    assert_eq!(
        warnings(&reply),
        [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas': replicas 3 above 2\""
        ]
    );
    client.get(&format!("{DEPLOYMENTS}/web")).await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    let event = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let found = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["stage"] == "ResponseComplete"
                    && e["verb"] == "create"
                    && e["objectRef"]["resource"] == "deployments"
            });
        if let Some(event) = found {
            break event;
        }
        assert!(
            Instant::now() < deadline,
            "no audit event for the create: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let failure: Value = serde_json::from_str(
        event["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "replicas 3 above 2", "policy": "max-replicas", "binding": "max-replicas",
            "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}])
    );
}

#[tokio::test]
async fn a_binding_with_a_namespace_selector_applies_only_there() {
    let (_, client) = server().await;
    client
        .create(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "prod", "labels": {"env": "prod"}}}),
        )
        .await
        .unwrap();
    client
        .create(
            VAPS,
            &policy(
                "one-replica",
                json!({
            "matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <= 1"}]}),
            ),
        )
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "prod-only",
                json!({"policyName": "one-replica",
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}),
            ),
        )
        .await
        .unwrap();
    client
        .create(DEPLOYMENTS, &deployment("web", 3))
        .await
        .unwrap();
    let e = client
        .create(
            "/apis/apps/v1/namespaces/prod/deployments",
            &deployment("web", 3),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .ends_with("denied request: failed expression: object.spec.replicas <= 1"),
        "{}",
        e.message
    );
}

/// Each policy reads only some of a write's variables (only those are made, once for all
/// policies): what one reads is there whatever the others read.
#[tokio::test]
async fn the_namespace_object_and_the_old_object_are_there_for_the_policies_that_read_them() {
    let (_, client) = server().await;
    client
        .create(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "frozen", "labels": {"frozen": "yes"}}}),
        )
        .await
        .unwrap();
    let policies = [
        (
            "not-frozen",
            json!([{"expression": "!has(namespaceObject.metadata.labels) || !('frozen' in namespaceObject.metadata.labels)",
                "messageExpression": "'namespace ' + namespaceObject.metadata.name + ' is frozen'"}]),
        ),
        (
            "no-scale-down",
            json!([{"expression": "oldObject == null || object.spec.replicas >= oldObject.spec.replicas",
                "messageExpression": "'from ' + string(oldObject.spec.replicas) + ' down to ' + string(object.spec.replicas)"}]),
        ),
    ];
    for (name, validations) in policies {
        let spec = json!({"matchConstraints": deployments_rule(), "validations": validations});
        client.create(VAPS, &policy(name, spec)).await.unwrap();
        let spec = json!({"policyName": name, "validationActions": ["Deny"]});
        client.create(BINDINGS, &binding(name, spec)).await.unwrap();
    }
    let e = client
        .create(
            "/apis/apps/v1/namespaces/frozen/deployments",
            &deployment("web", 2),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("namespace frozen is frozen"),
        "{}",
        e.message
    );
    client
        .create(DEPLOYMENTS, &deployment("web", 3))
        .await
        .unwrap();
    let path = format!("{DEPLOYMENTS}/web");
    let mut stored = client.get(&path).await.unwrap();
    stored["spec"]["replicas"] = json!(1);
    let e = client.replace(&path, &stored).await.unwrap_err();
    assert!(e.message.ends_with("from 3 down to 1"), "{}", e.message);
    stored["spec"]["replicas"] = json!(4);
    client.replace(&path, &stored).await.unwrap();
}

#[tokio::test]
async fn match_conditions_variables_request_and_the_authorizer_are_available() {
    let (api, client) = server().await;
    client
        .create(VAPS, &policy("guarded", json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["*"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "not-exempt",
                "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
            "variables": [{"name": "user", "expression": "request.userInfo.username + request.userInfo.uid + request.subResource"},
                {"name": "mayDelete", "expression": "authorizer.group('').resource('configmaps').namespace(request.namespace).check('delete').allowed()"}],
            "validations": [
                {"expression": "request.operation != 'DELETE' || variables.mayDelete",
                 "messageExpression": "variables.user + ' may not delete ' + oldObject.metadata.name"},
                {"expression": "object == null || !has(object.data) || !('secret' in object.data)",
                 "message": "no secrets in ConfigMaps"}]})))
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "guarded",
                json!({"policyName": "guarded",
            "validationActions": ["Deny"]}),
            ),
        )
        .await
        .unwrap();
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let e = client
        .create(
            configmaps,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a"}, "data": {"secret": "x"}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("no secrets in ConfigMaps"),
        "{}",
        e.message
    );
    // The match condition skips exempt objects.
    client
        .create(
            configmaps,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b", "labels": {"exempt": "yes"}}, "data": {"secret": "x"}}),
        )
        .await
        .unwrap();
    client
        .create(
            configmaps,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}}),
        )
        .await
        .unwrap();
    // jane may create (the authorizer allows) but not delete: the policy asks it.
    let jane = Arc::new(UserInfo::new("jane", &["system:authenticated"]));
    let response = api
        .handle(
            jane,
            Method::DELETE,
            &format!("{configmaps}/c"),
            None,
            &Default::default(),
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let status: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: jane may not delete c"),
        "{status}"
    );
    client.delete(&format!("{configmaps}/c")).await.unwrap();
}

#[tokio::test]
async fn expressions_that_cannot_be_evaluated_fail_under_the_failure_policy() {
    let (_, client) = server().await;
    for (name, failure_policy, label) in [("fails", "Fail", "f"), ("ignores", "Ignore", "i")] {
        client
            .create(VAPS, &policy(name, json!({"failurePolicy": failure_policy,
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["deployments"]}],
                    "objectSelector": {"matchLabels": {"app": label}}},
                "validations": [{"expression": "object.spec.paused == false"}]})))
            .await
            .unwrap();
        client
            .create(
                BINDINGS,
                &binding(
                    name,
                    json!({"policyName": name,
                "validationActions": ["Deny"]}),
                ),
            )
            .await
            .unwrap();
    }
    let e = client
        .create(DEPLOYMENTS, &deployment("f", 1))
        .await
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message.ends_with(
            "ValidatingAdmissionPolicy 'fails' with binding 'fails' denied request: expression 'object.spec.paused == false' resulted in error: no such key: paused"
        ),
        "{}",
        e.message
    );
    client
        .create(DEPLOYMENTS, &deployment("i", 1))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_policy_whose_cel_does_not_compile_is_refused_and_type_checking_reaches_its_status() {
    let (_, client) = server().await;
    let e = client
        .create(
            VAPS,
            &policy(
                "broken",
                json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replicas <"}]}),
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, 422);
    let cause = &e.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.field, "spec.validations[0].expression");
    assert!(
        cause
            .message
            .contains("compilation failed: ERROR: <input>:1:"),
        "{}",
        cause.message
    );
    let listed = client.get(VAPS).await.unwrap();
    assert_eq!(listed["items"], json!([]), "nothing was stored");

    client
        .create(
            VAPS,
            &policy(
                "typo",
                json!({"matchConstraints": deployments_rule(),
            "validations": [{"expression": "object.spec.replica <= 3"}]}),
            ),
        )
        .await
        .unwrap();
    let path = format!("{VAPS}/typo");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let stored = client.get(&path).await.unwrap();
        if stored["status"]["observedGeneration"] == 1 {
            break stored["status"].clone();
        }
        assert!(Instant::now() < deadline, "no status: {stored}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        status["typeChecking"]["expressionWarnings"],
        json!([{"fieldRef": "spec.validations[0].expression",
            "warning": "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n | object.spec.replica <= 3\n | ...........^\n"}])
    );
    // Fixed: the warning goes with the next generation.
    let fixed = json!({"spec": {"validations": [{"expression": "object.spec.replicas <= 3"}]}});
    client.merge_patch(&path, &fixed).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stored = client.get(&path).await.unwrap();
        if stored["status"]["observedGeneration"] == 2 {
            assert_eq!(stored["status"]["typeChecking"], json!({}), "{stored}");
            break;
        }
        assert!(Instant::now() < deadline, "no status: {stored}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn admission_configurations_are_never_refused_by_policies() {
    let (_, client) = server().await;
    client
        .create(
            VAPS,
            &policy(
                "deny-all",
                json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                "operations": ["*"], "resources": ["*"]}]},
            "validations": [{"expression": "false", "message": "nothing"}]}),
            ),
        )
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "deny-all",
                json!({"policyName": "deny-all",
            "validationActions": ["Deny"]}),
            ),
        )
        .await
        .unwrap();
    let e: ApiError = client
        .create(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("denied request: nothing"),
        "{}",
        e.message
    );
    // The administrator can still undo it.
    client
        .delete(&format!("{BINDINGS}/deny-all"))
        .await
        .unwrap();
    client
        .create(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn audit_annotations_are_published_under_the_policy_name() {
    use crate::auth::audit::log::{AuditLog, LogConfig};
    use crate::auth::audit::policy::Policy as AuditPolicy;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let (api, _) = server().await;
    let audit = AuditLog::open(AuditPolicy::metadata(), LogConfig::new(&log)).unwrap();
    let stages = Stages {
        audit: Arc::new(audit),
        ..(*api.stages()).clone()
    };
    let client = Client::new(api.with_stages(stages));
    client
        .create(
            VAPS,
            &policy(
                "replicas",
                json!({"matchConstraints": deployments_rule(),
            "auditAnnotations": [{"key": "high", "valueExpression":
                "object.spec.replicas > 2 ? 'replicas ' + string(object.spec.replicas) : null"}]}),
            ),
        )
        .await
        .unwrap();
    client
        .create(
            BINDINGS,
            &binding(
                "replicas",
                json!({"policyName": "replicas",
            "validationActions": ["Audit"]}),
            ),
        )
        .await
        .unwrap();
    client
        .create(DEPLOYMENTS, &deployment("big", 4))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let event = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["stage"] == "ResponseComplete" && e["objectRef"]["resource"] == "deployments"
            });
        if let Some(event) = event {
            assert_eq!(
                event["annotations"],
                json!({"replicas/high": "replicas 4"}),
                "{event}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
