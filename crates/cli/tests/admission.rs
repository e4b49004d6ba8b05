//! Dynamic admission on a real `flotilla hub` with the real kubectl: ValidatingAdmission-
//! Policies with params, Warn and namespace selectors; webhooks served by the test itself
//! over HTTPS on loopback (a certificate made with rcgen, trusted through `caBundle`).

use std::net::SocketAddr;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

mod support;

use support::{Hub, eventually};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `kubectl apply -f -` of `manifest` (JSON or YAML), which must succeed.
fn apply(hub: &Hub, manifest: &str) -> String {
    let out = hub.kubectl_with(&["apply", "-f", "-"], Some(manifest));
    assert!(out.status.success(), "apply: {}", text(&out));
    text(&out)
}

/// kubectl `args` with `manifest` on stdin, which must fail; what kubectl said.
fn refused(hub: &Hub, args: &[&str], manifest: Option<&str>) -> String {
    let out = hub.kubectl_with(args, manifest);
    assert!(
        !out.status.success(),
        "kubectl {args:?} should fail: {}",
        text(&out)
    );
    text(&out)
}

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: v1
    kind: ConfigMap
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  variables:
  - name: max
    expression: "int(params.data.maxReplicas)"
  validations:
  - expression: "object.spec.replicas <= variables.max"
    messageExpression: "'replicas must be no greater than ' + string(variables.max) + ', got ' + string(object.spec.replicas)"
    reason: Invalid
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: replica-limit
  namespace: default
data:
  maxReplicas: "5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef:
    name: replica-limit
    namespace: default
    parameterNotFoundAction: Deny
"#;

#[test]
fn validating_admission_policies_deny_warn_and_apply_where_their_bindings_select() {
    let hub = Hub::start();
    apply(&hub, POLICY);
    hub.ok(&[
        "create",
        "deployment",
        "small",
        "--image=nginx",
        "--replicas=3",
    ]);
    let said = refused(
        &hub,
        &[
            "create",
            "deployment",
            "big",
            "--image=nginx",
            "--replicas=7",
        ],
        None,
    );
    assert!(
        said.contains("deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit' denied request: replicas must be no greater than 5, got 7"),
        "{said}"
    );
    assert!(!hub.kubectl(&["get", "deployment", "big"]).status.success());
    // An update over the limit is refused too; the param's change is in force at once.
    let said = refused(
        &hub,
        &["scale", "deployment", "small", "--replicas=6"],
        None,
    );
    assert!(said.contains("got 6"), "{said}");
    hub.ok(&[
        "patch",
        "configmap",
        "replica-limit",
        "-p",
        r#"{"data":{"maxReplicas":"10"}}"#,
    ]);
    hub.ok(&[
        "create",
        "deployment",
        "big",
        "--image=nginx",
        "--replicas=7",
    ]);

    // Warn: the write is stored, kubectl prints the warning.
    apply(
        &hub,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: require-team}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"]}
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
    message: "every ConfigMap should say which team owns it"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: require-team-warn}
spec:
  policyName: require-team
  validationActions: [Warn]
"#,
    );
    let out = hub.kubectl(&["create", "configmap", "unowned", "--from-literal=a=b"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Warning: Validation failed for ValidatingAdmissionPolicy 'require-team' with binding 'require-team-warn': every ConfigMap should say which team owns it"),
        "{}",
        text(&out)
    );
    hub.ok(&["get", "configmap", "unowned"]);

    // A binding with a namespace selector applies only there.
    hub.ok(&["create", "namespace", "prod"]);
    hub.ok(&["label", "namespace", "prod", "env=prod"]);
    hub.ok(&["create", "namespace", "dev"]);
    apply(
        &hub,
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-latest}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["deployments"]}
  validations:
  - expression: "object.spec.template.spec.containers.all(c, !c.image.endsWith(':latest'))"
    message: "images must be pinned in production"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-latest-prod}
spec:
  policyName: no-latest
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {env: prod}
"#,
    );
    hub.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:latest",
        "-n",
        "dev",
    ]);
    let said = refused(
        &hub,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:latest",
            "-n",
            "prod",
        ],
        None,
    );
    assert!(
        said.contains("images must be pinned in production"),
        "{said}"
    );
    hub.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "-n",
        "prod",
    ]);

    // A policy whose CEL does not compile is refused; one reading a field the kind lacks
    // is stored, its status says why.
    let said = refused(
        &hub,
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "broken"}, "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"],
            "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <"}]}}"#,
        ),
    );
    assert!(
        said.contains("spec.validations[0].expression: Invalid value"),
        "{said}"
    );
    assert!(said.contains("compilation failed"), "{said}");
    apply(
        &hub,
        r#"{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "typo"}, "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"],
            "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replica <= 3"}]}}"#,
    );
    let warning = eventually("the type check of typo", || {
        let policy = hub.json(&["get", "validatingadmissionpolicy", "typo"]);
        policy["status"]["typeChecking"]["expressionWarnings"][0]["warning"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| policy["status"].to_string())
    });
    assert!(
        warning.starts_with(
            "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'"
        ),
        "{warning}"
    );
}

/// The test's webhook server: HTTPS on loopback with a certificate its own CA issued for
/// 127.0.0.1; what it received, by path.
struct Webhooks {
    address: SocketAddr,
    ca_bundle: String,
    received: Arc<Mutex<Vec<(String, Value)>>>,
    _runtime: tokio::runtime::Runtime,
}

/// A CA, and a server certificate it issued for 127.0.0.1: (CA PEM, rustls config).
fn certificates() -> (String, rustls::ServerConfig) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "admission test webhooks");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca_cert.pem(), config)
}

/// The AdmissionReview answering `review` at `path`.
async fn answer(path: &str, review: &Value) -> String {
    let uid = review["request"]["uid"].clone();
    let response = match path {
        "/deny" => json!({"uid": uid, "allowed": false,
            "status": {"code": 403, "message": "ConfigMaps named forbidden-* are not allowed"}}),
        "/label" => {
            let labelled = review["request"]["object"]["metadata"]["labels"].is_object();
            let patch = match labelled {
                true => {
                    json!([{"op": "add", "path": "/metadata/labels/admitted-by", "value": "webhook"}])
                }
                false => {
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"admitted-by": "webhook"}}])
                }
            };
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())})
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(6)).await;
            json!({"uid": uid, "allowed": true})
        }
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
        .to_string()
}

impl Webhooks {
    fn start() -> Webhooks {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (ca_pem, tls) = certificates();
        let received: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let seen = received.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: bytes::Bytes| {
            let seen = seen.clone();
            async move {
                let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                seen.lock()
                    .unwrap()
                    .push((uri.path().to_owned(), review.clone()));
                answer(uri.path(), &review).await
            }
        });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        runtime.spawn(flotilla_apiserver::http::server::serve_tls(
            listener,
            Arc::new(tls),
            app,
            std::future::pending(),
        ));
        Webhooks {
            address,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca_pem),
            received,
            _runtime: runtime,
        }
    }

    /// How many reviews `path` received.
    fn count(&self, path: &str) -> usize {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }

    /// The reviews `path` received.
    fn at(&self, path: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// A webhook configuration named `name` of `kind` with one webhook calling `path` on
    /// `resources` of the core group (by `url`, or this server when `None`).
    fn configuration(
        &self,
        kind: &str,
        name: &str,
        path: &str,
        resources: &[&str],
        more: Value,
    ) -> String {
        let mut hook = json!({"name": format!("{name}.flotilla.test"), "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": format!("https://{}{path}", self.address), "caBundle": self.ca_bundle},
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": resources}]});
        for (key, value) in more.as_object().into_iter().flatten() {
            hook[key] = value.clone();
        }
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "webhooks": [hook]})
        .to_string()
    }
}

#[test]
fn webhooks_deny_mutate_fail_closed_or_open_and_are_bounded_by_their_timeout() {
    let webhooks = Webhooks::start();
    let hub = Hub::start();

    // A validating denial reaches kubectl with its message.
    apply(
        &hub,
        &webhooks.configuration(
            "ValidatingWebhookConfiguration",
            "deny-forbidden",
            "/deny",
            &["configmaps"],
            json!({"matchConditions": [{"name": "forbidden-names",
                "expression": "object.metadata.name.startsWith('forbidden-')"}]}),
        ),
    );
    let said = refused(&hub, &["create", "configmap", "forbidden-a"], None);
    assert!(
        said.contains("admission webhook \"deny-forbidden.flotilla.test\" denied the request: ConfigMaps named forbidden-* are not allowed"),
        "{said}"
    );
    assert!(
        !hub.kubectl(&["get", "configmap", "forbidden-a"])
            .status
            .success()
    );
    hub.ok(&["create", "configmap", "allowed"]);
    assert_eq!(
        webhooks.count("/deny"),
        1,
        "the match condition kept it from 'allowed'"
    );

    // A mutating webhook's JSONPatch label is stored.
    apply(
        &hub,
        &webhooks.configuration(
            "MutatingWebhookConfiguration",
            "label",
            "/label",
            &["secrets"],
            json!({}),
        ),
    );
    hub.ok(&["create", "secret", "generic", "s", "--from-literal=a=b"]);
    let secret = hub.json(&["get", "secret", "s"]);
    assert_eq!(
        secret["metadata"]["labels"]["admitted-by"], "webhook",
        "{secret}"
    );
    let review = &webhooks.at("/label")[0];
    assert_eq!(review["request"]["operation"], "CREATE");
    assert_eq!(review["request"]["userInfo"]["username"], "flotilla:admin");
    assert_eq!(review["request"]["kind"]["kind"], "Secret");

    // A webhook that is down: Fail refuses what it matches and nothing else; Ignore lets
    // writes through.
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let down_hook = |name: &str, policy: &str, resource: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": [{"name": format!("{name}.flotilla.test"),
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": policy,
            "clientConfig": {"url": format!("https://{down}/validate"), "caBundle": webhooks.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": [resource]}]}]})
        .to_string()
    };
    apply(&hub, &down_hook("down-fail", "Fail", "serviceaccounts"));
    apply(&hub, &down_hook("down-ignore", "Ignore", "limitranges"));
    let said = refused(&hub, &["create", "serviceaccount", "robot"], None);
    assert!(
        said.contains(
            "Internal error occurred: failed calling webhook \"down-fail.flotilla.test\""
        ),
        "{said}"
    );
    assert!(
        said.contains(&format!("Post \"https://{down}/validate?timeout=10s\"")),
        "{said}"
    );
    hub.ok(&["create", "configmap", "unmatched"]);
    apply(
        &hub,
        r#"{"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "through", "namespace": "default"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}}"#,
    );
    hub.ok(&["get", "limitrange", "through"]);

    // timeoutSeconds: a webhook slower than it fails (here closed).
    apply(
        &hub,
        &webhooks.configuration(
            "ValidatingWebhookConfiguration",
            "slow",
            "/slow",
            &["resourcequotas"],
            json!({"timeoutSeconds": 1}),
        ),
    );
    let said = refused(&hub, &["create", "quota", "q", "--hard=pods=1"], None);
    assert!(
        said.contains("failed calling webhook \"slow.flotilla.test\""),
        "{said}"
    );
    assert!(
        said.contains("/slow?timeout=1s\": context deadline exceeded"),
        "{said}"
    );
    assert!(!hub.kubectl(&["get", "quota", "q"]).status.success());

    // Malformed configurations are refused.
    let bad = webhooks
        .configuration(
            "ValidatingWebhookConfiguration",
            "bad",
            "/x",
            &["pods"],
            json!({}),
        )
        .replace("https://", "http://");
    let said = refused(&hub, &["apply", "-f", "-"], Some(&bad));
    assert!(
        said.contains("webhooks[0].clientConfig.url: Invalid value"),
        "{said}"
    );
    assert!(
        said.contains("'https' is the only allowed URL scheme"),
        "{said}"
    );
    let bad = webhooks
        .configuration(
            "ValidatingWebhookConfiguration",
            "bad",
            "/x",
            &["pods"],
            json!({}),
        )
        .replace(&webhooks.ca_bundle, "bm90IGEgY2VydGlmaWNhdGU=");
    let said = refused(&hub, &["apply", "-f", "-"], Some(&bad));
    assert!(
        said.contains("webhooks[0].clientConfig.caBundle: Invalid value"),
        "{said}"
    );
}

#[test]
fn a_dry_run_is_not_sent_to_a_webhook_with_side_effects() {
    let webhooks = Webhooks::start();
    let hub = Hub::start();
    // v1 accepts only None and NoneOnDryRun: Some is refused as written.
    let some = webhooks.configuration(
        "ValidatingWebhookConfiguration",
        "effects",
        "/record",
        &["configmaps"],
        json!({"sideEffects": "Some"}),
    );
    let said = refused(&hub, &["apply", "-f", "-"], Some(&some));
    assert!(
        said.contains("webhooks[0].sideEffects: Unsupported value: \"Some\""),
        "{said}"
    );
    // NoneOnDryRun: a dry run is sent, and the webhook is told.
    apply(
        &hub,
        &webhooks.configuration(
            "ValidatingWebhookConfiguration",
            "effects",
            "/record",
            &["configmaps"],
            json!({"sideEffects": "NoneOnDryRun"}),
        ),
    );
    hub.ok(&["create", "configmap", "a", "--dry-run=server"]);
    let reviews = webhooks.at("/record");
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["request"]["dryRun"], true);
    assert_eq!(reviews[0]["request"]["options"]["dryRun"], json!(["All"]));

    // A configuration stored with side effects Some (as one written before v1 is): the hub
    // is stopped, the stored value changed, the hub started on it again.
    let dir = hub.stop();
    let db = dir.path().join("hub.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let (revision, value): (i64, Vec<u8>) = conn
            .query_row(
                "SELECT log.revision, data.value FROM log JOIN data ON data.revision = log.revision \
                 WHERE CAST(log.key AS TEXT) LIKE '/admissionregistration.k8s.io/validatingwebhookconfigurations/%/effects' \
                 ORDER BY log.revision DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let mut stored: Value = serde_json::from_slice(&value).unwrap();
        stored["webhooks"][0]["sideEffects"] = json!("Some");
        conn.execute(
            "UPDATE data SET value = ?1 WHERE revision = ?2",
            rusqlite::params![stored.to_string().into_bytes(), revision],
        )
        .unwrap();
    }
    let hub = Hub::start_in(dir, &[]);
    let said = refused(
        &hub,
        &["create", "configmap", "b", "--dry-run=server"],
        None,
    );
    assert!(
        said.contains("admission webhook \"effects.flotilla.test\" does not support dry run"),
        "{said}"
    );
    assert_eq!(webhooks.count("/record"), 1, "the dry run was not sent");
    hub.ok(&["create", "configmap", "b"]);
    assert_eq!(webhooks.count("/record"), 2, "a real write is sent");
}
