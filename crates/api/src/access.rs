//! Who may do what with the fleet: the RBAC objects the hub installs at start (created
//! when missing, updated when they differ), before its controllers run. No I/O: the hub
//! writes [`objects`] through its own API, as it does the CRDs.
//!
//! ```text
//!  user system:flotilla:fleet-controller (the hub's controllers)
//!     ├─ ClusterRoleBinding ─► ClusterRole system:flotilla:fleet-controller
//!     │                        (the fleet's kinds, Works, ComputeNamespaces, profiles,
//!     │                         decisions, namespaces, Roles and RoleBindings with
//!     │                         bind and escalate (ComputeNamespaces' hub grants),
//!     │                         Events; templates read in every group, core without
//!     │                         Secrets; every status)
//!     └─ RoleBinding in flotilla-system ─► Role system:flotilla:member-credentials
//!                                          (the Secrets holding members' kubeconfigs)
//!
//!  admin ◄─┬─ flotilla:aggregate-to-admin  (ClusterSetBindings written: still needs bind)
//!  edit  ◄─┼─ flotilla:aggregate-to-edit   (Placements, Overrides written)
//!  view  ◄─┴─ flotilla:aggregate-to-view   (Placements, Overrides, bindings, decisions read)
//!          (labels rbac.authorization.k8s.io/aggregate-to-*: the aggregation controller
//!           copies their rules into the built-in roles)
//!
//!  flotilla:fleet-admin  everything in flotilla.io and multicluster.x-k8s.io; bind on
//!                        every ClusterSet (bound to nobody: the platform team binds it)
//!
//!  group system:bootstrappers ─► system:flotilla:bootstrapper (a pull agent's
//!                                registration: `crate::agent`)
//! ```
//!
//! Member credentials are readable by the controller's identity (the Role above) and by
//! `cluster-admin`; no other role here grants Secrets, so nobody else reads them by
//! default.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::{GROUP, MULTICLUSTER_GROUP};

/// The user the hub's fleet controllers run as (groups `system:authenticated`).
pub const FLEET_CONTROLLER: &str = "system:flotilla:fleet-controller";

/// The namespace where `flotilla join` keeps each member's credentials (a Secret holding
/// its kubeconfig).
pub const CREDENTIALS_NAMESPACE: &str = "flotilla-system";

/// The Role (and RoleBinding) in [`CREDENTIALS_NAMESPACE`] that lets the fleet controller
/// read and remove member credentials.
pub const MEMBER_CREDENTIALS: &str = "system:flotilla:member-credentials";

/// The ClusterRole of the platform team: the whole fleet API, and binding any ClusterSet.
pub const FLEET_ADMIN: &str = "flotilla:fleet-admin";

/// The ClusterRole aggregated into `admin`.
pub const AGGREGATE_TO_ADMIN: &str = "flotilla:aggregate-to-admin";

/// The ClusterRole aggregated into `edit` (and `admin`).
pub const AGGREGATE_TO_EDIT: &str = "flotilla:aggregate-to-edit";

/// The ClusterRole aggregated into `view` (and `edit`, `admin`).
pub const AGGREGATE_TO_VIEW: &str = "flotilla:aggregate-to-view";

/// The label that aggregates a ClusterRole into the built-in role `<role>`.
pub fn aggregate_label(role: &str) -> String {
    format!("rbac.authorization.k8s.io/aggregate-to-{role}")
}

/// The RBAC group, which roles and bindings name.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Every core resource a template may be, but Secrets: the controller reads templates of
/// these kinds. (The core group is fixed, so it is listed; Secrets are left out so that
/// the controller cannot read every Secret of the hub. A Secret placed as a template needs
/// a RoleBinding of the controller in its namespace.)
pub const CORE_TEMPLATES: &[&str] = &[
    "configmaps",
    "endpoints",
    "events",
    "limitranges",
    "namespaces",
    "nodes",
    "persistentvolumeclaims",
    "persistentvolumes",
    "pods",
    "podtemplates",
    "replicationcontrollers",
    "resourcequotas",
    "serviceaccounts",
    "services",
];

/// The RBAC objects the hub installs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Objects {
    /// Cluster-wide roles.
    pub cluster_roles: Vec<ClusterRole>,
    /// Their bindings.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// Namespaced roles (in [`CREDENTIALS_NAMESPACE`]).
    pub roles: Vec<Role>,
    /// Their bindings.
    pub role_bindings: Vec<RoleBinding>,
}

/// Every RBAC object the hub installs. `groups` are the API groups the hub serves besides
/// the core group (its discovery's, CRDs' included): the fleet controller reads templates
/// of any kind in them ([`fleet_controller_role`]).
pub fn objects(groups: &[String]) -> Objects {
    // Bootstrap tokens' users: a pull agent's registration (`crate::agent`).
    let (bootstrapper, bootstrappers) = crate::agent::bootstrapper();
    Objects {
        cluster_roles: vec![
            fleet_controller_role(groups),
            fleet_admin_role(),
            aggregate_to_admin(),
            aggregate_to_edit(),
            aggregate_to_view(),
            bootstrapper,
        ],
        cluster_role_bindings: vec![
            ClusterRoleBinding {
                metadata: named(FLEET_CONTROLLER, None, BTreeMap::new()),
                role_ref: role_ref("ClusterRole", FLEET_CONTROLLER),
                subjects: Some(vec![fleet_controller_subject()]),
            },
            bootstrappers,
        ],
        roles: vec![member_credentials_role()],
        role_bindings: vec![RoleBinding {
            metadata: named(
                MEMBER_CREDENTIALS,
                Some(CREDENTIALS_NAMESPACE),
                BTreeMap::new(),
            ),
            role_ref: role_ref("Role", MEMBER_CREDENTIALS),
            subjects: Some(vec![fleet_controller_subject()]),
        }],
    }
}

/// The fleet controllers' ClusterRole: just what their API calls use
/// (`flotilla_fleet::runtime`; a test there checks every call against it), rule by rule
/// below. `groups`: the API groups served besides the core group, in which templates of
/// any kind are read.
///
/// No rule names Secrets: the controller reads member credentials through the Role in
/// [`CREDENTIALS_NAMESPACE`] ([`MEMBER_CREDENTIALS`]) only.
pub fn fleet_controller_role(groups: &[String]) -> ClusterRole {
    let mut template_groups: Vec<&str> = groups
        .iter()
        .map(String::as_str)
        .filter(|g| !g.is_empty())
        .collect();
    template_groups.sort_unstable();
    template_groups.dedup();
    let mut rules = vec![
        // Discovery: the detector finds a selected kind's resource and scope
        // (`kube::discovery::pinned_kind`) before it watches it.
        PolicyRule {
            non_resource_urls: Some(strings(&["/api", "/api/*", "/apis", "/apis/*"])),
            verbs: strings(&["get"]),
            ..PolicyRule::default()
        },
        // Clusters: cached (list, watch); the cluster controller's finalizer is added and
        // removed by patches.
        rule(GROUP, &["clusters"], &["get", "list", "watch", "patch"]),
        // Placements of both scopes: cached; their finalizers, patched.
        rule(
            GROUP,
            &["placements", "clusterplacements"],
            &["get", "list", "watch", "patch"],
        ),
        // ComputeNamespaces: cached; their finalizer patched (their Works are written
        // as placements' are, below; the hub namespace of each created, below).
        rule(
            GROUP,
            &["computenamespaces"],
            &["get", "list", "watch", "patch"],
        ),
        // What plans are made from, read only: overrides of both scopes, the sets and
        // the namespaces' bindings to them.
        rule(
            GROUP,
            &[
                "overrides",
                "clusteroverrides",
                "clustersets",
                "clustersetbindings",
            ],
            &["get", "list", "watch"],
        ),
        // Works: cached; written by server-side apply (which creates them), their
        // finalizer patched, deleted when a cluster is no longer chosen, listed in a
        // cluster's namespace when it is unjoined.
        rule(
            GROUP,
            &["works"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // PlacementRevisions: cached; created for each change of what a placement
        // delivers, the oldest beyond its history limit deleted.
        rule(
            GROUP,
            &["placementrevisions"],
            &["get", "list", "watch", "create", "delete"],
        ),
        // ClusterProfiles (KEP-4322): read and applied per cluster, listed across
        // namespaces when a cluster changed sets, deleted from the old set's namespace
        // and at unjoin.
        rule(
            MULTICLUSTER_GROUP,
            &["clusterprofiles"],
            &["get", "list", "create", "patch", "delete"],
        ),
        // PlacementDecisions (KEP-5313): read and applied per placement; extra slices and
        // those of a placement going are listed and deleted.
        rule(
            MULTICLUSTER_GROUP,
            &["placementdecisions"],
            &["get", "list", "create", "patch", "delete"],
        ),
        // A ComputeNamespace's Roles and RoleBindings in its hub namespace (the team's
        // grants on the hub, `flotilla_fleet::runtime::compute`): server-side applied
        // (create, patch), listed by its label to delete those no longer in its spec.
        rule(
            RBAC_GROUP,
            &["roles", "rolebindings"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // RBAC's escalation check lets a binding be written only by who holds every rule
        // of its role or has `bind` on it, and a Role only by who holds its rules or has
        // `escalate`: the controller writes whatever roles a ComputeNamespace binds and
        // defines, so it has both. Who may make it write them is the hub's admission
        // rule on ComputeNamespaces (the writer needs `bind` on each role bound and
        // `escalate` for each Role defined), not this role.
        rule(RBAC_GROUP, &["clusterroles", "roles"], &["bind"]),
        rule(RBAC_GROUP, &["roles"], &["escalate"]),
        // Namespaces: each cluster's Works namespace and each set's profile namespace are
        // created when missing; the Works namespace is deleted at unjoin.
        rule("", &["namespaces"], &["get", "create", "delete"]),
        // Events about the fleet's objects: created, and counted up when repeated.
        rule("", &["events"], &["create", "patch"]),
        // A pull cluster's heartbeat: its agent's Lease, read by the cluster controller.
        rule("coordination.k8s.io", &["leases"], &["get"]),
        // Every status the controllers write: their own kinds' (Cluster, Placement,
        // ClusterPlacement, Work, ClusterSetBinding, ClusterProfile) and a template's
        // fleet-wide status, which may be of any kind. Status only: no object's spec.
        rule("*", &["*/status"], &["patch"]),
        // Templates, core group: every kind but Secrets ([`CORE_TEMPLATES`]), read and
        // watched by the detector.
        rule("", CORE_TEMPLATES, &["get", "list", "watch"]),
    ];
    // Templates of any other group (CRDs' included): read and watched, every resource.
    // Writes stay the status rule's.
    if !template_groups.is_empty() {
        rules.push(PolicyRule {
            api_groups: Some(strings(&template_groups)),
            resources: Some(strings(&["*"])),
            verbs: strings(&["get", "list", "watch"]),
            ..PolicyRule::default()
        });
    }
    ClusterRole {
        metadata: named(FLEET_CONTROLLER, None, BTreeMap::new()),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// The Role in [`CREDENTIALS_NAMESPACE`] for member credentials: the controller reads a
/// cluster's Secret to build its client, watches the Secrets' versions to rebuild it when
/// one changes, and deletes the Secret when the cluster is unjoined.
fn member_credentials_role() -> Role {
    Role {
        metadata: named(
            MEMBER_CREDENTIALS,
            Some(CREDENTIALS_NAMESPACE),
            BTreeMap::new(),
        ),
        rules: Some(vec![rule(
            "",
            &["secrets"],
            &["get", "list", "watch", "delete"],
        )]),
    }
}

/// `flotilla:fleet-admin`: the platform team's role.
fn fleet_admin_role() -> ClusterRole {
    ClusterRole {
        metadata: named(FLEET_ADMIN, None, BTreeMap::new()),
        rules: Some(vec![
            // Every kind of the fleet API and of SIG-Multicluster's, every verb:
            // clusters, sets, placements of both scopes, overrides, Works, profiles,
            // decisions, bindings in any namespace.
            rule(GROUP, &["*"], &["*"]),
            rule(MULTICLUSTER_GROUP, &["*"], &["*"]),
            // Binding any ClusterSet to any namespace (the `*` verbs above hold it too;
            // said once more so that the grant reads plainly).
            rule(GROUP, &["clustersets"], &["bind"]),
        ]),
        aggregation_rule: None,
    }
}

/// Aggregated into `admin`: a namespace's admin writes its ClusterSetBindings (each
/// still needs `bind` on its set, which `admin` does not give).
fn aggregate_to_admin() -> ClusterRole {
    ClusterRole {
        metadata: named(AGGREGATE_TO_ADMIN, None, aggregates(&["admin"])),
        rules: Some(vec![rule(
            GROUP,
            &["clustersetbindings"],
            &["create", "update", "patch", "delete", "deletecollection"],
        )]),
        aggregation_rule: None,
    }
}

/// Aggregated into `edit` (and `admin`): a namespace's editors write its Placements and
/// Overrides. Its bindings they only read: binding a set is the platform team's grant.
fn aggregate_to_edit() -> ClusterRole {
    ClusterRole {
        metadata: named(AGGREGATE_TO_EDIT, None, aggregates(&["admin", "edit"])),
        rules: Some(vec![rule(
            GROUP,
            &["placements", "overrides"],
            &[
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
            ],
        )]),
        aggregation_rule: None,
    }
}

/// Aggregated into `view` (and `edit`, `admin`): a namespace's readers see its
/// Placements (and their status), Overrides, bindings and the decisions published.
fn aggregate_to_view() -> ClusterRole {
    ClusterRole {
        metadata: named(
            AGGREGATE_TO_VIEW,
            None,
            aggregates(&["admin", "edit", "view"]),
        ),
        rules: Some(vec![
            rule(
                GROUP,
                &[
                    "placements",
                    "placements/status",
                    "placementrevisions",
                    "overrides",
                    "clustersetbindings",
                    "clustersetbindings/status",
                ],
                &["get", "list", "watch"],
            ),
            rule(
                MULTICLUSTER_GROUP,
                &["placementdecisions"],
                &["get", "list", "watch"],
            ),
        ]),
        aggregation_rule: None,
    }
}

/// The labels that aggregate a role into each of `roles` (every one named, not only the
/// narrowest, so that it reaches them whether or not the built-in roles aggregate each
/// other).
fn aggregates(roles: &[&str]) -> BTreeMap<String, String> {
    roles
        .iter()
        .map(|role| (aggregate_label(role), "true".to_owned()))
        .collect()
}

fn fleet_controller_subject() -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.to_owned()),
        kind: "User".to_owned(),
        name: FLEET_CONTROLLER.to_owned(),
        namespace: None,
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}

fn named(name: &str, namespace: Option<&str>, labels: BTreeMap<String, String>) -> ObjectMeta {
    let mut labels = labels;
    labels.insert(
        "app.kubernetes.io/managed-by".to_owned(),
        "flotilla".to_owned(),
    );
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
