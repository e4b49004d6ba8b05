//! Built-in kinds through the API: refused with 400 or 422 naming the field, nothing
//! written; defaulted as a cluster defaults them.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::{Value, json};

use crate::api::Api;
use crate::registry::resources::Registry;

async fn api() -> Api {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
    api.bootstrap().await.unwrap();
    api
}

async fn call(
    api: &Api,
    method: Method,
    path: &str,
    body: Value,
    patch: &str,
) -> (StatusCode, Value) {
    let mut headers = HeaderMap::new();
    let body = match body {
        Value::Null => Bytes::new(),
        body => Bytes::from(body.to_string()),
    };
    if !patch.is_empty() {
        headers.insert(axum::http::header::CONTENT_TYPE, patch.parse().unwrap());
    }
    let response = api.serve(method, path, None, &headers, body).await;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn post(api: &Api, path: &str, body: Value) -> (StatusCode, Value) {
    call(api, Method::POST, path, body, "").await
}

fn container() -> Value {
    json!({"name": "web", "image": "nginx:1.27"})
}

fn deployment(name: &str, spec: Value) -> Value {
    let mut full = json!({
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [container()]}}});
    merge(&mut full, spec);
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": full})
}

fn merge(target: &mut Value, patch: Value) {
    *target = crate::patch::merge(target, &patch);
}

fn service(name: &str, spec: Value) -> Value {
    let mut full = json!({"selector": {"app": "web"}, "ports": [{"port": 80}]});
    merge(&mut full, spec);
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": full})
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const SERVICES: &str = "/api/v1/namespaces/default/services";

/// The issue's invalid objects (and more), each refused with 422 naming the field, and
/// none stored.
#[tokio::test]
async fn invalid_builtin_objects_are_refused_with_the_field_named() {
    let api = api().await;
    let long = "x".repeat(64);
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "service port 70000",
            SERVICES,
            service("s1", json!({"ports": [{"port": 70000}]})),
            "spec.ports[0].port",
        ),
        (
            "service targetPort 0 by name too long",
            SERVICES,
            service(
                "s2",
                json!({"ports": [{"port": 80, "targetPort": "a-very-long-port-name"}]}),
            ),
            "spec.ports[0].targetPort",
        ),
        (
            "service without ports",
            SERVICES,
            service("s3", json!({"ports": null})),
            "spec.ports",
        ),
        (
            "service two unnamed ports",
            SERVICES,
            service("s4", json!({"ports": [{"port": 80}, {"port": 81}]})),
            "spec.ports[1].name",
        ),
        (
            "service protocol HTTP",
            SERVICES,
            service("s5", json!({"ports": [{"port": 80, "protocol": "HTTP"}]})),
            "spec.ports[0].protocol",
        ),
        (
            "service type Internal",
            SERVICES,
            service("s6", json!({"type": "Internal"})),
            "spec.type",
        ),
        (
            "service name starting with a digit is fine, with a dot is not",
            SERVICES,
            service("web.v1", json!({})),
            "metadata.name",
        ),
        (
            "selector not matching the template",
            DEPLOYMENTS,
            deployment("d1", json!({"selector": {"matchLabels": {"app": "api"}}})),
            "spec.template.metadata.labels",
        ),
        (
            "no containers",
            DEPLOYMENTS,
            deployment("d2", json!({"template": {"spec": {"containers": []}}})),
            "spec.template.spec.containers",
        ),
        (
            "64-character label value",
            DEPLOYMENTS,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d3", "labels": {"team": long}},
                   "spec": deployment("x", json!({}))["spec"]}),
            "metadata.labels[team]",
        ),
        (
            "invalid label key",
            DEPLOYMENTS,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d4", "labels": {"-team": "a"}},
                   "spec": deployment("x", json!({}))["spec"]}),
            "metadata.labels",
        ),
        (
            "duplicate container names",
            DEPLOYMENTS,
            deployment(
                "d5",
                json!({"template": {"spec": {"containers": [container(), container()]}}}),
            ),
            "spec.template.spec.containers[1].name",
        ),
        (
            "duplicate port names",
            DEPLOYMENTS,
            deployment(
                "d6",
                json!({"template": {"spec": {"containers": [{"name": "web",
                "image": "nginx", "ports": [{"name": "http", "containerPort": 80},
                                             {"name": "http", "containerPort": 81}]}]}}}),
            ),
            "spec.template.spec.containers[0].ports[1].name",
        ),
        (
            "container port 0",
            DEPLOYMENTS,
            deployment(
                "d7",
                json!({"template": {"spec": {"containers": [{"name": "web",
                "image": "nginx", "ports": [{"containerPort": 0}]}]}}}),
            ),
            "spec.template.spec.containers[0].ports[0].containerPort",
        ),
        (
            "container without image",
            DEPLOYMENTS,
            deployment(
                "d8",
                json!({"template": {"spec": {"containers": [{"name": "web"}]}}}),
            ),
            "spec.template.spec.containers[0].image",
        ),
        (
            "container name with capitals",
            DEPLOYMENTS,
            deployment(
                "d9",
                json!({"template": {"spec": {"containers": [{"name": "Web",
                "image": "nginx"}]}}}),
            ),
            "spec.template.spec.containers[0].name",
        ),
        (
            "negative replicas",
            DEPLOYMENTS,
            deployment("d10", json!({"replicas": -1})),
            "spec.replicas",
        ),
        (
            "empty selector",
            DEPLOYMENTS,
            deployment("d11", json!({"selector": {"matchLabels": null}})),
            "spec.selector",
        ),
        (
            "no selector",
            DEPLOYMENTS,
            deployment("d12", json!({"selector": null})),
            "spec.selector",
        ),
        (
            "restartPolicy Never in a Deployment",
            DEPLOYMENTS,
            deployment(
                "d13",
                json!({"template": {"spec": {"restartPolicy": "Never"}}}),
            ),
            "spec.template.spec.restartPolicy",
        ),
        (
            "maxSurge and maxUnavailable both 0",
            DEPLOYMENTS,
            deployment(
                "d14",
                json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}),
            ),
            "spec.strategy.rollingUpdate.maxUnavailable",
        ),
        (
            "volume mount of no volume",
            DEPLOYMENTS,
            deployment(
                "d15",
                json!({"template": {"spec": {"containers": [{"name": "web",
                "image": "nginx", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}}}),
            ),
            "spec.template.spec.containers[0].volumeMounts[0].name",
        ),
        (
            "request above limit",
            DEPLOYMENTS,
            deployment(
                "d16",
                json!({"template": {"spec": {"containers": [{"name": "web",
                "image": "nginx", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}}}]}}}),
            ),
            "spec.template.spec.containers[0].resources.requests",
        ),
        (
            "job with restartPolicy Always",
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j1"},
                   "spec": {"template": {"spec": {"containers": [container()]}}}}),
            "spec.template.spec.restartPolicy",
        ),
        (
            "cronjob with a bad schedule",
            "/apis/batch/v1/namespaces/default/cronjobs",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c1"},
                   "spec": {"schedule": "every minute", "jobTemplate": {"spec": {"template":
                       {"spec": {"restartPolicy": "Never", "containers": [container()]}}}}}}),
            "spec.schedule",
        ),
        (
            "configmap key with a slash",
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"},
                   "data": {"a/b": "x"}}),
            "data",
        ),
        (
            "tls secret without its key",
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
                   "type": "kubernetes.io/tls", "data": {"tls.crt": ""}}),
            "data[tls.key]",
        ),
        (
            "statefulset selector mismatch",
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "st1"},
                   "spec": {"serviceName": "x", "selector": {"matchLabels": {"app": "db"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [container()]}}}}),
            "spec.template.metadata.labels",
        ),
        (
            "daemonset without template labels",
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds1"},
                   "spec": {"selector": {"matchLabels": {"app": "agent"}},
                            "template": {"spec": {"containers": [container()]}}}}),
            "spec.template.metadata.labels",
        ),
        (
            "hpa min above max",
            "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers",
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": {"name": "h1"}, "spec": {"minReplicas": 5, "maxReplicas": 2,
                   "scaleTargetRef": {"kind": "Deployment", "name": "web"}}}),
            "spec.minReplicas",
        ),
        (
            "pod with an annotation key that is not a qualified name",
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p1", "annotations": {"a b": "c"}},
                   "spec": {"containers": [container()]}}),
            "metadata.annotations",
        ),
    ];
    assert!(cases.len() >= 17);
    for (what, path, object, field) in cases {
        let (status, body) = post(&api, path, object.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
        assert_eq!(body["reason"], "Invalid", "{what}");
        let causes: Vec<&str> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(
            causes.contains(&field),
            "{what}: {field} not in {causes:?}: {body}"
        );
        let name = object["metadata"]["name"].as_str().unwrap();
        let (status, _) = call(
            &api,
            Method::GET,
            &format!("{path}/{name}"),
            Value::Null,
            "",
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{what}: nothing stored");
    }
}

#[tokio::test]
async fn a_field_of_the_wrong_type_is_a_400_naming_it() {
    let api = api().await;
    let (status, body) = post(
        &api,
        DEPLOYMENTS,
        deployment("web", json!({"replicas": "three"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("spec.replicas"), "{message}");
    let (status, _) = call(
        &api,
        Method::GET,
        &format!("{DEPLOYMENTS}/web"),
        Value::Null,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A patch that makes it so is refused the same way.
    let (status, _) = post(&api, DEPLOYMENTS, deployment("web", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(
        &api,
        Method::PATCH,
        &format!("{DEPLOYMENTS}/web"),
        json!({"spec": {"replicas": "three"}}),
        "application/merge-patch+json",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// Fields that never change: a Deployment's selector, a Service's clusterIP, a Job's
/// template, a Secret's type, the data of an immutable ConfigMap or Secret.
#[tokio::test]
async fn immutable_fields_are_refused_on_update() {
    let api = api().await;
    let patch = "application/merge-patch+json";
    let cases: Vec<(&str, &str, Value, Value, &str)> = vec![
        (
            "deployment selector",
            DEPLOYMENTS,
            deployment("d", json!({})),
            json!({"spec": {"selector": {"matchLabels": {"app": "web", "v": "2"}},
                            "template": {"metadata": {"labels": {"v": "2"}}}}}),
            "spec.selector",
        ),
        (
            "service clusterIP",
            SERVICES,
            service("s", json!({"clusterIP": "10.96.0.10"})),
            json!({"spec": {"clusterIP": "10.96.0.11"}}),
            "spec.clusterIP",
        ),
        (
            "job template",
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                   "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                  "containers": [container()]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
            "spec.template",
        ),
        (
            "secret type",
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                   "data": {"a": "YQ=="}}),
            json!({"type": "kubernetes.io/basic-auth"}),
            "type",
        ),
        (
            "immutable configmap data",
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                   "immutable": true, "data": {"a": "1"}}),
            json!({"data": {"a": "2"}}),
            "data",
        ),
        (
            "immutable configmap flag",
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c2"},
                   "immutable": true, "data": {"a": "1"}}),
            json!({"immutable": false}),
            "immutable",
        ),
        (
            "immutable secret stringData",
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s2"},
                   "immutable": true, "data": {"a": "YQ=="}}),
            json!({"stringData": {"a": "b"}}),
            "data",
        ),
        (
            "statefulset serviceName",
            "/apis/apps/v1/namespaces/default/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "st"},
                   "spec": {"serviceName": "a", "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [container()]}}}}),
            json!({"spec": {"serviceName": "b"}}),
            "spec",
        ),
    ];
    for (what, path, object, change, field) in cases {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let (status, body) = post(&api, path, object).await;
        assert_eq!(status, StatusCode::CREATED, "{what}: {body}");
        let (status, body) = call(
            &api,
            Method::PATCH,
            &format!("{path}/{name}"),
            change,
            patch,
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {body}");
        let fields: Vec<&str> = body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&field), "{what}: {field} not in {fields:?}");
    }
    // What stays mutable does change: a Deployment's replicas, a mutable ConfigMap.
    let (status, body) = call(
        &api,
        Method::PATCH,
        &format!("{DEPLOYMENTS}/d"),
        json!({"spec": {"replicas": 5}}),
        patch,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A suspended Job's template may change.
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let (status, _) = post(
        &api,
        jobs,
        json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "later"}, "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never", "containers": [container()]}}}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(&api, Method::PATCH, &format!("{jobs}/later"),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}}}),
        patch).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A Secret's `stringData` is folded into `data` and never stored or returned; `type`
/// is Opaque; a Deployment is stored with a cluster's defaults.
#[tokio::test]
async fn objects_are_stored_defaulted() {
    let api = api().await;
    let secrets = "/api/v1/namespaces/default/secrets";
    let (status, body) = post(
        &api,
        secrets,
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db"}, "stringData": {"password": "hunter2"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, stored) = call(&api, Method::GET, &format!("{secrets}/db"), Value::Null, "").await;
    assert_eq!(stored["data"], json!({"password": "aHVudGVyMg=="}));
    assert_eq!(stored["type"], "Opaque");
    assert!(stored.get("stringData").is_none(), "{stored}");
    assert!(stored["metadata"].get("generation").is_none(), "{stored}");

    let (status, body) = post(&api, DEPLOYMENTS, deployment("web", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, stored) = call(
        &api,
        Method::GET,
        &format!("{DEPLOYMENTS}/web"),
        Value::Null,
        "",
    )
    .await;
    assert_eq!(
        stored["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(stored["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(stored["metadata"]["generation"], 1);
}

/// The Python client's `patch_namespaced_deployment_scale` sends a strategic merge patch.
#[tokio::test]
async fn scale_takes_a_strategic_merge_patch() {
    let api = api().await;
    let (status, _) = post(&api, DEPLOYMENTS, deployment("web", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(
        &api,
        Method::PATCH,
        &format!("{DEPLOYMENTS}/web/scale"),
        json!({"spec": {"replicas": 4}}),
        "application/strategic-merge-patch+json",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "Scale");
    assert_eq!(body["spec"]["replicas"], 4);
    let (_, stored) = call(
        &api,
        Method::GET,
        &format!("{DEPLOYMENTS}/web"),
        Value::Null,
        "",
    )
    .await;
    assert_eq!(stored["spec"]["replicas"], 4);
    assert_eq!(stored["metadata"]["generation"], 2);
}

/// Objects a cluster takes are taken: no rule here refuses more than Kubernetes does.
#[tokio::test]
async fn valid_objects_are_accepted() {
    let api = api().await;
    let ns = "/api/v1/namespaces/default";
    let cases: Vec<(String, Value)> = vec![
        (
            format!("{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "headless"}, "spec": {"clusterIP": "None"}}),
        ),
        (
            format!("{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db"}, "spec": {"type": "ExternalName",
            "externalName": "db.example.com"}}),
        ),
        (
            format!("{ns}/services"),
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web"}, "spec": {"type": "NodePort", "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080},
                      {"name": "dns", "port": 53, "protocol": "UDP"},
                      {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets".into(),
            json!({"apiVersion": "apps/v1",
            "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]},
                     "template": {"metadata": {"labels": {"app": "db"}},
                                  "spec": {"containers": [{"name": "db", "image": "postgres:16",
                                      "volumeMounts": [{"name": "data", "mountPath": "/var/lib"}]}],
                                           "volumes": [{"name": "data", "emptyDir": {}}]}}}}),
        ),
        (
            "/apis/batch/v1/namespaces/default/cronjobs".into(),
            json!({"apiVersion": "batch/v1",
            "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "30 2 * * 1-5", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "containers": [container()]}}}}}}),
        ),
        (
            "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies".into(),
            json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny"}, "spec": {"policyTypes": ["Ingress"]}}),
        ),
        (
            format!("{ns}/pods"),
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"example.com/tier": "Web_1.x"},
                         "annotations": {"Example.com/Note": "anything at all"}},
            "spec": {"initContainers": [{"name": "init", "image": "busybox"}],
                     "containers": [{"name": "app", "image": "app:1",
                        "env": [{"name": "my.var-1", "value": "x"}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"},
                                      "limits": {"cpu": "1", "memory": "128Mi"}}}]}}),
        ),
        (
            format!("{ns}/secrets"),
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": "", "tls.key": ""}}),
        ),
        (
            format!("{ns}/configmaps"),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "conf"}, "data": {"app.properties": "a=b", "KEY_1": "x"},
            "binaryData": {"blob": "AAEC"}}),
        ),
    ];
    for (path, object) in cases {
        let (status, body) = post(&api, &path, object.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{object}: {body}");
    }
}

async fn get(api: &Api, path: &str) -> (StatusCode, Value) {
    call(api, Method::GET, path, Value::Null, "").await
}

fn in_range(ip: &Value) -> bool {
    let ip: std::net::Ipv4Addr = ip.as_str().unwrap().parse().unwrap();
    let bits = u32::from(ip);
    // 10.96.0.0/12 without its network, first and broadcast addresses.
    bits & 0xfff0_0000 == 0x0a60_0000 && bits > 0x0a60_0001 && bits != 0x0a6f_ffff
}

/// A Service that needs a cluster IP gets one of the range, with its families; one asked
/// for is kept when free and in range; headless and ExternalName get none.
#[tokio::test]
async fn services_get_cluster_ips_from_the_range() {
    let api = api().await;
    let (status, web) = post(&api, SERVICES, service("web", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{web}");
    let ip = web["spec"]["clusterIP"].clone();
    assert!(in_range(&ip), "{web}");
    assert_eq!(web["spec"]["clusterIPs"], json!([ip]));
    assert_eq!(web["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(web["spec"]["ipFamilyPolicy"], "SingleStack");
    // Nobody owns what the server allocated (an apply without it keeps it).
    let owned = web["metadata"]["managedFields"].to_string();
    assert!(!owned.contains("clusterIP"), "{owned}");
    for ty in ["NodePort", "LoadBalancer"] {
        let name = ty.to_lowercase();
        let (status, body) = post(&api, SERVICES, service(&name, json!({"type": ty}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(in_range(&body["spec"]["clusterIP"]), "{body}");
    }
    let (_, asked) = post(
        &api,
        SERVICES,
        service("asked", json!({"clusterIP": "10.96.0.10"})),
    )
    .await;
    assert_eq!(asked["spec"]["clusterIP"], "10.96.0.10", "{asked}");
    assert_eq!(asked["spec"]["clusterIPs"], json!(["10.96.0.10"]));
    let (_, by_list) = post(
        &api,
        SERVICES,
        service("by-list", json!({"clusterIPs": ["10.96.0.11"]})),
    )
    .await;
    assert_eq!(by_list["spec"]["clusterIP"], "10.96.0.11", "{by_list}");
    let (_, headless) = post(
        &api,
        SERVICES,
        service("headless", json!({"clusterIP": "None"})),
    )
    .await;
    assert_eq!(headless["spec"]["clusterIP"], "None", "{headless}");
    assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    let external = service(
        "external",
        json!({"type": "ExternalName", "externalName": "db.example.com"}),
    );
    let (status, external) = post(&api, SERVICES, external).await;
    assert_eq!(status, StatusCode::CREATED, "{external}");
    assert!(external["spec"].get("clusterIP").is_none(), "{external}");

    // Taken, outside the range, the first address, a clusterIPs that differs: 422.
    for (name, spec, message) in [
        (
            "taken",
            json!({"clusterIP": "10.96.0.10"}),
            "provided IP is already allocated",
        ),
        (
            "taken-too",
            json!({"clusterIP": ip}),
            "provided IP is already allocated",
        ),
        (
            "first",
            json!({"clusterIP": "10.96.0.1"}),
            "provided IP is already allocated",
        ),
        (
            "outside",
            json!({"clusterIP": "192.168.0.10"}),
            "is not in the valid range",
        ),
        (
            "network",
            json!({"clusterIP": "10.96.0.0"}),
            "is not in the valid range",
        ),
        (
            "differs",
            json!({"clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.13"]}),
            "must match `clusterIP`",
        ),
    ] {
        let (status, body) = post(&api, SERVICES, service(name, spec)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{name}: {body}");
        assert_eq!(
            body["details"]["causes"][0]["field"], "spec.clusterIPs[0]",
            "{body}"
        );
        assert!(
            body["message"].as_str().unwrap().contains(message),
            "{name}: {body}"
        );
        let (status, _) = get(&api, &format!("{SERVICES}/{name}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{name} was stored");
    }
}

/// Concurrent creates never share an address; nor do creates after a restart (a new API
/// over the same store); a deleted Service's address can be asked for again; a dry run
/// holds nothing; an update that leaves the address out keeps it.
#[tokio::test]
async fn cluster_ips_are_unique_across_concurrent_creates_and_restarts() {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    // A /28 leaves 13 addresses: a collision would show.
    let cidr = "10.0.0.0/28".parse().unwrap();
    let api =
        Api::new(store.clone(), Arc::new(Registry::builtin()), "127.0.0.1").with_service_cidr(cidr);
    api.bootstrap().await.unwrap();
    let creates = (0..8).map(|i| {
        let api = api.clone();
        async move { post(&api, SERVICES, service(&format!("s{i}"), json!({}))).await }
    });
    let mut seen = std::collections::HashSet::new();
    for (status, body) in futures_util::future::join_all(creates).await {
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(
            seen.insert(body["spec"]["clusterIP"].as_str().unwrap().to_owned()),
            "{seen:?}"
        );
    }
    let restarted =
        Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1").with_service_cidr(cidr);
    // A dry run gets an address and holds none of it (else
    // the range would be full one create early).
    let body = Bytes::from(service("dry", json!({})).to_string());
    let response = restarted
        .serve(
            Method::POST,
            SERVICES,
            Some("dryRun=All"),
            &HeaderMap::new(),
            body,
        )
        .await;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let dry: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::CREATED, "{dry}");
    assert!(!seen.contains(dry["spec"]["clusterIP"].as_str().unwrap()));

    for i in 8..13 {
        let (status, body) = post(&restarted, SERVICES, service(&format!("s{i}"), json!({}))).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert!(
            seen.insert(body["spec"]["clusterIP"].as_str().unwrap().to_owned()),
            "{seen:?}"
        );
    }
    // The range is full: a 500 in Kubernetes' words, nothing stored.
    let (status, body) = post(&restarted, SERVICES, service("s13", json!({}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("range is full"),
        "{body}"
    );

    // A deleted Service's address is free again, asked for or not.
    let (_, s0) = get(&restarted, &format!("{SERVICES}/s0")).await;
    let freed = s0["spec"]["clusterIP"].clone();
    let (status, _) = call(
        &restarted,
        Method::DELETE,
        &format!("{SERVICES}/s0"),
        Value::Null,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, again) = post(
        &restarted,
        SERVICES,
        service("again", json!({"clusterIP": freed})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    let (_, s1) = get(&restarted, &format!("{SERVICES}/s1")).await;
    call(
        &restarted,
        Method::DELETE,
        &format!("{SERVICES}/s1"),
        Value::Null,
        "",
    )
    .await;
    let (status, any) = post(&restarted, SERVICES, service("any", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{any}");
    assert_eq!(any["spec"]["clusterIP"], s1["spec"]["clusterIP"]);

    // A replace without the address keeps it (not a change of an immutable field).
    let mut replaced = any.clone();
    replaced["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterIP");
    replaced["spec"]
        .as_object_mut()
        .unwrap()
        .remove("clusterIPs");
    replaced["metadata"]["labels"] = json!({"changed": "yes"});
    let (status, body) = call(
        &restarted,
        Method::PUT,
        &format!("{SERVICES}/any"),
        replaced,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["spec"]["clusterIP"], any["spec"]["clusterIP"]);
}

/// From ExternalName to ClusterIP, a Service is given an address.
#[tokio::test]
async fn a_service_that_comes_to_need_an_address_gets_one() {
    let api = api().await;
    let external = service(
        "db",
        json!({"type": "ExternalName", "externalName": "db.example.com"}),
    );
    let (status, _) = post(&api, SERVICES, external).await;
    assert_eq!(status, StatusCode::CREATED);
    let patch = json!({"spec": {"type": "ClusterIP", "externalName": null}});
    let (status, body) = call(
        &api,
        Method::PATCH,
        &format!("{SERVICES}/db"),
        patch,
        "application/merge-patch+json",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(in_range(&body["spec"]["clusterIP"]), "{body}");
}

/// A Job gets its generated selector and labels, unless manualSelector.
#[tokio::test]
async fn jobs_get_a_generated_selector() {
    let api = api().await;
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let job = |name: &str, spec: Value| {
        let mut full = json!({"template": {"spec": {"restartPolicy": "Never",
            "containers": [container()]}}});
        merge(&mut full, spec);
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": full})
    };
    let (status, pi) = post(&api, jobs, job("pi", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{pi}");
    let uid = pi["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        pi["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    assert_eq!(
        pi["spec"]["template"]["metadata"]["labels"],
        json!({"controller-uid": uid, "job-name": "pi",
            "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "pi"})
    );
    let (_, read) = get(&api, &format!("{jobs}/pi")).await;
    assert_eq!(read["spec"]["selector"], pi["spec"]["selector"]);
    // A label change of the generated ones is a change of the template: refused.
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"job-name": "other"}}}}});
    let (status, _) = call(
        &api,
        Method::PATCH,
        &format!("{jobs}/pi"),
        patch,
        "application/merge-patch+json",
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

    let manual = job(
        "manual",
        json!({"manualSelector": true,
        "selector": {"matchLabels": {"app": "m"}},
        "template": {"metadata": {"labels": {"app": "m"}}}}),
    );
    let (status, body) = post(&api, jobs, manual).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["spec"]["selector"],
        json!({"matchLabels": {"app": "m"}})
    );
    assert_eq!(
        body["spec"]["template"]["metadata"]["labels"],
        json!({"app": "m"})
    );

    let chosen = job(
        "chosen",
        json!({"selector": {"matchLabels": {"app": "c"}},
        "template": {"metadata": {"labels": {"app": "c"}}}}),
    );
    let (status, body) = post(&api, jobs, chosen).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.selector");
    let (status, _) = get(&api, &format!("{jobs}/chosen")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Without the built-in kinds' plugins (the benchmark's baseline), built-in objects are
/// stored as sent: not defaulted, not validated.
#[tokio::test]
async fn without_the_builtin_kinds_plugins_objects_are_stored_as_sent() {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
        .with_admission(crate::admission::Admission::without_builtin_kinds());
    api.bootstrap().await.unwrap();
    let (status, body) = post(&api, DEPLOYMENTS, deployment("web", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["spec"].get("strategy").is_none(), "{body}");
    let port = service("wide", json!({"ports": [{"port": 70000}]}));
    let (status, body) = post(&api, SERVICES, port).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // And with them (the default chain): defaulted, and the port refused.
    let api = self::api().await;
    let (_, body) = post(&api, DEPLOYMENTS, deployment("web", json!({}))).await;
    assert_eq!(body["spec"]["strategy"]["type"], "RollingUpdate", "{body}");
}

/// NodePort and LoadBalancer Services get node ports of the range, one per port number;
/// a port asked for is kept when free and in the range, else 422 naming
/// `spec.ports[i].nodePort` and nothing stored; a deleted Service's port is free again;
/// an update keeps them; a change to ClusterIP drops (and frees) them.
#[tokio::test]
async fn node_ports_are_allocated_from_the_range_and_freed() {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let range = "31000-31099".parse().unwrap();
    let api =
        Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1").with_node_port_range(range);
    api.bootstrap().await.unwrap();
    let node_port = |v: &Value, i: usize| v["spec"]["ports"][i]["nodePort"].as_u64().unwrap();

    // Any port: in the range; TCP and UDP of one number share one.
    let dns = service(
        "dns",
        json!({"type": "NodePort", "ports": [
            {"name": "tcp", "port": 53, "protocol": "TCP"},
            {"name": "udp", "port": 53, "protocol": "UDP"},
            {"name": "metrics", "port": 9153}]}),
    );
    let (status, dns) = post(&api, SERVICES, dns).await;
    assert_eq!(status, StatusCode::CREATED, "{dns}");
    assert!((31000..31100).contains(&node_port(&dns, 0)), "{dns}");
    assert_eq!(node_port(&dns, 0), node_port(&dns, 1));
    assert_ne!(node_port(&dns, 0), node_port(&dns, 2));

    // Asked for: kept; then held. (A port the random allocation above did not take.)
    let asked = (31080..31100)
        .find(|p| (0..3).all(|i| node_port(&dns, i) != *p))
        .unwrap();
    let web = |name: &str, port: u64| {
        service(
            name,
            json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
        )
    };
    let (status, body) = post(&api, SERVICES, web("web", asked)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(node_port(&body, 0), asked);
    for (name, port, message) in [
        (
            "taken",
            asked,
            format!("Invalid value: {asked}: provided port is already allocated"),
        ),
        (
            "outside",
            30080,
            "Invalid value: 30080: provided port is not in the valid range. The range of valid ports is 31000-31099".to_string(),
        ),
    ] {
        let (status, body) = post(&api, SERVICES, web(name, port)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(
            body["details"]["causes"][0]["field"],
            "spec.ports[0].nodePort"
        );
        assert!(
            body["message"].as_str().unwrap().contains(&message),
            "{body}"
        );
        let (status, _) = get(&api, &format!("{SERVICES}/{name}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{name} was stored");
    }

    // A LoadBalancer gets them too, unless it says not to; with `Local` traffic a
    // health check port as well.
    let lb = service(
        "lb",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"}),
    );
    let (status, lb) = post(&api, SERVICES, lb).await;
    assert_eq!(status, StatusCode::CREATED, "{lb}");
    assert!((31000..31100).contains(&node_port(&lb, 0)), "{lb}");
    let health = lb["spec"]["healthCheckNodePort"].as_u64().unwrap();
    assert!((31000..31100).contains(&health) && health != node_port(&lb, 0));
    let bare = service(
        "bare",
        json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false}),
    );
    let (status, bare) = post(&api, SERVICES, bare).await;
    assert_eq!(status, StatusCode::CREATED, "{bare}");
    assert!(bare["spec"]["ports"][0].get("nodePort").is_none(), "{bare}");

    // An update keeps them: a replace without them, and one adding a port.
    let mut replaced = dns.clone();
    for port in replaced["spec"]["ports"].as_array_mut().unwrap() {
        port.as_object_mut().unwrap().remove("nodePort");
    }
    replaced["spec"]["ports"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "extra", "port": 8080}));
    let (status, updated) = call(&api, Method::PUT, &format!("{SERVICES}/dns"), replaced, "").await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    for i in 0..3 {
        assert_eq!(node_port(&updated, i), node_port(&dns, i), "{updated}");
    }
    let extra = node_port(&updated, 3);
    assert!(
        (31000..31100).contains(&extra)
            && extra != node_port(&dns, 0)
            && extra != node_port(&dns, 2)
    );

    // Deleted: its port can be asked for again.
    let (status, _) = call(
        &api,
        Method::DELETE,
        &format!("{SERVICES}/web"),
        Value::Null,
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post(&api, SERVICES, web("web2", asked)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // To ClusterIP (a merge patch of the type: the ports sent back with their node
    // ports): they are dropped, and free again.
    let patch = json!({"spec": {"type": "ClusterIP"}});
    let merge = "application/merge-patch+json";
    let (status, body) = call(
        &api,
        Method::PATCH,
        &format!("{SERVICES}/web2"),
        patch,
        merge,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["spec"]["ports"][0].get("nodePort").is_none(), "{body}");
    let (status, body) = post(&api, SERVICES, web("web3", asked)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A ClusterIP Service asking for one is refused by validation.
    let plain = service("plain", json!({"ports": [{"port": 80, "nodePort": 31090}]}));
    let (status, body) = post(&api, SERVICES, plain).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}

/// Concurrent creates never share a node port, and a full range is a 500 in Kubernetes'
/// words with nothing stored.
#[tokio::test]
async fn node_ports_are_unique_across_concurrent_creates() {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let range = "31000-31019".parse().unwrap();
    let api =
        Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1").with_node_port_range(range);
    api.bootstrap().await.unwrap();
    let creates = (0..20).map(|i| {
        let api = api.clone();
        let body = service(&format!("s{i}"), json!({"type": "NodePort"}));
        async move { post(&api, SERVICES, body).await }
    });
    let mut seen = std::collections::HashSet::new();
    for (status, body) in futures_util::future::join_all(creates).await {
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let port = body["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
        assert!(
            (31000..31020).contains(&port) && seen.insert(port),
            "{seen:?}"
        );
    }
    let (status, body) = post(&api, SERVICES, service("full", json!({"type": "NodePort"}))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("range is full"),
        "{body}"
    );
    let (status, _) = get(&api, &format!("{SERVICES}/full")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Every rule of a Deployment's walk broken at once: each cause keeps its field, reason and
/// message (the paths are made only for a cause; this pins what they say).
#[test]
fn a_deployment_breaking_every_rule_names_each_field() {
    let bad = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"-team": "a", "tier": "-x"},
            "annotations": {"Example.COM/Owner": "x", "bad key!": "y"}},
        "spec": {"replicas": -1, "minReadySeconds": -2, "revisionHistoryLimit": -3,
            "progressDeadlineSeconds": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "150%", "maxUnavailable": "x"}},
            "template": {"metadata": {"labels": {"app": "other", "k": "v!"}},
                "spec": {"restartPolicy": "Never", "dnsPolicy": "Sometimes",
                    "terminationGracePeriodSeconds": -1, "activeDeadlineSeconds": 0,
                    "nodeSelector": {"bad key!": "v?"},
                    "volumes": [{"name": "data"}, {"name": "data"}, {"name": "Bad"}],
                    "initContainers": [{"name": "web", "image": "busybox"}],
                    "containers": [
                        {"name": "web", "image": " ", "imagePullPolicy": "Sometimes",
                         "terminationMessagePolicy": "Later",
                         "ports": [{"name": "http", "containerPort": 0, "protocol": "TCPX"},
                                   {"name": "http", "containerPort": 70000, "hostPort": -5},
                                   {"name": "Bad--", "containerPort": 80}],
                         "volumeMounts": [{"name": "missing", "mountPath": "/m"}],
                         "env": [{"name": "A=B", "value": "1"}],
                         "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
                        {"name": "Web_", "image": "nginx"}]}}}});
    let causes = super::validate::validate("apps", "v1", "Deployment", &bad, None, "");
    let said: Vec<String> = causes
        .iter()
        .map(|c| format!("{} {} {}", c.field, c.reason, c.message))
        .collect();
    let expected = [
        r#"metadata.labels FieldValueInvalid Invalid value: "-team": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), at most 63 characters"#,
        r#"metadata.labels[tier] FieldValueInvalid Invalid value: "-x": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#,
        r#"metadata.annotations FieldValueInvalid Invalid value: "bad key!": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), at most 63 characters"#,
        "spec.replicas FieldValueInvalid Invalid value: -1: must be greater than or equal to 0",
        "spec.minReadySeconds FieldValueInvalid Invalid value: -2: must be greater than or equal to 0",
        "spec.revisionHistoryLimit FieldValueInvalid Invalid value: -3: must be greater than or equal to 0",
        r#"spec.template.metadata.labels FieldValueInvalid Invalid value: {"app":"other","k":"v!"}: `selector` does not match template `labels`"#,
        r#"spec.template.metadata.labels[k] FieldValueInvalid Invalid value: "v!": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#,
        r#"spec.template.spec.volumes[1].name FieldValueDuplicate Duplicate value: "data""#,
        r#"spec.template.spec.volumes[2].name FieldValueInvalid Invalid value: "Bad": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')"#,
        r#"spec.template.spec.containers[0].name FieldValueDuplicate Duplicate value: "web""#,
        "spec.template.spec.containers[0].image FieldValueRequired Required value",
        r#"spec.template.spec.containers[0].imagePullPolicy FieldValueNotSupported Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#,
        r#"spec.template.spec.containers[0].terminationMessagePolicy FieldValueNotSupported Unsupported value: "Later": supported values: "File", "FallbackToLogsOnError""#,
        "spec.template.spec.containers[0].ports[0].containerPort FieldValueInvalid Invalid value: 0: must be between 1 and 65535, inclusive",
        r#"spec.template.spec.containers[0].ports[0].protocol FieldValueNotSupported Unsupported value: "TCPX": supported values: "SCTP", "TCP", "UDP""#,
        r#"spec.template.spec.containers[0].ports[1].name FieldValueDuplicate Duplicate value: "http""#,
        "spec.template.spec.containers[0].ports[1].containerPort FieldValueInvalid Invalid value: 70000: must be between 1 and 65535, inclusive",
        "spec.template.spec.containers[0].ports[1].hostPort FieldValueInvalid Invalid value: -5: must be between 1 and 65535, inclusive",
        r#"spec.template.spec.containers[0].ports[2].name FieldValueInvalid Invalid value: "Bad--": must contain only lowercase alphanumeric characters (a-z, 0-9), and '-'; must contain at least one letter (a-z); must not contain consecutive hyphens; must be no more than 15 characters"#,
        r#"spec.template.spec.containers[0].volumeMounts[0].name FieldValueNotFound Not found: "missing""#,
        r#"spec.template.spec.containers[0].env[0].name FieldValueInvalid Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='"#,
        r#"spec.template.spec.containers[0].resources.requests FieldValueInvalid Invalid value: "2": must be less than or equal to cpu limit of 1"#,
        r#"spec.template.spec.containers[1].name FieldValueInvalid Invalid value: "Web_": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')"#,
        r#"spec.template.spec.dnsPolicy FieldValueNotSupported Unsupported value: "Sometimes": supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None""#,
        "spec.template.spec.terminationGracePeriodSeconds FieldValueInvalid Invalid value: -1: must be greater than or equal to 0",
        "spec.template.spec.activeDeadlineSeconds FieldValueInvalid Invalid value: 0: must be between 1 and 2147483647, inclusive",
        r#"spec.template.spec.nodeSelector FieldValueInvalid Invalid value: "bad key!": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), at most 63 characters"#,
        r#"spec.template.spec.nodeSelector FieldValueInvalid Invalid value: "v?": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#,
        r#"spec.template.spec.restartPolicy FieldValueNotSupported Unsupported value: "Never": supported values: "Always""#,
        r#"spec.strategy.rollingUpdate.maxUnavailable FieldValueInvalid Invalid value: "x": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"#,
        r#"spec.strategy.rollingUpdate.maxSurge FieldValueInvalid Invalid value: "150%": must not be greater than 100%"#,
    ];
    assert_eq!(said, expected, "{}", said.join("\n"));
}
