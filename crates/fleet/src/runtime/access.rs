//! The API calls the fleet controllers make on the hub, as authorization sees them, and
//! the check that the roles the hub installs for their identity
//! (`flotilla_api::access`) allow each of them, and no more than that on Secrets. A new
//! call in the runtime adds a line to [`CALLS`].
//!
//! ```text
//!  CALLS (group, resource[/sub], verb, namespace) ─► allowed by the ClusterRole, or the
//!                                                    Role in flotilla-system ─► ok
//! ```

use flotilla_api::access::{self, Objects};
use k8s_openapi::api::rbac::v1::PolicyRule;

/// One kind of call: `verb` on `group`/`resource` (`resource/subresource`), in
/// `namespace` (`""`: cluster-scoped or across namespaces).
type Call = (&'static str, &'static str, &'static str, &'static str);

/// Every call the runtime makes, by who makes it.
const CALLS: &[Call] = &[
    // Caches (runtime.rs: one watch per kind across namespaces).
    ("flotilla.io", "clusters", "list", ""),
    ("flotilla.io", "clusters", "watch", ""),
    ("flotilla.io", "placements", "list", ""),
    ("flotilla.io", "placements", "watch", ""),
    ("flotilla.io", "clusterplacements", "list", ""),
    ("flotilla.io", "clusterplacements", "watch", ""),
    ("flotilla.io", "overrides", "list", ""),
    ("flotilla.io", "overrides", "watch", ""),
    ("flotilla.io", "clusteroverrides", "list", ""),
    ("flotilla.io", "clusteroverrides", "watch", ""),
    ("flotilla.io", "clustersets", "list", ""),
    ("flotilla.io", "clustersets", "watch", ""),
    ("flotilla.io", "clustersetbindings", "list", ""),
    ("flotilla.io", "clustersetbindings", "watch", ""),
    ("flotilla.io", "works", "list", ""),
    ("flotilla.io", "works", "watch", ""),
    ("flotilla.io", "placementrevisions", "list", ""),
    ("flotilla.io", "placementrevisions", "watch", ""),
    ("flotilla.io", "computenamespaces", "list", ""),
    ("flotilla.io", "computenamespaces", "watch", ""),
    // Member credentials (members.rs, runtime.rs watch_credentials, health.rs unjoin).
    ("", "secrets", "get", "flotilla-system"),
    ("", "secrets", "list", "flotilla-system"),
    ("", "secrets", "watch", "flotilla-system"),
    ("", "secrets", "delete", "flotilla-system"),
    // Placement controller (placement.rs): finalizers, Works, decisions, status.
    ("flotilla.io", "placements", "patch", "shop"),
    ("flotilla.io", "placements/status", "patch", "shop"),
    ("flotilla.io", "clusterplacements", "patch", ""),
    ("flotilla.io", "clusterplacements/status", "patch", ""),
    ("flotilla.io", "works", "patch", "flotilla-cluster-a"),
    // Revisions (rollout.rs): one created per change, the oldest deleted.
    ("flotilla.io", "placementrevisions", "create", "shop"),
    ("flotilla.io", "placementrevisions", "delete", "shop"),
    ("flotilla.io", "works", "create", "flotilla-cluster-a"),
    ("flotilla.io", "works", "delete", "flotilla-cluster-a"),
    ("multicluster.x-k8s.io", "placementdecisions", "get", "shop"),
    (
        "multicluster.x-k8s.io",
        "placementdecisions",
        "patch",
        "shop",
    ),
    (
        "multicluster.x-k8s.io",
        "placementdecisions",
        "delete",
        "shop",
    ),
    (
        "multicluster.x-k8s.io",
        "placementdecisions",
        "list",
        "shop",
    ),
    // Templates (templates.rs, placement.rs): read any kind, write its status.
    ("", "configmaps", "list", ""),
    ("", "configmaps", "watch", ""),
    ("", "namespaces", "list", ""),
    ("apps", "deployments", "list", ""),
    ("apps", "deployments", "watch", ""),
    ("apps", "deployments/status", "patch", "shop"),
    ("example.com", "widgets", "list", ""),
    ("example.com", "widgets", "watch", ""),
    ("example.com", "widgets/status", "patch", "shop"),
    // Push controller (push.rs): finalizers and status of Works.
    ("flotilla.io", "works/status", "patch", "flotilla-cluster-a"),
    // Cluster controller (health.rs): finalizer, status, namespaces, profiles, unjoin.
    ("flotilla.io", "clusters", "patch", ""),
    ("flotilla.io", "clusters/status", "patch", ""),
    ("", "namespaces", "get", ""),
    ("", "namespaces", "create", ""),
    ("", "namespaces", "delete", ""),
    ("multicluster.x-k8s.io", "clusterprofiles", "get", "eu"),
    ("multicluster.x-k8s.io", "clusterprofiles", "patch", "eu"),
    (
        "multicluster.x-k8s.io",
        "clusterprofiles/status",
        "patch",
        "eu",
    ),
    ("multicluster.x-k8s.io", "clusterprofiles", "list", ""),
    ("multicluster.x-k8s.io", "clusterprofiles", "delete", "us"),
    ("flotilla.io", "works", "list", "flotilla-cluster-a"),
    // ... and a pull cluster's heartbeat Lease.
    ("coordination.k8s.io", "leases", "get", "flotilla-cluster-a"),
    // ComputeNamespace controller (compute.rs): its finalizer, status, Works (applied,
    // deleted: as the placement controller's), the hub namespace.
    ("flotilla.io", "computenamespaces", "patch", ""),
    ("flotilla.io", "computenamespaces/status", "patch", ""),
    // ... and its Roles and RoleBindings on the hub namespace (listed by label, applied,
    // a binding whose role changed deleted and created again, pruned), which grant what
    // the controller does not hold itself: bind and escalate.
    ("rbac.authorization.k8s.io", "roles", "list", "team-a"),
    ("rbac.authorization.k8s.io", "roles", "patch", "team-a"),
    ("rbac.authorization.k8s.io", "roles", "delete", "team-a"),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "list",
        "team-a",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "create",
        "team-a",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "patch",
        "team-a",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "delete",
        "team-a",
    ),
    ("rbac.authorization.k8s.io", "clusterroles", "bind", ""),
    ("rbac.authorization.k8s.io", "roles", "bind", "team-a"),
    ("rbac.authorization.k8s.io", "roles", "escalate", "team-a"),
    // Bindings controller (bindings.rs).
    ("flotilla.io", "clustersetbindings/status", "patch", "shop"),
    // Events (events.rs).
    ("", "events", "create", "shop"),
    ("", "events", "patch", "shop"),
];

/// Whether `rule` allows `verb` on `group`/`resource` (RBAC's matching: `*` for any verb,
/// group or resource, `*/sub` for a subresource of any resource; no resource names).
fn allows(rule: &PolicyRule, group: &str, resource: &str, verb: &str) -> bool {
    let has = |list: &Option<Vec<String>>, item: &str| {
        list.iter().flatten().any(|x| x == "*" || x == item)
    };
    let resource_ok = rule.resources.iter().flatten().any(|r| {
        r == "*"
            || r == resource
            || r.strip_prefix("*/")
                .is_some_and(|sub| resource.split_once('/').is_some_and(|(_, s)| s == sub))
    });
    rule.verbs.iter().any(|v| v == "*" || v == verb)
        && has(&rule.api_groups, group)
        && resource_ok
        && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
}

/// The installed objects, with the groups the hub serves in the tests' fleet.
fn installed() -> Objects {
    let groups = [
        "apps",
        "batch",
        "flotilla.io",
        "multicluster.x-k8s.io",
        "example.com",
    ];
    access::objects(&groups.map(str::to_owned))
}

/// Whether the controller's identity may make `call`: through its ClusterRole anywhere,
/// or through the Role in the credentials namespace there.
fn controller_may(objects: &Objects, (group, resource, verb, namespace): Call) -> bool {
    let cluster_role = objects
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(access::FLEET_CONTROLLER))
        .expect("the controller's ClusterRole");
    let by_cluster_role = cluster_role
        .rules
        .iter()
        .flatten()
        .any(|rule| allows(rule, group, resource, verb));
    let by_role = namespace == access::CREDENTIALS_NAMESPACE
        && objects.roles.iter().any(|role| {
            role.metadata.namespace.as_deref() == Some(namespace)
                && objects.role_bindings.iter().any(|b| {
                    b.role_ref.name == role.metadata.name.clone().unwrap_or_default()
                        && b.subjects
                            .iter()
                            .flatten()
                            .any(|s| s.kind == "User" && s.name == access::FLEET_CONTROLLER)
                })
                && role
                    .rules
                    .iter()
                    .flatten()
                    .any(|rule| allows(rule, group, resource, verb))
        });
    by_cluster_role || by_role
}

#[test]
fn the_controllers_roles_allow_every_call_they_make() {
    let objects = installed();
    let refused: Vec<&Call> = CALLS
        .iter()
        .filter(|call| !controller_may(&objects, **call))
        .collect();
    assert!(refused.is_empty(), "not allowed: {refused:?}");
    // The binding makes the ClusterRole the controller's.
    let binding = &objects.cluster_role_bindings[0];
    assert_eq!(binding.role_ref.name, access::FLEET_CONTROLLER);
    assert_eq!(
        binding.subjects.as_deref().unwrap()[0].name,
        access::FLEET_CONTROLLER
    );
}

#[test]
fn the_controller_reads_secrets_only_where_member_credentials_are() {
    let objects = installed();
    let controller = objects
        .cluster_roles
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(access::FLEET_CONTROLLER))
        .unwrap();
    // No rule of its ClusterRole names Secrets or reaches them by a wildcard.
    for rule in controller.rules.iter().flatten() {
        for verb in [
            "get", "list", "watch", "delete", "update", "patch", "create",
        ] {
            assert!(
                !allows(rule, "", "secrets", verb),
                "{verb} secrets: {rule:?}"
            );
        }
        assert!(
            !rule.resources.iter().flatten().any(|r| r == "secrets"),
            "{rule:?}"
        );
    }
    for call in [
        ("", "secrets", "get", "shop"),
        ("", "secrets", "list", ""),
        ("", "secrets", "watch", "kube-system"),
    ] {
        assert!(!controller_may(&objects, call), "{call:?}");
    }
    assert!(controller_may(
        &objects,
        ("", "secrets", "get", access::CREDENTIALS_NAMESPACE)
    ));
    // Writes of templates stay status writes.
    for call in [
        ("apps", "deployments", "patch", "shop"),
        ("apps", "deployments", "delete", "shop"),
        ("example.com", "widgets", "update", "shop"),
        ("", "configmaps", "create", "shop"),
    ] {
        assert!(!controller_may(&objects, call), "{call:?}");
    }
    // Nobody else is given Secrets by the installed roles.
    for role in &objects.cluster_roles {
        let name = role.metadata.name.as_deref().unwrap();
        if name == access::FLEET_CONTROLLER {
            continue;
        }
        for rule in role.rules.iter().flatten() {
            assert!(!allows(rule, "", "secrets", "get"), "{name}: {rule:?}");
        }
    }
}

#[test]
fn the_fleet_roles_are_aggregated_into_admin_edit_and_view() {
    let objects = installed();
    let role = |name: &str| {
        objects
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no ClusterRole {name}"))
    };
    let into = |name: &str| -> Vec<String> {
        let mut into: Vec<String> = role(name)
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(_, v)| *v == "true")
            .filter_map(|(k, _)| {
                k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-")
                    .map(str::to_owned)
            })
            .collect();
        into.sort();
        into
    };
    assert_eq!(into(access::AGGREGATE_TO_VIEW), ["admin", "edit", "view"]);
    assert_eq!(into(access::AGGREGATE_TO_EDIT), ["admin", "edit"]);
    assert_eq!(into(access::AGGREGATE_TO_ADMIN), ["admin"]);
    assert!(into(access::FLEET_ADMIN).is_empty());
    assert!(into(access::FLEET_CONTROLLER).is_empty());
    let may = |name: &str, group: &str, resource: &str, verb: &str| {
        role(name)
            .rules
            .iter()
            .flatten()
            .any(|r| allows(r, group, resource, verb))
    };
    // view reads placements, their status, overrides, bindings and decisions.
    for resource in [
        "placements",
        "placements/status",
        "overrides",
        "clustersetbindings",
    ] {
        assert!(may(
            access::AGGREGATE_TO_VIEW,
            "flotilla.io",
            resource,
            "watch"
        ));
        assert!(!may(
            access::AGGREGATE_TO_VIEW,
            "flotilla.io",
            resource,
            "create"
        ));
    }
    assert!(may(
        access::AGGREGATE_TO_VIEW,
        "multicluster.x-k8s.io",
        "placementdecisions",
        "list"
    ));
    // edit writes placements and overrides, but not bindings (binding needs bind).
    for resource in ["placements", "overrides"] {
        assert!(may(
            access::AGGREGATE_TO_EDIT,
            "flotilla.io",
            resource,
            "create"
        ));
        assert!(may(
            access::AGGREGATE_TO_EDIT,
            "flotilla.io",
            resource,
            "delete"
        ));
    }
    assert!(!may(
        access::AGGREGATE_TO_EDIT,
        "flotilla.io",
        "clustersetbindings",
        "create"
    ));
    assert!(!may(
        access::AGGREGATE_TO_EDIT,
        "flotilla.io",
        "placements/status",
        "patch"
    ));
    // admin writes bindings, and still may not bind a set.
    assert!(may(
        access::AGGREGATE_TO_ADMIN,
        "flotilla.io",
        "clustersetbindings",
        "create"
    ));
    for name in [
        access::AGGREGATE_TO_ADMIN,
        access::AGGREGATE_TO_EDIT,
        access::AGGREGATE_TO_VIEW,
    ] {
        assert!(!may(name, "flotilla.io", "clustersets", "bind"), "{name}");
    }
    // The fleet admin has the whole fleet API and binds every set.
    assert!(may(
        access::FLEET_ADMIN,
        "flotilla.io",
        "clustersets",
        "bind"
    ));
    assert!(may(
        access::FLEET_ADMIN,
        "flotilla.io",
        "clusters",
        "delete"
    ));
    assert!(may(
        access::FLEET_ADMIN,
        "multicluster.x-k8s.io",
        "clusterprofiles",
        "get"
    ));
    assert!(!may(access::FLEET_ADMIN, "", "secrets", "get"));
    assert!(!may(access::FLEET_ADMIN, "apps", "deployments", "get"));
}

#[test]
fn templates_of_every_served_group_are_read_and_the_core_group_is_listed() {
    let role = access::fleet_controller_role(&["example.com".into(), "".into(), "apps".into()]);
    let rules = role.rules.unwrap();
    let groups = rules
        .last()
        .and_then(|r| r.api_groups.clone())
        .unwrap_or_default();
    assert_eq!(groups, ["apps", "example.com"], "sorted, no core group");
    // A group the hub does not serve (yet) is not read: the hub installs the role again
    // when CRDs come.
    let none = access::fleet_controller_role(&[]);
    assert!(
        !none
            .rules
            .iter()
            .flatten()
            .any(|r| allows(r, "example.com", "widgets", "list"))
    );
}
