//! Where objects live in the store.
//!
//! `/{group}/{plural}/{cluster}/{namespace}/{name}` for namespaced resources and
//! `/{group}/{plural}/{cluster}/{name}` for cluster-scoped ones, `core` standing for the
//! core group. The logical cluster comes after the resource so that one store watch per
//! resource serves every logical cluster.

use crate::resources::ResourceType;

/// The store prefix of a resource's objects in a logical cluster, and in one namespace if
/// given (a namespaced resource listed across namespaces has none).
pub fn prefix(rt: &ResourceType, cluster: &str, namespace: Option<&str>) -> Vec<u8> {
    let mut key = resource_prefix(rt);
    key.extend_from_slice(cluster.as_bytes());
    key.push(b'/');
    if let Some(namespace) = namespace.filter(|_| rt.namespaced) {
        key.extend_from_slice(namespace.as_bytes());
        key.push(b'/');
    }
    key
}

/// The store prefix of every object of a resource, in every logical cluster.
pub fn resource_prefix(rt: &ResourceType) -> Vec<u8> {
    let group = if rt.group.is_empty() {
        "core"
    } else {
        &rt.group
    };
    format!("/{group}/{}/", rt.plural).into_bytes()
}

/// The store key of one object.
pub fn key(rt: &ResourceType, cluster: &str, namespace: &str, name: &str) -> Vec<u8> {
    let mut key = prefix(rt, cluster, Some(namespace));
    key.extend_from_slice(name.as_bytes());
    key
}
