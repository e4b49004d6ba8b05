//! What a cluster allocates for itself, left out of what is applied to a member: a hub's
//! template may carry the hub's (or a source cluster's) allocations, which another cluster
//! would refuse (an immutable cluster IP, a node port taken) or share by mistake.
//!
//! ```text
//!  manifest ─► v1 Service   spec.clusterIP / clusterIPs (not "None": headless stays),
//!                           spec.ports[].nodePort, spec.healthCheckNodePort, and
//!                           ipFamilies [IPv4] with the ipFamilyPolicy a cluster
//!                           defaults (see `hub_families`)
//!              batch/v1 Job spec.selector and the template's controller-uid / job-name
//!                           labels, unless spec.manualSelector
//!              other kinds  unchanged (borrowed, not copied)
//! ```

use std::borrow::Cow;

use serde_json::Value;

/// The labels a Job's generated selector matches, set by the cluster on its template.
const JOB_LABELS: &[&str] = &[
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
];

/// `manifest` without what its cluster would allocate; borrowed when there is nothing to
/// remove.
pub(crate) fn without_allocated(manifest: &Value) -> Cow<'_, Value> {
    let kind = (
        manifest["apiVersion"].as_str().unwrap_or(""),
        manifest["kind"].as_str().unwrap_or(""),
    );
    match kind {
        ("v1", "Service") if service_allocations(manifest) => {
            let mut object = manifest.clone();
            prune_service(&mut object);
            Cow::Owned(object)
        }
        ("batch/v1", "Job") if job_allocations(manifest) => {
            let mut object = manifest.clone();
            prune_job(&mut object);
            Cow::Owned(object)
        }
        _ => Cow::Borrowed(manifest),
    }
}

/// A cluster IP that is not the headless `None`.
fn allocated_ip(ip: &Value) -> bool {
    ip.as_str().is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// Whether a Service's IP families are those the hub fills in when a client sets none:
/// `[IPv4]` (the hub's single family) with `SingleStack`, or `RequireDualStack` for a
/// headless Service without a selector. The hub cannot tell them from the same values set
/// by hand (both are stored alike), so both are left to the member, whose own defaults
/// follow its own families: an IPv6 or dual-stack member would refuse, or mislabel, the
/// hub's IPv4. Any other choice (IPv6, two families, PreferDualStack) is the client's and
/// is sent.
fn hub_families(spec: &Value) -> bool {
    let headless_without_selector =
        spec["clusterIP"] == "None" && spec["selector"].as_object().is_none_or(|s| s.is_empty());
    let defaulted_policy = match headless_without_selector {
        true => "RequireDualStack",
        false => "SingleStack",
    };
    spec["ipFamilies"] == serde_json::json!(["IPv4"])
        && (spec["ipFamilyPolicy"].is_null() || spec["ipFamilyPolicy"] == defaulted_policy)
}

fn service_allocations(service: &Value) -> bool {
    let spec = &service["spec"];
    hub_families(spec)
        || allocated_ip(&spec["clusterIP"])
        || spec["clusterIPs"]
            .as_array()
            .is_some_and(|ips| ips.iter().any(allocated_ip))
        || !spec["healthCheckNodePort"].is_null()
        || spec["ports"]
            .as_array()
            .is_some_and(|ports| ports.iter().any(|p| !p["nodePort"].is_null()))
}

fn prune_service(service: &mut Value) {
    if hub_families(&service["spec"])
        && let Some(spec) = service["spec"].as_object_mut()
    {
        spec.remove("ipFamilies");
        spec.remove("ipFamilyPolicy");
    }
    let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("clusterIP").is_some_and(allocated_ip) {
        spec.remove("clusterIP");
    }
    if spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .is_some_and(|ips| ips.iter().any(allocated_ip))
    {
        spec.remove("clusterIPs");
    }
    spec.remove("healthCheckNodePort");
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(port) = port.as_object_mut() {
            port.remove("nodePort");
        }
    }
}

fn job_allocations(job: &Value) -> bool {
    let spec = &job["spec"];
    if spec["manualSelector"] == true {
        return false;
    }
    let labels = &spec["template"]["metadata"]["labels"];
    !spec["selector"].is_null() || JOB_LABELS.iter().any(|l| labels.get(*l).is_some())
}

fn prune_job(job: &mut Value) {
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.remove("selector");
    let labels = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("metadata"))
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut);
    if let Some(labels) = labels {
        for label in JOB_LABELS {
            labels.remove(*label);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_services_allocations_are_left_to_the_member() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.12"],
                     "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                     "healthCheckNodePort": 31000, "externalTrafficPolicy": "Local",
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}});
        let pruned = without_allocated(&service);
        assert_eq!(
            *pruned,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                         "ports": [{"port": 80, "protocol": "TCP"}]}})
        );
        // Headless stays headless; a Service without allocations is not copied.
        let headless = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 5432}]}});
        assert!(matches!(without_allocated(&headless), Cow::Borrowed(_)));
        // The families a headless Service without a selector is given go too.
        let mut defaulted = headless.clone();
        defaulted["spec"]["ipFamilies"] = json!(["IPv4"]);
        defaulted["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
        assert_eq!(*without_allocated(&defaulted), headless);
        // Families a client chose are sent.
        for (families, policy) in [
            (json!(["IPv6"]), json!("SingleStack")),
            (json!(["IPv4", "IPv6"]), json!("PreferDualStack")),
            (json!(["IPv4"]), json!("PreferDualStack")),
        ] {
            let mut chosen = headless.clone();
            chosen["spec"]["selector"] = json!({"app": "db"});
            chosen["spec"]["ipFamilies"] = families;
            chosen["spec"]["ipFamilyPolicy"] = policy;
            assert!(
                matches!(without_allocated(&chosen), Cow::Borrowed(_)),
                "{chosen}"
            );
        }
    }

    #[test]
    fn a_jobs_generated_selector_is_left_to_the_member_unless_manual() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
            "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
                     "template": {"metadata": {"labels": {"app": "pi", "controller-uid": "u1",
                         "job-name": "pi", "batch.kubernetes.io/controller-uid": "u1",
                         "batch.kubernetes.io/job-name": "pi"}},
                         "spec": {"restartPolicy": "Never"}}}});
        assert_eq!(
            *without_allocated(&job),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
                "spec": {"template": {"metadata": {"labels": {"app": "pi"}},
                                      "spec": {"restartPolicy": "Never"}}}})
        );
        let mut manual = job.clone();
        manual["spec"]["manualSelector"] = json!(true);
        assert_eq!(*without_allocated(&manual), manual);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"selector": {"matchLabels": {"app": "web"}}}});
        assert!(matches!(without_allocated(&deployment), Cow::Borrowed(_)));
    }
}
