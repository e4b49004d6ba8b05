//! Validation of built-in kinds (422 with `causes`), the rules of kube-apiserver's
//! `pkg/apis/*/validation` that users meet daily, written by hand where the schema cannot
//! say them: required fields (from the schema), names and label syntax, unique container
//! and port names, port ranges, enums, a workload's selector matching its template, and
//! the fields that never change.
//!
//! ```text
//!  object (decoded, defaulted) ─► metadata: labels, annotations (every kind)
//!                              ─► required fields of the schema (spec side)
//!                              ─► the kind's rules ─► pod spec (templates, Pods)
//!  old object (an update)      ─► immutable fields (selectors, clusterIP, Job template,
//!                                 Secret/ConfigMap data once `immutable`, …)
//!  causes ─► none: admitted      some: 422 Invalid naming every field
//! ```

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::admission::schema::resolved_facts;
use crate::admission::validation::{Causes, check_enum, is_qualified_name, items, text};
use crate::discovery::openapi;
use crate::registry::object::{NameRule, check_name};
use crate::registry::selector::LabelSelector;

/// The most bytes of annotations an object may have (keys and values).
const ANNOTATIONS_MAX: usize = 256 * 1024;
/// The most bytes of data a ConfigMap or Secret may hold.
const DATA_MAX: usize = 1024 * 1024;

/// Every cause of a write of `object` of the built-in kind `kind` of `group` (`old`: the
/// stored object on an update; `subresource` the subresource written, `""` for none).
pub(crate) fn validate(
    group: &str,
    version: &str,
    kind: &str,
    object: &Value,
    old: Option<&Value>,
    subresource: &str,
) -> Vec<crate::http::error::Cause> {
    let mut causes = Causes::default();
    metadata(&mut causes, &object["metadata"], "metadata");
    // A status (or scale) write is checked for what it may change; the spec is as stored.
    if !subresource.is_empty() {
        return causes.0;
    }
    if let Some(definition) = openapi::builtin_definition(group, version, kind)
        .and_then(openapi::builtin_schema)
        .filter(|_| checks_required(group, kind))
    {
        required(&mut causes, definition, object, "");
    }
    let spec = &object["spec"];
    let old_spec = old.map(|o| &o["spec"]);
    match (group, kind) {
        ("", "Pod") => pod_spec(&mut causes, spec, "spec"),
        ("", "PodTemplate") => pod_template(&mut causes, &object["template"], "template"),
        ("", "Service") => service(&mut causes, spec, old_spec),
        ("", "ConfigMap") => config_map(&mut causes, object, old),
        ("", "Secret") => secret(&mut causes, object, old),
        ("", "Namespace") => {}
        ("apps", "Deployment") => {
            workload(&mut causes, spec, old_spec, true);
            deployment(&mut causes, spec);
        }
        ("apps", "ReplicaSet") => workload(&mut causes, spec, old_spec, true),
        ("apps", "StatefulSet") => {
            workload(&mut causes, spec, None, true);
            stateful_set(&mut causes, spec, old_spec);
        }
        ("apps", "DaemonSet") => {
            workload(&mut causes, spec, old_spec, true);
            rolling_update(
                &mut causes,
                &spec["updateStrategy"],
                "spec.updateStrategy",
                false,
            );
        }
        ("batch", "Job") => job(&mut causes, spec, old_spec),
        ("batch", "CronJob") => cron_job(&mut causes, object),
        ("autoscaling", "HorizontalPodAutoscaler") => hpa(&mut causes, spec),
        ("policy", "PodDisruptionBudget")
            if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() =>
        {
            causes.invalid(
                "spec",
                spec,
                "minAvailable and maxUnavailable cannot be both set",
            );
        }
        _ => {}
    }
    // A field the schema requires and a rule also names is said once.
    if causes.0.len() < 2 {
        return causes.0;
    }
    let mut seen = HashSet::new();
    causes
        .0
        .into_iter()
        .filter(|c| seen.insert((c.field.clone(), c.message.clone())))
        .collect()
}

/// Whether the schema's `required` lists are checked for a kind: those of kinds whose own
/// validation (RBAC, CRDs, admission configurations, CSRs) names them already, and Events
/// (one resource in two versions, whose required fields differ), are not.
fn checks_required(group: &str, kind: &str) -> bool {
    match group {
        "" => kind != "Event",
        "apps"
        | "batch"
        | "networking.k8s.io"
        | "policy"
        | "autoscaling"
        | "discovery.k8s.io"
        | "coordination.k8s.io" => true,
        _ => false,
    }
}

/// The fields the schema marks required, below `value` (a status is the server's and
/// controllers' and is not checked; fields kube-apiserver does not require are left out).
fn required(causes: &mut Causes, schema: &Value, value: &Value, path: &str) {
    let mut path = path.to_owned();
    required_at(causes, schema, value, &mut path);
}

/// [`required`] with the field's path in one buffer, grown and cut back as the walk goes
/// down and up (a string is made only for a cause).
fn required_at(causes: &mut Causes, schema: &Value, value: &Value, path: &mut String) {
    // A scalar holds no fields: its schema is not even looked up.
    if !(value.is_object() || value.is_array()) {
        return;
    }
    let (_, facts) = resolved_facts(schema);
    let base = path.len();
    match value {
        Value::Object(map) => {
            for field in facts.required {
                let field = text(field);
                let absent = map.get(field).is_none_or(Value::is_null);
                // Required in the schema, not in kube-apiserver's validation: a
                // StatefulSet's serviceName (since 1.30), a NetworkPolicy's podSelector
                // (empty selects every pod), an EndpointSlice's endpoints.
                let optional = matches!(
                    field,
                    "serviceName" | "metadata" | "podSelector" | "endpoints"
                );
                if absent && !optional {
                    causes.required(&join(path, field), "");
                }
            }
            let Some(properties) = facts.properties else {
                return;
            };
            for (key, field) in map {
                // A scalar holds no fields: its schema is not looked up.
                if !(field.is_object() || field.is_array())
                    || (base == 0 && (key == "status" || key == "metadata"))
                {
                    continue;
                }
                if let Some(field_schema) = properties.get(key) {
                    if base > 0 {
                        path.push('.');
                    }
                    path.push_str(key);
                    required_at(causes, field_schema, field, path);
                    path.truncate(base);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item_schema) = facts.items {
                for (i, item) in list.iter().enumerate() {
                    if !(item.is_object() || item.is_array()) {
                        continue;
                    }
                    let _ = std::fmt::Write::write_fmt(path, format_args!("[{i}]"));
                    required_at(causes, item_schema, item, path);
                    path.truncate(base);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, field: &str) -> String {
    match path {
        "" => field.to_owned(),
        path => format!("{path}.{field}"),
    }
}

/// Why `value` is not a label value, if it is not.
fn label_value_problem(value: &str) -> Option<&'static str> {
    if value.len() > 63 {
        return Some("must be no more than 63 characters");
    }
    let ok = value.is_empty()
        || (value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value.as_bytes()[0].is_ascii_alphanumeric()
            && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric());
    (!ok).then_some(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    )
}

const QUALIFIED_NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName'), at most 63 characters";

/// Labels (qualified keys, label values) and annotations (qualified keys, 256 KiB) of an
/// object's (or a template's) metadata at `path`.
fn metadata(causes: &mut Causes, meta: &Value, path: &str) {
    let Some(meta) = meta.as_object() else {
        return;
    };
    if let Some(labels) = meta.get("labels") {
        labels_at(causes, labels, path);
    }
    let mut size = 0;
    for (key, value) in meta
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if !is_qualified_name_ignoring_case(key) {
            causes.invalid(&format!("{path}.annotations"), &json!(key), QUALIFIED_NAME);
        }
        size += key.len() + text(value).len();
    }
    if size > ANNOTATIONS_MAX {
        causes.push_too_long(
            &format!("{path}.annotations"),
            &format!("may not be more than {ANNOTATIONS_MAX} bytes"),
        );
    }
}

/// The labels of the metadata at `meta` (`{meta}.labels`), the field's path made only for a
/// cause.
fn labels_at(causes: &mut Causes, labels: &Value, meta: &str) {
    for (key, value) in labels.as_object().into_iter().flatten() {
        if !is_qualified_name(key) {
            causes.invalid(&format!("{meta}.labels"), &json!(key), QUALIFIED_NAME);
        }
        if let Some(problem) = label_value_problem(text(value)) {
            causes.invalid(&format!("{meta}.labels[{key}]"), value, problem);
        }
    }
}

/// [`is_qualified_name`] of `key` in lower case (annotation keys are checked so), without a
/// lower-case copy unless the key has an upper-case letter.
fn is_qualified_name_ignoring_case(key: &str) -> bool {
    match key.bytes().any(|b| b.is_ascii_uppercase()) {
        true => is_qualified_name(&key.to_ascii_lowercase()),
        false => is_qualified_name(key),
    }
}

/// [`check_enum`] of the field `{path}.{field}`, its path made only for a cause.
fn enum_at(causes: &mut Causes, path: &str, field: &str, value: &Value, allowed: &[&str]) {
    if !value.is_null() && !value.as_str().is_some_and(|v| allowed.contains(&v)) {
        check_enum(causes, &format!("{path}.{field}"), value, allowed);
    }
}

/// Whether `name` is an IANA service name (a named port): at most 15 lowercase
/// alphanumerics and '-', a letter among them, no '--', not starting or ending with '-'.
fn is_port_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.contains("--")
        && !name.starts_with('-')
        && !name.ends_with('-')
}

const PORT_NAME: &str = "must contain only lowercase alphanumeric characters (a-z, 0-9), and '-'; must contain at least one letter (a-z); must not contain consecutive hyphens; must be no more than 15 characters";

fn is_label_name(name: &str) -> bool {
    check_name(name, NameRule::Label).is_none()
}

const LABEL_NAME: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc')";

/// Whether `port` is a port number, in 1..=65535.
fn is_port_number(port: &Value) -> bool {
    port.as_i64().is_some_and(|p| (1..=65535).contains(&p))
}

/// A port number in 1..=65535.
fn port_number(causes: &mut Causes, field: &str, port: &Value) {
    if !is_port_number(port) {
        causes.invalid(field, port, "must be between 1 and 65535, inclusive");
    }
}

/// A port given by number or by name.
fn int_or_name(causes: &mut Causes, field: &str, port: &Value) {
    match port {
        Value::String(name) => {
            if !is_port_name(name) {
                causes.invalid(field, port, PORT_NAME);
            }
        }
        port => port_number(causes, field, port),
    }
}

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

fn pod_template(causes: &mut Causes, template: &Value, path: &str) {
    if template.is_null() {
        causes.required(path, "");
        return;
    }
    let metadata_path = format!("{path}.metadata");
    metadata(causes, &template["metadata"], &metadata_path);
    let mut spec_path = metadata_path;
    spec_path.truncate(path.len());
    spec_path.push_str(".spec");
    pod_spec(causes, &template["spec"], &spec_path);
}

fn pod_spec(causes: &mut Causes, spec: &Value, path: &str) {
    // Pods have a few containers and volumes: their names are compared in a list.
    let mut names: Vec<&str> = Vec::new();
    let volumes: Vec<&str> = items(&spec["volumes"])
        .iter()
        .map(|v| text(&v["name"]))
        .collect();
    for (i, volume) in items(&spec["volumes"]).iter().enumerate() {
        let name = volumes[i];
        let at = || format!("{path}.volumes[{i}].name");
        if !name.is_empty() && !is_label_name(name) {
            causes.invalid(&at(), &volume["name"], LABEL_NAME);
        }
        if volumes[..i].contains(&name) {
            causes.duplicate(&at(), &volume["name"]);
        }
    }
    if items(&spec["containers"]).is_empty() {
        causes.required(&format!("{path}.containers"), "");
    }
    let mut at = String::with_capacity(path.len() + 24);
    for list in ["initContainers", "containers"] {
        for (i, c) in items(&spec[list]).iter().enumerate() {
            at.clear();
            let _ = std::fmt::Write::write_fmt(&mut at, format_args!("{path}.{list}[{i}]"));
            container(causes, c, &at, &mut names, &volumes);
        }
    }
    enum_at(
        causes,
        path,
        "restartPolicy",
        &spec["restartPolicy"],
        &["Always", "Never", "OnFailure"],
    );
    enum_at(
        causes,
        path,
        "dnsPolicy",
        &spec["dnsPolicy"],
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    );
    if let Some(seconds) = spec["terminationGracePeriodSeconds"].as_i64()
        && seconds < 0
    {
        causes.invalid(
            &format!("{path}.terminationGracePeriodSeconds"),
            &spec["terminationGracePeriodSeconds"],
            "must be greater than or equal to 0",
        );
    }
    if let Some(seconds) = spec["activeDeadlineSeconds"].as_i64()
        && seconds < 1
    {
        causes.invalid(
            &format!("{path}.activeDeadlineSeconds"),
            &spec["activeDeadlineSeconds"],
            "must be between 1 and 2147483647, inclusive",
        );
    }
    for (key, value) in spec["nodeSelector"].as_object().into_iter().flatten() {
        let at = || format!("{path}.nodeSelector");
        if !is_qualified_name(key) {
            causes.invalid(&at(), &json!(key), QUALIFIED_NAME);
        }
        if let Some(problem) = label_value_problem(text(value)) {
            causes.invalid(&at(), value, problem);
        }
    }
}

/// A container's rules; `names`: the names of the pod's containers checked before it.
fn container<'c>(
    causes: &mut Causes,
    c: &'c Value,
    path: &str,
    names: &mut Vec<&'c str>,
    volumes: &[&str],
) {
    let name = text(&c["name"]);
    if !name.is_empty() {
        if !is_label_name(name) {
            causes.invalid(&format!("{path}.name"), &c["name"], LABEL_NAME);
        }
        match names.contains(&name) {
            true => causes.duplicate(&format!("{path}.name"), &c["name"]),
            false => names.push(name),
        }
    }
    if text(&c["image"]).trim().is_empty() {
        causes.required(&format!("{path}.image"), "");
    }
    enum_at(
        causes,
        path,
        "imagePullPolicy",
        &c["imagePullPolicy"],
        &["Always", "IfNotPresent", "Never"],
    );
    enum_at(
        causes,
        path,
        "terminationMessagePolicy",
        &c["terminationMessagePolicy"],
        &["File", "FallbackToLogsOnError"],
    );
    let mut port_names: Vec<&str> = Vec::new();
    for (i, port) in items(&c["ports"]).iter().enumerate() {
        let at = |field: &str| format!("{path}.ports[{i}].{field}");
        if let Some(name) = port["name"].as_str().filter(|n| !n.is_empty()) {
            if !is_port_name(name) {
                causes.invalid(&at("name"), &port["name"], PORT_NAME);
            } else if port_names.contains(&name) {
                causes.duplicate(&at("name"), &port["name"]);
            } else {
                port_names.push(name);
            }
        }
        let container_port = &port["containerPort"];
        if !container_port.is_null() && !is_port_number(container_port) {
            port_number(causes, &at("containerPort"), container_port);
        }
        if let Some(host) = port["hostPort"].as_i64()
            && host != 0
            && !is_port_number(&port["hostPort"])
        {
            port_number(causes, &at("hostPort"), &port["hostPort"]);
        }
        let protocol = &port["protocol"];
        if !protocol.is_null() && !protocol.as_str().is_some_and(|p| PROTOCOLS.contains(&p)) {
            check_enum(causes, &at("protocol"), protocol, PROTOCOLS);
        }
    }
    for (i, mount) in items(&c["volumeMounts"]).iter().enumerate() {
        let name = text(&mount["name"]);
        if !name.is_empty() && !volumes.contains(&name) {
            causes.not_found(&format!("{path}.volumeMounts[{i}].name"), &mount["name"]);
        }
    }
    for (i, env) in items(&c["env"]).iter().enumerate() {
        let name = text(&env["name"]);
        if !name.is_empty() && (name.contains('=') || name.bytes().any(|b| !(32..127).contains(&b)))
        {
            causes.invalid(
                &format!("{path}.env[{i}].name"),
                &env["name"],
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            );
        }
    }
    for (resource, amount) in c["resources"]["requests"].as_object().into_iter().flatten() {
        let limit = &c["resources"]["limits"][resource];
        if let (Some(request), Some(limit)) = (quantity(amount), quantity(limit))
            && request > limit
        {
            causes.invalid(
                &format!("{path}.resources.requests"),
                amount,
                &format!(
                    "must be less than or equal to {resource} limit of {}",
                    text_of(&c["resources"]["limits"][resource])
                ),
            );
        }
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A quantity's value as a float, close enough to order requests against limits.
fn quantity(value: &Value) -> Option<f64> {
    let text = text_of(value);
    if value.is_null() {
        return None;
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => 10f64.powi(exponent.get(1..)?.parse().ok()?),
    };
    Some(number * scale)
}

/// What Deployments, ReplicaSets, StatefulSets and DaemonSets share: replicas, a selector
/// that is not empty and matches the template's labels, never changing in `apps/v1`
/// (`old`: the stored spec), and a pod template whose restart policy is Always.
fn workload(causes: &mut Causes, spec: &Value, old: Option<&Value>, selector_fixed: bool) {
    if let Some(replicas) = spec["replicas"].as_i64()
        && replicas < 0
    {
        causes.invalid(
            "spec.replicas",
            &spec["replicas"],
            "must be greater than or equal to 0",
        );
    }
    non_negative(causes, spec, "spec", "minReadySeconds");
    non_negative(causes, spec, "spec", "revisionHistoryLimit");
    let selector = &spec["selector"];
    let template_labels = &spec["template"]["metadata"]["labels"];
    if !selector.is_null() {
        match LabelSelector::from_object(selector) {
            Err(e) => causes.invalid("spec.selector", selector, &e),
            Ok(parsed) if parsed.is_empty() => {
                causes.invalid(
                    "spec.selector",
                    selector,
                    "empty selector is invalid for deployment",
                );
            }
            Ok(parsed) => {
                let matches =
                    parsed.matches_with(|k| template_labels.get(k).and_then(Value::as_str));
                if !spec["template"].is_null() && !matches {
                    causes.invalid(
                        "spec.template.metadata.labels",
                        template_labels,
                        "`selector` does not match template `labels`",
                    );
                }
            }
        }
    }
    if let Some(old) = old
        && selector_fixed
        && !old["selector"].is_null()
        && old["selector"] != *selector
    {
        causes.invalid("spec.selector", selector, "field is immutable");
    }
    if !spec["template"].is_null() {
        pod_template(causes, &spec["template"], "spec.template");
        let policy = &spec["template"]["spec"]["restartPolicy"];
        if !policy.is_null() && policy != "Always" {
            causes.unsupported("spec.template.spec.restartPolicy", policy, &["Always"]);
        }
    }
}

fn non_negative(causes: &mut Causes, spec: &Value, path: &str, field: &str) {
    if let Some(n) = spec[field].as_i64()
        && n < 0
    {
        causes.invalid(
            &format!("{path}.{field}"),
            &spec[field],
            "must be greater than or equal to 0",
        );
    }
}

/// An int-or-percent (`maxSurge`), its value if an integer or the percentage.
/// `field` names the field, made only for a cause.
fn int_or_percent(causes: &mut Causes, field: impl Fn() -> String, value: &Value) -> Option<i64> {
    match value {
        Value::Null => None,
        Value::String(text) => {
            let number = text.strip_suffix('%').and_then(|n| n.parse::<i64>().ok());
            match number {
                Some(n) if (0..=100).contains(&n) => Some(n),
                Some(_) => {
                    causes.invalid(&field(), value, "must not be greater than 100%");
                    None
                }
                None => {
                    causes.invalid(
                        &field(),
                        value,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    );
                    None
                }
            }
        }
        value => {
            let n = value.as_i64().unwrap_or(0);
            if n < 0 {
                causes.invalid(&field(), value, "must be greater than or equal to 0");
            }
            Some(n)
        }
    }
}

fn rolling_update(causes: &mut Causes, strategy: &Value, path: &str, deployment: bool) {
    let types: &[&str] = match deployment {
        true => &["Recreate", "RollingUpdate"],
        false => &["OnDelete", "RollingUpdate"],
    };
    enum_at(causes, path, "type", &strategy["type"], types);
    let rolling = &strategy["rollingUpdate"];
    if strategy["type"] != "RollingUpdate" {
        if !rolling.is_null() {
            causes.forbidden(
                &format!("{path}.rollingUpdate"),
                &format!(
                    "may not be specified when strategy `type` is '{}'",
                    text(&strategy["type"])
                ),
            );
        }
        return;
    }
    let unavailable = int_or_percent(
        causes,
        || format!("{path}.rollingUpdate.maxUnavailable"),
        &rolling["maxUnavailable"],
    );
    let surge = int_or_percent(
        causes,
        || format!("{path}.rollingUpdate.maxSurge"),
        &rolling["maxSurge"],
    );
    if unavailable == Some(0) && surge == Some(0) {
        causes.invalid(
            &format!("{path}.rollingUpdate.maxUnavailable"),
            &rolling["maxUnavailable"],
            "may not be 0 when `maxSurge` is 0",
        );
    }
}

fn deployment(causes: &mut Causes, spec: &Value) {
    rolling_update(causes, &spec["strategy"], "spec.strategy", true);
    if let (Some(deadline), minimum) = (
        spec["progressDeadlineSeconds"].as_i64(),
        spec["minReadySeconds"].as_i64().unwrap_or(0),
    ) && deadline <= minimum
    {
        causes.invalid(
            "spec.progressDeadlineSeconds",
            &spec["progressDeadlineSeconds"],
            "must be greater than minReadySeconds",
        );
    }
}

fn stateful_set(causes: &mut Causes, spec: &Value, old: Option<&Value>) {
    check_enum(
        causes,
        "spec.podManagementPolicy",
        &spec["podManagementPolicy"],
        &["OrderedReady", "Parallel"],
    );
    check_enum(
        causes,
        "spec.updateStrategy.type",
        &spec["updateStrategy"]["type"],
        &["OnDelete", "RollingUpdate"],
    );
    let Some(old) = old else {
        return;
    };
    const MUTABLE: &[&str] = &[
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let fixed = |s: &Value| {
        let mut s = s.clone();
        if let Some(map) = s.as_object_mut() {
            map.retain(|k, _| !MUTABLE.contains(&k.as_str()));
        }
        s
    };
    if fixed(spec) != fixed(old) {
        causes.forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        );
    }
}

fn job(causes: &mut Causes, spec: &Value, old: Option<&Value>) {
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ] {
        non_negative(causes, spec, "spec", field);
    }
    check_enum(
        causes,
        "spec.completionMode",
        &spec["completionMode"],
        &["Indexed", "NonIndexed"],
    );
    if spec["completionMode"] == "Indexed" && spec["completions"].is_null() {
        causes.required("spec.completions", "when completion mode is Indexed");
    }
    if !spec["selector"].is_null()
        && let Err(e) = LabelSelector::from_object(&spec["selector"])
    {
        causes.invalid("spec.selector", &spec["selector"], &e);
    }
    if !spec["template"].is_null() {
        pod_template(causes, &spec["template"], "spec.template");
        let policy = &spec["template"]["spec"]["restartPolicy"];
        if !policy.is_null() && policy != "OnFailure" && policy != "Never" {
            causes.unsupported(
                "spec.template.spec.restartPolicy",
                policy,
                &["OnFailure", "Never"],
            );
        }
    }
    let Some(old) = old else {
        return;
    };
    for field in [
        "selector",
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
    ] {
        if !old[field].is_null() && old[field] != spec[field] {
            causes.invalid(&format!("spec.{field}"), &spec[field], "field is immutable");
        }
    }
    if !old["completions"].is_null()
        && old["completions"] != spec["completions"]
        && spec["completionMode"] != "Indexed"
    {
        causes.invalid(
            "spec.completions",
            &spec["completions"],
            "field is immutable",
        );
    }
    // A Job's template may change only while it is suspended (before it starts).
    if old["template"] != spec["template"] && old["suspend"] != true {
        causes.invalid("spec.template", &spec["template"], "field is immutable");
    }
}

fn cron_job(causes: &mut Causes, object: &Value) {
    let name = text(&object["metadata"]["name"]);
    if name.len() > 52 {
        causes.invalid(
            "metadata.name",
            &object["metadata"]["name"],
            "must be no more than 52 characters",
        );
    }
    let spec = &object["spec"];
    if let Some(schedule) = spec["schedule"].as_str()
        && !is_schedule(schedule)
    {
        causes.invalid(
            "spec.schedule",
            &spec["schedule"],
            "unparseable cron schedule",
        );
    }
    check_enum(
        causes,
        "spec.concurrencyPolicy",
        &spec["concurrencyPolicy"],
        &["Allow", "Forbid", "Replace"],
    );
    for field in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        non_negative(causes, spec, "spec", field);
    }
    let template = &spec["jobTemplate"]["spec"]["template"];
    if !template.is_null() {
        pod_template(causes, template, "spec.jobTemplate.spec.template");
        let policy = &template["spec"]["restartPolicy"];
        if !policy.is_null() && policy != "OnFailure" && policy != "Never" {
            causes.unsupported(
                "spec.jobTemplate.spec.template.spec.restartPolicy",
                policy,
                &["OnFailure", "Never"],
            );
        }
    }
}

/// A cron schedule: a macro (`@hourly`, …) or five fields of numbers, names, `*`, ranges,
/// lists and steps (an optional `TZ=`/`CRON_TZ=` prefix).
fn is_schedule(schedule: &str) -> bool {
    let schedule = schedule.trim();
    if schedule.starts_with('@') {
        return [
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
        ]
        .contains(&schedule)
            || schedule.starts_with("@every ");
    }
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.len() != 5 {
        return false;
    }
    let ranges = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)];
    fields.iter().zip(ranges).all(|(field, (low, high))| {
        field.split(',').all(|part| {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => (range, Some(step)),
                None => (part, None),
            };
            if step.is_some_and(|s| s.parse::<u32>().map_or(true, |s| s == 0)) {
                return false;
            }
            let bound = |v: &str| {
                v.parse::<u32>().is_ok_and(|n| (low..=high).contains(&n))
                    || (v.len() == 3 && v.bytes().all(|b| b.is_ascii_alphabetic()))
            };
            match range {
                "*" | "?" => true,
                range => match range.split_once('-') {
                    Some((a, b)) => bound(a) && bound(b),
                    None => bound(range),
                },
            }
        })
    })
}

fn hpa(causes: &mut Causes, spec: &Value) {
    let max = spec["maxReplicas"].as_i64();
    if let Some(max) = max
        && max < 1
    {
        causes.invalid(
            "spec.maxReplicas",
            &spec["maxReplicas"],
            "must be greater than 0",
        );
    }
    if let Some(min) = spec["minReplicas"].as_i64() {
        if min < 1 {
            causes.invalid(
                "spec.minReplicas",
                &spec["minReplicas"],
                "must be greater than or equal to 1",
            );
        }
        if max.is_some_and(|max| min > max) {
            causes.invalid(
                "spec.minReplicas",
                &spec["minReplicas"],
                "must be less than or equal to maxReplicas",
            );
        }
    }
}

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

fn service(causes: &mut Causes, spec: &Value, old: Option<&Value>) {
    check_enum(causes, "spec.type", &spec["type"], SERVICE_TYPES);
    check_enum(
        causes,
        "spec.sessionAffinity",
        &spec["sessionAffinity"],
        &["ClientIP", "None"],
    );
    let kind = text(&spec["type"]);
    let headless = spec["clusterIP"] == "None";
    let ports = items(&spec["ports"]);
    if ports.is_empty() && kind != "ExternalName" && !headless {
        causes.required("spec.ports", "");
    }
    if kind == "ExternalName" && text(&spec["externalName"]).is_empty() {
        causes.required("spec.externalName", "");
    }
    let mut names = HashSet::new();
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = text(&port["name"]);
        if name.is_empty() {
            if ports.len() > 1 {
                causes.required(&format!("{at}.name"), "");
            }
        } else if !is_label_name(name) {
            causes.invalid(&format!("{at}.name"), &port["name"], LABEL_NAME);
        } else if !names.insert(name) {
            causes.duplicate(&format!("{at}.name"), &port["name"]);
        }
        if !port["port"].is_null() {
            port_number(causes, &format!("{at}.port"), &port["port"]);
        }
        check_enum(
            causes,
            &format!("{at}.protocol"),
            &port["protocol"],
            PROTOCOLS,
        );
        if !port["targetPort"].is_null() {
            int_or_name(causes, &format!("{at}.targetPort"), &port["targetPort"]);
        }
        if let Some(node_port) = port["nodePort"].as_i64()
            && node_port != 0
        {
            if kind != "NodePort" && kind != "LoadBalancer" {
                causes.forbidden(
                    &format!("{at}.nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                );
            }
            port_number(causes, &format!("{at}.nodePort"), &port["nodePort"]);
        }
        let key = (port["port"].to_string(), text(&port["protocol"]).to_owned());
        if !seen.insert(key) {
            causes.duplicate(
                &at,
                &json!({"port": port["port"], "protocol": port["protocol"]}),
            );
        }
    }
    for (key, value) in spec["selector"].as_object().into_iter().flatten() {
        if !is_qualified_name(key) {
            causes.invalid("spec.selector", &json!(key), QUALIFIED_NAME);
        }
        if let Some(problem) = label_value_problem(text(value)) {
            causes.invalid("spec.selector", value, problem);
        }
    }
    if let Some(ip) = spec["clusterIP"].as_str()
        && !ip.is_empty()
        && ip != "None"
        && ip.parse::<std::net::IpAddr>().is_err()
    {
        causes.invalid(
            "spec.clusterIP",
            &spec["clusterIP"],
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        );
    }
    // A cluster IP stays, unless the type goes to or from ExternalName.
    if let Some(old) = old {
        let old_ip = text(&old["clusterIP"]);
        let external = kind == "ExternalName" || old["type"] == "ExternalName";
        if !old_ip.is_empty() && !external && text(&spec["clusterIP"]) != old_ip {
            causes.invalid("spec.clusterIP", &spec["clusterIP"], "field is immutable");
        }
    }
}

/// Keys of a ConfigMap's or Secret's data: `[-._a-zA-Z0-9]+`, at most 253 bytes.
fn data_keys(causes: &mut Causes, data: &Value, field: &str) -> usize {
    let mut size = 0;
    for (key, value) in data.as_object().into_iter().flatten() {
        let ok = !key.is_empty()
            && key.len() <= 253
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            && key != "."
            && key != "..";
        if !ok {
            causes.invalid(
                field,
                &json!(key),
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            );
        }
        size += text(value).len();
    }
    size
}

/// `immutable: true` fixes the data and the flag itself.
fn immutable(causes: &mut Causes, object: &Value, old: Option<&Value>, fields: &[&str]) {
    let Some(old) = old else {
        return;
    };
    if old["immutable"] != true {
        return;
    }
    if object["immutable"] != true {
        causes.forbidden("immutable", "field is immutable when `immutable` is set");
    }
    for field in fields {
        let empty = |v: &Value| v.as_object().is_none_or(|m| m.is_empty());
        let same = old[field] == object[field] || (empty(&old[field]) && empty(&object[field]));
        if !same {
            causes.forbidden(field, "field is immutable when `immutable` is set");
        }
    }
}

fn config_map(causes: &mut Causes, object: &Value, old: Option<&Value>) {
    let mut size = data_keys(causes, &object["data"], "data");
    size += data_keys(causes, &object["binaryData"], "binaryData");
    for key in object["data"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        if object["binaryData"].get(key).is_some() {
            causes.invalid(
                "data",
                &json!(key),
                "duplicate of key present in binaryData",
            );
        }
    }
    if size > DATA_MAX {
        causes.push_too_long("", &format!("may not be more than {DATA_MAX} bytes"));
    }
    immutable(causes, object, old, &["data", "binaryData"]);
}

fn secret(causes: &mut Causes, object: &Value, old: Option<&Value>) {
    let size = data_keys(causes, &object["data"], "data");
    if size * 3 / 4 > DATA_MAX {
        causes.push_too_long("data", &format!("may not be more than {DATA_MAX} bytes"));
    }
    // The keys a Secret of a known type must hold.
    let needed: &[&str] = match text(&object["type"]) {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        _ => &[],
    };
    for key in needed {
        if object["data"].get(key).is_none() {
            causes.required(&format!("data[{key}]"), "");
        }
    }
    immutable(causes, object, old, &["data"]);
}
