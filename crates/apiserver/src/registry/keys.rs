//! Where objects live in the store.
//!
//! `/{group}/{plural}/{cluster}/{namespace}/{name}` for namespaced resources and
//! `/{group}/{plural}/{cluster}/{name}` for cluster-scoped ones, `core` standing for the
//! core group. The logical cluster comes after the resource so that one store watch per
//! resource serves every logical cluster.

use crate::registry::resources::ResourceType;

/// The store prefix of a resource's objects in a logical cluster, and in one namespace if
/// given (a namespaced resource listed across namespaces has none).
pub fn prefix(rt: &ResourceType, cluster: &str, namespace: Option<&str>) -> Vec<u8> {
    build(rt, cluster, namespace, "")
}

/// The store prefix of every object of a resource, in every logical cluster.
pub fn resource_prefix(rt: &ResourceType) -> Vec<u8> {
    let mut key = Vec::with_capacity(rt.group.len().max(4) + rt.plural.len() + 3);
    push_resource(&mut key, rt);
    key
}

fn push_resource(key: &mut Vec<u8>, rt: &ResourceType) {
    // Events of events.k8s.io live with the core group's (one resource, two versions).
    let group = match crate::registry::events::storage_group(rt) {
        "" => "core",
        group => group,
    };
    for part in ["/", group, "/", &rt.plural, "/"] {
        key.extend_from_slice(part.as_bytes());
    }
}

/// The store key of one object.
pub fn key(rt: &ResourceType, cluster: &str, namespace: &str, name: &str) -> Vec<u8> {
    build(rt, cluster, Some(namespace), name)
}

/// `prefix(rt, cluster, namespace)` followed by `name`, in one allocation.
fn build(rt: &ResourceType, cluster: &str, namespace: Option<&str>, name: &str) -> Vec<u8> {
    let namespace = namespace.filter(|_| rt.namespaced);
    let length = crate::registry::events::storage_group(rt).len().max(4)
        + rt.plural.len()
        + cluster.len()
        + namespace.map_or(0, |n| n.len() + 1)
        + name.len()
        + 4;
    let mut key = Vec::with_capacity(length);
    push_resource(&mut key, rt);
    key.extend_from_slice(cluster.as_bytes());
    key.push(b'/');
    if let Some(namespace) = namespace {
        key.extend_from_slice(namespace.as_bytes());
        key.push(b'/');
    }
    key.extend_from_slice(name.as_bytes());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_resource_the_cluster_the_namespace_and_the_object() {
        let configmaps = ResourceType::new("", "v1", "ConfigMap", "configmaps", true);
        let crds = ResourceType::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        );
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        assert_eq!(
            text(key(&configmaps, "root", "shop", "web")),
            "/core/configmaps/root/shop/web"
        );
        assert_eq!(
            text(prefix(&configmaps, "c1", Some("shop"))),
            "/core/configmaps/c1/shop/"
        );
        assert_eq!(
            text(prefix(&configmaps, "c1", None)),
            "/core/configmaps/c1/"
        );
        assert_eq!(text(resource_prefix(&configmaps)), "/core/configmaps/");
        assert_eq!(
            text(key(&crds, "root", "ignored", "a.example.com")),
            "/apiextensions.k8s.io/customresourcedefinitions/root/a.example.com"
        );
        assert_eq!(
            text(prefix(&crds, "root", Some("ignored"))),
            "/apiextensions.k8s.io/customresourcedefinitions/root/"
        );
    }
}
