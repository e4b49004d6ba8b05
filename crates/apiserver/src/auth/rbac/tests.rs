//! The RBAC authorizer: its index, and through the API (a memory store): defaults,
//! aggregation, escalation prevention, reviews and impersonation as several users.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use bytes::Bytes;
use flotilla_store::Store;
use serde_json::{Value, json};

use super::index::{Index, Kind};
use super::*;
use crate::api::Api;
use crate::auth::{AUTHENTICATED, MASTERS, UserInfo};
use crate::registry::resources::Registry;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::new(name, groups)
}

fn asks<'a>(
    user: &'a UserInfo,
    cluster: &'a str,
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
) -> Attributes<'a> {
    Attributes {
        cluster,
        user,
        verb,
        resource_request: true,
        group,
        version: "v1",
        resource,
        subresource: "",
        namespace,
        name: "",
        path: "",
    }
}

fn role(rules: Value) -> Value {
    json!({"rules": rules})
}

fn binding(kind: &str, role: &str, subjects: Value) -> Value {
    json!({"roleRef": {"apiGroup": GROUP, "kind": kind, "name": role}, "subjects": subjects})
}

const PODS_READ: &str = r#"[{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]"#;

fn pods_read() -> Value {
    serde_json::from_str(PODS_READ).unwrap()
}

#[test]
fn the_index_applies_adds_updates_and_deletes() {
    let mut index = Index::default();
    let alice = user("alice", &[AUTHENTICATED]);
    let list_pods = |index: &Index, namespace| {
        index.allows(&asks(&alice, "root", "list", "", "pods", namespace))
    };
    assert!(!list_pods(&index, "shop"));
    index.put(Kind::ClusterRole, "root", None, "pods", &role(pods_read()));
    assert!(!list_pods(&index, "shop"), "a role alone grants nothing");
    let to_alice = json!([{"kind": "User", "name": "alice"}]);
    index.put(
        Kind::RoleBinding,
        "root",
        Some("shop"),
        "b",
        &binding("ClusterRole", "pods", to_alice.clone()),
    );
    assert!(list_pods(&index, "shop"));
    assert!(
        !list_pods(&index, "default"),
        "a RoleBinding grants in its namespace only"
    );
    assert!(!list_pods(&index, ""), "nor across namespaces");
    // Updated: the role loses list.
    let get_only = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    index.put(Kind::ClusterRole, "root", None, "pods", &role(get_only));
    assert!(!list_pods(&index, "shop"));
    assert!(index.allows(&asks(&alice, "root", "get", "", "pods", "shop")));
    // Updated: the binding names someone else.
    let to_bob = json!([{"kind": "User", "name": "bob"}]);
    index.put(
        Kind::RoleBinding,
        "root",
        Some("shop"),
        "b",
        &binding("ClusterRole", "pods", to_bob),
    );
    assert!(!index.allows(&asks(&alice, "root", "get", "", "pods", "shop")));
    let bob = user("bob", &[]);
    assert!(index.allows(&asks(&bob, "root", "get", "", "pods", "shop")));
    // Deleted.
    index.remove(Kind::RoleBinding, "root", Some("shop"), "b");
    assert!(!index.allows(&asks(&bob, "root", "get", "", "pods", "shop")));
    // A ClusterRoleBinding grants everywhere; a Role of the namespace through a RoleBinding.
    index.put(
        Kind::ClusterRoleBinding,
        "root",
        None,
        "c",
        &binding(
            "ClusterRole",
            "pods",
            json!([{"kind": "Group", "name": "team-a"}]),
        ),
    );
    let team = user("carol", &["team-a"]);
    for namespace in ["shop", "default", ""] {
        assert!(index.allows(&asks(&team, "root", "get", "", "pods", namespace)));
    }
    index.put(
        Kind::Role,
        "root",
        Some("shop"),
        "cm",
        &role(json!([{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}])),
    );
    index.put(
        Kind::RoleBinding,
        "root",
        Some("shop"),
        "cm",
        &binding("Role", "cm", to_alice),
    );
    assert!(index.allows(&asks(&alice, "root", "create", "", "configmaps", "shop")));
    index.remove(Kind::Role, "root", Some("shop"), "cm");
    assert!(
        !index.allows(&asks(&alice, "root", "create", "", "configmaps", "shop")),
        "a binding to a role that is gone grants nothing"
    );
    let rules = index.rules(&alice, "root", "shop");
    assert_eq!(
        rules.errors,
        ["role.rbac.authorization.k8s.io \"cm\" not found"]
    );
}

#[test]
fn each_binding_gives_its_rules_once_whether_it_names_the_user_or_its_groups() {
    let mut index = Index::default();
    index.put(Kind::ClusterRole, "root", None, "pods", &role(pods_read()));
    let both = json!([{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "team-a"}]);
    // A ClusterRoleBinding and a RoleBinding of the same name are two bindings.
    let to_pods = binding("ClusterRole", "pods", both);
    index.put(Kind::ClusterRoleBinding, "root", None, "same", &to_pods);
    index.put(Kind::RoleBinding, "root", Some("shop"), "same", &to_pods);
    let alice = user("alice", &["team-a"]);
    assert_eq!(index.rules(&alice, "root", "shop").rules.len(), 2);
    assert_eq!(index.rules(&alice, "root", "").rules.len(), 1);
}

#[test]
fn service_accounts_match_their_user_name_and_logical_clusters_their_own_bindings() {
    let mut index = Index::default();
    index.put(Kind::ClusterRole, "root", None, "pods", &role(pods_read()));
    index.put(Kind::ClusterRole, "c1", None, "pods", &role(pods_read()));
    // No namespace: the binding's.
    index.put(
        Kind::RoleBinding,
        "root",
        Some("shop"),
        "ci",
        &binding(
            "ClusterRole",
            "pods",
            json!([{"kind": "ServiceAccount", "name": "ci"}]),
        ),
    );
    // A ClusterRoleBinding's ServiceAccount without a namespace matches nobody.
    index.put(
        Kind::ClusterRoleBinding,
        "root",
        None,
        "nobody",
        &binding(
            "ClusterRole",
            "pods",
            json!([{"kind": "ServiceAccount", "name": "ci"}]),
        ),
    );
    index.put(
        Kind::ClusterRoleBinding,
        "c1",
        None,
        "sa",
        &binding(
            "ClusterRole",
            "pods",
            json!([{"kind": "ServiceAccount", "name": "ci", "namespace": "shop"}]),
        ),
    );
    let ci = user(
        "system:serviceaccount:shop:ci",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            AUTHENTICATED,
        ],
    );
    assert!(index.allows(&asks(&ci, "root", "list", "", "pods", "shop")));
    assert!(!index.allows(&asks(&ci, "root", "list", "", "pods", "default")));
    assert!(!index.allows(&asks(&ci, "root", "list", "", "pods", "")));
    // In c1, its cluster-wide binding there.
    assert!(index.allows(&asks(&ci, "c1", "list", "", "pods", "default")));
    assert!(index.allows(&asks(&ci, "c1", "list", "", "pods", "")));
    assert!(!index.allows(&asks(&ci, "c2", "list", "", "pods", "shop")));
    let other = user("system:serviceaccount:other:ci", &[]);
    assert!(!index.allows(&asks(&other, "root", "list", "", "pods", "shop")));
}

#[test]
fn roles_with_the_same_rules_share_them_and_strings_are_held_once() {
    let mut index = Index::default();
    for i in 0..1000 {
        index.put(
            Kind::ClusterRole,
            "root",
            None,
            &format!("r{i}"),
            &role(pods_read()),
        );
    }
    for i in 0..1000 {
        let subjects = json!([{"kind": "Group", "name": format!("g{}", i % 10)}]);
        index.put(
            Kind::RoleBinding,
            "root",
            Some(&format!("ns{}", i % 100)),
            &format!("b{i}"),
            &binding("ClusterRole", &format!("r{i}"), subjects),
        );
    }
    let (strings, rule_sets) = index.shared();
    assert_eq!(rule_sets, 1, "one rule set for a thousand roles");
    // The verbs, group and resource; role, binding, namespace and group names; the cluster.
    assert_eq!(strings, 4 + 1000 + 1000 + 100 + 10 + 1);
    let member = user("u", &["g3"]);
    assert!(index.allows(&asks(&member, "root", "get", "", "pods", "ns3")));
    assert!(!index.allows(&asks(&member, "root", "get", "", "pods", "ns4")));
}

#[test]
fn aggregated_roles_gather_the_rules_their_selectors_match() {
    let mut index = Index::default();
    let labelled =
        |labels: Value, rules: Value| json!({"metadata": {"labels": labels}, "rules": rules});
    let aggregating = |selector: &str| json!({"aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector: "true"}}]}});
    index.put(
        Kind::ClusterRole,
        "root",
        None,
        "view",
        &aggregating("to-view"),
    );
    index.put(
        Kind::ClusterRole,
        "root",
        None,
        "b-pods",
        &labelled(json!({"to-view": "true"}), pods_read()),
    );
    let secrets = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]);
    index.put(
        Kind::ClusterRole,
        "root",
        None,
        "a-secrets",
        &labelled(json!({"to-view": "true"}), secrets.clone()),
    );
    index.put(
        Kind::ClusterRole,
        "root",
        None,
        "unlabelled",
        &role(json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}])),
    );
    let changes = index.aggregations("root");
    assert_eq!(changes.len(), 1);
    let (name, rules) = &changes[0];
    assert_eq!(&**name, "view");
    let json: Vec<Value> = rules.iter().map(Rule::to_json).collect();
    // By name: a-secrets before b-pods; the same rule twice is kept once.
    assert_eq!(json, [secrets[0].clone(), pods_read()[0].clone()]);
    let mut filled = aggregating("to-view");
    filled["rules"] = json!(json);
    index.put(Kind::ClusterRole, "root", None, "view", &filled);
    assert!(
        index.aggregations("root").is_empty(),
        "filled: nothing to do"
    );
    // A part loses its label: the aggregate follows.
    index.put(Kind::ClusterRole, "root", None, "a-secrets", &role(secrets));
    let changes = index.aggregations("root");
    assert_eq!(changes[0].1.len(), 1);
    assert!(index.aggregations("c1").is_empty());
}

// Through the API.

/// An API over a memory store, authorized by RBAC with the default roles.
async fn rbac_api() -> (Api, Arc<Rbac>) {
    let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
    let rbac = Rbac::start(store.clone(), Vec::new()).await.unwrap();
    let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
    api.bootstrap().await.unwrap();
    let api = api.authorize_with_rbac(rbac.clone());
    api.bootstrap_rbac().await.unwrap();
    (api, rbac)
}

/// A request of `user` (with `headers`): the status code and the JSON body.
async fn call_with(
    api: &Api,
    user: &UserInfo,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Value,
) -> (u16, Value) {
    let body = match body {
        Value::Null => Bytes::new(),
        body => Bytes::from(body.to_string()),
    };
    let response = api
        .handle(Arc::new(user.clone()), method, path, None, headers, body)
        .await;
    let code = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn call(api: &Api, user: &UserInfo, method: Method, path: &str, body: Value) -> (u16, Value) {
    call_with(api, user, method, path, &HeaderMap::new(), body).await
}

fn admin() -> UserInfo {
    UserInfo::admin()
}

/// Polls `probe` until it holds, for at most 10 s.
async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe().await {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

async fn create(api: &Api, path: &str, object: Value) {
    let (code, body) = call(api, &admin(), Method::POST, path, object).await;
    assert_eq!(code, 201, "{path}: {body}");
}

async fn namespace(api: &Api, name: &str) {
    create(
        api,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
}

fn role_binding(name: &str, kind: &str, role: &str, subjects: Value) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": GROUP, "kind": kind, "name": role}, "subjects": subjects})
}

fn alice_subject() -> Value {
    json!([{"kind": "User", "name": "alice", "apiGroup": GROUP}])
}

fn alice() -> UserInfo {
    user("alice", &["team-a", AUTHENTICATED])
}

#[tokio::test]
async fn the_default_roles_are_created_and_aggregated_roles_filled() {
    let (api, _) = rbac_api().await;
    let admin = admin();
    for name in [
        "cluster-admin",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
        "system:service-account-issuer-discovery",
        "system:aggregate-to-edit",
    ] {
        let (code, role) = call(
            &api,
            &admin,
            Method::GET,
            &format!("{RBAC}/clusterroles/{name}"),
            Value::Null,
        )
        .await;
        assert_eq!(code, 200, "{name}");
        assert_eq!(
            role["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(role["metadata"]["annotations"][AUTOUPDATE], "true");
    }
    let (code, binding) = call(
        &api,
        &admin,
        Method::GET,
        &format!("{RBAC}/clusterrolebindings/cluster-admin"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(binding["subjects"][0]["name"], MASTERS);
    // edit gathers view's rules and its own part's; admin gathers edit's.
    eventually("admin, edit and view are filled", async || {
        let rules = async |name: &str| {
            let path = format!("{RBAC}/clusterroles/{name}");
            let (_, role) = call(&api, &admin, Method::GET, &path, Value::Null).await;
            role["rules"].as_array().cloned().unwrap_or_default()
        };
        let (view, edit, admin) = (
            rules("view").await,
            rules("edit").await,
            rules("admin").await,
        );
        !view.is_empty()
            && view.iter().all(|r| edit.contains(r))
            && edit.iter().all(|r| admin.contains(r))
            && edit.len() > view.len()
            && admin.len() > edit.len()
    })
    .await;
    // A new part joins view (and so edit and admin).
    create(
        &api,
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole",
            "metadata": {"name": "widgets-view",
                "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}]}),
    )
    .await;
    let bob = user("bob", &[AUTHENTICATED]);
    namespace(&api, "shop").await;
    create(
        &api,
        &format!("{RBAC}/namespaces/shop/rolebindings"),
        role_binding(
            "bob-admin",
            "ClusterRole",
            "admin",
            json!([{"kind": "User", "name": "bob"}]),
        ),
    )
    .await;
    eventually("the new part reaches admin", async || {
        let widgets = asks(&bob, "root", "get", "example.com", "widgets", "shop");
        api.stages.authorizer.authorize(&widgets).await == Decision::Allow
    })
    .await;
}

#[tokio::test]
async fn bindings_decide_at_once_and_a_revoked_one_stops_allowing_when_its_delete_returns() {
    let (api, _) = rbac_api().await;
    namespace(&api, "shop").await;
    let alice = alice();
    let deployments = "/apis/apps/v1/namespaces/shop/deployments";
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let (code, status) = call(&api, &alice, Method::POST, deployments, deployment.clone()).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "deployments.apps is forbidden: User \"alice\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"shop\""
    );
    create(
        &api,
        &format!("{RBAC}/namespaces/shop/rolebindings"),
        role_binding("alice-edit", "ClusterRole", "edit", alice_subject()),
    )
    .await;
    // Answered once the binding governs requests: no waiting here.
    eventually("edit is filled", async || {
        let probe = asks(&alice, "root", "create", "apps", "deployments", "shop");
        api.stages.authorizer.authorize(&probe).await == Decision::Allow
    })
    .await;
    let (code, _) = call(&api, &alice, Method::POST, deployments, deployment).await;
    assert_eq!(code, 201);
    // Lists and watches: in the namespace, yes; across namespaces, no.
    let (code, _) = call(&api, &alice, Method::GET, deployments, Value::Null).await;
    assert_eq!(code, 200);
    let (code, status) = call(
        &api,
        &alice,
        Method::GET,
        "/apis/apps/v1/deployments",
        Value::Null,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
    );
    let (code, status) = call(
        &api,
        &alice,
        Method::GET,
        "/api/v1/namespaces/kube-system/secrets",
        Value::Null,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    let path = format!("{RBAC}/namespaces/shop/rolebindings/alice-edit");
    let (code, _) = call(&api, &admin(), Method::DELETE, &path, Value::Null).await;
    assert_eq!(code, 200);
    let (code, _) = call(&api, &alice, Method::GET, deployments, Value::Null).await;
    assert_eq!(code, 403, "revoked as soon as the delete was answered");
}

/// Creates `object` at `path` as `user`: the code and body.
async fn write_as(api: &Api, user: &UserInfo, path: &str, object: Value) -> (u16, Value) {
    call(api, user, Method::POST, path, object).await
}

#[tokio::test]
async fn a_user_grants_only_what_it_holds_unless_it_may_bind_or_escalate() {
    let (api, _) = rbac_api().await;
    namespace(&api, "shop").await;
    let alice = alice();
    let bindings = format!("{RBAC}/namespaces/shop/rolebindings");
    let roles = format!("{RBAC}/namespaces/shop/roles");
    // alice: edit in shop, and a role that lets her write roles and bindings there.
    create(
        &api,
        &bindings,
        role_binding("alice-edit", "ClusterRole", "edit", alice_subject()),
    )
    .await;
    create(
        &api,
        &roles,
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role", "metadata": {"name": "rbac-writer"},
            "rules": [{"verbs": ["create", "update", "get"], "apiGroups": [GROUP], "resources": ["roles", "rolebindings"]}]}),
    )
    .await;
    create(
        &api,
        &bindings,
        role_binding("alice-rbac", "Role", "rbac-writer", alice_subject()),
    )
    .await;
    eventually("edit is filled", async || {
        let probe = asks(&alice, "root", "create", "apps", "deployments", "shop");
        api.stages.authorizer.authorize(&probe).await == Decision::Allow
    })
    .await;
    let to_bob = json!([{"kind": "User", "name": "bob"}]);

    // Binding admin or cluster-admin: refused (admin grants roles, cluster-admin all).
    for role in ["admin", "cluster-admin"] {
        let (code, status) = write_as(
            &api,
            &alice,
            &bindings,
            role_binding(&format!("bob-{role}"), "ClusterRole", role, to_bob.clone()),
        )
        .await;
        assert_eq!(code, 403, "{role}: {status}");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "rolebindings.rbac.authorization.k8s.io \"bob-{role}\" is forbidden: user \"alice\" (groups=[\"team-a\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n"
            )),
            "{message}"
        );
    }
    let (_, status) = write_as(
        &api,
        &alice,
        &bindings,
        role_binding("x", "ClusterRole", "cluster-admin", to_bob.clone()),
    )
    .await;
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}")
    );
    // What she holds she may grant.
    let (code, status) = write_as(
        &api,
        &alice,
        &bindings,
        role_binding("bob-edit", "ClusterRole", "edit", to_bob.clone()),
    )
    .await;
    assert_eq!(code, 201, "{status}");
    // Given `bind` on admin (only), she may bind admin, and still not cluster-admin.
    create(
        &api,
        &roles,
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role", "metadata": {"name": "bind-admin"},
            "rules": [{"verbs": ["bind"], "apiGroups": [GROUP], "resources": ["clusterroles"], "resourceNames": ["admin"]}]}),
    )
    .await;
    create(
        &api,
        &bindings,
        role_binding("alice-bind", "Role", "bind-admin", alice_subject()),
    )
    .await;
    let (code, status) = write_as(
        &api,
        &alice,
        &bindings,
        role_binding("bob-admin", "ClusterRole", "admin", to_bob.clone()),
    )
    .await;
    assert_eq!(code, 201, "{status}");
    let (code, _) = write_as(
        &api,
        &alice,
        &bindings,
        role_binding(
            "bob-cluster-admin",
            "ClusterRole",
            "cluster-admin",
            to_bob.clone(),
        ),
    )
    .await;
    assert_eq!(code, 403);
    // A binding to a role that does not exist, by a user who may not bind it: 404.
    let (code, _) = write_as(
        &api,
        &alice,
        &bindings,
        role_binding("nothing", "Role", "missing", to_bob),
    )
    .await;
    assert_eq!(code, 404);

    // A Role with rules she lacks: refused; with rules she has: created.
    let nodes = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role", "metadata": {"name": "leases-and-quotas"},
        "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["resourcequotas"]},
                  {"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]}]});
    let (code, status) = write_as(&api, &alice, &roles, nodes.clone()).await;
    assert_eq!(code, 403);
    assert!(
        status["message"].as_str().unwrap().ends_with(
            "is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"resourcequotas\"], Verbs:[\"create\"]}"
        ),
        "{status}"
    );
    let held = json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role", "metadata": {"name": "read-deployments"},
        "rules": [{"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]}]});
    let (code, status) = write_as(&api, &alice, &roles, held).await;
    assert_eq!(code, 201, "{status}");
    // A dry run is refused as the write would be, and writes nothing either way.
    let response = api
        .handle(
            Arc::new(alice.clone()),
            Method::POST,
            &roles,
            Some("dryRun=All"),
            &HeaderMap::new(),
            Bytes::from(nodes.to_string()),
        )
        .await;
    assert_eq!(response.status().as_u16(), 403);
    // With `escalate` on roles, she may.
    create(
        &api,
        &roles,
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Role", "metadata": {"name": "escalate"},
            "rules": [{"verbs": ["escalate"], "apiGroups": [GROUP], "resources": ["roles"]}]}),
    )
    .await;
    create(
        &api,
        &bindings,
        role_binding("alice-escalate", "Role", "escalate", alice_subject()),
    )
    .await;
    let (code, status) = write_as(&api, &alice, &roles, nodes).await;
    assert_eq!(code, 201, "{status}");
    let (code, _) = call(
        &api,
        &admin(),
        Method::GET,
        &format!("{roles}/leases-and-quotas"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_bindings_role_never_changes_and_bad_objects_are_refused_with_422() {
    let (api, _) = rbac_api().await;
    namespace(&api, "shop").await;
    let bindings = format!("{RBAC}/namespaces/shop/rolebindings");
    create(
        &api,
        &bindings,
        role_binding("b", "ClusterRole", "view", alice_subject()),
    )
    .await;
    let path = format!("{bindings}/b");
    let (_, mut current) = call(&api, &admin(), Method::GET, &path, Value::Null).await;
    current["roleRef"]["name"] = json!("edit");
    let (code, status) = call(&api, &admin(), Method::PUT, &path, current.clone()).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "roleRef");
    let (_, stored) = call(&api, &admin(), Method::GET, &path, Value::Null).await;
    assert_eq!(stored["roleRef"]["name"], "view", "nothing was written");
    // Subjects may change.
    current["roleRef"]["name"] = json!("view");
    current["subjects"] = json!([{"kind": "Group", "name": "team-b"}]);
    let (code, updated) = call(&api, &admin(), Method::PUT, &path, current).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["subjects"][0]["apiGroup"], GROUP, "defaulted");
    let (code, _) = call(
        &api,
        &admin(),
        Method::POST,
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": {"name": "bad"},
            "rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
    )
    .await;
    assert_eq!(code, 422);
    let (code, _) = call(
        &api,
        &admin(),
        Method::GET,
        &format!("{RBAC}/clusterroles/bad"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 404);
}

fn ssar(verb: &str, resource: &str, namespace: &str) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace}}})
}

#[tokio::test]
async fn reviews_are_answered_by_the_authorizer() {
    let (api, _) = rbac_api().await;
    namespace(&api, "shop").await;
    let ci = user(
        "system:serviceaccount:shop:ci",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            AUTHENTICATED,
        ],
    );
    create(
        &api,
        &format!("{RBAC}/namespaces/shop/rolebindings"),
        role_binding(
            "ci",
            "ClusterRole",
            "view",
            json!([{"kind": "ServiceAccount", "name": "ci", "namespace": "shop"}]),
        ),
    )
    .await;
    let ssars = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    eventually("view is filled", async || {
        let (_, review) = call(&api, &ci, Method::POST, ssars, ssar("list", "pods", "shop")).await;
        review["status"]["allowed"] == true
    })
    .await;
    let (code, review) = call(
        &api,
        &ci,
        Method::POST,
        ssars,
        ssar("delete", "pods", "shop"),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(review["status"], json!({"allowed": false}));
    assert_eq!(review["spec"]["resourceAttributes"]["verb"], "delete");
    let (_, review) = call(
        &api,
        &ci,
        Method::POST,
        ssars,
        ssar("list", "pods", "default"),
    )
    .await;
    assert_eq!(review["status"]["allowed"], false);
    let path_review =
        json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/apis/apps"}}});
    let (_, review) = call(&api, &ci, Method::POST, ssars, path_review).await;
    assert_eq!(review["status"]["allowed"], true, "system:discovery");
    for bad in [
        json!({"spec": {}}),
        json!({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {}}}),
    ] {
        let (code, status) = call(&api, &ci, Method::POST, ssars, bad).await;
        assert_eq!(code, 422, "{status}");
    }

    // Rules in a namespace: view's, and the cluster-wide ones of every authenticated user.
    let ssrrs = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let ssrr = |namespace: &str| json!({"spec": {"namespace": namespace}});
    let (code, review) = call(&api, &ci, Method::POST, ssrrs, ssrr("shop")).await;
    assert_eq!(code, 201);
    let status = &review["status"];
    assert_eq!(status["incomplete"], false);
    let grants = |rules: &Value, verb: &str, resource: &str| {
        rules.as_array().unwrap().iter().any(|r| {
            r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
                && r["resources"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x == resource)
        })
    };
    assert!(grants(&status["resourceRules"], "list", "pods"));
    assert!(grants(
        &status["resourceRules"],
        "create",
        "selfsubjectaccessreviews"
    ));
    assert!(!grants(&status["resourceRules"], "delete", "pods"));
    assert!(
        status["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u == "/apis/*"))
    );
    let (_, review) = call(&api, &ci, Method::POST, ssrrs, ssrr("default")).await;
    assert!(!grants(&review["status"]["resourceRules"], "list", "pods"));
    let (code, status) = call(&api, &ci, Method::POST, ssrrs, json!({"spec": {}})).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("no namespace on request"))
    );

    // Reviews of another subject need `create` on them.
    let sars = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": ci.name, "groups": ci.groups,
            "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "shop"}}});
    let (code, _) = call(&api, &ci, Method::POST, sars, sar.clone()).await;
    assert_eq!(code, 403);
    let (code, review) = call(&api, &admin(), Method::POST, sars, sar.clone()).await;
    assert_eq!(code, 201);
    assert_eq!(review["status"]["allowed"], true);
    let mut no_groups = sar.clone();
    no_groups["spec"]["groups"] = json!([]);
    no_groups["spec"]["user"] = json!("system:serviceaccount:shop:other");
    let (_, review) = call(&api, &admin(), Method::POST, sars, no_groups).await;
    assert_eq!(review["status"]["allowed"], false);
    let (code, _) = call(
        &api,
        &admin(),
        Method::POST,
        sars,
        json!({"spec": {"resourceAttributes": {"verb": "get"}}}),
    )
    .await;
    assert_eq!(code, 422, "no user or group");

    // A local review: within its namespace only.
    let local = "/apis/authorization.k8s.io/v1/namespaces/shop/localsubjectaccessreviews";
    let mut lsar = sar.clone();
    lsar["kind"] = json!("LocalSubjectAccessReview");
    let (code, review) = call(&api, &admin(), Method::POST, local, lsar.clone()).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"]["allowed"], true);
    assert_eq!(review["metadata"]["namespace"], "shop");
    lsar["spec"]["resourceAttributes"]["namespace"] = json!("default");
    let (code, status) = call(&api, &admin(), Method::POST, local, lsar).await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "spec.resourceAttributes.namespace must match namespace: shop"
    );
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in pairs {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    headers
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_on_each_thing_asked() {
    let (api, _) = rbac_api().await;
    namespace(&api, "shop").await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    // The admin may act as anyone; the groups asked are the ones it gets (and
    // system:authenticated).
    let as_alice = headers(&[
        ("impersonate-user", "alice"),
        ("impersonate-group", "team-a"),
        ("impersonate-group", "team-b"),
        ("impersonate-uid", "u-1"),
        ("impersonate-extra-scopes", "read"),
        ("impersonate-extra-acme.com%2fproject", "p1"),
    ]);
    let (code, answer) = call_with(
        &api,
        &admin(),
        Method::POST,
        whoami,
        &as_alice,
        review.clone(),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["status"]["userInfo"],
        json!({"username": "alice", "uid": "u-1", "groups": ["team-a", "team-b", AUTHENTICATED],
            "extra": {"acme.com/project": ["p1"], "scopes": ["read"]}})
    );
    // A service account gets its groups.
    let as_ci = headers(&[("impersonate-user", "system:serviceaccount:shop:ci")]);
    let (_, answer) = call_with(&api, &admin(), Method::POST, whoami, &as_ci, review.clone()).await;
    assert_eq!(
        answer["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:shop",
            AUTHENTICATED
        ])
    );
    // alice may not impersonate.
    let bob = headers(&[("impersonate-user", "bob")]);
    let (code, status) =
        call_with(&api, &alice(), Method::POST, whoami, &bob, review.clone()).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // Given impersonate on users named bob, she may act as bob, but not in a group too.
    create(
        &api,
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": {"name": "be-bob"},
            "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]}]}),
    )
    .await;
    create(
        &api,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRoleBinding", "metadata": {"name": "alice-be-bob"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "be-bob"}, "subjects": alice_subject()}),
    )
    .await;
    let (code, answer) =
        call_with(&api, &alice(), Method::POST, whoami, &bob, review.clone()).await;
    assert_eq!(code, 201);
    assert_eq!(answer["status"]["userInfo"]["username"], "bob");
    let bob_admin = headers(&[("impersonate-user", "bob"), ("impersonate-group", MASTERS)]);
    let (code, status) = call_with(
        &api,
        &alice(),
        Method::POST,
        whoami,
        &bob_admin,
        review.clone(),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "groups \"system:masters\" is forbidden: User \"alice\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
    );
    // A service account: impersonate on serviceaccounts in its namespace (edit has it).
    let (code, status) =
        call_with(&api, &alice(), Method::POST, whoami, &as_ci, review.clone()).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "serviceaccounts \"ci\" is forbidden: User \"alice\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"shop\""
    );
    // The impersonated user is then authorized as itself: bob may not list pods.
    let (code, status) = call_with(
        &api,
        &alice(),
        Method::GET,
        "/api/v1/namespaces/shop/pods",
        &bob,
        Value::Null,
    )
    .await;
    assert_eq!(code, 403);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("pods is forbidden: User \"bob\"")
    );
    // Groups without a user: 400.
    let groups_only = headers(&[("impersonate-group", "team-a")]);
    let (code, _) = call_with(&api, &admin(), Method::POST, whoami, &groups_only, review).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn reconciliation_restores_defaults_unless_told_not_to() {
    let (api, _) = rbac_api().await;
    let path = format!("{RBAC}/clusterroles/system:basic-user");
    let (_, mut role) = call(&api, &admin(), Method::GET, &path, Value::Null).await;
    role["rules"] =
        json!([{"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["extra"]}]);
    let (code, _) = call(&api, &admin(), Method::PUT, &path, role).await;
    assert_eq!(code, 200);
    api.bootstrap_rbac().await.unwrap();
    let (_, role) = call(&api, &admin(), Method::GET, &path, Value::Null).await;
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(
        rules[0]["apiGroups"],
        json!(["example.com"]),
        "extra rules are kept"
    );
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == json!(["selfsubjectaccessreviews"])),
        "the missing rules are back: {rules:?}"
    );
    // Protected: left as it is.
    let discovery = format!("{RBAC}/clusterroles/system:discovery");
    let (_, mut role) = call(&api, &admin(), Method::GET, &discovery, Value::Null).await;
    role["metadata"]["annotations"][AUTOUPDATE] = json!("false");
    role["rules"] = json!([{"verbs": ["get"], "nonResourceURLs": ["/version"]}]);
    call(&api, &admin(), Method::PUT, &discovery, role).await;
    api.bootstrap_rbac().await.unwrap();
    let (_, role) = call(&api, &admin(), Method::GET, &discovery, Value::Null).await;
    assert_eq!(
        role["rules"],
        json!([{"verbs": ["get"], "nonResourceURLs": ["/version"]}])
    );
    // A deleted default binding is created again.
    let binding = format!("{RBAC}/clusterrolebindings/system:basic-user");
    call(&api, &admin(), Method::DELETE, &binding, Value::Null).await;
    api.bootstrap_rbac().await.unwrap();
    let (code, _) = call(&api, &admin(), Method::GET, &binding, Value::Null).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_user_without_bindings_may_discover_ask_about_itself_and_nothing_else() {
    let (api, _) = rbac_api().await;
    let dave = user("dave", &[AUTHENTICATED]);
    for path in ["/api", "/apis", "/apis/apps/v1", "/version", "/openapi/v3"] {
        let (code, _) = call(&api, &dave, Method::GET, path, Value::Null).await;
        assert_eq!(code, 200, "{path}");
    }
    let (code, review) = call(
        &api,
        &dave,
        Method::POST,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        ssar("get", "pods", "default"),
    )
    .await;
    assert_eq!((code, &review["status"]["allowed"]), (201, &json!(false)));
    for path in [
        "/api/v1/namespaces",
        "/api/v1/namespaces/default/configmaps",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ] {
        let (code, _) = call(&api, &dave, Method::GET, path, Value::Null).await;
        assert_eq!(code, 403, "{path}");
    }
    // Anonymous: /version only.
    let anonymous = UserInfo::anonymous();
    let (code, _) = call(&api, &anonymous, Method::GET, "/version", Value::Null).await;
    assert_eq!(code, 200);
    let (code, _) = call(&api, &anonymous, Method::GET, "/api", Value::Null).await;
    assert_eq!(code, 403);
}

#[tokio::test]
async fn logical_clusters_get_the_defaults_and_their_own_bindings_govern_there() {
    let (api, _) = rbac_api().await;
    create(
        &api,
        "/apis/tenancy.flotilla.io/v1alpha1/logicalclusters",
        json!({"apiVersion": "tenancy.flotilla.io/v1alpha1", "kind": "LogicalCluster", "metadata": {"name": "c1"}}),
    )
    .await;
    let (code, _) = call(
        &api,
        &admin(),
        Method::GET,
        &format!("/clusters/c1{RBAC}/clusterroles/cluster-admin"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "the defaults are there");
    create(
        &api,
        &format!("/clusters/c1{RBAC}/clusterrolebindings"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRoleBinding", "metadata": {"name": "alice-view"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "view"}, "subjects": alice_subject()}),
    )
    .await;
    let alice = alice();
    eventually("view is filled in c1", async || {
        let (code, _) = call(
            &api,
            &alice,
            Method::GET,
            "/clusters/c1/api/v1/configmaps",
            Value::Null,
        )
        .await;
        code == 200
    })
    .await;
    let (code, _) = call(&api, &alice, Method::GET, "/api/v1/configmaps", Value::Null).await;
    assert_eq!(code, 403, "c1's binding grants nothing in the root cluster");
}

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// A CertificateSigningRequest `name` for the API server's client signer.
fn signing_request(name: &str) -> Value {
    use base64::Engine as _;
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})
}

/// `user` approves (or denies) CSR `name` through its `approval` subresource, as
/// `kubectl certificate approve|deny` does: the status code and the answer.
async fn decide(api: &Api, user: &UserInfo, name: &str, kind: &str) -> (u16, Value) {
    let (code, mut csr) = call(
        api,
        &admin(),
        Method::GET,
        &format!("{CSRS}/{name}"),
        Value::Null,
    )
    .await;
    assert_eq!(code, 200, "{csr}");
    csr["status"]["conditions"] = json!([{"type": kind, "status": "True",
        "reason": "KubectlApprove", "message": "by the test"}]);
    call(
        api,
        user,
        Method::PUT,
        &format!("{CSRS}/{name}/approval"),
        csr,
    )
    .await
}

#[tokio::test]
async fn approving_a_csr_needs_approve_on_its_signer_besides_the_approval_update() {
    let (api, _) = rbac_api().await;
    create(&api, CSRS, signing_request("one")).await;
    create(&api, CSRS, signing_request("two")).await;
    // carol may update approvals (and read requests), nothing on signers yet.
    create(
        &api,
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": {"name": "csr-approval"},
            "rules": [
                {"verbs": ["get", "list"], "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"]},
                {"verbs": ["update"], "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"]},
            ]}),
    )
    .await;
    let carol = user("carol", &[AUTHENTICATED]);
    let to_carol = json!([{"kind": "User", "name": "carol", "apiGroup": GROUP}]);
    let cluster_binding = |name: &str, role: &str| {
        let mut b = role_binding(name, "ClusterRole", role, to_carol.clone());
        b["kind"] = json!("ClusterRoleBinding");
        b
    };
    create(
        &api,
        &format!("{RBAC}/clusterrolebindings"),
        cluster_binding("carol-approval", "csr-approval"),
    )
    .await;
    let (code, status) = decide(&api, &carol, "one", "Approved").await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "certificatesigningrequests.certificates.k8s.io \"one\" is forbidden: user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""
    );
    let (code, status) = decide(&api, &carol, "one", "Denied").await;
    assert_eq!(code, 403, "denying is approving's verb too: {status}");
    let (_, stored) = call(
        &api,
        &admin(),
        Method::GET,
        &format!("{CSRS}/one"),
        Value::Null,
    )
    .await;
    assert!(
        stored["status"]["conditions"].is_null(),
        "nothing written: {stored}"
    );

    // `approve` on another domain's signers: still refused.
    let signer_role = |name: &str, signer: &str| {
        json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"verbs": ["approve"], "apiGroups": ["certificates.k8s.io"],
                "resources": ["signers"], "resourceNames": [signer]}]})
    };
    create(
        &api,
        &format!("{RBAC}/clusterroles"),
        signer_role("example-signers", "example.com/*"),
    )
    .await;
    create(
        &api,
        &format!("{RBAC}/clusterrolebindings"),
        cluster_binding("carol-example", "example-signers"),
    )
    .await;
    let (code, _) = decide(&api, &carol, "one", "Approved").await;
    assert_eq!(code, 403);

    // The domain's wildcard suffices (Kubernetes asks for `kubernetes.io/*` too).
    create(
        &api,
        &format!("{RBAC}/clusterroles"),
        signer_role("k8s-signers", "kubernetes.io/*"),
    )
    .await;
    create(
        &api,
        &format!("{RBAC}/clusterrolebindings"),
        cluster_binding("carol-k8s", "k8s-signers"),
    )
    .await;
    let (code, approved) = decide(&api, &carol, "one", "Approved").await;
    assert_eq!(code, 200, "{approved}");
    assert_eq!(approved["status"]["conditions"][0]["type"], "Approved");

    // So does the signer by name: the default role upstream has for it.
    let dave = user("dave", &[AUTHENTICATED]);
    let mut to_dave = cluster_binding("dave-approval", "csr-approval");
    to_dave["subjects"] = json!([{"kind": "User", "name": "dave", "apiGroup": GROUP}]);
    create(&api, &format!("{RBAC}/clusterrolebindings"), to_dave).await;
    let (code, _) = decide(&api, &dave, "two", "Denied").await;
    assert_eq!(code, 403);
    let mut approver = cluster_binding(
        "dave-signer",
        "system:certificates.k8s.io:kube-apiserver-client-approver",
    );
    approver["subjects"] = json!([{"kind": "User", "name": "dave", "apiGroup": GROUP}]);
    create(&api, &format!("{RBAC}/clusterrolebindings"), approver).await;
    let (code, denied) = decide(&api, &dave, "two", "Denied").await;
    assert_eq!(code, 200, "{denied}");
    assert_eq!(denied["status"]["conditions"][0]["type"], "Denied");

    // The admin (system:masters) needs no grant.
    create(&api, CSRS, signing_request("three")).await;
    let (code, _) = decide(&api, &admin(), "three", "Approved").await;
    assert_eq!(code, 200);
}
