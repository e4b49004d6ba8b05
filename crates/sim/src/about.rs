//! The About API (KEP-2149): `about.k8s.io` ClusterProperty, cluster-scoped facts a
//! cluster states about itself, such as its ID within a ClusterSet.

use serde_json::{Value, json};

/// The API group.
pub const GROUP: &str = "about.k8s.io";

/// The version served.
pub const VERSION: &str = "v1alpha1";

/// The resource (plural).
pub const PLURAL: &str = "clusterproperties";

/// The property naming the cluster within its ClusterSet (KEP-2149).
pub const CLUSTER_ID: &str = "cluster.clusterset.k8s.io";

/// The CustomResourceDefinition of `ClusterProperty`.
pub fn definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{PLURAL}.{GROUP}"),
            "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/3084"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": PLURAL, "singular": "clusterproperty", "kind": "ClusterProperty",
                "listKind": "ClusterPropertyList"},
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "additionalPrinterColumns": [
                    {"name": "value", "type": "string", "jsonPath": ".spec.value"},
                    {"name": "age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A fact about this cluster for multi-cluster tools: its name is the property, its spec.value the value.",
                    "required": ["spec"],
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["value"],
                            "properties": {
                                "value": {"type": "string", "minLength": 1, "maxLength": 128000,
                                    "description": "The property's value."},
                            },
                        },
                    },
                }},
            }],
        },
    })
}

/// A ClusterProperty object.
pub fn property(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "ClusterProperty",
        "metadata": {"name": name},
        "spec": {"value": value},
    })
}
