//! A [`ComputeNamespace`] as what each member gets (pure): who its members are, the
//! objects it renders, the one Work per member that delivers them, and its status from
//! those Works' reports. [`runtime`](crate::runtime)'s compute controller writes what
//! this decides.
//!
//! ```text
//!  ComputeNamespace + Clusters ──► members (spec.clusterSet ∈ clusterSets, not leaving)
//!  ComputeNamespace ──► manifests: Namespace, ServiceAccounts, LimitRange, ResourceQuota,
//!                       Roles, RoleBindings (in that order: the namespace first)
//!                  ──► work(cluster): those manifests, drift Correct, its deletion policy
//!                  ──► hub_grants: its Roles and RoleBindings, owned by it, for the hub
//!                      namespace of the same name
//!  members + their Works' status ──► status: per member Ready / Drifted / Failed / Pending
//! ```

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::compute::{self, ComputeNamespace, MemberState, MemberStatus};
use flotilla_api::{
    ApplyPolicy, Cluster, ComputeNamespaceStatus, ConflictPolicy, DeletionPolicy, DriftPolicy,
    Json, MAX_LISTED_CLUSTERS, Work, WorkSpec, condition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use crate::model::is_true;

/// The clusters ComputeNamespace `cns` goes to: those whose set (`spec.clusterSet`, or
/// `default` for clusters in none) is one of its `clusterSets`, and that are not being
/// removed from the fleet.
pub fn members<'a>(
    cns: &ComputeNamespace,
    clusters: impl IntoIterator<Item = &'a Cluster>,
) -> BTreeSet<String> {
    let sets: BTreeSet<&str> = cns.spec.cluster_sets.iter().map(String::as_str).collect();
    clusters
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter(|c| sets.contains(c.spec.bound_set()))
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// The label every object a ComputeNamespace renders carries, naming it (so that the
/// member's objects say where they come from beyond delivery's own provenance).
pub const LABEL: &str = "flotilla.io/compute-namespace";

/// The objects ComputeNamespace `cns` puts on each member, whole: the Namespace first
/// (everything else lives in it), then ServiceAccounts, the LimitRange and the
/// ResourceQuota (both named after the namespace), Roles and RoleBindings.
pub fn manifests(cns: &ComputeNamespace) -> Vec<Value> {
    let namespace = cns.metadata.name.clone().unwrap_or_default();
    let spec = &cns.spec;
    let with_label = |labels: &BTreeMap<String, String>| {
        let mut labels = labels.clone();
        labels.insert(LABEL.to_owned(), namespace.clone());
        labels
    };
    let meta = |name: &str, labels: &BTreeMap<String, String>| json!({"name": name, "namespace": namespace, "labels": with_label(labels)});
    let none = BTreeMap::new();
    let mut out = Vec::new();
    let mut ns_meta = json!({"name": namespace, "labels": with_label(&spec.labels)});
    if !spec.annotations.is_empty() {
        ns_meta["annotations"] = json!(spec.annotations);
    }
    out.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": ns_meta}));
    for sa in &spec.service_accounts {
        let mut metadata = meta(&sa.name, &sa.labels);
        if !sa.annotations.is_empty() {
            metadata["annotations"] = json!(sa.annotations);
        }
        out.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}));
    }
    if let Some(limits) = &spec.limit_range {
        out.push(json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": meta(&namespace, &none), "spec": limits}));
    }
    if let Some(quota) = &spec.resource_quota {
        out.push(json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": meta(&namespace, &none), "spec": quota}));
    }
    for role in &spec.roles {
        out.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": meta(&role.name, &none), "rules": role.rules}),
        );
    }
    for binding in &spec.role_bindings {
        let mut object = json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding", "metadata": meta(&binding.name, &none),
            "roleRef": binding.role_ref});
        if !binding.subjects.is_empty() {
            object["subjects"] = json!(binding.subjects);
        }
        out.push(object);
    }
    out
}

/// The Roles and RoleBindings `cns` also makes in its hub namespace, so that its team's
/// grants hold on the hub (for its Placements) as on every member: those of
/// [`manifests`], each labelled [`LABEL`] and owned by `cns` (deleted with it by
/// garbage collection, if not before), Roles first.
pub fn hub_grants(cns: &ComputeNamespace) -> Vec<Value> {
    let owner = cns.metadata.uid.as_ref().map(|uid| {
        json!([{
            "apiVersion": <ComputeNamespace as kube::Resource>::api_version(&()),
            "kind": <ComputeNamespace as kube::Resource>::kind(&()),
            "name": cns.metadata.name.clone().unwrap_or_default(),
            "uid": uid,
            "controller": true,
        }])
    });
    manifests(cns)
        .into_iter()
        .filter(|m| matches!(m["kind"].as_str(), Some("Role" | "RoleBinding")))
        .map(|mut m| {
            if let Some(owner) = &owner {
                m["metadata"]["ownerReferences"] = owner.clone();
            }
            m
        })
        .collect()
}

/// The spec of the Work that puts `cns` on `cluster`: its [`manifests`]; drift is put
/// back; objects of the same names already on the member are taken over (the
/// ComputeNamespace is what the namespace is on every member of its sets, whoever made it
/// first, a placement's namespace included); on deletion, its deletion policy, `Delete`
/// as `DeleteCreated`: what was taken over is given back, not deleted.
pub fn work(cns: &ComputeNamespace, manifests: &[Value], cluster: &str) -> WorkSpec {
    WorkSpec {
        placement: compute::reference(&cns.metadata.name.clone().unwrap_or_default()),
        cluster: cluster.to_owned(),
        manifests: manifests.iter().map(Json::from).collect(),
        apply: Some(ApplyPolicy {
            conflict: ConflictPolicy::Overwrite,
            drift: DriftPolicy::Correct,
            // What a member had before (a namespace made by hand or by a placement) is
            // taken over but never deleted: `Delete` removes only what it created.
            deletion: match cns.spec.deletion_policy {
                DeletionPolicy::Delete | DeletionPolicy::DeleteCreated => {
                    DeletionPolicy::DeleteCreated
                }
                DeletionPolicy::Orphan => DeletionPolicy::Orphan,
            },
            // Delivered as the agent or push delivery itself: the namespace and its RBAC
            // are what a member's own service accounts are later bound by.
            service_account_name: None,
        }),
    }
}

/// Where `cns` stands on one member whose Work is `work` (none yet: `Pending`), and why.
pub fn member_state(cluster: &str, work: Option<&Work>) -> MemberStatus {
    let pending = |message: &str| MemberStatus {
        cluster: cluster.to_owned(),
        state: MemberState::Pending,
        message: message.to_owned(),
    };
    let Some(work) = work else {
        return pending("its Work is not written yet");
    };
    let Some(status) = work.status.as_ref().filter(|s| {
        s.observed_generation.is_some() && s.observed_generation == work.metadata.generation
    }) else {
        return pending("the member has not reported on the latest spec yet");
    };
    if !is_true(&status.conditions, condition::APPLIED) {
        // The first manifest that failed says why; the Work's condition otherwise.
        let why = status
            .manifests
            .iter()
            .find_map(|m| {
                m.conditions
                    .iter()
                    .find(|c| c.type_ == condition::APPLIED && c.status != "True")
                    .map(|c| format!("{} {}: {}", m.kind, m.name, c.message))
            })
            .or_else(|| {
                status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == condition::APPLIED)
                    .map(|c| c.message.clone())
            })
            .unwrap_or_else(|| "not applied".to_owned());
        return MemberStatus {
            cluster: cluster.to_owned(),
            state: MemberState::Failed,
            message: why,
        };
    }
    let drifted: Vec<String> = status
        .manifests
        .iter()
        .flat_map(|m| {
            m.drift
                .iter()
                .map(move |d| format!("{} {} {}", m.kind, m.name, d.path))
        })
        .collect();
    if !drifted.is_empty() {
        return MemberStatus {
            cluster: cluster.to_owned(),
            state: MemberState::Drifted,
            message: format!("differs from the hub's: {}", drifted.join(", ")),
        };
    }
    MemberStatus {
        cluster: cluster.to_owned(),
        state: MemberState::Ready,
        message: String::new(),
    }
}

/// `cns`'s status over its `members`, each with its Work if it has one (`works`, by
/// cluster); `now` is the time of a condition that changes. Members are listed in name
/// order, those not `Ready` first, at most [`MAX_LISTED_CLUSTERS`].
pub fn status(
    cns: &ComputeNamespace,
    members: &BTreeSet<String>,
    works: &BTreeMap<String, &Work>,
    now: &Time,
) -> ComputeNamespaceStatus {
    let mut states: Vec<MemberStatus> = members
        .iter()
        .map(|c| member_state(c, works.get(c).copied()))
        .collect();
    let mut counts: BTreeMap<MemberState, usize> = BTreeMap::new();
    for s in &states {
        *counts.entry(s.state).or_default() += 1;
    }
    let ready = counts.get(&MemberState::Ready).copied().unwrap_or_default();
    let others: Vec<String> = counts
        .iter()
        .filter(|(state, _)| **state != MemberState::Ready)
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let summary = if members.is_empty() {
        "NoClusters".to_owned()
    } else if others.is_empty() {
        "Ready".to_owned()
    } else {
        others.join(", ")
    };
    let generation = cns.metadata.generation;
    let previous = cns
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let all_ready = !members.is_empty() && ready == members.len();
    let (flag, reason, message) = if all_ready {
        (
            "True",
            "Ready",
            format!("on all {ready} clusters of its sets"),
        )
    } else if members.is_empty() {
        (
            "False",
            "NoClusters",
            format!(
                "no cluster is in ClusterSet(s) {}",
                cns.spec.cluster_sets.join(", ")
            ),
        )
    } else {
        (
            "False",
            "NotReady",
            format!("{ready} of {} ready: {summary}", members.len()),
        )
    };
    let ready_condition = condition::keep_time(
        condition::READY,
        flag,
        reason,
        message,
        generation,
        previous,
        now,
    );
    // Not ready first, then by name; the list is bounded.
    states.sort_by(|a, b| {
        (a.state == MemberState::Ready, &a.cluster)
            .cmp(&(b.state == MemberState::Ready, &b.cluster))
    });
    states.truncate(MAX_LISTED_CLUSTERS);
    ComputeNamespaceStatus {
        observed_generation: generation,
        conditions: vec![ready_condition],
        clusters: i32::try_from(members.len()).unwrap_or(i32::MAX),
        ready_clusters: i32::try_from(ready).unwrap_or(i32::MAX),
        summary,
        members: states,
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{
        ClusterSpec, ComputeNamespaceSpec, DeletionPolicy, ManifestStatus, RoleBindingTemplate,
        RoleTemplate, ServiceAccountTemplate, WorkStatus,
    };
    use k8s_openapi::api::core::v1::{LimitRangeItem, LimitRangeSpec, ResourceQuotaSpec};
    use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;

    fn team_a() -> ComputeNamespace {
        let mut cns = ComputeNamespace::new(
            "team-a",
            ComputeNamespaceSpec {
                cluster_sets: vec!["eu".into()],
                labels: BTreeMap::from([("team".into(), "a".into())]),
                service_accounts: vec![ServiceAccountTemplate {
                    name: "deployer".into(),
                    ..Default::default()
                }],
                limit_range: Some(LimitRangeSpec {
                    limits: vec![LimitRangeItem {
                        type_: "Container".into(),
                        default: Some(BTreeMap::from([("cpu".into(), Quantity("500m".into()))])),
                        ..Default::default()
                    }],
                }),
                resource_quota: Some(ResourceQuotaSpec {
                    hard: Some(BTreeMap::from([("pods".into(), Quantity("10".into()))])),
                    ..Default::default()
                }),
                roles: vec![RoleTemplate {
                    name: "reader".into(),
                    rules: vec![PolicyRule {
                        api_groups: Some(vec![String::new()]),
                        resources: Some(vec!["pods".into()]),
                        verbs: vec!["get".into()],
                        ..Default::default()
                    }],
                }],
                role_bindings: vec![RoleBindingTemplate {
                    name: "team-a-edit".into(),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "ClusterRole".into(),
                        name: "edit".into(),
                    },
                    subjects: vec![Subject {
                        kind: "Group".into(),
                        name: "team-a".into(),
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            },
        );
        cns.metadata.generation = Some(1);
        cns
    }

    fn cluster(name: &str, set: Option<&str>) -> Cluster {
        Cluster::new(
            name,
            ClusterSpec {
                cluster_set: set.map(str::to_owned),
                ..Default::default()
            },
        )
    }

    #[test]
    fn members_are_the_clusters_of_its_sets_that_are_not_leaving() {
        let mut leaving = cluster("eu-3", Some("eu"));
        leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let clusters = [
            cluster("eu-1", Some("eu")),
            cluster("eu-2", Some("eu")),
            leaving,
            cluster("us-1", Some("us")),
            cluster("none", None),
        ];
        let cns = team_a();
        assert_eq!(
            members(&cns, &clusters),
            BTreeSet::from(["eu-1".to_owned(), "eu-2".to_owned()])
        );
        // Clusters in no set are the set `default`'s.
        let mut both = team_a();
        both.spec.cluster_sets = vec!["us".into(), "default".into()];
        assert_eq!(
            members(&both, &clusters),
            BTreeSet::from(["none".to_owned(), "us-1".to_owned()])
        );
    }

    #[test]
    fn the_namespace_comes_first_and_every_object_lives_in_it() {
        let rendered = manifests(&team_a());
        let kinds: Vec<(&str, &str)> = rendered
            .iter()
            .map(|m| {
                (
                    m["kind"].as_str().unwrap(),
                    m["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("Namespace", "team-a"),
                ("ServiceAccount", "deployer"),
                ("LimitRange", "team-a"),
                ("ResourceQuota", "team-a"),
                ("Role", "reader"),
                ("RoleBinding", "team-a-edit"),
            ]
        );
        assert_eq!(
            rendered[0]["metadata"],
            json!({"name": "team-a", "labels": {"team": "a", LABEL: "team-a"}})
        );
        for m in &rendered[1..] {
            assert_eq!(m["metadata"]["namespace"], "team-a", "{m}");
            assert_eq!(m["metadata"]["labels"][LABEL], "team-a", "{m}");
        }
        assert_eq!(rendered[2]["spec"]["limits"][0]["default"]["cpu"], "500m");
        assert_eq!(rendered[3]["spec"], json!({"hard": {"pods": "10"}}));
        assert_eq!(rendered[4]["rules"][0]["resources"], json!(["pods"]));
        assert_eq!(
            rendered[5]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"})
        );
        assert_eq!(
            rendered[5]["subjects"],
            json!([{"kind": "Group", "name": "team-a"}])
        );
    }

    #[test]
    fn a_bare_compute_namespace_is_its_namespace_alone_with_annotations() {
        let mut cns = ComputeNamespace::new(
            "ci",
            ComputeNamespaceSpec {
                cluster_sets: vec!["eu".into()],
                annotations: BTreeMap::from([("owner".into(), "ci@example.com".into())]),
                ..Default::default()
            },
        );
        cns.metadata.generation = Some(1);
        let rendered = manifests(&cns);
        assert_eq!(rendered.len(), 1);
        assert_eq!(
            rendered[0]["metadata"]["annotations"]["owner"],
            "ci@example.com"
        );
    }

    #[test]
    fn its_hub_grants_are_its_roles_and_bindings_owned_by_it() {
        let mut cns = team_a();
        cns.metadata.uid = Some("u-1".into());
        let grants = hub_grants(&cns);
        let kinds: Vec<&str> = grants.iter().map(|m| m["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Role", "RoleBinding"]);
        for m in &grants {
            assert_eq!(m["metadata"]["namespace"], "team-a", "{m}");
            assert_eq!(m["metadata"]["labels"][LABEL], "team-a", "{m}");
            let owner = &m["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "ComputeNamespace", "{m}");
            assert_eq!(owner["apiVersion"], "flotilla.io/v1alpha1", "{m}");
            assert_eq!(owner["uid"], "u-1", "{m}");
            assert_eq!(owner["name"], "team-a", "{m}");
        }
        assert_eq!(
            grants[1]["roleRef"]["name"],
            cns.spec.role_bindings[0].role_ref.name
        );
    }

    #[test]
    fn its_work_carries_its_reference_and_deletion_policy() {
        let mut cns = team_a();
        cns.spec.deletion_policy = DeletionPolicy::Orphan;
        let rendered = manifests(&cns);
        let spec = work(&cns, &rendered, "eu-1");
        assert_eq!(spec.cluster, "eu-1");
        assert_eq!(compute::referenced(&spec.placement), Some("team-a"));
        assert_eq!(spec.manifests.len(), 6);
        let apply = spec.apply.unwrap();
        assert_eq!(apply.deletion, DeletionPolicy::Orphan);
        assert_eq!(apply.drift, DriftPolicy::Correct);
        assert_eq!(apply.conflict, ConflictPolicy::Overwrite);
        // `Delete` deletes only what it created: a namespace taken over is given back.
        cns.spec.deletion_policy = DeletionPolicy::Delete;
        let apply = work(&cns, &rendered, "eu-1").apply.unwrap();
        assert_eq!(apply.deletion, DeletionPolicy::DeleteCreated);
    }

    fn condition(type_: &str, status: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: message.into(),
            observed_generation: None,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    fn reported(generation: i64, applied: bool, manifests: Vec<ManifestStatus>) -> Work {
        let mut w = Work::new("computenamespace.team-a", WorkSpec::default());
        w.metadata.generation = Some(generation);
        w.status = Some(WorkStatus {
            observed_generation: Some(generation),
            conditions: vec![condition(
                condition::APPLIED,
                if applied { "True" } else { "False" },
                "some manifests failed",
            )],
            manifests,
        });
        w
    }

    #[test]
    fn each_member_is_ready_drifted_failed_or_pending_with_why() {
        let quota = |drift: bool, applied: bool| ManifestStatus {
            api_version: "v1".into(),
            kind: "ResourceQuota".into(),
            namespace: Some("team-a".into()),
            name: "team-a".into(),
            conditions: vec![condition(
                condition::APPLIED,
                if applied { "True" } else { "False" },
                "quota refused",
            )],
            drift: if drift {
                vec![flotilla_api::Drift {
                    path: "/spec/hard/pods".into(),
                    hub: Some("10".into()),
                    member: Some("20".into()),
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let ready = reported(1, true, vec![quota(false, true)]);
        let drifted = reported(1, true, vec![quota(true, true)]);
        let failed = reported(1, false, vec![quota(false, false)]);
        let mut stale = reported(1, true, vec![]);
        stale.metadata.generation = Some(2);
        let cns = team_a();
        let members: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let works = BTreeMap::from([
            ("a".to_owned(), &ready),
            ("b".to_owned(), &drifted),
            ("c".to_owned(), &failed),
            ("d".to_owned(), &stale),
        ]);
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let got = status(&cns, &members, &works, &now);
        let states: Vec<(&str, MemberState)> = got
            .members
            .iter()
            .map(|m| (m.cluster.as_str(), m.state))
            .collect();
        assert_eq!(
            states,
            [
                ("b", MemberState::Drifted),
                ("c", MemberState::Failed),
                ("d", MemberState::Pending),
                ("e", MemberState::Pending),
                ("a", MemberState::Ready),
            ]
        );
        assert_eq!(
            got.members[0].message,
            "differs from the hub's: ResourceQuota team-a /spec/hard/pods"
        );
        assert_eq!(
            got.members[1].message,
            "ResourceQuota team-a: quota refused"
        );
        assert!(got.members[3].message.contains("not written"));
        assert_eq!((got.clusters, got.ready_clusters), (5, 1));
        assert_eq!(got.summary, "2 Pending, 1 Drifted, 1 Failed");
        assert_eq!(got.conditions[0].status, "False");
        assert_eq!(got.observed_generation, Some(1));

        let all = BTreeMap::from([("a".to_owned(), &ready)]);
        let one: BTreeSet<String> = ["a".to_owned()].into();
        let got = status(&cns, &one, &all, &now);
        assert_eq!(
            (got.summary.as_str(), got.conditions[0].status.as_str()),
            ("Ready", "True")
        );
        let got = status(&cns, &BTreeSet::new(), &BTreeMap::new(), &now);
        assert_eq!(got.summary, "NoClusters");
        assert_eq!(got.conditions[0].reason, "NoClusters");
    }
}
