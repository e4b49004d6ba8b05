//! What admission costs a create, for profiling by instruction count (`valgrind
//! --tool=callgrind`): the admission scenario's configurations of `flotilla bench`, driven
//! through `Api::serve` (no HTTP, no TLS) on a SQLite store.
//!
//! ```text
//! admission_cost <configuration> <n>
//!   builtin       n nginx Deployments (the bench's), the built-in chain
//!   builtin-off   the same, `Admission::without_builtin_kinds`
//!   builtin-off-defaulted
//!                 `without_builtin_kinds`, sent the Deployment as the built-in chain
//!                 stores it (every default written out): the same stored object as
//!                 `builtin`, so the difference is the chain's own work
//!   none          n 1 KiB ConfigMaps, dynamic admission with nothing configured
//!   vap5          the same with the bench's 5 matching ValidatingAdmissionPolicies
//! ```
//!
//! Setup is the same whatever `n` is, so the difference of two runs' counts divided by the
//! difference of their `n` is the cost of one create.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use bytes::Bytes;
use flotilla_apiserver::Api;
use flotilla_apiserver::Registry;
use flotilla_apiserver::admission::Admission;
use flotilla_apiserver::admission::dynamic::Dynamic;
use flotilla_apiserver::admission::webhook::model::ServiceAddresses;
use flotilla_store::Store;
use flotilla_store_sqlite::SqliteStore;
use http_body_util::BodyExt;
use serde_json::{Value, json};

/// The allocator the `flotilla` binary uses, so that costs match the shipped hub's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The five validations of the bench's matching policies.
const MATCHING: [&str; 5] = [
    "object.metadata.name.size() <= 63",
    "!has(object.data) || object.data.size() <= 16",
    "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)",
    "!object.metadata.name.startsWith('kube-')",
    "!has(object.data) || !('password' in object.data)",
];

const VAPS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/bench/deployments";
const CONFIGMAPS: &str = "/api/v1/namespaces/bench/configmaps";

/// The bench's nginx Deployment (`flotilla_bench::admission::deployment`).
fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "web",
            "app.kubernetes.io/part-of": "shop", "team": "storefront"},
            "annotations": {"example.com/owner": "storefront@example.com"}},
        "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "web",
                "app.kubernetes.io/part-of": "shop"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27.3",
                    "ports": [{"name": "http", "containerPort": 80}],
                    "env": [{"name": "NGINX_ENTRYPOINT_QUIET_LOGS", "value": "1"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"},
                        "periodSeconds": 5},
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"},
                        "initialDelaySeconds": 10},
                    "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/nginx"}]}],
                    "volumes": [{"name": "cache", "emptyDir": {}}]}}}})
}

/// [`deployment`] as the built-in chain stores it, without what the server sets (identity,
/// timestamps, managed fields, status): what `flotilla bench`'s `builtin-off-defaulted`
/// sends.
fn defaulted(name: &str) -> Value {
    let mut object = deployment(name);
    let spec = &mut object["spec"];
    spec["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}});
    spec["revisionHistoryLimit"] = json!(10);
    spec["progressDeadlineSeconds"] = json!(600);
    let pod = &mut spec["template"]["spec"];
    pod["restartPolicy"] = json!("Always");
    pod["terminationGracePeriodSeconds"] = json!(30);
    pod["dnsPolicy"] = json!("ClusterFirst");
    pod["securityContext"] = json!({});
    pod["schedulerName"] = json!("default-scheduler");
    let container = &mut pod["containers"][0];
    container["ports"][0]["protocol"] = json!("TCP");
    container["terminationMessagePath"] = json!("/dev/termination-log");
    container["terminationMessagePolicy"] = json!("File");
    container["imagePullPolicy"] = json!("IfNotPresent");
    for (probe, initial) in [("readinessProbe", None), ("livenessProbe", Some(10))] {
        let probe = &mut container[probe];
        probe["httpGet"]["scheme"] = json!("HTTP");
        probe["timeoutSeconds"] = json!(1);
        probe["successThreshold"] = json!(1);
        probe["failureThreshold"] = json!(3);
        if probe.get("periodSeconds").is_none() {
            probe["periodSeconds"] = json!(10);
        }
        if let Some(initial) = initial {
            probe["initialDelaySeconds"] = json!(initial);
        }
    }
    object
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"payload": "x".repeat(1024)}})
}

fn headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    headers
}

/// A POST of `body` to `path`; its status.
async fn post(api: &Api, path: &str, body: &Value) -> StatusCode {
    let response = api
        .serve(
            Method::POST,
            path,
            None,
            &headers(),
            Bytes::from(body.to_string()),
        )
        .await;
    let status = response.status();
    response.into_body().collect().await.unwrap();
    status
}

fn main() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let args: Vec<String> = std::env::args().collect();
    let [_, configuration, n] = args.as_slice() else {
        panic!("usage: admission_cost builtin|builtin-off|builtin-off-defaulted|none|vap5 N");
    };
    let n: usize = n.parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("s.db")).await.unwrap());
    let admission = match configuration.as_str() {
        "builtin-off" | "builtin-off-defaulted" => Admission::without_builtin_kinds(),
        _ => Admission::builtin(),
    };
    let dynamic = Dynamic::start(store.clone(), ServiceAddresses::new())
        .await
        .unwrap();
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1")
        .with_admission(admission.with_dynamic(dynamic));
    api.bootstrap().await.unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}});
    assert_eq!(
        post(&api, "/api/v1/namespaces", &ns).await,
        StatusCode::CREATED
    );
    if configuration == "vap5" {
        for (i, expression) in MATCHING.iter().enumerate() {
            let name = format!("configmaps-{i}");
            let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
                "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
                    "validations": [{"expression": expression}]}});
            let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]}});
            assert_eq!(post(&api, VAPS, &policy).await, StatusCode::CREATED);
            assert_eq!(post(&api, BINDINGS, &binding).await, StatusCode::CREATED);
        }
        // The policies are in force once a create they refuse is refused.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        for tries in 1.. {
            let status = post(&api, CONFIGMAPS, &configmap("kube-refused")).await;
            if status == StatusCode::UNPROCESSABLE_ENTITY {
                eprintln!("the policies applied after {tries} tries");
                break;
            }
            assert_eq!(status, StatusCode::CREATED, "before the policies applied");
            assert!(
                std::time::Instant::now() < deadline,
                "the policies never applied"
            );
            let path = format!("{CONFIGMAPS}/kube-refused");
            let response = api
                .serve(Method::DELETE, &path, None, &headers(), Bytes::new())
                .await;
            response.into_body().collect().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    for i in 0..n {
        let name = format!("bench-{i:06}");
        let (path, body) = match configuration.as_str() {
            "builtin" | "builtin-off" => (DEPLOYMENTS, deployment(&name)),
            "builtin-off-defaulted" => (DEPLOYMENTS, defaulted(&name)),
            _ => (CONFIGMAPS, configmap(&name)),
        };
        assert_eq!(post(&api, path, &body).await, StatusCode::CREATED);
    }
    // With ADMISSION_COST_SHOW set, the last object's spec as stored (to check that
    // `builtin-off-defaulted` stores what `builtin` does).
    if std::env::var_os("ADMISSION_COST_SHOW").is_some() && n > 0 {
        let path = match configuration.as_str() {
            "builtin" | "builtin-off" | "builtin-off-defaulted" => DEPLOYMENTS,
            _ => CONFIGMAPS,
        };
        let path = format!("{path}/bench-{:06}", n - 1);
        let response = api
            .serve(Method::GET, &path, None, &headers(), Bytes::new())
            .await;
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let object: Value = serde_json::from_slice(&body).unwrap();
        println!("{}", serde_json::to_string_pretty(&object["spec"]).unwrap());
    }
}
