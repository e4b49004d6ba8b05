//! The member-side RBAC an agent needs, and no more (`flotilla agent print-rbac`).
//!
//! ```text
//!  Namespace flotilla-system, ServiceAccount flotilla-agent (the agent's identity)
//!  ClusterRole flotilla-agent ─ ClusterRoleBinding ─► the ServiceAccount
//!     get /version, /api, /apis (discovery)          what every sync and probe reads
//!     get, list nodes; about.k8s.io clusterproperties health facts
//!     with service accounts: impersonate the groups a service account's requests carry
//!     without:               every verb delivery uses, on every kind (it applies
//!                            whatever the placements deliver: narrow it to their kinds)
//!  per namespace NS of the service accounts named:
//!     Role flotilla-agent-impersonate ─ RoleBinding ─► the ServiceAccount
//!        impersonate serviceaccounts NAME… in NS (not a namesake in another namespace)
//! ```
//!
//! With service accounts named, the agent itself creates nothing on the member: every
//! object is applied as a placement's service account, whose own RBAC decides. The agent
//! writes neither Leases nor Events on the member (its heartbeat is on the hub).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::Error;

/// The namespace of the agent's ServiceAccount on the member.
pub const AGENT_NAMESPACE: &str = "flotilla-system";
/// The name of the agent's ServiceAccount, ClusterRole, ClusterRoleBinding on the member.
pub const AGENT_NAME: &str = "flotilla-agent";
/// The name of the Role and RoleBinding that let the agent impersonate service accounts
/// in one namespace.
pub const IMPERSONATE_ROLE: &str = "flotilla-agent-impersonate";

/// Delivery's verbs on what it applies: read, server-side apply (a patch that may
/// create), delete, and the change watches.
const APPLY_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// A member's service account a placement applies as: `NAMESPACE/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NamedAccount {
    /// Its namespace on the member.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::str::FromStr for NamedAccount {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let bad = || {
            Error::Input(format!(
                "{text:?} is not a service account NAMESPACE/NAME (a placement's serviceAccountName, with the namespace it has on the member)"
            ))
        };
        let (namespace, name) = text.split_once('/').ok_or_else(bad)?;
        if !is_label(namespace) || !is_subdomain(name) {
            return Err(bad());
        }
        Ok(NamedAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

fn is_label(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

fn is_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(is_label)
}

/// The member-side objects for the agent of cluster `cluster`, which applies as
/// `accounts` (none: as itself), in the order to apply them.
pub fn objects(cluster: &str, accounts: &[NamedAccount]) -> Vec<Value> {
    let labels =
        json!({"app.kubernetes.io/managed-by": "flotilla", "flotilla.io/cluster": cluster});
    let agent =
        json!([{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": AGENT_NAMESPACE}]);
    let mut rules = vec![
        json!({"nonResourceURLs": ["/version", "/api", "/api/*", "/apis", "/apis/*"], "verbs": ["get"]}),
        json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}),
        json!({"apiGroups": ["about.k8s.io"], "resources": ["clusterproperties"], "verbs": ["get", "list"]}),
    ];
    let mut by_namespace: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for account in accounts {
        let names = by_namespace.entry(&account.namespace).or_default();
        if !names.contains(&account.name.as_str()) {
            names.push(&account.name);
        }
    }
    if by_namespace.is_empty() {
        rules.push(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": APPLY_VERBS}));
    } else {
        let mut groups = vec![
            "system:serviceaccounts".to_owned(),
            "system:authenticated".to_owned(),
        ];
        groups.extend(
            by_namespace
                .keys()
                .map(|ns| format!("system:serviceaccounts:{ns}")),
        );
        rules.push(
            json!({"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"],
            "resourceNames": groups}),
        );
    }
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": AGENT_NAME, "namespace": AGENT_NAMESPACE, "labels": labels}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": AGENT_NAME, "labels": labels}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": AGENT_NAME, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_NAME},
            "subjects": agent}),
    ];
    for (namespace, names) in by_namespace {
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": IMPERSONATE_ROLE, "namespace": namespace, "labels": labels},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
                "resourceNames": names}]}));
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": IMPERSONATE_ROLE, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": IMPERSONATE_ROLE},
            "subjects": agent}));
    }
    objects
}

/// `objects` as one YAML stream (documents separated by `---`), block style; strings are
/// double-quoted where plain text could be read as something else.
pub fn yaml(objects: &[Value]) -> String {
    let mut out = String::new();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        block(object, 0, &mut out);
    }
    out
}

fn block(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                out.push_str(&format!("{pad}{}:", scalar(&Value::String(key.clone()))));
                nested(value, indent + 2, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                out.push_str(&format!("{pad}-"));
                match item {
                    Value::Object(map) if !map.is_empty() => {
                        // The first key on the dash's line, the rest below it.
                        let mut first = String::new();
                        block(item, indent + 2, &mut first);
                        out.push(' ');
                        out.push_str(&first[indent + 2..]);
                    }
                    _ => nested(item, indent + 2, out),
                }
            }
        }
        other => out.push_str(&format!("{pad}{}\n", scalar(other))),
    }
}

/// What follows a key or a dash: a scalar or empty collection on the same line, else a
/// block below.
fn nested(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            block(value, indent, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            // Sequences under a key sit at the key's indentation, as kubectl prints them.
            block(value, indent - 2, out);
        }
        Value::Object(_) => out.push_str(" {}\n"),
        Value::Array(_) => out.push_str(" []\n"),
        other => out.push_str(&format!(" {}\n", scalar(other))),
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => {
            let plain = !text.is_empty()
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-./_".contains(c))
                && text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && !matches!(
                    text.to_ascii_lowercase().as_str(),
                    "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
                );
            if plain {
                text.clone()
            } else {
                // A JSON string is a valid YAML double-quoted scalar.
                Value::String(text.clone()).to_string()
            }
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(text: &str) -> NamedAccount {
        text.parse().unwrap()
    }

    #[test]
    fn service_accounts_are_namespace_slash_name() {
        assert_eq!(account("shop/deployer").namespace, "shop");
        for bad in ["deployer", "Shop/deployer", "shop/", "/deployer", "a/b/c"] {
            assert!(bad.parse::<NamedAccount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn impersonation_is_on_exactly_the_named_accounts() {
        let objects = objects(
            "east",
            &[
                account("shop/deployer"),
                account("shop/builder"),
                account("ops/deployer"),
                account("shop/deployer"),
            ],
        );
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
        let ops = &objects[4];
        assert_eq!(ops["metadata"]["namespace"], "ops");
        assert_eq!(ops["rules"][0]["resourceNames"], json!(["deployer"]));
        let shop = &objects[6];
        assert_eq!(
            shop["rules"][0]["resourceNames"],
            json!(["deployer", "builder"])
        );
        let rules = objects[2]["rules"].as_array().unwrap();
        // Nothing applied as the agent itself: no wildcard.
        assert!(!objects[2].to_string().contains("\"*\""), "{rules:?}");
        let groups = rules
            .iter()
            .find(|r| r["resources"][0] == "groups")
            .unwrap();
        assert_eq!(
            groups["resourceNames"],
            json!([
                "system:serviceaccounts",
                "system:authenticated",
                "system:serviceaccounts:ops",
                "system:serviceaccounts:shop"
            ])
        );
    }

    #[test]
    fn without_accounts_the_agent_applies_itself() {
        let objects = objects("east", &[]);
        assert_eq!(objects.len(), 4);
        let rules = objects[2]["rules"].as_array().unwrap();
        assert!(
            rules
                .iter()
                .any(|r| r["resources"] == json!(["*"]) && r["verbs"][0] == "get")
        );
        assert!(!objects[2].to_string().contains("impersonate"));
    }

    #[test]
    fn yaml_reads_back_as_the_objects() {
        let objects = objects("east", &[account("shop/deployer")]);
        let text = yaml(&objects);
        assert!(text.contains("kind: ClusterRole\n"), "{text}");
        assert!(text.contains("- \"system:authenticated\""), "{text}");
        let back: Vec<Value> = text
            .split("---\n")
            .map(|doc| serde_saphyr::from_str(doc).unwrap())
            .collect();
        assert_eq!(back, objects);
    }
}
