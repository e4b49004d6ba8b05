//! Logical clusters: many isolated Kubernetes APIs served by one server from one store.
//!
//! ```text
//!  /clusters/<name>/api/...  ─► LogicalCluster <name> exists in the root cluster?
//!        no  ─► 404                     yes ─► the cluster's view of the API: its own
//!                                              registry (its CRDs), OpenAPI, namespaces;
//!                                              keys /{group}/{plural}/<name>/…; the one
//!                                              watch cache and store shared by all
//! ```
//!
//! Creating a `LogicalCluster` (`tenancy.flotilla.io/v1alpha1`, cluster-scoped, in the
//! root cluster) is the explicit, authenticated operation that makes a cluster; a
//! kubeconfig whose server ends in `/clusters/<name>` then works with any client.

use serde_json::{Value, json};

/// The API group of logical clusters.
pub const GROUP: &str = "tenancy.flotilla.io";

/// The version served.
pub const VERSION: &str = "v1alpha1";

/// The resource (plural).
pub const PLURAL: &str = "logicalclusters";

/// The CustomResourceDefinition of `LogicalCluster`, installed in the root cluster at start.
pub fn definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": PLURAL, "singular": "logicalcluster", "kind": "LogicalCluster",
                "shortNames": ["lc"]},
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A logical cluster: an isolated Kubernetes API served under /clusters/<name> by this server.",
                    "properties": {
                        "spec": {"type": "object", "description": "Nothing to set yet.",
                            "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    })
}

/// Why a logical cluster name is not acceptable, if it is not (names are DNS labels).
pub fn check_name(name: &str) -> Option<String> {
    crate::registry::object::check_name(name, crate::registry::object::NameRule::Label)
        .map(|why| format!("invalid logical cluster name {name:?}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_definition_is_an_acceptable_crd() {
        let mut crd = definition();
        let defined = crate::registry::crd::admit(&mut crd).unwrap();
        assert_eq!(defined.types.len(), 1);
        assert!(!defined.types[0].namespaced);
        assert_eq!(defined.types[0].kind, "LogicalCluster");
    }

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(check_name("team-a"), None);
        assert!(check_name("Team_A").is_some());
        assert!(check_name("a.b").is_some());
    }
}
