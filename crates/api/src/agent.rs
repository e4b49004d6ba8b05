//! Who a pull agent is, and what it may do on the hub: the names its identities use, the
//! bootstrappers' ClusterRole, and the RBAC each approved cluster gets. No I/O.
//!
//! ```text
//!  bootstrap token ID.SECRET ─► user system:bootstrap:ID, groups system:bootstrappers
//!     (+ system:bootstrappers:flotilla:auto-approve, …:clusterset:SET from the token)
//!     └─ ClusterRoleBinding ─► system:flotilla:bootstrapper: create CSRs (get, watch them),
//!                              create Clusters. Nothing else.
//!
//!  client certificate CN system:flotilla:cluster:NAME, O system:flotilla:clusters
//!     (issued once its CSR is approved; valid while the Cluster records its serial)
//!     ├─ RoleBinding in flotilla-cluster-NAME ─► Role system:flotilla:cluster:NAME
//!     │     Works: get, list, watch; works/status: update, patch; Leases: get, create, update
//!     └─ ClusterRoleBinding ─► ClusterRole system:flotilla:cluster:NAME
//!           clusters/status of NAME only: get, update, patch
//!           CSRs: create, get, watch (its certificate's renewal, approved by the hub
//!           only for its own identity)
//!     (all four owned by the Cluster: gone when it goes)
//! ```

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::GROUP;

/// The ClusterRole (and its binding to [`BOOTSTRAPPERS`]) of bootstrap tokens' users.
pub const BOOTSTRAPPER: &str = "system:flotilla:bootstrapper";

/// The group of every bootstrap token's user.
pub const BOOTSTRAPPERS: &str = "system:bootstrappers";

/// The prefix of a bootstrap token's user name; the token's id follows.
pub const BOOTSTRAP_USER_PREFIX: &str = "system:bootstrap:";

/// The extra group of a token made with `--auto-approve`: its clusters' CSRs are approved
/// by the hub at once.
pub const AUTO_APPROVE_GROUP: &str = "system:bootstrappers:flotilla:auto-approve";

/// The prefix of the extra group of a token made with `--clusterset SET`; SET follows.
pub const CLUSTER_SET_GROUP_PREFIX: &str = "system:bootstrappers:flotilla:clusterset:";

/// The prefix of an agent's user name (its certificate's CN); the cluster's name follows.
pub const CLUSTER_USER_PREFIX: &str = "system:flotilla:cluster:";

/// The group of every agent (its certificate's O).
pub const CLUSTERS_GROUP: &str = "system:flotilla:clusters";

/// The annotation on a Cluster an agent created: the id of the bootstrap token it used.
pub const TOKEN_ID_ANNOTATION: &str = "flotilla.io/bootstrap-token-id";

/// The annotation on a Cluster holding the serial number of the one certificate its agent
/// may use (lowercase hex). Missing: no certificate is valid (never approved, or revoked).
pub const SERIAL_ANNOTATION: &str = "flotilla.io/certificate-serial";

/// The annotation on a Cluster naming the certificate request whose certificate its agent
/// may use until the hub records that certificate's serial: the registrar names it before
/// the request is approved, so a new certificate authenticates as soon as it is issued.
pub const REQUEST_ANNOTATION: &str = "flotilla.io/certificate-request";

/// The name of an agent's heartbeat Lease in its cluster's Works namespace.
pub const HEARTBEAT_LEASE: &str = "flotilla-agent";

/// The user an agent of cluster `name` authenticates as.
pub fn cluster_user(name: &str) -> String {
    format!("{CLUSTER_USER_PREFIX}{name}")
}

/// The cluster whose agent `user` is, if it is one.
pub fn cluster_of_user(user: &str) -> Option<&str> {
    user.strip_prefix(CLUSTER_USER_PREFIX)
        .filter(|name| !name.is_empty())
}

/// The bootstrapper's ClusterRole and its binding to every bootstrap token's user.
pub fn bootstrapper() -> (ClusterRole, ClusterRoleBinding) {
    let role = ClusterRole {
        metadata: named(BOOTSTRAPPER, None, None),
        rules: Some(vec![
            // Its certificate request, and waiting for it to be signed (a GET, or a watch
            // of it by name). RBAC cannot say "its own": a CSR holds no secret.
            rule(
                "certificates.k8s.io",
                &["certificatesigningrequests"],
                &["create", "get", "watch"],
            ),
            // Its cluster's registration.
            rule(GROUP, &["clusters"], &["create"]),
        ]),
        aggregation_rule: None,
    };
    let binding = ClusterRoleBinding {
        metadata: named(BOOTSTRAPPER, None, None),
        role_ref: role_ref("ClusterRole", BOOTSTRAPPER),
        subjects: Some(vec![Subject {
            api_group: Some(RBAC_GROUP.to_owned()),
            kind: "Group".to_owned(),
            name: BOOTSTRAPPERS.to_owned(),
            namespace: None,
        }]),
    };
    (role, binding)
}

/// The ValidatingAdmissionPolicy (and its binding) that keeps a bootstrap token's Cluster
/// request to its own: pull access as `system:flotilla:cluster:NAME` and no push access,
/// the token's id in the annotation, the token's cluster set if it names one, and no
/// certificate annotations (those are the registrar's). Only requests of
/// `system:bootstrappers` are matched. As JSON, `admissionregistration.k8s.io/v1`.
pub fn bootstrapper_policy() -> (serde_json::Value, serde_json::Value) {
    let policy = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": BOOTSTRAPPER_POLICY,
            "labels": {"app.kubernetes.io/managed-by": "flotilla"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [GROUP], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["clusters"]}]},
            "matchConditions": [{"name": "bootstrappers",
                "expression": format!("request.userInfo.groups.exists(g, g == '{BOOTSTRAPPERS}')")}],
            "validations": [
                {"expression": format!(
                    "has(object.spec.access) && has(object.spec.access.pull) &&                      !has(object.spec.access.push) &&                      object.spec.access.pull.identity == '{CLUSTER_USER_PREFIX}' + object.metadata.name"),
                 "message": "a bootstrap token registers a pull cluster, as its own identity only"},
                {"expression": format!(
                    "has(object.metadata.annotations) &&                      '{TOKEN_ID_ANNOTATION}' in object.metadata.annotations &&                      '{BOOTSTRAP_USER_PREFIX}' + object.metadata.annotations['{TOKEN_ID_ANNOTATION}']                      == request.userInfo.username"),
                 "message": format!("a cluster registered with a bootstrap token names that token ({TOKEN_ID_ANNOTATION})")},
                {"expression": format!(
                    "!has(object.metadata.annotations) ||                      (!('{SERIAL_ANNOTATION}' in object.metadata.annotations) &&                      !('{REQUEST_ANNOTATION}' in object.metadata.annotations))"),
                 "message": "a cluster's certificate is recorded by the hub, not by its registration"},
                {"expression": format!(
                    "request.userInfo.groups.all(g, !g.startsWith('{CLUSTER_SET_GROUP_PREFIX}') ||                      (has(object.spec.clusterSet) && g == '{CLUSTER_SET_GROUP_PREFIX}' + object.spec.clusterSet))"),
                 "message": "this bootstrap token registers clusters into its cluster set only"},
            ],
        },
    });
    let binding = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": BOOTSTRAPPER_POLICY,
            "labels": {"app.kubernetes.io/managed-by": "flotilla"}},
        "spec": {"policyName": BOOTSTRAPPER_POLICY, "validationActions": ["Deny"]},
    });
    (policy, binding)
}

/// The name of [`bootstrapper_policy`]'s policy and binding (a DNS subdomain, as
/// admission configurations' names must be).
pub const BOOTSTRAPPER_POLICY: &str = "flotilla-bootstrapper";

/// What an approved cluster's agent may do on the hub.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentAccess {
    /// In the cluster's Works namespace: its Works and their status, its Lease.
    pub role: Role,
    /// Binds [`AgentAccess::role`] to the agent.
    pub role_binding: RoleBinding,
    /// Its own Cluster's status.
    pub cluster_role: ClusterRole,
    /// Binds [`AgentAccess::cluster_role`] to the agent.
    pub cluster_role_binding: ClusterRoleBinding,
}

/// The RBAC of cluster `cluster`'s agent (namespace `works_namespace`), owned by the
/// Cluster of uid `uid`.
pub fn agent_access(cluster: &str, uid: &str, works_namespace: &str) -> AgentAccess {
    let name = cluster_user(cluster);
    let owner = OwnerReference {
        api_version: format!("{GROUP}/v1alpha1"),
        kind: "Cluster".to_owned(),
        name: cluster.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let subject = Subject {
        api_group: Some(RBAC_GROUP.to_owned()),
        kind: "User".to_owned(),
        name: name.clone(),
        namespace: None,
    };
    let mut status = rule(GROUP, &["clusters/status"], &["get", "update", "patch"]);
    status.resource_names = Some(vec![cluster.to_owned()]);
    AgentAccess {
        role: Role {
            metadata: named(&name, Some(works_namespace), Some(owner.clone())),
            rules: Some(vec![
                rule(GROUP, &["works"], &["get", "list", "watch"]),
                rule(GROUP, &["works/status"], &["update", "patch"]),
                rule(
                    "coordination.k8s.io",
                    &["leases"],
                    &["get", "create", "update"],
                ),
            ]),
        },
        role_binding: RoleBinding {
            metadata: named(&name, Some(works_namespace), Some(owner.clone())),
            role_ref: role_ref("Role", &name),
            subjects: Some(vec![subject.clone()]),
        },
        cluster_role: ClusterRole {
            metadata: named(&name, None, Some(owner.clone())),
            rules: Some(vec![
                status,
                // Its certificate's renewal: the request, and waiting for it by name.
                rule(
                    "certificates.k8s.io",
                    &["certificatesigningrequests"],
                    &["create", "get", "watch"],
                ),
            ]),
            aggregation_rule: None,
        },
        cluster_role_binding: ClusterRoleBinding {
            metadata: named(&name, None, Some(owner)),
            role_ref: role_ref("ClusterRole", &name),
            subjects: Some(vec![subject]),
        },
    }
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}

fn named(name: &str, namespace: Option<&str>, owner: Option<OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".to_owned(),
            "flotilla".to_owned(),
        )])),
        owner_references: owner.map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_is_named_after_its_cluster() {
        assert_eq!(cluster_user("east"), "system:flotilla:cluster:east");
        assert_eq!(
            cluster_of_user("system:flotilla:cluster:east"),
            Some("east")
        );
        assert_eq!(cluster_of_user("system:flotilla:cluster:"), None);
        assert_eq!(cluster_of_user("alice"), None);
    }

    #[test]
    fn an_agent_gets_its_works_its_lease_and_its_clusters_status_only() {
        let access = agent_access("east", "u-1", "flotilla-cluster-east");
        let rules = access.role.rules.as_ref().unwrap();
        let verbs = |resource: &str| -> Vec<String> {
            rules
                .iter()
                .filter(|r| r.resources.as_ref().unwrap().iter().any(|x| x == resource))
                .flat_map(|r| r.verbs.clone())
                .collect()
        };
        assert_eq!(verbs("works"), ["get", "list", "watch"]);
        assert_eq!(verbs("works/status"), ["update", "patch"]);
        assert!(verbs("secrets").is_empty());
        let status = &access.cluster_role.rules.as_ref().unwrap()[0];
        assert_eq!(
            status.resource_names.as_deref(),
            Some(&["east".to_owned()][..])
        );
        assert_eq!(
            status.resources.as_deref(),
            Some(&["clusters/status".to_owned()][..])
        );
        for owners in [
            &access.role.metadata.owner_references,
            &access.role_binding.metadata.owner_references,
            &access.cluster_role.metadata.owner_references,
            &access.cluster_role_binding.metadata.owner_references,
        ] {
            let owner = &owners.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                ("Cluster", "u-1")
            );
        }
        let (role, binding) = bootstrapper();
        assert_eq!(role.rules.as_ref().unwrap().len(), 2);
        assert_eq!(binding.subjects.unwrap()[0].name, BOOTSTRAPPERS);
    }
}
