//! Two servers on one store (hub replicas): what one writes, the other serves at once or
//! as soon as its store watch delivers it, and what both allocate never collides.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::{Value, json};

use crate::{Api, Registry};

/// Two APIs of the root cluster over one memory store, each set up as a server starts.
async fn replicas(cidr: Option<&str>) -> (Api, Api) {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let mut apis = Vec::new();
    for address in ["127.0.0.1:1", "127.0.0.1:2"] {
        let mut api = Api::new(store.clone(), Arc::new(Registry::builtin()), address);
        if let Some(cidr) = cidr {
            api = api.with_service_cidr(cidr.parse().unwrap());
        }
        api.bootstrap().await.unwrap();
        apis.push(api);
    }
    let b = apis.pop().unwrap();
    (apis.pop().unwrap(), b)
}

async fn request(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    let response = api.serve(method, path, None, &HeaderMap::new(), body).await;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Polls `api` at `path` until it answers `want`, for at most 10 s.
async fn until_status(api: &Api, path: &str, want: StatusCode) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = request(api, Method::GET, path, None).await;
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: {status} {body}, waiting for {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_crd_defined_on_one_replica_is_served_by_the_other_until_deleted_there() {
    let (a, b) = replicas(None).await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let (status, _) = request(&b, Method::GET, widgets, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (status, body) = request(&a, Method::POST, crds, Some(crd)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    until_status(&b, widgets, StatusCode::OK).await;
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}});
    let (status, body) = request(&b, Method::POST, widgets, Some(widget)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = request(&a, Method::GET, &format!("{widgets}/w1"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let (status, body) = request(
        &a,
        Method::DELETE,
        &format!("{crds}/widgets.example.com"),
        None,
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    until_status(&b, widgets, StatusCode::NOT_FOUND).await;
}

#[tokio::test]
async fn two_replicas_never_hand_out_one_cluster_ip() {
    // Five usable addresses (.2 to .6): random picks of two allocators collide without the claims.
    let (a, b) = replicas(Some("10.0.0.0/29")).await;
    let services = "/api/v1/namespaces/default/services";
    let service = |name: String| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": [{"port": 80}]}})
    };
    let creates = (0..5).map(|i| {
        let api = if i % 2 == 0 { a.clone() } else { b.clone() };
        let body = service(format!("s{i}"));
        tokio::spawn(async move { request(&api, Method::POST, services, Some(body)).await })
    });
    let mut ips = HashSet::new();
    for create in creates.collect::<Vec<_>>() {
        let (status, body) = create.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let ip = body["spec"]["clusterIP"].as_str().unwrap().to_owned();
        assert!(ips.insert(ip.clone()), "{ip} handed out twice");
    }
    assert_eq!(ips.len(), 5);
    // The range is full, on either replica.
    for api in [&a, &b] {
        let (status, body) =
            request(api, Method::POST, services, Some(service("more".into()))).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    }
    // An address asked for that the other replica handed out is refused.
    let (_, s0) = request(&a, Method::GET, &format!("{services}/s0"), None).await;
    let taken = s0["spec"]["clusterIP"].clone();
    let asked = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "asks"},
        "spec": {"clusterIP": taken, "ports": [{"port": 80}]}});
    let (status, body) = request(&b, Method::POST, services, Some(asked.clone())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // Once its Service is deleted on one replica, the other may hand it out at once.
    let (status, body) = request(&a, Method::DELETE, &format!("{services}/s0"), None).await;
    assert!(status.is_success(), "{status} {body}");
    let (status, body) = request(&b, Method::POST, services, Some(asked)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["clusterIP"], taken);
    // A dry run leaves no claim behind: the last address, freed, is taken for real.
    let (status, body) = request(&a, Method::DELETE, &format!("{services}/s1"), None).await;
    assert!(status.is_success(), "{status} {body}");
    let dry = a
        .serve(
            Method::POST,
            services,
            Some("dryRun=All"),
            &HeaderMap::new(),
            Bytes::from(service("dry".into()).to_string()),
        )
        .await;
    assert_eq!(dry.status(), StatusCode::CREATED);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) =
            request(&b, Method::POST, services, Some(service("last".into()))).await;
        if status == StatusCode::CREATED {
            break;
        }
        assert!(Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
