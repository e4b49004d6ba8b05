//! The hub's side of registration: approving CSRs of auto-approve tokens, and for every
//! approved cluster certificate, recording its serial on the Cluster and granting its
//! agent its RBAC. Runs in the hub as the server itself (it writes roles it does not
//! hold itself, as kube-controller-manager's bootstrap controllers do).
//!
//! ```text
//!  watch CSRs ─► signer kube-apiserver-client, CN system:flotilla:cluster:NAME? (else none
//!     of ours)
//!     pending, from system:bootstrap:ID in system:bootstrappers:flotilla:auto-approve
//!        ─► Cluster NAME exists, created with token ID (annotation), pull identity = CN,
//!           O = system:flotilla:clusters, in the token's set if it names one
//!           ─► the agent's RBAC applied, then Approved (AutoApproved) | else Denied
//!           (why) — a token for another cluster's name is refused
//!           (a Cluster the token registered and that never had a certificate is
//!           deleted with the refusal: nothing half-registered stays)
//!     pending, from system:flotilla:cluster:NAME itself (its agent renewing, with its
//!     current certificate) ─► CN = requester, O system:flotilla:clusters, Cluster NAME
//!        there, not deleting, pull identity = CN, a certificate recorded (not revoked)
//!        ─► named on the Cluster, then Approved (AutoApprovedRenewal) | else Denied (why)
//!     pending, from the token that registered the Cluster, not auto-approved ─► named on
//!        the Cluster; left to a person
//!     approved and signed ─► newer than the certificate the Cluster records?
//!        ─► annotations serial + issued-at; Role, RoleBinding, ClusterRole,
//!           ClusterRoleBinding (crate flotilla_api::agent), owned by the Cluster
//!  requests deleted once 24 h pending, or 1 h after approval or denial (kube's CSR
//!  cleaner's ages): a request pending forever does not stay
//! ```
//!
//! Only the serial the Cluster records authenticates (the x509 authenticator checks it
//! on every request): a newer approval replaces the older certificate, and
//! `flotilla revoke` empties the serial.

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::Cluster;
use flotilla_api::agent::{
    AUTO_APPROVE_GROUP, BOOTSTRAP_USER_PREFIX, CLUSTER_SET_GROUP_PREFIX, CLUSTERS_GROUP,
    REQUEST_ANNOTATION, SERIAL_ANNOTATION, TOKEN_ID_ANNOTATION, agent_access, cluster_of_user,
};
use futures_util::StreamExt as _;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Api, ResourceExt as _};
use tracing::{Instrument as _, info, info_span, warn};

use crate::Error;
use crate::register::SIGNER;

/// The field manager of what the registrar writes.
pub const MANAGER: &str = "flotilla-registrar";

/// The annotation on a Cluster: when the CSR of the certificate it records was created
/// (RFC 3339). An approved CSR older than this never replaces it (nor a revoked one).
pub const ISSUED_AT_ANNOTATION: &str = "flotilla.io/certificate-requested-at";

/// How long a cluster certificate request may stay pending before it is deleted (as
/// kube-controller-manager's CSR cleaner deletes pending requests after 24 hours).
pub const PENDING_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long an approved or denied request is kept (its certificate recorded, or its
/// refusal read) before it is deleted (the CSR cleaner's hour).
pub const DECIDED_TTL: Duration = Duration::from_secs(3600);

/// How long until `csr` (created at its creationTimestamp) is `ttl` old; zero if it is.
fn left(csr: &CertificateSigningRequest, ttl: Duration) -> Duration {
    let Some(created) = csr.metadata.creation_timestamp.as_ref() else {
        return ttl;
    };
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
    let age = Duration::try_from(age).unwrap_or_default();
    ttl.saturating_sub(age)
}

/// Deletes `csr` once it is `ttl` old; else the action that comes back then.
async fn expire(
    client: &kube::Client,
    csr: &CertificateSigningRequest,
    ttl: Duration,
) -> Result<Action, Error> {
    let left = left(csr, ttl);
    if !left.is_zero() {
        return Ok(Action::requeue(left));
    }
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    match api.delete(&csr.name_any(), &Default::default()).await {
        Ok(_) => info!("certificate request expired: deleted"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// Who asked for a cluster certificate, and for which cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterRequest {
    /// The cluster it names.
    pub cluster: String,
    /// Its subject's organizations.
    pub organizations: Vec<String>,
}

/// The cluster certificate `csr` asks for, if it is one.
pub fn cluster_request(csr: &CertificateSigningRequest) -> Option<ClusterRequest> {
    if csr.spec.signer_name != SIGNER {
        return None;
    }
    let request = flotilla_pki::CertificateRequest::parse(&csr.spec.request.0).ok()?;
    let cluster = cluster_of_user(&request.common_name)?.to_owned();
    Some(ClusterRequest {
        cluster,
        organizations: request.organizations,
    })
}

/// What the auto-approver decides of a pending request.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Not for the auto-approver: left to a person.
    Leave,
    /// Its Cluster is not there yet: looked at again shortly.
    Wait,
    /// Approved.
    Approve,
    /// Approved: the cluster's agent renewing its own certificate.
    ApproveRenewal,
    /// Refused, and why.
    Deny(String),
}

/// Whether a pending request `csr` for `request` is approved at once, given its Cluster.
pub fn decide(
    csr: &CertificateSigningRequest,
    request: &ClusterRequest,
    cluster: Option<&Cluster>,
) -> Decision {
    let groups = csr.spec.groups.clone().unwrap_or_default();
    let user = csr.spec.username.as_deref().unwrap_or_default();
    if user == flotilla_api::agent::cluster_user(&request.cluster) {
        return renewal(request, cluster);
    }
    let Some(token_id) = user.strip_prefix(BOOTSTRAP_USER_PREFIX) else {
        return Decision::Leave;
    };
    if !groups.iter().any(|g| g == AUTO_APPROVE_GROUP) {
        return Decision::Leave;
    }
    if request.organizations != [CLUSTERS_GROUP] {
        return Decision::Deny(format!(
            "a cluster certificate's organization must be {CLUSTERS_GROUP} alone, not {:?}",
            request.organizations
        ));
    }
    let Some(cluster) = cluster else {
        return Decision::Wait;
    };
    let name = &request.cluster;
    let created_by = cluster.annotations().get(TOKEN_ID_ANNOTATION);
    if created_by.map(String::as_str) != Some(token_id) {
        return Decision::Deny(format!(
            "cluster {name} was not registered with bootstrap token {token_id}"
        ));
    }
    let identity = cluster
        .spec
        .access
        .as_ref()
        .and_then(|a| a.pull.as_ref())
        .map(|p| p.identity.as_str());
    if identity != Some(flotilla_api::agent::cluster_user(name).as_str()) {
        return Decision::Deny(format!(
            "cluster {name} does not have pull access as {}",
            flotilla_api::agent::cluster_user(name)
        ));
    }
    let set = groups
        .iter()
        .find_map(|g| g.strip_prefix(CLUSTER_SET_GROUP_PREFIX));
    if let Some(set) = set
        && cluster.spec.cluster_set.as_deref() != Some(set)
    {
        return Decision::Deny(format!(
            "bootstrap token {token_id} registers clusters into set {set}, and cluster {name} is not in it"
        ));
    }
    Decision::Approve
}

/// A request of a cluster's agent, authenticated by its current certificate, for a new
/// one of the same identity (the kubelet's client certificate rotation: the requester is
/// the subject). Approved while the Cluster exists and still records a certificate;
/// anything else is refused (a revoked cluster cannot renew its way back).
fn renewal(request: &ClusterRequest, cluster: Option<&Cluster>) -> Decision {
    let name = &request.cluster;
    if request.organizations != [CLUSTERS_GROUP] {
        return Decision::Deny(format!(
            "a cluster certificate's organization must be {CLUSTERS_GROUP} alone, not {:?}",
            request.organizations
        ));
    }
    let Some(cluster) = cluster else {
        return Decision::Deny(format!("cluster {name} does not exist"));
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return Decision::Deny(format!("cluster {name} is being removed"));
    }
    let identity = cluster
        .spec
        .access
        .as_ref()
        .and_then(|a| a.pull.as_ref())
        .map(|p| p.identity.as_str());
    if identity != Some(flotilla_api::agent::cluster_user(name).as_str()) {
        return Decision::Deny(format!(
            "cluster {name} does not have pull access as {}",
            flotilla_api::agent::cluster_user(name)
        ));
    }
    if cluster
        .annotations()
        .get(SERIAL_ANNOTATION)
        .is_none_or(String::is_empty)
    {
        return Decision::Deny(format!(
            "cluster {name} has no valid certificate (revoked): it registers again with a token"
        ));
    }
    Decision::ApproveRenewal
}

/// Names `csr` on its Cluster (annotation [`REQUEST_ANNOTATION`]) before it is approved,
/// unless it is no newer than the certificate the Cluster records: the hub's
/// authenticators accept its certificate from the moment the signer issues it, before its
/// serial is recorded, so the agent's first request with it is never refused.
async fn name_request(
    clusters: &Api<Cluster>,
    cluster: &Cluster,
    csr: &CertificateSigningRequest,
) -> Result<(), Error> {
    let name = csr.name_any();
    if cluster.annotations().get(REQUEST_ANNOTATION) == Some(&name) {
        return Ok(());
    }
    let requested = csr.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let recorded = cluster
        .annotations()
        .get(ISSUED_AT_ANNOTATION)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    if let (Some(requested), Some(recorded)) = (requested, recorded)
        && requested <= recorded
    {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": {REQUEST_ANNOTATION: name}}});
    clusters
        .patch(
            &cluster.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    info!(csr = %name, "certificate request named on its Cluster before approval");
    Ok(())
}

/// Whether `csr` was asked for with the bootstrap token that registered `cluster`.
fn registered_by(cluster: &Cluster, csr: &CertificateSigningRequest) -> bool {
    let token = csr
        .spec
        .username
        .as_deref()
        .and_then(|u| u.strip_prefix(BOOTSTRAP_USER_PREFIX));
    token.is_some()
        && cluster
            .annotations()
            .get(TOKEN_ID_ANNOTATION)
            .map(String::as_str)
            == token
}

/// Whether `cluster` was registered by the token that asked for `csr` and never had a
/// certificate recorded.
fn never_approved_from(cluster: &Cluster, csr: &CertificateSigningRequest) -> bool {
    registered_by(cluster, csr) && !cluster.annotations().contains_key(ISSUED_AT_ANNOTATION)
}

fn condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Runs the registrar until the process ends. `client` must be allowed to approve CSRs of
/// the kube-apiserver-client signer, patch Clusters and write RBAC objects.
pub async fn run(client: kube::Client) {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let (cache, writer) = reflector::store();
    // A request's managed fields are never read here, and they are most of what it holds
    // beside the request and the certificate: the controller's cache keeps it without them
    // (a hub with many pull clusters keeps a request per cluster for an hour).
    let requests = watcher(csrs, watcher::Config::default())
        .default_backoff()
        .modify(|csr| csr.managed_fields_mut().clear())
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(requests, cache)
        .run(reconcile, error_policy, Arc::new(client))
        .for_each(|_| async {})
        .await;
}

fn error_policy(
    csr: Arc<CertificateSigningRequest>,
    error: &Error,
    _client: Arc<kube::Client>,
) -> Action {
    warn!(csr = %csr.name_any(), %error, "cluster certificate request not handled; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    client: Arc<kube::Client>,
) -> Result<Action, Error> {
    let Some(request) = cluster_request(&csr) else {
        return Ok(Action::await_change());
    };
    let span = info_span!("registrar", csr = %csr.name_any(), cluster = %request.cluster);
    async {
        if condition(&csr, "Denied") || condition(&csr, "Failed") {
            return expire(&client, &csr, DECIDED_TTL).await;
        }
        let clusters: Api<Cluster> = Api::all((*client).clone());
        let cluster = clusters.get_opt(&request.cluster).await?;
        if !condition(&csr, "Approved") {
            return match decide(&csr, &request, cluster.as_ref()) {
                Decision::Leave => {
                    // A person may approve it: named now, its certificate authenticates as
                    // soon as it is issued.
                    if let Some(cluster) = &cluster
                        && registered_by(cluster, &csr)
                    {
                        name_request(&clusters, cluster, &csr).await?;
                    }
                    expire(&client, &csr, PENDING_TTL).await
                }
                Decision::Wait => Ok(Action::requeue(Duration::from_secs(1))),
                Decision::Approve => {
                        if let Some(cluster) = &cluster {
                            name_request(&clusters, cluster, &csr).await?;
                            // Its access before its certificate: the agent's first
                            // request, as soon as the certificate is issued, is allowed.
                            grant(&client, cluster).await?;
                        }
                    set_condition(&client, &csr, "Approved", "AutoApproved",
                        "approved by the hub: a bootstrap token made with --auto-approve, for the cluster it registered").await?;
                    info!("auto-approved");
                    Ok(Action::await_change())
                }
                Decision::ApproveRenewal => {
                        if let Some(cluster) = &cluster {
                            name_request(&clusters, cluster, &csr).await?;
                        }
                    set_condition(&client, &csr, "Approved", "AutoApprovedRenewal",
                        "approved by the hub: the cluster's agent renewing its own certificate").await?;
                    info!("renewal auto-approved");
                    Ok(Action::await_change())
                }
                Decision::Deny(why) => {
                    set_condition(&client, &csr, "Denied", "NotAllowed", &why).await?;
                    warn!(%why, "denied");
                    // Nothing half-registered stays: a Cluster this token registered and
                    // that never had a certificate goes with the refusal.
                    if let Some(cluster) = &cluster
                        && never_approved_from(cluster, &csr)
                    {
                        clusters
                            .delete(&request.cluster, &Default::default())
                            .await?;
                        info!("the refused registration's Cluster deleted");
                    }
                    Ok(Action::requeue(DECIDED_TTL))
                }
            };
        }
        let Some(cert) = csr
            .status
            .as_ref()
            .and_then(|s| s.certificate.as_ref())
            .filter(|c| !c.0.is_empty())
        else {
            // Approved, not signed yet: the signer's write comes back as a change.
            return Ok(Action::await_change());
        };
        let Some(cluster) = cluster else {
            return expire(&client, &csr, DECIDED_TTL).await;
        };
        let serial = flotilla_pki::certificate_serial(&cert.0).map_err(Error::Hub)?;
        let requested = csr
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_default();
        let recorded = cluster
            .annotations()
            .get(ISSUED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let current = cluster.annotations().get(SERIAL_ANNOTATION) == Some(&serial);
        if !current && recorded.is_some_and(|at| requested <= at) {
            // An older certificate, or one revoked: never authenticates again.
            return expire(&client, &csr, DECIDED_TTL).await;
        }
        grant(&client, &cluster).await?;
        if !current {
            let patch = serde_json::json!({"metadata": {"annotations": {
                SERIAL_ANNOTATION: serial,
                ISSUED_AT_ANNOTATION: requested.to_string(),
            }}});
            clusters
                .patch(&request.cluster, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            info!(%serial, "cluster certificate recorded; its agent's access granted");
        }
        expire(&client, &csr, DECIDED_TTL).await
    }
    .instrument(span)
    .await
}

async fn set_condition(
    client: &kube::Client,
    csr: &CertificateSigningRequest,
    type_: &str,
    reason: &str,
    message: &str,
) -> Result<(), Error> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    conditions.push(CertificateSigningRequestCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_update_time: Some(now.clone()),
        last_transition_time: Some(now),
    });
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    api.patch_approval(
        &csr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Applies the agent's RBAC for `cluster` (owned by it).
async fn grant(client: &kube::Client, cluster: &Cluster) -> Result<(), Error> {
    let name = cluster.name_any();
    let namespace = format!("{}{name}", crate::pull::WORK_NAMESPACE_PREFIX);
    ensure_namespace(client, &namespace, &name).await?;
    let access = agent_access(&name, &cluster.uid().unwrap_or_default(), &namespace);
    let params = PatchParams::apply(MANAGER).force();
    let role_name = flotilla_api::agent::cluster_user(&name);
    Api::<Role>::namespaced(client.clone(), &namespace)
        .patch(
            &role_name,
            &params,
            &Patch::Apply(typed(&access.role, "Role")),
        )
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), &namespace)
        .patch(
            &role_name,
            &params,
            &Patch::Apply(typed(&access.role_binding, "RoleBinding")),
        )
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .patch(
            &role_name,
            &params,
            &Patch::Apply(typed(&access.cluster_role, "ClusterRole")),
        )
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &role_name,
            &params,
            &Patch::Apply(typed(&access.cluster_role_binding, "ClusterRoleBinding")),
        )
        .await?;
    Ok(())
}

/// `object` as JSON with its apiVersion and kind (server-side apply needs them).
fn typed<T: serde::Serialize>(object: &T, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    value["kind"] = kind.into();
    value
}

/// The cluster's Works namespace, created if missing (the cluster controller creates it
/// too; whichever comes first).
async fn ensure_namespace(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(namespace).await?.is_some() {
        return Ok(());
    }
    let object = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(namespace.to_owned()),
            labels: Some(std::collections::BTreeMap::from([(
                "flotilla.io/cluster".to_owned(),
                cluster.to_owned(),
            )])),
            ..kube::api::ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&kube::api::PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::{ClusterAccess, ClusterSpec, PullAccess};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;

    fn csr(cn: &str, org: &str, user: &str, groups: &[&str]) -> CertificateSigningRequest {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, org);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        CertificateSigningRequest {
            metadata: Default::default(),
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.into_bytes()),
                signer_name: SIGNER.into(),
                username: Some(user.into()),
                groups: Some(groups.iter().map(|g| (*g).to_owned()).collect()),
                ..Default::default()
            },
            status: None,
        }
    }

    fn cluster(name: &str, token: &str, set: Option<&str>) -> Cluster {
        let mut cluster = Cluster::new(
            name,
            ClusterSpec {
                cluster_set: set.map(str::to_owned),
                access: Some(ClusterAccess {
                    push: None,
                    pull: Some(PullAccess {
                        identity: flotilla_api::agent::cluster_user(name),
                    }),
                }),
                ..ClusterSpec::default()
            },
        );
        cluster
            .annotations_mut()
            .insert(TOKEN_ID_ANNOTATION.into(), token.into());
        cluster
    }

    #[test]
    fn requests_age_out_and_a_refused_registration_is_its_tokens_to_clean() {
        let mut old = csr(
            "system:flotilla:cluster:east",
            CLUSTERS_GROUP,
            "system:bootstrap:abcdef",
            &[],
        );
        assert_eq!(left(&old, PENDING_TTL), PENDING_TTL);
        old.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now()
                    - k8s_openapi::jiff::SignedDuration::from_hours(2),
            ));
        assert_eq!(left(&old, DECIDED_TTL), Duration::ZERO);
        assert!(left(&old, PENDING_TTL) > Duration::from_secs(21 * 3600));
        let mine = cluster("east", "abcdef", None);
        assert!(never_approved_from(&mine, &old));
        let theirs = cluster("east", "zzzzzz", None);
        assert!(!never_approved_from(&theirs, &old));
        let mut approved_once = mine.clone();
        approved_once
            .annotations_mut()
            .insert(ISSUED_AT_ANNOTATION.into(), "2026-01-01T00:00:00Z".into());
        assert!(!never_approved_from(&approved_once, &old));
    }

    #[test]
    fn an_auto_approve_token_gets_its_own_cluster_only() {
        let auto = [
            "system:bootstrappers",
            AUTO_APPROVE_GROUP,
            "system:authenticated",
        ];
        let east = csr(
            "system:flotilla:cluster:east",
            CLUSTERS_GROUP,
            "system:bootstrap:abcdef",
            &auto,
        );
        let request = cluster_request(&east).unwrap();
        assert_eq!(request.cluster, "east");
        let mine = cluster("east", "abcdef", None);
        assert_eq!(decide(&east, &request, Some(&mine)), Decision::Approve);
        assert_eq!(decide(&east, &request, None), Decision::Wait);
        // Another token's cluster: refused.
        let theirs = cluster("east", "zzzzzz", None);
        assert!(matches!(
            decide(&east, &request, Some(&theirs)),
            Decision::Deny(_)
        ));
        // A token without auto-approve, or a person's request: left to a person.
        let manual = csr(
            "system:flotilla:cluster:east",
            CLUSTERS_GROUP,
            "system:bootstrap:abcdef",
            &["system:bootstrappers"],
        );
        assert_eq!(decide(&manual, &request, Some(&mine)), Decision::Leave);
        // Another organization (system:masters) is never auto-approved.
        let masters = csr(
            "system:flotilla:cluster:east",
            "system:masters",
            "system:bootstrap:abcdef",
            &auto,
        );
        let request_masters = cluster_request(&masters).unwrap();
        assert!(matches!(
            decide(&masters, &request_masters, Some(&mine)),
            Decision::Deny(_)
        ));
        // A token bound to a set: its clusters must be in it.
        let set = format!("{CLUSTER_SET_GROUP_PREFIX}prod");
        let in_set = csr(
            "system:flotilla:cluster:east",
            CLUSTERS_GROUP,
            "system:bootstrap:abcdef",
            &[AUTO_APPROVE_GROUP, &set],
        );
        assert!(matches!(
            decide(&in_set, &request, Some(&mine)),
            Decision::Deny(_)
        ));
        let prod = cluster("east", "abcdef", Some("prod"));
        assert_eq!(decide(&in_set, &request, Some(&prod)), Decision::Approve);
        // Not a cluster certificate at all.
        let alice = csr("alice", "team", "system:bootstrap:abcdef", &auto);
        assert_eq!(cluster_request(&alice), None);
    }
}
