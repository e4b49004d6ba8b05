//! `as=Table` responses: the columns kubectl prints, computed on the server.
//!
//! ```text
//!  Accept: application/json;as=Table;v=v1;g=meta.k8s.io ─► Columns::for_type(rt)
//!      built-in kinds: the columns a Kubernetes server prints for them
//!      custom resources: additionalPrinterColumns (simple JSONPath), else Name and Age
//!  objects ─► rows of cells (ages rendered here) + PartialObjectMetadata ─► Table
//! ```

use serde_json::{Value, json};

use crate::registry::resources::ResourceType;

/// `object`'s metadata alone, as a `PartialObjectMetadata` of `api_version`.
pub fn partial(object: &Value, api_version: &str) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": object["metadata"]})
}

/// How one cell is computed from an object.
#[derive(Clone, Debug)]
enum Cell {
    Name,
    Age,
    /// A simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`).
    Path(String),
    /// A value computed by the kind's printer.
    Computed(fn(&Value) -> Value),
}

/// One column: its definition and how its cells are made.
#[derive(Clone, Debug)]
struct Column {
    name: String,
    kind: &'static str,
    format: &'static str,
    description: String,
    priority: u64,
    cell: Cell,
}

fn column(name: &str, kind: &'static str, priority: u64, cell: Cell) -> Column {
    let format = match cell {
        Cell::Name => "name",
        _ => "",
    };
    Column {
        name: name.to_owned(),
        kind,
        format,
        description: String::new(),
        priority,
        cell,
    }
}

fn name() -> Column {
    Column {
        description: "Name must be unique within a namespace.".into(),
        ..column("Name", "string", 0, Cell::Name)
    }
}

fn age() -> Column {
    Column {
        description: "The time since the object was created.".into(),
        ..column("Age", "string", 0, Cell::Age)
    }
}

fn computed(name: &str, kind: &'static str, priority: u64, f: fn(&Value) -> Value) -> Column {
    column(name, kind, priority, Cell::Computed(f))
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn count(v: &Value) -> usize {
    v.as_object().map_or(0, |m| m.len())
}

fn containers(o: &Value) -> &Value {
    &o["spec"]["template"]["spec"]["containers"]
}

fn joined(list: &Value, field: &str) -> Value {
    let items: Vec<&str> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c[field].as_str())
        .collect();
    json!(items.join(","))
}

fn selector(o: &Value) -> Value {
    let labels = o["spec"]["selector"]["matchLabels"].as_object();
    let text: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    json!(if text.is_empty() {
        "<none>".to_owned()
    } else {
        text.join(",")
    })
}

/// A node's STATUS as kubectl shows it: its Ready condition, and whether it is cordoned.
fn node_status(o: &Value) -> Value {
    let ready = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let mut status = match ready.and_then(|c| c["status"].as_str()) {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
    .to_owned();
    if o["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

/// A node's ROLES: from `node-role.kubernetes.io/<role>` labels and `kubernetes.io/role`.
fn node_roles(o: &Value) -> Value {
    let labels = o["metadata"]["labels"].as_object().into_iter().flatten();
    let mut roles: Vec<&str> = labels
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) => Some(role),
                None if key == "kubernetes.io/role" => value.as_str(),
                None => None,
            },
        )
        .filter(|role| !role.is_empty())
        .collect();
    roles.sort_unstable();
    roles.dedup();
    json!(if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    })
}

/// A node's first address of type `kind`, or `<none>`.
fn node_address(o: &Value, kind: &str) -> Value {
    let address = o["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == kind)
        .and_then(|a| a["address"].as_str());
    json!(address.unwrap_or("<none>"))
}

/// A CertificateSigningRequest's CONDITION as kubectl shows it: its conditions' types,
/// `Issued` once it has a certificate, else `Pending`.
fn csr_condition(o: &Value) -> Value {
    let mut shown: Vec<String> = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"].as_str().unwrap_or("True") == "True")
        .filter_map(|c| c["type"].as_str().map(str::to_owned))
        .collect();
    if o["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        shown.push("Issued".into());
    }
    json!(if shown.is_empty() {
        "Pending".to_owned()
    } else {
        shown.join(",")
    })
}

/// The columns of a built-in kind, as a Kubernetes server prints them.
fn builtin_columns(rt: &ResourceType) -> Vec<Column> {
    let mut columns = vec![name()];
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => columns.push(column(
            "Status",
            "string",
            0,
            Cell::Path(".status.phase".into()),
        )),
        // An Event's what and why, as kubectl shows them (core/v1 names; the object is
        // `kind/name`, the kind in lower case).
        ("", "Event") => {
            columns.push(column("Type", "string", 0, Cell::Path(".type".into())));
            columns.push(column("Reason", "string", 0, Cell::Path(".reason".into())));
            columns.push(computed("Object", "string", 0, |o| {
                let object = &o["involvedObject"];
                json!(format!(
                    "{}/{}",
                    object["kind"].as_str().unwrap_or_default().to_lowercase(),
                    object["name"].as_str().unwrap_or_default()
                ))
            }));
            columns.push(column("Count", "integer", 1, Cell::Path(".count".into())));
            columns.push(column(
                "Message",
                "string",
                0,
                Cell::Path(".message".into()),
            ));
        }
        ("", "ConfigMap") => columns.push(computed("Data", "integer", 0, |o| {
            json!(count(&o["data"]) + count(&o["binaryData"]))
        })),
        ("", "Secret") => {
            columns.push(computed("Type", "string", 0, |o| {
                json!(o["type"].as_str().unwrap_or("Opaque"))
            }));
            columns.push(computed("Data", "integer", 0, |o| json!(count(&o["data"]))));
        }
        ("", "Service") => {
            columns.push(computed("Type", "string", 0, |o| {
                json!(o["spec"]["type"].as_str().unwrap_or("ClusterIP"))
            }));
            columns.push(computed("Cluster-IP", "string", 0, |o| {
                json!(o["spec"]["clusterIP"].as_str().unwrap_or("<none>"))
            }));
            columns.push(computed("External-IP", "string", 0, |o| {
                let ips: Vec<&str> = o["spec"]["externalIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                json!(if ips.is_empty() {
                    "<none>".to_owned()
                } else {
                    ips.join(",")
                })
            }));
            columns.push(computed("Port(s)", "string", 0, |o| {
                let ports: Vec<String> = o["spec"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
                    .collect();
                json!(if ports.is_empty() {
                    "<none>".to_owned()
                } else {
                    ports.join(",")
                })
            }));
        }
        ("", "Pod") => {
            columns.push(computed("Ready", "string", 0, |o| {
                let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                let ready = o["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["ready"] == true)
                    .count();
                json!(format!("{ready}/{total}"))
            }));
            columns.push(computed("Status", "string", 0, |o| {
                json!(o["status"]["phase"].as_str().unwrap_or("Pending"))
            }));
            columns.push(computed("Restarts", "string", 0, |o| {
                let restarts: i64 = o["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| int(&c["restartCount"]))
                    .sum();
                json!(restarts.to_string())
            }));
        }
        ("apps", "Deployment") => {
            columns.push(computed("Ready", "string", 0, |o| {
                json!(format!(
                    "{}/{}",
                    int(&o["status"]["readyReplicas"]),
                    int(&o["spec"]["replicas"])
                ))
            }));
            columns.push(computed("Up-to-date", "integer", 0, |o| {
                json!(int(&o["status"]["updatedReplicas"]))
            }));
            columns.push(computed("Available", "integer", 0, |o| {
                json!(int(&o["status"]["availableReplicas"]))
            }));
        }
        ("apps", "ReplicaSet") => {
            columns.push(computed("Desired", "integer", 0, |o| {
                json!(int(&o["spec"]["replicas"]))
            }));
            columns.push(computed("Current", "integer", 0, |o| {
                json!(int(&o["status"]["replicas"]))
            }));
            columns.push(computed("Ready", "integer", 0, |o| {
                json!(int(&o["status"]["readyReplicas"]))
            }));
        }
        ("apps", "StatefulSet") => {
            columns.push(computed("Ready", "string", 0, |o| {
                json!(format!(
                    "{}/{}",
                    int(&o["status"]["readyReplicas"]),
                    int(&o["spec"]["replicas"])
                ))
            }));
        }
        ("apps", "DaemonSet") => {
            for (title, field) in [
                ("Desired", "desiredNumberScheduled"),
                ("Current", "currentNumberScheduled"),
                ("Ready", "numberReady"),
                ("Up-to-date", "updatedNumberScheduled"),
                ("Available", "numberAvailable"),
            ] {
                columns.push(column(
                    title,
                    "integer",
                    0,
                    Cell::Path(format!(".status.{field}")),
                ));
            }
        }
        ("batch", "Job") => {
            columns.push(computed("Completions", "string", 0, |o| {
                let wanted = o["spec"]["completions"].as_i64().unwrap_or(1);
                json!(format!("{}/{wanted}", int(&o["status"]["succeeded"])))
            }));
        }
        ("batch", "CronJob") => {
            columns.push(column(
                "Schedule",
                "string",
                0,
                Cell::Path(".spec.schedule".into()),
            ));
            columns.push(computed("Suspend", "boolean", 0, |o| {
                json!(o["spec"]["suspend"].as_bool().unwrap_or(false))
            }));
            columns.push(computed("Active", "integer", 0, |o| {
                json!(o["status"]["active"].as_array().map_or(0, Vec::len))
            }));
        }
        ("", "Node") => {
            columns.push(computed("Status", "string", 0, node_status));
            columns.push(computed("Roles", "string", 0, node_roles));
        }
        ("coordination.k8s.io", "Lease") => columns.push(column(
            "Holder",
            "string",
            0,
            Cell::Path(".spec.holderIdentity".into()),
        )),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            // Shown as the time itself, not an age.
            columns.push(computed("Created At", "date", 0, |o| {
                o["metadata"]["creationTimestamp"].clone()
            }));
            return columns;
        }
        _ => {}
    }
    columns.push(age());
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            columns.push(computed("Containers", "string", 1, |o| {
                joined(containers(o), "name")
            }));
            columns.push(computed("Images", "string", 1, |o| {
                joined(containers(o), "image")
            }));
            columns.push(computed("Selector", "string", 1, selector));
        }
        ("", "Node") => {
            columns.push(column(
                "Version",
                "string",
                0,
                Cell::Path(".status.nodeInfo.kubeletVersion".into()),
            ));
            columns.push(computed("Internal-IP", "string", 1, |o| {
                node_address(o, "InternalIP")
            }));
            columns.push(computed("External-IP", "string", 1, |o| {
                node_address(o, "ExternalIP")
            }));
            for (title, field) in [
                ("OS-Image", "osImage"),
                ("Kernel-Version", "kernelVersion"),
                ("Container-Runtime", "containerRuntimeVersion"),
            ] {
                columns.push(column(
                    title,
                    "string",
                    1,
                    Cell::Path(format!(".status.nodeInfo.{field}")),
                ));
            }
        }
        ("certificates.k8s.io", "CertificateSigningRequest") => {
            columns.push(column(
                "SignerName",
                "string",
                0,
                Cell::Path(".spec.signerName".into()),
            ));
            columns.push(column(
                "Requestor",
                "string",
                0,
                Cell::Path(".spec.username".into()),
            ));
            columns.push(computed("RequestedDuration", "string", 0, |o| {
                json!(match o["spec"]["expirationSeconds"].as_i64() {
                    Some(seconds) => human_duration(seconds),
                    None => "<none>".to_owned(),
                })
            }));
            columns.push(computed("Condition", "string", 0, csr_condition));
        }
        ("", "Pod") => {
            columns.push(column(
                "IP",
                "string",
                1,
                Cell::Path(".status.podIP".into()),
            ));
            columns.push(column(
                "Node",
                "string",
                1,
                Cell::Path(".spec.nodeName".into()),
            ));
        }
        _ => {}
    }
    columns
}

/// The columns of a custom resource: its `additionalPrinterColumns`, else Name and Age.
fn custom_columns(printer_columns: &Value) -> Vec<Column> {
    let Some(defined) = printer_columns.as_array().filter(|c| !c.is_empty()) else {
        return vec![name(), age()];
    };
    let mut columns = vec![name()];
    for c in defined {
        let kind = match c["type"].as_str() {
            Some("integer") => "integer",
            Some("number") => "number",
            Some("boolean") => "boolean",
            Some("date") => "date",
            _ => "string",
        };
        columns.push(Column {
            description: c["description"].as_str().unwrap_or("").to_owned(),
            ..column(
                c["name"].as_str().unwrap_or(""),
                kind,
                c["priority"].as_u64().unwrap_or(0),
                Cell::Path(c["jsonPath"].as_str().unwrap_or("").to_owned()),
            )
        });
    }
    columns
}

/// The first value a column's JSONPath finds: fields (`.a.b`), indexes (`[0]`), every
/// item (`[*]`) and filters on items (`[?(@.type=="Ready")]`, `==` or `!=` against a
/// quoted string, a number or a boolean, or a bare `@.path` that must exist), optionally
/// wrapped in `{…}`.
fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    find(object, path.trim_start_matches('$'))
}

fn find<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim_start();
    if path.is_empty() {
        return Some(value);
    }
    if let Some(rest) = path.strip_prefix('.') {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let (field, rest) = rest.split_at(end);
        return match field {
            "" => find(value, rest),
            field => find(value.get(field)?, rest),
        };
    }
    let inner = path.strip_prefix('[')?;
    let close = closing_bracket(inner)?;
    let (selector, rest) = (&inner[..close], &inner[close + 1..]);
    let items = value.as_array();
    match selector.trim() {
        "*" => items?.iter().find_map(|item| find(item, rest)),
        filter if filter.starts_with("?(") && filter.ends_with(')') => {
            let condition = &filter[2..filter.len() - 1];
            items?
                .iter()
                .filter(|item| holds(item, condition))
                .find_map(|item| find(item, rest))
        }
        index => find(value.get(index.parse::<usize>().ok()?)?, rest),
    }
}

/// Where the `]` closing a selector is, skipping quoted text and nested brackets.
fn closing_bracket(text: &str) -> Option<usize> {
    let (mut depth, mut quote) = (0usize, None);
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '(') => depth += 1,
            (None, ')') => depth = depth.saturating_sub(1),
            (None, ']') if depth == 0 => return Some(i),
            (None, ']') => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Whether a filter condition (`@.type=="Ready"`) holds for `item`.
fn holds(item: &Value, condition: &str) -> bool {
    let (path, op, literal) = match condition.split_once("==") {
        Some((path, literal)) => (path, true, Some(literal)),
        None => match condition.split_once("!=") {
            Some((path, literal)) => (path, false, Some(literal)),
            None => (condition, true, None),
        },
    };
    let Some(path) = path.trim().strip_prefix('@') else {
        return false;
    };
    let found = find(item, path);
    let Some(literal) = literal else {
        return found.is_some();
    };
    let literal = literal.trim();
    let expected: Value = match literal.strip_prefix(['"', '\'']) {
        Some(quoted) => Value::String(quoted[..quoted.len().saturating_sub(1)].to_owned()),
        None => match serde_json::from_str(literal) {
            Ok(value) => value,
            Err(_) => return false,
        },
    };
    (found == Some(&expected)) == op
}

/// A duration as kubectl shows ages: `45s`, `3m20s`, `5h`, `2d3h`, `400d`, `3y20d`.
pub fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    match () {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => format!("{d}d{}h", h % 24),
        _ if d < 365 * 2 => format!("{d}d"),
        _ if d < 365 * 8 => format!("{}y{}d", d / 365, d % 365),
        _ => format!("{}y", d / 365),
    }
}

fn age_of(timestamp: Option<&str>, now: jiff::Timestamp) -> Value {
    match timestamp.and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(then) => json!(human_duration(now.duration_since(then).as_secs())),
        None => json!("<unknown>"),
    }
}

/// The columns of `rt`'s objects; `printer_columns` are the CRD version's
/// `additionalPrinterColumns` for custom resources.
fn columns_for(rt: &ResourceType, printer_columns: &Value) -> Vec<Column> {
    if rt.schema.is_some() {
        custom_columns(printer_columns)
    } else {
        builtin_columns(rt)
    }
}

/// A Table of `objects` (with column definitions) at `resource_version`.
pub fn table(
    rt: &ResourceType,
    printer_columns: &Value,
    objects: &[Value],
    resource_version: &str,
    include_object: &str,
) -> Value {
    let columns = columns_for(rt, printer_columns);
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| row(&columns, o, now, include_object))
        .collect();
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions, "rows": rows})
}

fn row(columns: &[Column], object: &Value, now: jiff::Timestamp, include_object: &str) -> Value {
    let cells: Vec<Value> = columns
        .iter()
        .map(|c| match &c.cell {
            Cell::Name => object["metadata"]["name"].clone(),
            Cell::Age => age_of(object["metadata"]["creationTimestamp"].as_str(), now),
            Cell::Computed(f) => f(object),
            Cell::Path(path) => match (lookup(object, path), c.kind) {
                (Some(Value::String(t)), "date") => age_of(Some(t), now),
                (Some(v), _) => v.clone(),
                (None, _) => json!("<none>"),
            },
        })
        .collect();
    let embedded = match include_object {
        "None" => Value::Null,
        "Object" => object.clone(),
        _ => partial(object, "meta.k8s.io/v1"),
    };
    json!({"cells": cells, "object": embedded})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    #[test]
    fn column_paths_index_and_filter() {
        let object = json!({"metadata": {"name": "eu-1"},
            "status": {"conditions": [
                {"type": "Joined", "status": "True", "n": 1},
                {"type": "Ready", "status": "False", "reason": "Unreachable", "n": 2}],
                "tags": ["a", "b"], "weird": [{"k": "a]b", "v": 1}]}});
        let get = |path: &str| lookup(&object, path).cloned();
        assert_eq!(get(".metadata.name"), Some(json!("eu-1")));
        assert_eq!(get("{.status.tags[1]}"), Some(json!("b")));
        assert_eq!(
            get(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("False"))
        );
        assert_eq!(
            get(".status.conditions[?(@.type=='Joined')].status"),
            Some(json!("True"))
        );
        assert_eq!(
            get(r#".status.conditions[?(@.type!="Joined")].reason"#),
            Some(json!("Unreachable"))
        );
        assert_eq!(
            get(".status.conditions[?(@.n==2)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(
            get(".status.conditions[?(@.reason)].type"),
            Some(json!("Ready"))
        );
        assert_eq!(get(".status.conditions[*].type"), Some(json!("Joined")));
        assert_eq!(get(r#".status.weird[?(@.k=="a]b")].v"#), Some(json!(1)));
        assert_eq!(
            get(r#".status.conditions[?(@.type=="Applied")].status"#),
            None
        );
        assert_eq!(get(".status.tags[7]"), None);
        assert_eq!(get(".status.conditions[?(broken)]"), None);
        assert_eq!(get(".status.conditions[?(@.type==Ready)]"), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600 + 120, "3h2m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (9 * 86_400, "9d"),
            (800 * 86_400, "2y70d"),
            (3000 * 86_400, "8y"),
        ];
        for (seconds, shown) in cases {
            assert_eq!(human_duration(seconds), shown, "{seconds}");
        }
        assert_eq!(human_duration(-5), "0s");
    }

    #[test]
    fn a_csr_row_shows_its_signer_requestor_duration_and_condition() {
        let rt = Registry::builtin()
            .get("certificates.k8s.io", "v1", "certificatesigningrequests")
            .unwrap();
        let csr = |status: Value| {
            json!({"metadata": {"name": "alice"},
                "spec": {"signerName": "kubernetes.io/kube-apiserver-client",
                    "username": "flotilla:admin", "expirationSeconds": 86400},
                "status": status})
        };
        let rows = [
            csr(json!({})),
            csr(
                json!({"conditions": [{"type": "Approved", "status": "True"}],
                "certificate": "Zm9v"}),
            ),
        ];
        let t = table(&rt, &Value::Null, &rows, "7", "None");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Age",
                "SignerName",
                "Requestor",
                "RequestedDuration",
                "Condition"
            ]
        );
        let cells = |i: usize| t["rows"][i]["cells"].as_array().unwrap()[2..].to_vec();
        assert_eq!(
            cells(0),
            json!([
                "kubernetes.io/kube-apiserver-client",
                "flotilla:admin",
                "24h",
                "Pending"
            ])
            .as_array()
            .unwrap()
            .clone()
        );
        assert_eq!(cells(1)[3], "Approved,Issued");
    }

    #[test]
    fn an_event_row_says_what_happened_to_which_object() {
        let rt = Registry::builtin().get("", "v1", "events").unwrap();
        let event = json!({"metadata": {"name": "web.1", "namespace": "shop"},
            "involvedObject": {"kind": "Placement", "name": "web"},
            "type": "Normal", "reason": "Scheduled", "count": 2,
            "message": "scheduled to 2 clusters: a, b"});
        let t = table(&rt, &Value::Null, &[event], "7", "None");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name", "Type", "Reason", "Object", "Count", "Message", "Age"
            ]
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(
            cells.as_array().unwrap()[..6],
            json!([
                "web.1",
                "Normal",
                "Scheduled",
                "placement/web",
                2,
                "scheduled to 2 clusters: a, b"
            ])
            .as_array()
            .unwrap()[..]
        );
    }

    #[test]
    fn a_deployment_row_has_the_usual_columns() {
        let rt = Registry::builtin()
            .get("apps", "v1", "deployments")
            .unwrap();
        let created = jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_secs(3 * 3600 + 300))
            .unwrap();
        let deployment = json!({"metadata": {"name": "web", "namespace": "shop", "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
            "spec": {"replicas": 9, "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1"}, {"name": "log", "image": "busybox"}]}}},
            "status": {"readyReplicas": 7, "updatedReplicas": 9, "availableReplicas": 7}});
        let t = table(&rt, &Value::Null, &[deployment], "42", "Metadata");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web",
                "7/9",
                9,
                7,
                "3h5m",
                "web,log",
                "nginx:1,busybox",
                "app=web"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "shop");
        assert_eq!(t["metadata"]["resourceVersion"], "42");
    }

    #[test]
    fn a_node_row_shows_readiness_roles_and_version() {
        let rt = Registry::builtin().get("", "v1", "nodes").unwrap();
        let node = |labels: Value, ready: &str, unschedulable: bool| {
            json!({"metadata": {"name": "n1", "labels": labels},
                "spec": {"unschedulable": unschedulable},
                "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": ready}],
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                    "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Linux"}}})
        };
        let nodes = [
            node(json!({"kubernetes.io/hostname": "n1"}), "True", false),
            node(
                json!({"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/etcd": "", "kubernetes.io/role": "etcd"}),
                "False",
                true,
            ),
            node(json!({}), "Unknown", false),
        ];
        let t = table(&rt, &Value::Null, &nodes, "1", "None");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        let cells = |i: usize| t["rows"][i]["cells"].as_array().unwrap().clone();
        assert_eq!(cells(0)[1..3], [json!("Ready"), json!("<none>")]);
        assert_eq!(
            cells(0)[4..8],
            [
                json!("v1.32.0"),
                json!("10.0.0.1"),
                json!("<none>"),
                json!("Linux")
            ]
        );
        assert_eq!(
            cells(1)[1..3],
            [
                json!("NotReady,SchedulingDisabled"),
                json!("control-plane,etcd")
            ]
        );
        assert_eq!(cells(2)[1], "Unknown");
    }

    #[test]
    fn custom_resources_use_their_printer_columns() {
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(crate::registry::resources::Schema(std::sync::Arc::new(
            json!({"type": "object"}),
        )));
        let printer = json!([{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "First", "type": "string", "jsonPath": ".spec.tags[0]", "priority": 1},
            {"name": "Missing", "type": "string", "jsonPath": ".status.nothing"}]);
        let widget = json!({"metadata": {"name": "w"}, "spec": {"size": 3, "tags": ["a", "b"]}});
        let t = table(&rt, &printer, std::slice::from_ref(&widget), "1", "None");
        assert_eq!(t["rows"][0]["cells"], json!(["w", 3, "a", "<none>"]));
        assert_eq!(t["columnDefinitions"][2]["priority"], 1);
        assert!(t["rows"][0]["object"].is_null());
        let plain = table(&rt, &Value::Null, &[widget], "1", "Metadata");
        let names: Vec<&str> = plain["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Age"]);
    }
}
