//! Where objects live in the store.
//!
//! `/{group}/{plural}/{cluster}/{namespace}/{name}` for namespaced resources and
//! `/{group}/{plural}/{cluster}/{name}` for cluster-scoped ones, `core` standing for the
//! core group. The logical cluster comes after the resource so that one store watch per
//! resource serves every logical cluster.
//!
//! This module is the one place that knows the layout: the registry, the watch cache,
//! Events' expiry, the simulator and the benchmarks build and read keys through it
//! (by [`ResourceType`], or by group and plural for readers that have no registry).

use crate::registry::resources::ResourceType;

/// The prefix of the server's own records, kept in the store beside the objects but
/// outside their layout: every object key starts with `/`, so no list or watch of
/// resources (the watch cache watches `/`) ever reaches these, and no request names them.
///
/// ```text
///  ~flotilla/hub-identity                   the CA, admin token, signing key of a hub
///                                           whose replicas share the store
///  ~flotilla/clusterips/{cluster}/{ip}      which Service holds a cluster IP
/// ```
pub const RESERVED_PREFIX: &[u8] = b"~flotilla/";

/// The store key of the hub's shared identity (see [`RESERVED_PREFIX`]).
pub const HUB_IDENTITY: &[u8] = b"~flotilla/hub-identity";

/// The store key of the claim on cluster IP `ip` in logical cluster `cluster` (see
/// [`RESERVED_PREFIX`]).
pub fn cluster_ip_claim(cluster: &str, ip: &str) -> Vec<u8> {
    let mut key = RESERVED_PREFIX.to_vec();
    for part in ["clusterips/", cluster, "/", ip] {
        key.extend_from_slice(part.as_bytes());
    }
    key
}

/// The store prefix of a resource's objects in a logical cluster, and in one namespace if
/// given (a namespaced resource listed across namespaces has none).
pub fn prefix(rt: &ResourceType, cluster: &str, namespace: Option<&str>) -> Vec<u8> {
    build(
        storage_group(rt),
        &rt.plural,
        cluster,
        namespace.filter(|_| rt.namespaced),
        "",
    )
}

/// The store prefix of every object of a resource, in every logical cluster.
pub fn resource_prefix(rt: &ResourceType) -> Vec<u8> {
    resource_in(storage_group(rt), &rt.plural)
}

/// The store key of one object.
pub fn key(rt: &ResourceType, cluster: &str, namespace: &str, name: &str) -> Vec<u8> {
    let namespace = Some(namespace).filter(|_| rt.namespaced);
    build(storage_group(rt), &rt.plural, cluster, namespace, name)
}

/// The store prefix of every object of resource `plural` of API group `group` (empty for
/// the core group), in every logical cluster: `/{group}/{plural}/`. For readers of the
/// store that know a resource by its names alone (the simulator, Events' expiry, the
/// benchmarks).
pub fn resource_prefix_of(group: &str, plural: &str) -> Vec<u8> {
    resource_in(key_group(group, plural), plural)
}

/// The store prefix of every object of every resource of API group `group` (empty for
/// the core group), in every logical cluster: `/{group}/`. One watch of it follows a whole
/// group (the RBAC authorizer's index of roles and bindings).
pub fn group_prefix(group: &str) -> Vec<u8> {
    let group = match group {
        "" => "core",
        group => group,
    };
    format!("/{group}/").into_bytes()
}

/// `/{group}/{plural}/`, `group` as keys spell it.
fn resource_in(group: &str, plural: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(group.len() + plural.len() + 3);
    for part in ["/", group, "/", plural, "/"] {
        key.extend_from_slice(part.as_bytes());
    }
    key
}

/// The store prefix of the objects of resource `plural` of `group` in a logical cluster,
/// and in one namespace if given: [`prefix`] by group and plural.
pub fn prefix_of(group: &str, plural: &str, cluster: &str, namespace: Option<&str>) -> Vec<u8> {
    build(key_group(group, plural), plural, cluster, namespace, "")
}

/// The store key of object `name` of resource `plural` of `group` in a logical cluster,
/// in `namespace` for a namespaced resource (`None` for a cluster-scoped one).
pub fn key_of(
    group: &str,
    plural: &str,
    cluster: &str,
    namespace: Option<&str>,
    name: &str,
) -> Vec<u8> {
    build(key_group(group, plural), plural, cluster, namespace, name)
}

/// An object's place, as its key names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place<'k> {
    /// Its logical cluster.
    pub cluster: &'k str,
    /// Its namespace (`None` for a cluster-scoped object).
    pub namespace: Option<&'k str>,
    /// Its name.
    pub name: &'k str,
}

/// Where the object stored at `key` is, if `key` is an object's key under `resource` (a
/// [`resource_prefix`] or [`resource_prefix_of`]).
pub fn place<'k>(key: &'k [u8], resource: &[u8]) -> Option<Place<'k>> {
    let rest = std::str::from_utf8(key.strip_prefix(resource)?).ok()?;
    let mut parts = rest.split('/');
    let cluster = parts.next()?;
    let (namespace, name) = match (parts.next()?, parts.next(), parts.next()) {
        (name, None, _) => (None, name),
        (namespace, Some(name), None) => (Some(namespace), name),
        (_, Some(_), Some(_)) => return None,
    };
    Some(Place {
        cluster,
        namespace,
        name,
    })
}

/// The resource part of a key: `/{group}/{plural}/` (`None` if `key` is shorter).
pub fn resource_of(key: &[u8]) -> Option<&[u8]> {
    through_slash(key, 3)
}

/// The part of a key that names its logical cluster's share of a resource:
/// `/{group}/{plural}/{cluster}/` (`None` if `key` is shorter).
pub fn cluster_part_of(key: &[u8]) -> Option<&[u8]> {
    through_slash(key, 4)
}

/// The part of a namespaced key that names its namespace's share of a resource:
/// `/{group}/{plural}/{cluster}/{namespace}/` (`None` for a cluster-scoped key, or a
/// prefix shorter than that).
pub fn namespace_part_of(key: &[u8]) -> Option<&[u8]> {
    through_slash(key, 5)
}

/// `key` up to and including its `n`th slash, if it has that many.
fn through_slash(key: &[u8], n: usize) -> Option<&[u8]> {
    key.iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'/')
        .nth(n - 1)
        .map(|(i, _)| &key[..=i])
}

/// How keys spell the group whose key space holds `rt`'s objects: Events of
/// `events.k8s.io` live with the core group's (one resource, two versions).
fn storage_group(rt: &ResourceType) -> &str {
    match crate::registry::events::storage_group(rt) {
        "" => "core",
        group => group,
    }
}

/// How keys spell API group `group` of resource `plural`: `core` for the core group, and
/// as [`storage_group`] says for Events of `events.k8s.io`.
fn key_group<'g>(group: &'g str, plural: &str) -> &'g str {
    match group {
        "" => "core",
        crate::registry::events::GROUP if plural == "events" => "core",
        group => group,
    }
}

/// `/{group}/{plural}/{cluster}/`, then `{namespace}/` if given, then `name`, in one
/// allocation (`group` as keys spell it).
fn build(group: &str, plural: &str, cluster: &str, namespace: Option<&str>, name: &str) -> Vec<u8> {
    let length = group.len()
        + plural.len()
        + cluster.len()
        + namespace.map_or(0, |n| n.len() + 1)
        + name.len()
        + 4;
    let mut key = Vec::with_capacity(length);
    for part in ["/", group, "/", plural, "/", cluster, "/"] {
        key.extend_from_slice(part.as_bytes());
    }
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

    #[test]
    fn keys_by_group_and_plural_are_the_keys_of_the_resource_type() {
        let registry = crate::Registry::builtin();
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        for (group, plural, namespaced) in [
            ("", "configmaps", true),
            ("", "nodes", false),
            ("apps", "deployments", true),
            ("", "events", true),
            ("events.k8s.io", "events", true),
        ] {
            let rt = registry.get(group, "v1", plural).unwrap();
            assert_eq!(rt.namespaced, namespaced, "{group}/{plural}");
            let namespace = Some("shop").filter(|_| namespaced);
            assert_eq!(
                text(resource_prefix_of(group, plural)),
                text(resource_prefix(&rt)),
                "{group}/{plural}"
            );
            assert_eq!(
                text(prefix_of(group, plural, "c1", namespace)),
                text(prefix(&rt, "c1", Some("shop"))),
                "{group}/{plural}"
            );
            assert_eq!(
                text(key_of(group, plural, "c1", namespace, "web")),
                text(key(&rt, "c1", "shop", "web")),
                "{group}/{plural}"
            );
        }
        assert_eq!(text(resource_prefix_of("", "nodes")), "/core/nodes/");
        assert_eq!(text(group_prefix("")), "/core/");
        assert_eq!(
            text(group_prefix("rbac.authorization.k8s.io")),
            "/rbac.authorization.k8s.io/"
        );
        assert!(
            resource_prefix_of("rbac.authorization.k8s.io", "roles")
                .starts_with(&group_prefix("rbac.authorization.k8s.io"))
        );
        assert_eq!(
            text(resource_prefix_of("apps", "deployments")),
            "/apps/deployments/"
        );
        assert_eq!(
            text(resource_prefix_of("events.k8s.io", "events")),
            "/core/events/"
        );
        assert_eq!(
            text(key_of("", "nodes", "c1", None, "n1")),
            "/core/nodes/c1/n1"
        );
    }

    #[test]
    fn resources_are_the_first_two_segments_and_clusters_the_third() {
        assert_eq!(
            resource_of(b"/apps/deployments/root/ns/web"),
            Some(&b"/apps/deployments/"[..])
        );
        assert_eq!(
            resource_of(b"/core/configmaps/"),
            Some(&b"/core/configmaps/"[..])
        );
        assert_eq!(resource_of(b"/core/configmaps"), None);
        assert_eq!(
            cluster_part_of(b"/apps/deployments/c1/ns/web"),
            Some(&b"/apps/deployments/c1/"[..])
        );
        assert_eq!(cluster_part_of(b"/apps/deployments/c1"), None);
        assert_eq!(
            namespace_part_of(b"/apps/deployments/c1/ns/web"),
            Some(&b"/apps/deployments/c1/ns/"[..])
        );
        assert_eq!(
            namespace_part_of(b"/apps/deployments/c1/ns/"),
            Some(&b"/apps/deployments/c1/ns/"[..])
        );
        assert_eq!(namespace_part_of(b"/core/namespaces/c1/web"), None);
    }

    #[test]
    fn a_key_reads_back_as_its_place() {
        let nodes = resource_prefix_of("", "nodes");
        let deployments = resource_prefix_of("apps", "deployments");
        let node = key_of("", "nodes", "c1", None, "n1");
        let deployment = key_of("apps", "deployments", "c1", Some("shop"), "web");
        assert_eq!(
            place(&node, &nodes),
            Some(Place {
                cluster: "c1",
                namespace: None,
                name: "n1"
            })
        );
        assert_eq!(
            place(&deployment, &deployments),
            Some(Place {
                cluster: "c1",
                namespace: Some("shop"),
                name: "web"
            })
        );
        assert_eq!(place(&deployment, &nodes), None);
        assert_eq!(place(b"/core/nodes/c1", &nodes), None);
        assert_eq!(place(b"/core/nodes/c1/a/b/c", &nodes), None);
    }
}
