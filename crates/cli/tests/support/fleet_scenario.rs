//! The fleet scenario, for push and pull members alike (issue 22: it "passes on pull
//! clusters as it does on push clusters"): three members `small-1` (region=eu,
//! size=small), `large-1` (region=eu, size=large) and `us-1` (region=us), each served by
//! a simulator of its own, however they joined.
//!
//! ```text
//!  deliver: APP ─► 9 replicas divided 1:2, image specialised per cluster (an Override's
//!     variables), nothing on us-1 ─► status back on the template and the placement ─►
//!     scale, new image ─► drift Correct (put back), Report (left, reported), Correct
//!  release: the Placement deleted ─► the members' copies gone, no Work left
//! ```

use std::time::Duration;

use serde_json::Value;

use super::{Hub, Sim, condition, eventually_every, image, member_web};

/// [`super::eventually`], polling every 150 ms.
fn eventually<T>(what: &str, probe: impl FnMut() -> Result<T, String>) -> T {
    eventually_every(what, Duration::from_millis(150), probe)
}

/// The simulators serving each member of the scenario.
pub struct Members<'a> {
    /// Serves `small-1`.
    pub small: &'a Sim,
    /// Serves `large-1`.
    pub large: &'a Sim,
    /// Serves `us-1`.
    pub us: &'a Sim,
}

/// Member `cluster`'s `shop/web` replicas and image.
pub fn replicas_and_image(sim: &Sim, cluster: &str) -> Result<(i64, String), String> {
    let web = member_web(sim, cluster).map_err(|_| "no Deployment yet")?;
    Ok((
        web["spec"]["replicas"].as_i64().unwrap_or(-1),
        image(&web).to_owned(),
    ))
}

/// Waits until member `cluster` of `sim` runs `replicas` × `image`.
pub fn wait_member(sim: &Sim, cluster: &str, replicas: i64, image: &str) {
    eventually(&format!("{cluster} runs {replicas} × {image}"), || {
        let got = replicas_and_image(sim, cluster)?;
        if got == (replicas, image.to_owned()) {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
}

/// Placement `shop/web` on the hub.
pub fn placement(hub: &Hub) -> Value {
    hub.json(&["get", "placement", "web", "-n", "shop"])
}

/// The application: Deployment `shop/web` (9 × nginx:1.27) placed on the `region=eu`
/// clusters divided 1:2 between `size=small` and `size=large`, its image specialised with
/// `${cluster.name}` by an Override.
pub const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 9
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
  clusters: {labelSelector: {matchLabels: {region: eu}}}
  replicas:
    mode: Divided
    weights:
    - {clusters: {labelSelector: {matchLabels: {size: small}}}, weight: 1}
    - {clusters: {labelSelector: {matchLabels: {size: large}}}, weight: 2}
---
apiVersion: flotilla.io/v1alpha1
kind: Override
metadata: {name: web-image, namespace: shop}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  rules:
  - jsonPatch:
    - {op: replace, path: /spec/template/spec/containers/0/image, value: "nginx:${cluster.name}"}
"#;

/// [`APP`] created on the hub: divided, specialised, reported back, scaled, updated, and
/// kept (drift corrected, then reported) on the members.
pub fn deliver(hub: &Hub, members: &Members) {
    let (small, large, us) = (members.small, members.large, members.us);
    hub.create(APP);
    // 9 replicas divided 1:2, the image specialised per cluster; nothing on us-1.
    wait_member(small, "small-1", 3, "nginx:small-1");
    wait_member(large, "large-1", 6, "nginx:large-1");
    assert!(member_web(us, "us-1").is_err());
    let web = member_web(small, "small-1").unwrap();
    assert_eq!(
        web["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "flotilla"
    );
    assert_eq!(
        web["metadata"]["annotations"]["flotilla.io/placement"],
        "shop/web"
    );

    // Status comes back: 9/9 ready on the hub's template; the placement lists both.
    eventually("the hub's Deployment reports 9 ready", || {
        let web = hub.json(&["get", "deploy", "web", "-n", "shop"]);
        (web["status"]["readyReplicas"] == 9 && web["status"]["availableReplicas"] == 9)
            .then_some(())
            .ok_or_else(|| web["status"].to_string())
    });
    let table = hub.ok(&["get", "deploy", "web", "-n", "shop"]);
    assert!(table.contains("9/9"), "{table}");
    let status = eventually("the placement is available", || {
        let p = placement(hub);
        (condition(&p, "Available").is_some_and(|c| c["status"] == "True"))
            .then(|| p["status"].clone())
            .ok_or_else(|| p["status"].to_string())
    });
    let table = hub.ok(&["get", "placements", "-n", "shop"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SCHEDULED",
            "AVAILABLE",
            "REVISION",
            "UPDATED",
            "PROGRESSING",
            "AGE"
        ],
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..3], ["web", "True", "True"], "{table}");
    let listed: Vec<(&str, i64)> = status["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["replicas"].as_i64().unwrap()))
        .collect();
    assert_eq!(listed, [("large-1", 6), ("small-1", 3)]);
    assert_eq!(status["excluded"][0]["name"], "us-1");
    let decision = hub.json(&["get", "placementdecisions", "web-decision-1", "-n", "shop"]);
    assert_eq!(
        decision["decisions"].as_array().unwrap().len(),
        2,
        "{decision}"
    );

    // Scaling the template re-divides; a new image propagates (specialised again).
    hub.ok(&["scale", "deploy", "web", "-n", "shop", "--replicas", "12"]);
    wait_member(small, "small-1", 4, "nginx:small-1");
    wait_member(large, "large-1", 8, "nginx:large-1");
    hub.ok(&["delete", "override", "web-image", "-n", "shop"]);
    hub.ok(&["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.28"]);
    wait_member(small, "small-1", 4, "nginx:1.28");
    wait_member(large, "large-1", 8, "nginx:1.28");

    // A hand edit on a member is put back (drift: Correct, the default).
    large.ok(
        "large-1",
        &["scale", "deploy", "web", "-n", "shop", "--replicas", "1"],
    );
    wait_member(large, "large-1", 8, "nginx:1.28");

    // Under drift: Report it stays, and the placement says where and what.
    hub.ok(&[
        "patch",
        "placement",
        "web",
        "-n",
        "shop",
        "--type",
        "merge",
        "-p",
        r#"{"spec": {"apply": {"drift": "Report"}}}"#,
    ]);
    // The edit comes once large-1 has the policy (its Work synced at that generation):
    // an edit seen before is corrected, as it should be.
    eventually("large-1 syncs its Work under drift: Report", || {
        let works = hub.json(&["get", "works", "-n", "flotilla-cluster-large-1"]);
        works["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|w| {
                w["spec"]["placement"]["name"] == "web"
                    && w["spec"]["apply"]["drift"] == "Report"
                    && w["status"]["observedGeneration"] == w["metadata"]["generation"]
            })
            .map(|_| ())
            .ok_or_else(|| works.to_string())
    });
    large.ok(
        "large-1",
        &["scale", "deploy", "web", "-n", "shop", "--replicas", "2"],
    );
    let drift = eventually("the drift is reported", || {
        let p = placement(hub);
        p["status"]["clusters"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "large-1"))
            .and_then(|c| c["drift"].as_array().filter(|d| !d.is_empty()).cloned())
            .ok_or_else(|| p["status"].to_string())
    });
    assert_eq!(
        drift[0]["path"], "Deployment/web/spec/replicas",
        "{drift:?}"
    );
    assert_eq!(drift[0]["hub"], "8");
    assert_eq!(drift[0]["member"], "2");
    assert_eq!(
        replicas_and_image(large, "large-1").unwrap().0,
        2,
        "not overwritten"
    );
    hub.ok(&[
        "patch",
        "placement",
        "web",
        "-n",
        "shop",
        "--type",
        "merge",
        "-p",
        r#"{"spec": {"apply": {"drift": "Correct"}}}"#,
    ]);
    wait_member(large, "large-1", 8, "nginx:1.28");
}

/// Deleting the Placement removes what it placed from the members.
pub fn release(hub: &Hub, members: &Members) {
    let (small, large) = (members.small, members.large);
    // Deleting the Placement removes what it placed (deletion: Delete, the default).
    hub.ok(&["delete", "placement", "web", "-n", "shop", "--wait=true"]);
    eventually("the members' copies are gone", || {
        match (
            member_web(small, "small-1").ok(),
            member_web(large, "large-1").ok(),
        ) {
            (None, None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let works = hub.ok(&["get", "works", "-A"]);
    assert!(!works.contains("shop.web"), "{works}");
}
