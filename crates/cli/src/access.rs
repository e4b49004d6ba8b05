//! Who may do what on the hub, set up before its fleet controllers start: the RBAC objects
//! of `flotilla_api::access`, the system namespace and the `default` ClusterSet, the
//! admission rule on ClusterSetBindings, and the controllers' own identity.
//!
//! ```text
//!  flotilla hub ─► CRDs (hub::install_fleet_api)
//!     ─► install: namespace flotilla-system, ClusterSet default (created when missing);
//!                 ClusterRoles, Roles and bindings (created when missing, updated when
//!                 they differ; a binding whose roleRef changed is deleted and created)
//!     ─► keep_template_reads: a watch of the CRDs; when the API groups served change,
//!                 the controller's ClusterRole is written again (templates of a new
//!                 CRD's kind become readable to it)
//!     ─► admission: a ClusterSetBinding is written only with `bind` on its ClusterSet;
//!                 a ComputeNamespace only with `bind` on the roles it binds and
//!                 `escalate` for the Roles it defines (the controller writes them)
//!     ─► fleet controllers, as system:flotilla:fleet-controller
//! ```
//!
//! Everything here is written through the API, as the server's own loopback user, with
//! field manager `flotilla`.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use flotilla_api::access;
use flotilla_apiserver::admission::Admission;
use flotilla_apiserver::admission::plugins::{Permission, RequireGrants, RequirePermission};
use flotilla_apiserver::auth::{AUTHENTICATED, UserInfo};
use flotilla_apiserver::client::Client;
use flotilla_apiserver::{Api, ApiError, Reason};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

/// The user the fleet controllers run as: `system:flotilla:fleet-controller`, in
/// `system:authenticated`, bound to the roles [`install`] writes.
pub fn controller_user() -> Arc<UserInfo> {
    Arc::new(UserInfo::new(access::FLEET_CONTROLLER, &[AUTHENTICATED]))
}

/// The hub's admission chain: the built-in plugins; a ClusterSetBinding (created,
/// changed or deleted) needs `bind` on the ClusterSet it names (or `create` on
/// `clustersets/bind`, OCM's form); a ComputeNamespace needs `bind` on each role its
/// `spec.roleBindings` name and `escalate` for each of its `spec.roles` (in its
/// namespace), as `api`'s authorizer decides. Built after the server's stages are set.
pub fn admission(api: &Api) -> Admission {
    let group = flotilla_api::GROUP;
    Admission::builtin()
        .with_validating(Arc::new(RequirePermission::new(
            api.authorizer(),
            group,
            "clustersetbindings",
            "/spec/clusterSet",
            vec![
                Permission::cluster_scoped("bind", group, "clustersets"),
                Permission::cluster_scoped("create", group, "clustersets/bind"),
            ],
        )))
        // The fleet controller writes a ComputeNamespace's Roles and RoleBindings in
        // its hub namespace with its own `bind` and `escalate`: its writer must hold
        // those grants himself.
        .with_validating(Arc::new(RequireGrants::new(
            api.authorizer(),
            group,
            "computenamespaces",
            "/spec/roleBindings",
            "/spec/roles",
            "/metadata/name",
        )))
}

const NAMESPACES: &str = "/api/v1/namespaces";
const CLUSTER_SETS: &str = "/apis/flotilla.io/v1alpha1/clustersets";
const CLUSTER_ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const POLICY_BINDINGS: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
const CLUSTER_ROLE_BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

fn roles(namespace: &str) -> String {
    format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles")
}

fn role_bindings(namespace: &str) -> String {
    format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings")
}

/// A refusal as one line.
fn why(e: &ApiError) -> String {
    match e.message.as_str() {
        "" => format!("{} {}", e.code, e.reason),
        message => message.to_owned(),
    }
}

/// Installs what access on the hub needs; returns the API groups the controller's
/// ClusterRole was written for. Any failure is one line.
pub async fn install(api: &Api) -> anyhow::Result<BTreeSet<String>> {
    let client = Client::new(api.clone()).with_field_manager("flotilla");
    let namespace = access::CREDENTIALS_NAMESPACE;
    create_missing(
        &client,
        NAMESPACES,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    )
    .await
    .with_context(|| format!("cannot create the namespace {namespace}"))?;
    // Clusters joined without a set are in `default` for bindings: the set exists so that
    // a binding to it binds them.
    create_missing(
        &client,
        CLUSTER_SETS,
        &json!({"apiVersion": "flotilla.io/v1alpha1", "kind": "ClusterSet",
            "metadata": {"name": flotilla_api::DEFAULT_CLUSTER_SET},
            "spec": {"description": "the clusters joined without a set"}}),
    )
    .await
    .context("cannot create the default ClusterSet")?;
    let groups = served_groups(&client).await?;
    let objects = access::objects(&groups.iter().cloned().collect::<Vec<_>>());
    let mut changed = 0;
    for role in &objects.cluster_roles {
        changed += ensure(&client, CLUSTER_ROLES, &serde_json::to_value(role)?).await? as usize;
    }
    for binding in &objects.cluster_role_bindings {
        changed += ensure(
            &client,
            CLUSTER_ROLE_BINDINGS,
            &serde_json::to_value(binding)?,
        )
        .await? as usize;
    }
    for role in &objects.roles {
        let namespace = role.metadata.namespace.as_deref().unwrap_or(namespace);
        changed += ensure(&client, &roles(namespace), &serde_json::to_value(role)?).await? as usize;
    }
    for binding in &objects.role_bindings {
        let namespace = binding.metadata.namespace.as_deref().unwrap_or(namespace);
        changed += ensure(
            &client,
            &role_bindings(namespace),
            &serde_json::to_value(binding)?,
        )
        .await? as usize;
    }
    // A bootstrap token's Cluster request kept to its own (a pull agent's registration).
    let (policy, binding) = flotilla_api::agent::bootstrapper_policy();
    changed += ensure(&client, POLICIES, &policy).await? as usize;
    changed += ensure(&client, POLICY_BINDINGS, &binding).await? as usize;
    info!(changed, user = access::FLEET_CONTROLLER, "access ready");
    Ok(groups)
}

/// Keeps the controller's ClusterRole reading templates of every API group served: a
/// watch of the CRDs (as the server itself); when the groups served change, the role is
/// written again. `groups`: those it was installed for.
pub fn keep_template_reads(api: Api, mut groups: BTreeSet<String>) {
    let loopback = kube::Client::new(
        flotilla_apiserver::http::server::local_service(
            api.clone(),
            Arc::new(flotilla_apiserver::http::metrics::Metrics::new()),
        ),
        "default",
    );
    type Crd =
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: kube::Api<Crd> = kube::Api::all(loopback);
    let client = Client::new(api).with_field_manager("flotilla");
    tokio::spawn(async move {
        use kube::runtime::{WatchStreamExt, watcher};
        let events = watcher::watcher(crds, watcher::Config::default()).default_backoff();
        futures_util::pin_mut!(events);
        // The group of every CRD seen, by name: a CRD's watch event may come before its
        // group is in discovery, so the groups served are discovery's and these.
        let mut defined: std::collections::BTreeMap<String, String> = Default::default();
        let mut listing = std::collections::BTreeMap::new();
        while let Some(event) = events.next().await {
            let name_group = |crd: &Crd| {
                (
                    crd.metadata.name.clone().unwrap_or_default(),
                    crd.spec.group.clone(),
                )
            };
            match event {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(crd)) => {
                    listing.extend([name_group(&crd)]);
                    continue;
                }
                Ok(watcher::Event::InitDone) => defined = std::mem::take(&mut listing),
                Ok(watcher::Event::Apply(crd)) => defined.extend([name_group(&crd)]),
                Ok(watcher::Event::Delete(crd)) => {
                    defined.remove(&name_group(&crd).0);
                }
                Err(e) => {
                    warn!(error = %e, "the watch of CRDs failed; retrying");
                    continue;
                }
            }
            let mut now = match served_groups(&client).await {
                Ok(now) => now,
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "cannot read the API groups served");
                    continue;
                }
            };
            now.extend(defined.values().cloned());
            if now == groups {
                continue;
            }
            let list: Vec<String> = now.iter().cloned().collect();
            let role = access::fleet_controller_role(&list);
            let written = match serde_json::to_value(&role) {
                Ok(role) => ensure(&client, CLUSTER_ROLES, &role).await,
                Err(e) => Err(e.into()),
            };
            match written {
                Ok(_) => {
                    info!(groups = ?list, "the fleet controller reads templates of these groups");
                    groups = now;
                }
                Err(e) => {
                    warn!(error = %format!("{e:#}"), "cannot update the fleet controller's role")
                }
            }
        }
    });
}

/// The API groups the hub serves besides the core group (its discovery's `/apis`).
async fn served_groups(client: &Client) -> anyhow::Result<BTreeSet<String>> {
    let list = client
        .get("/apis")
        .await
        .map_err(|e| anyhow::anyhow!("cannot list the API groups: {}", why(&e)))?;
    Ok(list["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str())
        .map(str::to_owned)
        .collect())
}

/// Creates `object` in `collection` unless it exists (what is there is left as it is).
async fn create_missing(client: &Client, collection: &str, object: &Value) -> anyhow::Result<()> {
    match client.create(collection, object).await {
        Ok(_) => Ok(()),
        Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
        Err(e) => Err(anyhow::anyhow!("{}", why(&e))),
    }
}

/// The fields of an RBAC object that say what it grants: its labels (aggregation), and
/// everything but metadata.
fn grants(object: &Value) -> Value {
    let mut grants = object.clone();
    if let Some(map) = grants.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        // A policy's status is the server's (its type checking).
        map.remove("status");
        map.insert("labels".into(), object["metadata"]["labels"].clone());
    }
    grants
}

/// Creates `desired` in `collection` when missing, replaces it when what it grants
/// differs (a binding whose `roleRef`, immutable, differs is deleted and created); returns
/// whether it wrote anything.
async fn ensure(client: &Client, collection: &str, desired: &Value) -> anyhow::Result<bool> {
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let kind = desired["kind"].as_str().unwrap_or_default();
    let fail =
        |action: &str, e: &ApiError| anyhow::anyhow!("cannot {action} {kind} {name}: {}", why(e));
    let path = format!("{collection}/{name}");
    let current = match client.get(&path).await {
        Ok(current) => Some(current),
        Err(e) if e.reason == Reason::NotFound => None,
        Err(e) => return Err(fail("read", &e)),
    };
    let Some(current) = current else {
        client
            .create(collection, desired)
            .await
            .map_err(|e| fail("create", &e))?;
        info!(%kind, %name, "created");
        return Ok(true);
    };
    let ours = grants(desired);
    if grants(&current) == ours {
        debug!(%kind, %name, "unchanged");
        return Ok(false);
    }
    if !desired["roleRef"].is_null() && current["roleRef"] != desired["roleRef"] {
        client.delete(&path).await.map_err(|e| fail("delete", &e))?;
        client
            .create(collection, desired)
            .await
            .map_err(|e| fail("create", &e))?;
        info!(%kind, %name, "created again (its roleRef changed)");
        return Ok(true);
    }
    let mut replacement = desired.clone();
    replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    client
        .replace(&path, &replacement)
        .await
        .map_err(|e| fail("update", &e))?;
    info!(%kind, %name, "updated");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn api() -> Api {
        let store: Arc<dyn flotilla_store::Store> = Arc::new(
            flotilla_store_sqlite::SqliteStore::open(
                tempfile::tempdir().unwrap().keep().join("hub.db"),
            )
            .await
            .unwrap(),
        );
        let api = Api::new(
            store,
            Arc::new(flotilla_apiserver::Registry::builtin()),
            "127.0.0.1",
        );
        api.bootstrap().await.unwrap();
        crate::hub::install_fleet_api(&api).await.unwrap();
        api
    }

    #[tokio::test]
    async fn install_writes_the_roles_once_and_puts_back_what_was_changed() {
        let api = api().await;
        let client = Client::new(api.clone());
        let groups = install(&api).await.unwrap();
        assert!(groups.contains("apps") && groups.contains("rbac.authorization.k8s.io"));
        for path in [
            format!("{NAMESPACES}/flotilla-system"),
            format!("{CLUSTER_ROLES}/{}", access::FLEET_CONTROLLER),
            format!("{CLUSTER_ROLES}/{}", access::FLEET_ADMIN),
            format!("{CLUSTER_ROLES}/{}", access::AGGREGATE_TO_VIEW),
            format!("{CLUSTER_ROLE_BINDINGS}/{}", access::FLEET_CONTROLLER),
            format!(
                "{}/{}",
                roles("flotilla-system"),
                access::MEMBER_CREDENTIALS
            ),
            format!(
                "{}/{}",
                role_bindings("flotilla-system"),
                access::MEMBER_CREDENTIALS
            ),
        ] {
            client
                .get(&path)
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        // Installed again: nothing to write.
        let role_path = format!("{CLUSTER_ROLES}/{}", access::FLEET_CONTROLLER);
        let before = client.get(&role_path).await.unwrap();
        install(&api).await.unwrap();
        let after = client.get(&role_path).await.unwrap();
        assert_eq!(
            before["metadata"]["resourceVersion"],
            after["metadata"]["resourceVersion"]
        );
        // Someone widened the role: the hub puts it back at its next start.
        let mut widened = after.clone();
        widened["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
        client.replace(&role_path, &widened).await.unwrap();
        install(&api).await.unwrap();
        let restored = client.get(&role_path).await.unwrap();
        assert_eq!(restored["rules"], after["rules"]);
        // A binding pointed elsewhere is made again, pointing at the controller's role.
        let binding_path = format!("{CLUSTER_ROLE_BINDINGS}/{}", access::FLEET_CONTROLLER);
        client.delete(&binding_path).await.unwrap();
        let mut other =
            serde_json::to_value(&access::objects(&[]).cluster_role_bindings[0]).unwrap();
        other["roleRef"]["name"] = json!("cluster-admin");
        client.create(CLUSTER_ROLE_BINDINGS, &other).await.unwrap();
        install(&api).await.unwrap();
        let binding = client.get(&binding_path).await.unwrap();
        assert_eq!(binding["roleRef"]["name"], access::FLEET_CONTROLLER);
    }
}
