//! The roles and bindings a cluster starts with (Kubernetes' bootstrap policy, for what
//! this server serves), and their reconciliation at start.
//!
//! ```text
//!  cluster-admin ◄── system:masters          system:discovery ◄── system:authenticated
//!  admin ◄ aggregate-to-admin: edit, system:aggregate-to-admin
//!  edit  ◄ aggregate-to-edit:  view, system:aggregate-to-edit
//!  view  ◄ aggregate-to-view:  system:aggregate-to-view
//!  system:basic-user ◄── system:authenticated
//!  system:public-info-viewer ◄── system:authenticated, system:unauthenticated
//!  system:service-account-issuer-discovery ◄── system:serviceaccounts, everyone (public)
//!  system:auth-delegator, system:monitoring ◄── system:monitoring
//! ```
//!
//! Reconciled as kube-apiserver reconciles them at start: a missing object is created; one
//! annotated `rbac.authorization.kubernetes.io/autoupdate: "false"` is left alone; any other
//! gets the labels, annotations, rules, aggregation selectors and subjects it lacks (what
//! it has beyond them is kept), and a binding whose role reference differs is created
//! again.

use serde_json::{Map, Value, json};

use super::rule::{Rule, covers};
use super::{AUTOUPDATE, GROUP};
use crate::client::Client;
use crate::http::error::{ApiResult, Reason};

/// The label every default carries.
pub const BOOTSTRAPPING: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A rule with each list sorted, as Kubernetes' rule builder leaves it.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    fn sorted<'s>(items: &[&'s str]) -> Vec<&'s str> {
        let mut items = items.to_vec();
        items.sort_unstable();
        items
    }
    Rule::resources(&sorted(verbs), &sorted(groups), &sorted(resources)).to_json()
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    let mut urls = urls.to_vec();
    urls.sort_unstable();
    Rule::urls(verbs, &urls).to_json()
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<Value>) -> Value {
    let labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels}, "rules": rules})
}

fn aggregated(name: &str, labels: &[(&str, &str)], selector: &str) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchLabels": {selector: "true"}}]});
    role
}

fn binding(role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": GROUP, "kind": "Group", "name": g}))
        .collect();
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects})
}

const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// Kubernetes' default ClusterRoles and ClusterRoleBindings (v1.32), for the API groups
/// this server serves; the rules of the aggregated parts are upstream's, kinds the server
/// does not serve included (harmless, and what tools that read them expect).
pub fn kubernetes() -> Vec<Value> {
    let to_view = vec![
        rule(
            READ,
            &[""],
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        rule(
            READ,
            &[""],
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ],
        ),
        // At the namespace scope: a user can read the namespace it has the role in.
        rule(READ, &[""], &["namespaces"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/status",
                "statefulsets/scale",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/status",
                "deployments/scale",
                "replicasets",
                "replicasets/status",
                "replicasets/scale",
            ],
        ),
        rule(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            &["batch"],
            &["jobs", "jobs/status", "cronjobs", "cronjobs/status"],
        ),
        rule(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        rule(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ];
    let to_edit = vec![
        // Reading what can escalate: secrets, and access to pods' processes.
        rule(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], &[""], &["serviceaccounts"]),
        rule(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
            ],
        ),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(
            WRITE,
            &[""],
            &[
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets",
                "events",
            ],
        ),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(
            WRITE,
            &["apps"],
            &[
                "statefulsets",
                "statefulsets/scale",
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "replicasets",
                "replicasets/scale",
            ],
        ),
        rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        rule(WRITE, &["batch"], &["jobs", "cronjobs"]),
        rule(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "ingresses",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
                "networkpolicies",
            ],
        ),
        rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        rule(
            WRITE,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses"],
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ];
    let to_admin = vec![
        rule(
            &["create"],
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
        ),
        rule(READ_WRITE, &[GROUP], &["roles", "rolebindings"]),
    ];
    let bootstrapping = [BOOTSTRAPPING];
    let labelled = |to: &'static str| [BOOTSTRAPPING, (to, "true")];
    vec![
        cluster_role(
            "cluster-admin",
            &bootstrapping,
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role(
            "system:discovery",
            &bootstrapping,
            vec![urls(
                &["get"],
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        ),
        cluster_role(
            "system:basic-user",
            &bootstrapping,
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            &bootstrapping,
            vec![urls(
                &["get"],
                &["/livez", "/readyz", "/healthz", "/version", "/version/"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &bootstrapping,
            vec![urls(
                &["get"],
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            &bootstrapping,
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        cluster_role(
            "system:monitoring",
            &bootstrapping,
            vec![urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        // Who may approve client certificates of the API server (`approve` on the
        // signer, which an approval needs besides its own update).
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            &bootstrapping,
            vec![
                Rule::resources(&["approve"], &["certificates.k8s.io"], &["signers"])
                    .named(&["kubernetes.io/kube-apiserver-client"])
                    .to_json(),
            ],
        ),
        aggregated("admin", &bootstrapping, TO_ADMIN),
        aggregated("edit", &labelled(TO_ADMIN), TO_EDIT),
        aggregated("view", &labelled(TO_EDIT), TO_VIEW),
        cluster_role("system:aggregate-to-admin", &labelled(TO_ADMIN), to_admin),
        cluster_role("system:aggregate-to-edit", &labelled(TO_EDIT), to_edit),
        cluster_role("system:aggregate-to-view", &labelled(TO_VIEW), to_view),
        binding("cluster-admin", &[crate::auth::MASTERS]),
        binding("system:discovery", &[crate::auth::AUTHENTICATED]),
        binding("system:basic-user", &[crate::auth::AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            &[crate::auth::AUTHENTICATED, crate::auth::UNAUTHENTICATED],
        ),
        // kube-apiserver binds the issuer's documents to service accounts only and
        // leaves making them public to the operator; the hub's tokens exist to be
        // verified by other systems (the agents' members, CI), so they are public here,
        // as the hub's `/version` is.
        binding(
            "system:service-account-issuer-discovery",
            &[
                crate::auth::serviceaccount::ALL_SERVICE_ACCOUNTS,
                crate::auth::AUTHENTICATED,
                crate::auth::UNAUTHENTICATED,
            ],
        ),
        binding("system:monitoring", &["system:monitoring"]),
    ]
}

/// `object` with the label and annotation every default carries added where missing.
pub(crate) fn with_default_metadata(mut object: Value) -> Value {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let meta = &mut object["metadata"];
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    if meta["labels"].get(BOOTSTRAPPING.0).is_none() {
        meta["labels"][BOOTSTRAPPING.0] = json!(BOOTSTRAPPING.1);
    }
    if !meta["annotations"].is_object() {
        meta["annotations"] = json!({});
    }
    if meta["annotations"].get(AUTOUPDATE).is_none() {
        meta["annotations"][AUTOUPDATE] = json!("true");
    }
    object
}

/// What reconciling an object does.
#[derive(Debug, PartialEq)]
pub(crate) enum Reconciled {
    /// Nothing: it is as it should be, or protected.
    Unchanged,
    /// It is replaced by this object.
    Update(Value),
    /// It is deleted and this object created (a binding's role changed).
    Recreate(Value),
}

/// `into`'s map at `field` with `from`'s entries added where `into` has none (the
/// existing object's labels and annotations win).
fn merge_missing(into: &mut Value, from: &Value, field: &str) {
    for (key, value) in from["metadata"][field].as_object().into_iter().flatten() {
        if into["metadata"][field].get(key).is_none() {
            if !into["metadata"][field].is_object() {
                into["metadata"][field] = json!({});
            }
            into["metadata"][field][key] = value.clone();
        }
    }
}

/// How `existing` is brought to `expected` (both of the same kind), as Kubernetes'
/// reconciliation does it without removing extra permissions or subjects.
pub(crate) fn reconcile_one(existing: &Value, expected: &Value) -> Reconciled {
    if existing["metadata"]["annotations"][AUTOUPDATE] == "false" {
        return Reconciled::Unchanged;
    }
    let mut result = existing.clone();
    merge_missing(&mut result, expected, "labels");
    merge_missing(&mut result, expected, "annotations");
    let is_binding = expected.get("roleRef").is_some();
    if is_binding {
        if existing["roleRef"] != expected["roleRef"] {
            return Reconciled::Recreate(expected.clone());
        }
        let mut subjects = existing["subjects"].as_array().cloned().unwrap_or_default();
        for subject in expected["subjects"].as_array().into_iter().flatten() {
            if !subjects.contains(subject) {
                subjects.push(subject.clone());
            }
        }
        result["subjects"] = json!(subjects);
    } else {
        let arc = &mut |s: &str| std::sync::Arc::from(s);
        let have = Rule::all_from_json(&existing["rules"], arc);
        let want = Rule::all_from_json(&expected["rules"], arc);
        if let Err(missing) = covers(&have, &want) {
            let mut rules = existing["rules"].as_array().cloned().unwrap_or_default();
            rules.extend(missing.iter().map(Rule::to_json));
            result["rules"] = json!(rules);
        }
        let expected_selectors = expected["aggregationRule"]["clusterRoleSelectors"].as_array();
        if let Some(wanted) = expected_selectors {
            let mut selectors = existing["aggregationRule"]["clusterRoleSelectors"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for selector in wanted {
                if !selectors.contains(selector) {
                    selectors.push(selector.clone());
                }
            }
            result["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
        }
    }
    if result == *existing {
        Reconciled::Unchanged
    } else {
        Reconciled::Update(result)
    }
}

/// The API path of the collection `object` belongs to, and of the object itself.
fn paths(object: &Value) -> (String, String) {
    let plural = object["kind"]
        .as_str()
        .and_then(super::Kind::of_name)
        .map_or("clusterroles", super::Kind::plural);
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("");
    let collection = match namespace {
        "" => format!("/apis/{GROUP}/v1/{plural}"),
        ns => format!("/apis/{GROUP}/v1/namespaces/{ns}/{plural}"),
    };
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let path = format!("{collection}/{name}");
    (collection, path)
}

/// Creates or reconciles each of `objects` through `client` (the server itself, in the
/// logical cluster `cluster`'s view). A write that races with another is tried again.
pub(crate) async fn reconcile(client: &Client, cluster: &str, objects: &[Value]) -> ApiResult<()> {
    let (mut created, mut changed) = (0, 0);
    for expected in objects {
        let expected = with_default_metadata(expected.clone());
        let (collection, path) = paths(&expected);
        for attempt in 0.. {
            let outcome = reconcile_at(client, &collection, &path, &expected).await;
            match outcome {
                Err(e)
                    if attempt < 5
                        && matches!(
                            e.reason,
                            Reason::Conflict | Reason::AlreadyExists | Reason::NotFound
                        ) => {}
                Err(e) => return Err(e),
                Ok(Done::Created) => {
                    created += 1;
                    break;
                }
                Ok(Done::Changed) => {
                    changed += 1;
                    break;
                }
                Ok(Done::Unchanged) => break,
            }
        }
    }
    if created + changed > 0 {
        tracing::info!(%cluster, created, changed, "default roles and bindings");
    }
    Ok(())
}

/// What reconciling one object did.
enum Done {
    Created,
    Changed,
    Unchanged,
}

async fn reconcile_at(
    client: &Client,
    collection: &str,
    path: &str,
    expected: &Value,
) -> ApiResult<Done> {
    let existing = match client.get(path).await {
        Ok(existing) => existing,
        Err(e) if e.reason == Reason::NotFound => {
            client.create(collection, expected).await?;
            return Ok(Done::Created);
        }
        Err(e) => return Err(e),
    };
    match reconcile_one(&existing, expected) {
        Reconciled::Unchanged => return Ok(Done::Unchanged),
        Reconciled::Update(object) => {
            client.replace(path, &object).await?;
            tracing::info!(%path, "default RBAC object reconciled");
        }
        Reconciled::Recreate(object) => {
            client.delete(path).await?;
            client.create(collection, &object).await?;
            tracing::info!(%path, "default RBAC binding created again (its role changed)");
        }
    }
    Ok(Done::Changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding_of(role: &str, subjects: Value) -> Value {
        json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
            "subjects": subjects})
    }

    #[test]
    fn bindings_get_missing_subjects_and_are_created_again_for_another_role() {
        let alice = json!({"apiGroup": GROUP, "kind": "User", "name": "alice"});
        let masters = json!({"apiGroup": GROUP, "kind": "Group", "name": "system:masters"});
        let expected = with_default_metadata(binding_of("cluster-admin", json!([masters])));
        let existing = binding_of("cluster-admin", json!([alice]));
        let Reconciled::Update(updated) = reconcile_one(&existing, &expected) else {
            panic!("the missing subject is added");
        };
        assert_eq!(
            updated["subjects"],
            json!([alice, masters]),
            "extra subjects kept"
        );
        assert_eq!(updated["metadata"]["annotations"][AUTOUPDATE], "true");
        assert_eq!(reconcile_one(&updated, &expected), Reconciled::Unchanged);
        let elsewhere = binding_of("view", json!([masters]));
        assert_eq!(
            reconcile_one(&elsewhere, &expected),
            Reconciled::Recreate(expected.clone())
        );
        let mut protected = elsewhere;
        protected["metadata"]["annotations"] = json!({AUTOUPDATE: "false"});
        assert_eq!(reconcile_one(&protected, &expected), Reconciled::Unchanged);
    }

    #[test]
    fn aggregated_roles_get_missing_selectors_and_every_default_is_valid() {
        let expected = aggregated("view", &[BOOTSTRAPPING], "to-view");
        let mut existing = expected.clone();
        existing["aggregationRule"]["clusterRoleSelectors"] =
            json!([{"matchLabels": {"mine": "true"}}]);
        let Reconciled::Update(updated) = reconcile_one(&existing, &expected) else {
            panic!("the missing selector is added");
        };
        assert_eq!(
            updated["aggregationRule"]["clusterRoleSelectors"],
            json!([{"matchLabels": {"mine": "true"}}, {"matchLabels": {"to-view": "true"}}])
        );
        for object in kubernetes() {
            let kind = super::super::Kind::of_name(object["kind"].as_str().unwrap()).unwrap();
            let causes = crate::registry::rbac::validate(kind, &object, None);
            assert!(causes.is_empty(), "{object}: {causes:?}");
        }
    }
}
