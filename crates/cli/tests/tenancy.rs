//! Tenant namespaces on the fleet, end to end: a real `flotilla hub`, real `flotilla sim`
//! members joined into cluster sets, and the real kubectl. A namespace's Placements reach
//! every cluster until a ClusterSetBinding limits them to the sets bound there (what they
//! had placed elsewhere is removed from those members); under `--tenancy bound` a
//! namespace without a binding reaches nothing and says so; a Placement delivers only
//! what lives in its namespace; the fleet controllers run as their own user.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::{Hub, Sim, condition, eventually_every, join_with, member_web};

/// [`support::eventually`], polling every 200 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(200), probe)
}

/// `flotilla join` of `sim`'s member `cluster` into `set` (none: no `--clusterset`).
fn join(hub: &Hub, sim: &Sim, cluster: &str, set: Option<&str>) {
    let mut more = vec!["--labels", "tier=web"];
    if let Some(set) = set {
        more.extend(["--clusterset", set]);
    }
    let stdout = join_with(hub, sim, cluster, &more);
    assert!(
        stdout.contains(&format!("cluster {cluster} joined")),
        "{stdout}"
    );
}

/// Namespace `shop`, a Deployment `web` and a Placement `web` asking for every cluster.
const SHOP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: flotilla.io/v1alpha1
kind: Placement
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
"#;

/// A ClusterSetBinding of `set` in `namespace`.
fn binding(namespace: &str, set: &str) -> String {
    format!(
        "apiVersion: flotilla.io/v1alpha1\nkind: ClusterSetBinding\n\
         metadata: {{name: {set}, namespace: {namespace}}}\nspec: {{clusterSet: {set}}}\n"
    )
}

/// The clusters placement `shop/web` lists as chosen, once its status is about its
/// generation.
fn chosen(hub: &Hub) -> Result<Vec<String>, String> {
    let placement = hub.json(&["get", "placement", "web", "-n", "shop"]);
    if placement["status"]["observedGeneration"] != placement["metadata"]["generation"] {
        return Err("status not about this generation yet".into());
    }
    Ok(placement["status"]["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect())
}

/// Waits until member `cluster` has (or has not) Deployment `shop/web`.
fn wait_web(sim: &Sim, cluster: &str, present: bool) {
    let what = if present { "has" } else { "no longer has" };
    eventually(&format!("{cluster} {what} shop/web"), || {
        match (member_web(sim, cluster), present) {
            (Ok(_), true) => Ok(()),
            (Err(e), false) if e.contains("NotFound") => Ok(()),
            (other, _) => Err(format!("{other:?}")),
        }
    });
}

#[test]
fn a_binding_limits_a_namespace_to_its_sets_and_what_it_delivers_stays_in_it() {
    let audit = tempfile::tempdir().unwrap();
    let log = audit.path().join("audit.log");
    let hub = Hub::start_with(&[
        "--health-period",
        "1s",
        "--audit-log-path",
        log.to_str().unwrap(),
    ]);
    let sim = Sim::start(&["--clusters", "3", "--prefix", "m-"]);
    join(&hub, &sim, "m-1", Some("eu"));
    join(&hub, &sim, "m-2", Some("eu"));
    join(&hub, &sim, "m-3", Some("us"));
    // Joining into a set creates it; the hub made `default` for clusters in none.
    let sets = hub.ok(&["get", "clustersets", "-o", "name"]);
    for set in ["eu", "us", "default"] {
        assert!(
            sets.contains(&format!("clusterset.flotilla.io/{set}\n")),
            "{sets}"
        );
    }

    // No binding in shop (open tenancy): every cluster.
    hub.create(SHOP);
    for cluster in ["m-1", "m-2", "m-3"] {
        wait_web(&sim, cluster, true);
    }

    // Bound to eu: what it placed on us (m-3) is removed, and it chooses only eu.
    hub.create(&binding("shop", "eu"));
    eventually("the placement chooses the eu clusters only", || {
        let chosen = chosen(&hub)?;
        (chosen == ["m-1", "m-2"]).then_some(()).ok_or(format!(
            "{chosen:?} {}",
            hub.json(&["get", "placement", "web", "-n", "shop"])["status"]
        ))
    });
    wait_web(&sim, "m-3", false);
    let placement = hub.json(&["get", "placement", "web", "-n", "shop"]);
    assert_eq!(
        placement["status"]["excluded"],
        serde_json::json!([{"name": "m-3", "reason": "cluster set us is not bound to namespace shop"}])
    );
    assert_eq!(
        condition(&placement, "Scheduled").unwrap()["status"],
        "True"
    );
    for cluster in ["m-1", "m-2"] {
        member_web(&sim, cluster).unwrap_or_else(|e| panic!("{cluster}: {e}"));
    }
    // The binding says it binds its set; the decision names the eu clusters.
    eventually("the binding is Bound", || {
        let b = hub.json(&["get", "clustersetbinding", "eu", "-n", "shop"]);
        match condition(&b, "Bound") {
            Some(c) if c["status"] == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let table = hub.ok(&["get", "clustersetbindings", "-n", "shop"]);
    assert!(table.starts_with("NAME") && table.contains("eu"), "{table}");
    assert!(table.contains("True"), "{table}");
    // A binding named otherwise than its set is refused, nothing written.
    let refused = hub
        .kubectl_with(
            &["create", "-f", "-"],
            Some(
                "apiVersion: flotilla.io/v1alpha1\nkind: ClusterSetBinding\n\
                 metadata: {name: us, namespace: shop}\nspec: {clusterSet: eu}\n",
            ),
        )
        .stderr;
    let refused = String::from_utf8_lossy(&refused);
    assert!(
        refused.contains("metadata.name must equal spec.clusterSet"),
        "{refused}"
    );
    assert!(
        hub.kubectl(&["get", "clustersetbinding", "us", "-n", "shop"])
            .stderr
            .starts_with(b"Error from server (NotFound)")
    );
    // A binding to a set that does not exist binds nothing: still eu only.
    hub.create(&binding("shop", "mars"));
    eventually("the binding of mars is not Bound", || {
        let b = hub.json(&["get", "clustersetbinding", "mars", "-n", "shop"]);
        match condition(&b, "Bound") {
            Some(c) if c["status"] == "False" && c["reason"] == "ClusterSetNotFound" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(chosen(&hub).unwrap(), ["m-1", "m-2"]);

    // An Override moving the object to another namespace is refused at admission.
    let moved = "apiVersion: flotilla.io/v1alpha1\nkind: Override\n\
        metadata: {name: move, namespace: shop}\nspec:\n\
        \x20 resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]\n\
        \x20 rules: [{jsonPatch: [{op: replace, path: /metadata/namespace, value: bank}]}]\n";
    let out = hub.kubectl_with(&["create", "-f", "-"], Some(moved));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("may not change /metadata/namespace"),
        "{stderr}"
    );
    assert!(
        hub.kubectl(&["get", "override", "move", "-n", "shop"])
            .stderr
            .starts_with(b"Error from server (NotFound)")
    );

    // A Placement in shop selecting a cluster-scoped kind delivers nothing and says so.
    hub.create(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
         metadata: {name: shop-reader}\nrules: []\n---\n\
         apiVersion: flotilla.io/v1alpha1\nkind: Placement\n\
         metadata: {name: reader, namespace: shop}\nspec:\n\
         \x20 resourceSelectors: [{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: shop-reader}]\n",
    );
    let found = eventually("the placement says it selects nothing", || {
        let p = hub.json(&["get", "placement", "reader", "-n", "shop"]);
        match condition(&p, "TemplatesFound") {
            Some(c) if c["status"] == "False" => Ok(c.clone()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(found["reason"], "OutsideNamespace");
    let message = found["message"].as_str().unwrap();
    assert!(
        message.contains("a Placement places only resources of its own namespace")
            && message.contains("rbac.authorization.k8s.io/v1 ClusterRole shop-reader"),
        "{message}"
    );
    for cluster in ["m-1", "m-2"] {
        let out = sim.kubectl(cluster, &["get", "clusterrole", "shop-reader"], None);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("NotFound"),
            "{cluster} has the ClusterRole"
        );
    }

    // The bindings gone (open tenancy): every cluster again.
    hub.ok(&["delete", "clustersetbinding", "eu", "mars", "-n", "shop"]);
    wait_web(&sim, "m-3", true);
    eventually("the placement chooses every cluster", || {
        let chosen = chosen(&hub)?;
        (chosen.len() == 3)
            .then_some(())
            .ok_or(format!("{chosen:?}"))
    });

    // The controllers run as their own user, under the roles the hub installed.
    let role = hub.json(&["get", "clusterrole", "system:flotilla:fleet-controller"]);
    let rules = role["rules"].as_array().unwrap();
    assert!(
        !rules.iter().any(|r| r["resources"]
            .as_array()
            .unwrap_or(&vec![])
            .contains(&"secrets".into())),
        "{role}"
    );
    let credentials = hub.json(&[
        "get",
        "role",
        "system:flotilla:member-credentials",
        "-n",
        "flotilla-system",
    ]);
    assert_eq!(credentials["rules"][0]["resources"][0], "secrets");
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let writers = |resource: &str, verb: &str| -> Vec<String> {
        let mut users: Vec<String> = events
            .iter()
            .filter(|e| e["objectRef"]["resource"] == resource && e["verb"] == verb)
            .filter_map(|e| e["user"]["username"].as_str().map(str::to_owned))
            .collect();
        users.sort();
        users.dedup();
        users
    };
    assert_eq!(
        writers("works", "patch"),
        ["system:flotilla:fleet-controller"]
    );
    assert_eq!(
        writers("works", "delete"),
        ["system:flotilla:fleet-controller"]
    );
    assert_eq!(
        writers("placementdecisions", "patch"),
        ["system:flotilla:fleet-controller"]
    );
    assert!(
        writers("secrets", "get").contains(&"system:flotilla:fleet-controller".to_owned()),
        "{:?}",
        writers("secrets", "get")
    );
}

#[test]
fn under_bound_tenancy_a_namespace_without_bindings_places_nothing() {
    let hub = Hub::start_with(&["--health-period", "1s", "--tenancy", "bound"]);
    let sim = Sim::start(&["--clusters", "1", "--prefix", "b-"]);
    join(&hub, &sim, "b-1", None);
    hub.create(SHOP);
    let scheduled = eventually("the placement says why it schedules nothing", || {
        let p = hub.json(&["get", "placement", "web", "-n", "shop"]);
        match condition(&p, "Scheduled") {
            Some(c) if c["status"] == "False" => Ok(c.clone()),
            other => Err(format!("{other:?}")),
        }
    });
    assert_eq!(scheduled["reason"], "NoClusterSetBinding");
    assert_eq!(
        scheduled["message"],
        "namespace shop has no ClusterSetBinding: under bound tenancy its Placements choose \
         no cluster until a ClusterSet is bound to it"
    );
    let placement = hub.json(&["get", "placement", "web", "-n", "shop"]);
    assert_eq!(
        placement["status"]["excluded"],
        serde_json::json!([{"name": "b-1",
            "reason": "namespace shop has no ClusterSetBinding (tenancy is bound)"}])
    );
    assert!(
        member_web(&sim, "b-1").is_err_and(|e| e.contains("NotFound")),
        "nothing was delivered"
    );
    // b-1 joined in no set: binding `default` to shop reaches it.
    hub.create(&binding("shop", "default"));
    wait_web(&sim, "b-1", true);
    eventually("the placement chooses b-1", || {
        let chosen = chosen(&hub)?;
        (chosen == ["b-1"])
            .then_some(())
            .ok_or(format!("{chosen:?}"))
    });
}
