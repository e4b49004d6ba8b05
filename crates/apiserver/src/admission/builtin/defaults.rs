//! Defaults of built-in kinds, as kube-apiserver fills them when it decodes an object
//! (`pkg/apis/*/v1/defaults.go`: the `SetDefaults_*` functions, applied to every nested
//! struct they name). The published schemas carry none of these defaults, so they are
//! written here by hand; `fixtures/defaults.json` holds inputs and the objects a cluster
//! returns for them (written out by hand in `fixtures/defaults.py`, which makes the file).
//!
//! ```text
//!  kind ─► Secret      stringData folded into data (then dropped), type Opaque
//!          Service     type, sessionAffinity, ports (protocol, targetPort), traffic
//!                      policies, IP families
//!          Pod         pod spec ─► containers (pull policy by tag, termination message,
//!                      ports, probes, env) and volumes (modes)
//!          workloads   their own fields, then their pod template's pod spec
//!          (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, PodTemplate)
//! ```
//!
//! A default only fills a field that is absent (or null): what a client sent is kept.

use serde_json::{Map, Value, json};

use crate::admission::validation::default_field;

/// Fills in the defaults of the built-in kind `kind` of `group`.
pub(crate) fn apply(group: &str, kind: &str, object: &mut Value) {
    match (group, kind) {
        ("", "Secret") => secret(object),
        ("", "Service") => on_spec(object, service),
        ("", "Pod") => pod(object),
        ("", "PodTemplate") => template(at(object, "template")),
        ("", "ReplicationController") | ("apps", "ReplicaSet") => on_spec(object, |spec| {
            default_field(spec, "replicas", json!(1));
            template(at(spec, "template"));
        }),
        ("", "Endpoints") => {
            for subset in list_mut(object, "subsets") {
                for port in list_mut(subset, "ports") {
                    default_field(port, "protocol", json!("TCP"));
                }
            }
        }
        ("", "PersistentVolumeClaim") => on_spec(object, |spec| {
            default_field(spec, "volumeMode", json!("Filesystem"));
        }),
        ("apps", "Deployment") => on_spec(object, deployment),
        ("apps", "StatefulSet") => on_spec(object, stateful_set),
        ("apps", "DaemonSet") => on_spec(object, daemon_set),
        ("batch", "Job") => on_spec(object, job),
        ("batch", "CronJob") => on_spec(object, cron_job),
        ("networking.k8s.io", "NetworkPolicy") => on_spec(object, network_policy),
        ("autoscaling", "HorizontalPodAutoscaler") => on_spec(object, hpa),
        _ => {}
    }
}

/// The items of a list field, none when it is absent.
fn list_mut<'a>(value: &'a mut Value, field: &str) -> impl Iterator<Item = &'a mut Value> {
    value
        .get_mut(field)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Runs `default` on the object's spec, when it has one (an object).
fn on_spec(object: &mut Value, default: impl FnOnce(&mut Value)) {
    if let Some(spec) = at(object, "spec")
        && spec.is_object()
    {
        default(spec);
    }
}

/// The value at `path` under `value`, when every step is present.
fn nested<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(value, |v, field| at(v, field))
}

/// The items of the list at `path`, none when it is absent.
fn list_at<'a>(value: &'a mut Value, path: &[&str]) -> impl Iterator<Item = &'a mut Value> {
    nested(value, path)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// `value[field]` when present and not null: never inserted, as indexing would.
fn at<'a>(value: &'a mut Value, field: &str) -> Option<&'a mut Value> {
    value.get_mut(field).filter(|v| !v.is_null())
}

/// `object[field]` as an object, made one when absent (only where Kubernetes makes it).
fn object_at<'a>(object: &'a mut Value, field: &str) -> &'a mut Value {
    if object.get(field).is_none_or(Value::is_null)
        && let Some(map) = object.as_object_mut()
    {
        map.insert(field.to_owned(), Value::Object(Map::new()));
    }
    &mut object[field]
}

/// A Secret: `stringData` written into `data` (base64, replacing a key of the same name)
/// and never kept; `type` Opaque.
fn secret(object: &mut Value) {
    use base64::Engine;
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Map::new()));
        if data.is_null() {
            *data = Value::Object(Map::new());
        }
        if let Some(data) = data.as_object_mut() {
            for (key, value) in strings {
                let text = value.as_str().unwrap_or_default();
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, Value::String(encoded));
            }
        }
    }
    default_field(object, "type", json!("Opaque"));
}

fn service(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "type", json!("ClusterIP"));
    default_field(spec, "sessionAffinity", json!("None"));
    let kind = spec["type"].as_str().unwrap_or("").to_owned();
    if spec["sessionAffinity"] == "ClientIP" {
        let config = object_at(spec, "sessionAffinityConfig");
        let client = object_at(config, "clientIP");
        default_field(client, "timeoutSeconds", json!(10800));
    }
    for port in list_mut(spec, "ports") {
        default_field(port, "protocol", json!("TCP"));
        if port["targetPort"].is_null() || port["targetPort"] == 0 || port["targetPort"] == "" {
            port["targetPort"] = port["port"].clone();
        }
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        default_field(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        default_field(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if kind != "ExternalName" {
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
        // A single-stack IPv4 cluster: the service registry's families; a headless
        // Service without a selector asks for both (and gets the one there is).
        let headless_without_selector =
            spec["clusterIP"] == "None" && spec["selector"].as_object().is_none_or(Map::is_empty);
        let policy = match headless_without_selector {
            true => "RequireDualStack",
            false => "SingleStack",
        };
        default_field(spec, "ipFamilyPolicy", json!(policy));
        default_field(spec, "ipFamilies", json!(["IPv4"]));
    }
}

fn pod(object: &mut Value) {
    let Some(spec) = at(object, "spec").filter(|s| s.is_object()) else {
        return;
    };
    pod_spec(spec);
    default_field(spec, "enableServiceLinks", json!(true));
    // A container's requests default to its limits (SetDefaults_Pod).
    for list in ["initContainers", "containers"] {
        for container in list_mut(spec, list) {
            let Some(resources) = at(container, "resources") else {
                continue;
            };
            let Some(limits) = resources["limits"].as_object().cloned() else {
                continue;
            };
            let requests = object_at(resources, "requests");
            for (resource, amount) in limits {
                default_field(requests, &resource, amount);
            }
        }
    }
}

/// A pod template (`spec.template` of a workload).
fn template(template: Option<&mut Value>) {
    if let Some(spec) = template.and_then(|t| at(t, "spec"))
        && spec.is_object()
    {
        pod_spec(spec);
    }
}

fn pod_spec(spec: &mut Value) {
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    if spec["hostNetwork"] == true {
        for list in ["initContainers", "containers"] {
            for container in list_mut(spec, list) {
                for port in list_mut(container, "ports") {
                    if port["hostPort"].is_null() {
                        port["hostPort"] = port["containerPort"].clone();
                    }
                }
            }
        }
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in list_mut(spec, list) {
            container(c);
        }
    }
    for volume in list_mut(spec, "volumes") {
        self::volume(volume);
    }
}

/// The volume sources a volume may name; with none it is an emptyDir.
const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

fn volume(volume: &mut Value) {
    if !VOLUME_SOURCES
        .iter()
        .any(|s| volume.get(*s).is_some_and(|v| !v.is_null()))
    {
        volume["emptyDir"] = json!({});
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if volume[source].is_object() {
            default_field(&mut volume[source], "defaultMode", json!(420));
        }
    }
    if volume["hostPath"].is_object() {
        default_field(&mut volume["hostPath"], "type", json!(""));
    }
    for item in list_at(volume, &["downwardAPI", "items"]) {
        field_ref(at(item, "fieldRef"));
    }
    for source in list_at(volume, &["projected", "sources"]) {
        for item in list_at(source, &["downwardAPI", "items"]) {
            field_ref(at(item, "fieldRef"));
        }
        if let Some(token) = at(source, "serviceAccountToken") {
            default_field(token, "expirationSeconds", json!(3600));
        }
    }
}

fn field_ref(reference: Option<&mut Value>) {
    if let Some(reference) = reference.filter(|r| r.is_object()) {
        default_field(reference, "apiVersion", json!("v1"));
    }
}

/// `Always` for an image tagged `latest` or not tagged (and not pinned by digest), else
/// `IfNotPresent`.
pub(crate) fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    // The tag follows the last ':' after the last '/' (a registry's port is before it).
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn container(container: &mut Value) {
    if !container.is_object() {
        return;
    }
    if container["imagePullPolicy"].is_null() {
        let image = container["image"].as_str().unwrap_or("");
        container["imagePullPolicy"] = json!(pull_policy(image));
    }
    default_field(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default_field(container, "terminationMessagePolicy", json!("File"));
    // Not a default but what Go writes: a container's resources struct, even empty.
    default_field(container, "resources", json!({}));
    for port in list_mut(container, "ports") {
        default_field(port, "protocol", json!("TCP"));
    }
    for env in list_mut(container, "env") {
        field_ref(nested(env, &["valueFrom", "fieldRef"]));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = at(container, probe).filter(|p| p.is_object()) else {
            continue;
        };
        default_field(probe, "timeoutSeconds", json!(1));
        default_field(probe, "periodSeconds", json!(10));
        default_field(probe, "successThreshold", json!(1));
        default_field(probe, "failureThreshold", json!(3));
        http_get(at(probe, "httpGet"));
    }
    for hook in ["postStart", "preStop"] {
        http_get(nested(container, &["lifecycle", hook, "httpGet"]));
    }
}

fn http_get(action: Option<&mut Value>) {
    if let Some(action) = action.filter(|a| a.is_object()) {
        default_field(action, "path", json!("/"));
        default_field(action, "scheme", json!("HTTP"));
    }
}

fn deployment(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "replicas", json!(1));
    let strategy = object_at(spec, "strategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = object_at(strategy, "rollingUpdate");
        default_field(rolling, "maxUnavailable", json!("25%"));
        default_field(rolling, "maxSurge", json!("25%"));
    }
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    template(at(spec, "template"));
}

fn stateful_set(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = object_at(spec, "updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = object_at(strategy, "rollingUpdate");
        default_field(rolling, "partition", json!(0));
    }
    let retention = object_at(spec, "persistentVolumeClaimRetentionPolicy");
    default_field(retention, "whenDeleted", json!("Retain"));
    default_field(retention, "whenScaled", json!("Retain"));
    default_field(spec, "replicas", json!(1));
    default_field(spec, "revisionHistoryLimit", json!(10));
    for claim in list_mut(spec, "volumeClaimTemplates") {
        default_field(object_at(claim, "spec"), "volumeMode", json!("Filesystem"));
    }
    template(at(spec, "template"));
}

fn daemon_set(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    let strategy = object_at(spec, "updateStrategy");
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = object_at(strategy, "rollingUpdate");
        default_field(rolling, "maxUnavailable", json!(1));
        default_field(rolling, "maxSurge", json!(0));
    }
    default_field(spec, "revisionHistoryLimit", json!(10));
    template(at(spec, "template"));
}

fn job(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    default_field(spec, "parallelism", json!(1));
    if spec["backoffLimit"].is_null() {
        spec["backoffLimit"] = match spec["backoffLimitPerIndex"].is_null() {
            true => json!(6),
            false => json!(i32::MAX),
        };
    }
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    if spec["podReplacementPolicy"].is_null() {
        spec["podReplacementPolicy"] = match spec["podFailurePolicy"].is_null() {
            true => json!("TerminatingOrFailed"),
            false => json!("Failed"),
        };
    }
    for rule in list_at(spec, &["podFailurePolicy", "rules"]) {
        for pattern in list_mut(rule, "onPodConditions") {
            default_field(pattern, "status", json!("True"));
        }
    }
    template(at(spec, "template"));
}

fn cron_job(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "concurrencyPolicy", json!("Allow"));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "successfulJobsHistoryLimit", json!(3));
    default_field(spec, "failedJobsHistoryLimit", json!(1));
    // The job template's pod template is defaulted as a pod template; the job spec's own
    // defaults are the Job's, filled when a Job is made from it.
    template(nested(spec, &["jobTemplate", "spec", "template"]));
}

fn network_policy(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    for direction in ["ingress", "egress"] {
        for rule in list_mut(spec, direction) {
            for port in list_mut(rule, "ports") {
                default_field(port, "protocol", json!("TCP"));
            }
        }
    }
    if spec["policyTypes"].as_array().is_none_or(Vec::is_empty) {
        let mut types = vec![json!("Ingress")];
        if spec["egress"].as_array().is_some_and(|e| !e.is_empty()) {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = Value::Array(types);
    }
}

fn hpa(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    default_field(spec, "minReplicas", json!(1));
    if spec["metrics"].as_array().is_none_or(Vec::is_empty) {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}]);
    }
    if let Some(behavior) = at(spec, "behavior").filter(|b| b.is_object()) {
        let up = object_at(behavior, "scaleUp");
        default_field(up, "stabilizationWindowSeconds", json!(0));
        default_field(up, "selectPolicy", json!("Max"));
        default_field(
            up,
            "policies",
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                   {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
        let down = object_at(behavior, "scaleDown");
        default_field(down, "selectPolicy", json!("Max"));
        default_field(
            down,
            "policies",
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(pull_policy("nginx"), "Always");
        assert_eq!(pull_policy("nginx:latest"), "Always");
        assert_eq!(pull_policy("nginx:1.14.2"), "IfNotPresent");
        assert_eq!(pull_policy("registry:5000/nginx"), "Always");
        assert_eq!(pull_policy("registry:5000/nginx:1.2"), "IfNotPresent");
        assert_eq!(pull_policy("nginx@sha256:abc"), "IfNotPresent");
    }

    /// Every case of `fixtures/defaults.json`: an input of a kind, and the object a
    /// Kubernetes v1.32 API server returns for it (its documented and coded defaults).
    #[test]
    fn defaults_match_the_recorded_objects() {
        let cases: Vec<Value> =
            serde_json::from_str(include_str!("fixtures/defaults.json")).unwrap();
        assert!(cases.len() >= 30, "{} cases", cases.len());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let (group, kind) = match case["input"]["apiVersion"].as_str().unwrap() {
                version if version.contains('/') => (
                    version.split('/').next().unwrap().to_owned(),
                    case["input"]["kind"].as_str().unwrap().to_owned(),
                ),
                _ => (
                    String::new(),
                    case["input"]["kind"].as_str().unwrap().to_owned(),
                ),
            };
            let mut object = case["input"].clone();
            apply(&group, &kind, &mut object);
            assert_eq!(object, case["output"], "{name}");
            // Defaulting twice changes nothing.
            apply(&group, &kind, &mut object);
            assert_eq!(object, case["output"], "{name}, defaulted again");
        }
    }
}
