//! Webhooks through the API: an in-process server with dynamic admission calls a webhook
//! server of the test's own, over HTTPS on loopback, trusted through its caBundle.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, StatusCode};
use base64::Engine;
use serde_json::{Value, json};

use crate::admission::policy::tests::{deployment, server, server_with};
use crate::admission::webhook::model::ServiceAddresses;
use crate::http::error::Reason;
use crate::registry::keys;

const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// The test's webhook server: what it was asked (path and AdmissionReview), and how to
/// reach it.
struct Webhooks {
    address: std::net::SocketAddr,
    ca_bundle: String,
    received: Arc<Mutex<Vec<(String, Value)>>>,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// The answer to `review` at `path`.
async fn answer(path: &str, review: &Value) -> (StatusCode, String) {
    let uid = review["request"]["uid"].clone();
    let response = |fields: Value| {
        let mut response = json!({"uid": uid});
        for (k, v) in fields.as_object().unwrap() {
            response[k] = v.clone();
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
            .to_string()
    };
    let body = match path {
        "/allow" => response(json!({"allowed": true, "warnings": ["looked at it"],
            "auditAnnotations": {"seen": "yes"}})),
        "/deny" => response(json!({"allowed": false,
            "status": {"message": "red is not allowed", "code": 403}})),
        "/label" => {
            let has_labels = review["request"]["object"]["metadata"]["labels"].is_object();
            let patch = match has_labels {
                true => json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]),
                false => {
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
                }
            };
            let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
            response(json!({"allowed": true, "patch": patch, "patchType": "JSONPatch"}))
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            response(json!({"allowed": true}))
        }
        "/garbage" => "this is not an AdmissionReview".to_owned(),
        "/wrong-uid" => json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "someone-else", "allowed": true}})
        .to_string(),
        _ => response(json!({"allowed": true})),
    };
    (StatusCode::OK, body)
}

/// Starts the webhook server, its certificate valid for 127.0.0.1 and
/// `deny.webhooks.svc`.
async fn webhooks() -> Webhooks {
    let dir = tempfile::tempdir().unwrap();
    let hosts = ["127.0.0.1".to_owned(), "deny.webhooks.svc".to_owned()];
    let identity = flotilla_pki::load_or_create(dir.path(), &hosts).unwrap();
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let tls = Arc::new(identity.server_config().unwrap());
    tokio::spawn(crate::http::server::serve_tls(
        listener,
        tls,
        app,
        async move {
            let _ = stopped.await;
        },
    ));
    Webhooks {
        address,
        ca_bundle: base64::engine::general_purpose::STANDARD.encode(&identity.ca_cert_pem),
        received,
        _dir: dir,
        _stop: stop,
    }
}

impl Webhooks {
    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.address)
    }

    /// The reviews received at `path`.
    fn at(&self, path: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// A webhook named `name` calling `path`, for writes of `resources` in group `group`.
    fn hook(&self, name: &str, path: &str, group: &str, resources: &[&str]) -> Value {
        json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": self.url(path), "caBundle": self.ca_bundle},
            "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [group],
                "apiVersions": ["*"], "resources": resources}]})
    }
}

fn configuration(kind: &str, name: &str, hooks: Vec<Value>) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": hooks})
}

fn configmap(name: &str, colour: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name,
        "labels": {"colour": colour}}, "data": {"colour": colour}})
}

#[tokio::test]
async fn a_webhook_is_sent_an_admission_review_v1_of_the_write() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "record",
        vec![hooks.hook("record.example.com", "/record", "", &["configmaps"])],
    );
    client.create(VALIDATING, &config).await.unwrap();
    let created = client
        .request(Method::POST, CONFIGMAPS)
        .query("fieldManager=tester")
        .json(&configmap("a", "blue"))
        .send()
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    client
        .merge_patch(
            &format!("{CONFIGMAPS}/a"),
            &json!({"data": {"colour": "green"}}),
        )
        .await
        .unwrap();
    client
        .request(Method::DELETE, format!("{CONFIGMAPS}/a"))
        .query("dryRun=All")
        .send()
        .await;
    let reviews = hooks.at("/record");
    assert_eq!(reviews.len(), 3, "{reviews:#?}");
    let create = &reviews[0];
    assert_eq!(create["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(create["kind"], "AdmissionReview");
    let request = &create["request"];
    assert!(
        request["uid"].as_str().is_some_and(|u| u.len() == 36),
        "{request}"
    );
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["requestKind"], request["kind"]);
    assert_eq!(request["requestResource"], request["resource"]);
    assert_eq!(
        (
            &request["name"],
            &request["namespace"],
            &request["operation"]
        ),
        (&json!("a"), &json!("default"), &json!("CREATE"))
    );
    assert_eq!(request["userInfo"]["username"], "system:apiserver");
    assert_eq!(
        request["userInfo"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(request["object"]["data"], json!({"colour": "blue"}));
    assert!(request["oldObject"].is_null());
    assert_eq!(request["dryRun"], false);
    assert_eq!(
        request["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "tester"})
    );
    let update = &reviews[1]["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["object"]["data"], json!({"colour": "green"}));
    assert_eq!(update["oldObject"]["data"], json!({"colour": "blue"}));
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    assert_ne!(update["uid"], request["uid"], "a uid per call");
    let delete = &reviews[2]["request"];
    assert_eq!(delete["operation"], "DELETE");
    assert!(delete["object"].is_null());
    assert_eq!(delete["oldObject"]["metadata"]["name"], "a");
    assert_eq!(delete["dryRun"], true);
    assert_eq!(
        delete["options"],
        json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "dryRun": ["All"]})
    );
}

#[tokio::test]
async fn a_validating_denial_is_the_answer_and_warnings_reach_the_client() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let mut deny = hooks.hook("deny.example.com", "/deny", "", &["configmaps"]);
    deny["objectSelector"] = json!({"matchLabels": {"colour": "red"}});
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "colours",
        vec![
            deny,
            hooks.hook("allow.example.com", "/allow", "", &["configmaps"]),
        ],
    );
    client.create(VALIDATING, &config).await.unwrap();
    let e = client
        .create(CONFIGMAPS, &configmap("red", "red"))
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason), (403, Reason::Forbidden));
    assert_eq!(
        e.message,
        "admission webhook \"deny.example.com\" denied the request: red is not allowed"
    );
    let gone = client.get(&format!("{CONFIGMAPS}/red")).await.unwrap_err();
    assert_eq!(gone.reason, Reason::NotFound);
    let reply = client
        .request(Method::POST, CONFIGMAPS)
        .json(&configmap("blue", "blue"))
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let warnings: Vec<_> = reply.headers.get_all("warning").iter().collect();
    assert_eq!(warnings, ["299 - \"looked at it\""]);
    // The selector kept the denying webhook from being asked about blue.
    assert_eq!(hooks.at("/deny").len(), 1);
}

#[tokio::test]
async fn a_mutating_webhooks_json_patch_is_stored_and_validation_sees_it() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let config = configuration(
        "MutatingWebhookConfiguration",
        "label",
        vec![hooks.hook("label.example.com", "/label", "apps", &["deployments"])],
    );
    client.create(MUTATING, &config).await.unwrap();
    let validating = configuration(
        "ValidatingWebhookConfiguration",
        "record",
        vec![hooks.hook("record.example.com", "/record", "apps", &["deployments"])],
    );
    client.create(VALIDATING, &validating).await.unwrap();
    let created = client
        .create(DEPLOYMENTS, &deployment("web", 1))
        .await
        .unwrap();
    assert_eq!(created["metadata"]["labels"]["mutated"], "yes");
    let stored = client.get(&format!("{DEPLOYMENTS}/web")).await.unwrap();
    assert_eq!(
        stored["metadata"]["labels"],
        json!({"app": "web", "mutated": "yes"})
    );
    let validated = hooks.at("/record");
    assert_eq!(
        validated[0]["request"]["object"]["metadata"]["labels"]["mutated"], "yes",
        "validating webhooks run after mutating ones"
    );
}

#[tokio::test]
async fn a_webhook_that_is_down_fails_closed_only_what_it_matches_or_fails_open() {
    let (_, client) = server().await;
    // Nothing listens here.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}/validate", closed.local_addr().unwrap());
    drop(closed);
    let hook = |name: &str, policy: &str, resource: &str| {
        json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "failurePolicy": policy, "clientConfig": {"url": url},
            "rules": [{"operations": ["CREATE"], "apiGroups": ["*"], "apiVersions": ["*"],
                "resources": [resource]}]})
    };
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "down",
        vec![
            hook("fail.example.com", "Fail", "configmaps"),
            hook("ignore.example.com", "Ignore", "secrets"),
        ],
    );
    client.create(VALIDATING, &config).await.unwrap();
    let e = client
        .create(CONFIGMAPS, &configmap("a", "blue"))
        .await
        .unwrap_err();
    assert_eq!((e.code, e.reason), (500, Reason::InternalError));
    assert!(
        e.message.starts_with(&format!(
            "Internal error occurred: failed calling webhook \"fail.example.com\": Post \"{url}?timeout=10s\": "
        )),
        "{}",
        e.message
    );
    // Not what it does not match; and Ignore lets writes through.
    client
        .create(
            "/api/v1/namespaces/default/serviceaccounts",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"}}),
        )
        .await
        .unwrap();
    client
        .create(
            "/api/v1/namespaces/default/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn too_slow_garbage_and_a_wrong_uid_are_failures_with_the_reason() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let mut slow = hooks.hook("slow.example.com", "/slow", "", &["configmaps"]);
    slow["timeoutSeconds"] = json!(1);
    slow["objectSelector"] = json!({"matchLabels": {"colour": "slow"}});
    let mut garbage = hooks.hook("garbage.example.com", "/garbage", "", &["configmaps"]);
    garbage["objectSelector"] = json!({"matchLabels": {"colour": "garbage"}});
    let mut uid = hooks.hook("uid.example.com", "/wrong-uid", "", &["configmaps"]);
    uid["objectSelector"] = json!({"matchLabels": {"colour": "uid"}});
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "bad",
        vec![slow, garbage, uid],
    );
    client.create(VALIDATING, &config).await.unwrap();
    let failure = |colour: &'static str| {
        let client = client.clone();
        async move {
            client
                .create(CONFIGMAPS, &configmap(colour, colour))
                .await
                .unwrap_err()
                .message
        }
    };
    let slow = failure("slow").await;
    assert!(
        slow.ends_with("/slow?timeout=1s\": context deadline exceeded"),
        "{slow}"
    );
    let garbage = failure("garbage").await;
    assert!(
        garbage.contains("the answer is not an AdmissionReview"),
        "{garbage}"
    );
    let uid = failure("uid").await;
    assert!(uid.contains("expected response.uid="), "{uid}");
    assert!(uid.ends_with(", got \"someone-else\""), "{uid}");
    for colour in ["slow", "garbage", "uid"] {
        let gone = client
            .get(&format!("{CONFIGMAPS}/{colour}"))
            .await
            .unwrap_err();
        assert_eq!(gone.reason, Reason::NotFound, "{colour}");
    }
}

#[tokio::test]
async fn a_dry_run_is_not_sent_to_a_webhook_with_side_effects() {
    let hooks = webhooks().await;
    let (api, client) = server().await;
    // A configuration written before v1 (v1 accepts only None and NoneOnDryRun), as it is
    // stored.
    let mut some = hooks.hook("some.example.com", "/record", "", &["configmaps"]);
    some["sideEffects"] = json!("Some");
    let refused = client
        .create(
            VALIDATING,
            &configuration("ValidatingWebhookConfiguration", "some", vec![some.clone()]),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code, 422);
    assert!(
        refused.message.contains("sideEffects"),
        "{}",
        refused.message
    );
    let mut stored = configuration("ValidatingWebhookConfiguration", "some", vec![some]);
    crate::admission::webhook::model::default(&mut stored, false);
    stored["metadata"]["uid"] = json!("0c4ff1d0-0000-4000-8000-000000000001");
    let rt = api
        .resource(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
        )
        .unwrap();
    let key = keys::key(&rt, api.cluster(), "", "some");
    let revision = api
        .store
        .create(&key, bytes::Bytes::from(stored.to_string()))
        .await
        .unwrap();
    api.admission.settled(revision).await;

    let e = client
        .request(Method::POST, CONFIGMAPS)
        .query("dryRun=All")
        .json(&configmap("a", "blue"))
        .send()
        .await
        .result()
        .unwrap_err();
    assert_eq!((e.code, e.reason), (400, Reason::BadRequest));
    assert_eq!(
        e.message,
        "admission webhook \"some.example.com\" does not support dry run"
    );
    assert!(hooks.at("/record").is_empty(), "not sent");
    client
        .create(CONFIGMAPS, &configmap("a", "blue"))
        .await
        .unwrap();
    assert_eq!(hooks.at("/record").len(), 1, "a real write is sent");

    // NoneOnDryRun: sent, and told.
    let mut none = hooks.hook("none.example.com", "/dry", "", &["secrets"]);
    none["sideEffects"] = json!("NoneOnDryRun");
    client
        .create(
            VALIDATING,
            &configuration("ValidatingWebhookConfiguration", "none", vec![none]),
        )
        .await
        .unwrap();
    client
        .request(Method::POST, "/api/v1/namespaces/default/secrets")
        .query("dryRun=All")
        .json(&json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))
        .send()
        .await
        .result()
        .unwrap();
    let dry = hooks.at("/dry");
    assert_eq!(dry.len(), 1);
    assert_eq!(dry[0]["request"]["dryRun"], true);
}

#[tokio::test]
async fn match_conditions_and_reinvocation_decide_who_is_called() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let mut watcher = hooks.hook("watch.example.com", "/record", "apps", &["deployments"]);
    watcher["reinvocationPolicy"] = json!("IfNeeded");
    watcher["matchConditions"] = json!([{"name": "not-system",
        "expression": "!object.metadata.name.startsWith('system-') && request.operation == 'CREATE'"}]);
    let label = hooks.hook("label.example.com", "/label", "apps", &["deployments"]);
    let config = configuration(
        "MutatingWebhookConfiguration",
        "chain",
        vec![watcher, label],
    );
    client.create(MUTATING, &config).await.unwrap();
    client
        .create(DEPLOYMENTS, &deployment("web", 1))
        .await
        .unwrap();
    let seen = hooks.at("/record");
    assert_eq!(seen.len(), 2, "called again once the label was added");
    assert!(seen[0]["request"]["object"]["metadata"]["labels"]["mutated"].is_null());
    assert_eq!(
        seen[1]["request"]["object"]["metadata"]["labels"]["mutated"],
        "yes"
    );
    client
        .create(DEPLOYMENTS, &deployment("system-web", 1))
        .await
        .unwrap();
    assert_eq!(
        hooks.at("/record").len(),
        2,
        "the match condition excluded it"
    );
}

#[tokio::test]
async fn a_service_is_reached_at_its_mapped_address_as_name_namespace_svc() {
    let hooks = webhooks().await;
    let mut services = ServiceAddresses::new();
    services
        .add(&format!("webhooks/deny={}", hooks.address))
        .unwrap();
    let (_, client) = server_with(services).await;
    let mut hook = hooks.hook("deny.example.com", "/deny", "", &["configmaps"]);
    hook["clientConfig"] = json!({"caBundle": hooks.ca_bundle,
        "service": {"namespace": "webhooks", "name": "deny", "path": "/deny"}});
    let mut unmapped = hook.clone();
    unmapped["name"] = json!("unmapped.example.com");
    unmapped["clientConfig"]["service"]["name"] = json!("elsewhere");
    unmapped["rules"][0]["resources"] = json!(["secrets"]);
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "svc",
        vec![hook, unmapped],
    );
    let stored = client.create(VALIDATING, &config).await.unwrap();
    assert_eq!(
        stored["webhooks"][0]["clientConfig"]["service"]["port"],
        443
    );
    let e = client
        .create(CONFIGMAPS, &configmap("a", "red"))
        .await
        .unwrap_err();
    assert!(
        e.message
            .ends_with("denied the request: red is not allowed"),
        "{}",
        e.message
    );
    let e = client
        .create(
            "/api/v1/namespaces/default/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, 500);
    assert!(
        e.message
            .contains("service \"webhooks/elsewhere\" has no address"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn malformed_configurations_are_refused_and_configurations_are_never_sent_to_webhooks() {
    let hooks = webhooks().await;
    let (_, client) = server().await;
    let mut bad_url = hooks.hook("bad.example.com", "/x", "", &["configmaps"]);
    bad_url["clientConfig"] = json!({"url": "http://127.0.0.1/x"});
    let mut bad_ca = hooks.hook("bad.example.com", "/x", "", &["configmaps"]);
    bad_ca["clientConfig"]["caBundle"] = json!("LS0tLS1CRUdJTiBub25zZW5zZQ==");
    let mut no_v1 = hooks.hook("bad.example.com", "/x", "", &["configmaps"]);
    no_v1["admissionReviewVersions"] = json!(["v1beta1"]);
    for (hook, field) in [
        (bad_url, "webhooks[0].clientConfig.url"),
        (bad_ca, "webhooks[0].clientConfig.caBundle"),
        (no_v1, "webhooks[0].admissionReviewVersions"),
    ] {
        let e = client
            .create(
                VALIDATING,
                &configuration("ValidatingWebhookConfiguration", "bad", vec![hook]),
            )
            .await
            .unwrap_err();
        assert_eq!((e.code, e.reason), (422, Reason::Invalid));
        assert_eq!(e.details.unwrap().causes[0].field, field);
    }
    assert_eq!(client.get(VALIDATING).await.unwrap()["items"], json!([]));

    // A webhook denying everything cannot lock the administrator out.
    let everything = json!({"name": "all.example.com", "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": hooks.url("/deny"), "caBundle": hooks.ca_bundle},
        "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]});
    client
        .create(
            VALIDATING,
            &configuration("ValidatingWebhookConfiguration", "all", vec![everything]),
        )
        .await
        .unwrap();
    assert!(
        client
            .create(CONFIGMAPS, &configmap("a", "blue"))
            .await
            .is_err()
    );
    client.delete(&format!("{VALIDATING}/all")).await.unwrap();
    client
        .create(CONFIGMAPS, &configmap("a", "blue"))
        .await
        .unwrap();
    assert_eq!(hooks.at("/deny").len(), 1, "only the ConfigMap was sent");
}
