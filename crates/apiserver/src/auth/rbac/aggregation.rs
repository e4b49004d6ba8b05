//! The clusterrole aggregation controller: a ClusterRole with an `aggregationRule` gets the
//! rules of the ClusterRoles its selectors match, and keeps them as those change.
//!
//! ```text
//!  index applies a ClusterRole change in cluster C ─► C marked ─► the controller wakes
//!    ─► Index::aggregations(C): each aggregated role whose rules differ from what its
//!       selectors gather ─► merge patch {"rules": …} through the API, as the server
//!       (field manager clusterrole-aggregation-controller) ─► its own write marks C again
//!       and finds nothing left to do
//! ```

use std::time::Duration;

use serde_json::json;

use super::{GROUP, Rbac, Rule};
use crate::api::{Api, ROOT_CLUSTER};
use crate::client::Client;
use crate::http::error::{ApiResult, Reason};

/// The field manager of the rules the controller writes (as upstream names it).
pub(crate) const FIELD_MANAGER: &str = "clusterrole-aggregation-controller";

/// The API path of ClusterRole `name` of logical cluster `cluster`: from the root API
/// (`/clusters/<cluster>/…` for a logical cluster) if `from_root`, else from the
/// cluster's own view.
fn path(cluster: &str, name: &str, from_root: bool) -> String {
    let inside = format!("/apis/{GROUP}/v1/clusterroles/{name}");
    match cluster {
        ROOT_CLUSTER => inside,
        _ if !from_root => inside,
        cluster => format!("/clusters/{cluster}{inside}"),
    }
}

/// Fills the aggregated ClusterRoles of the logical cluster `client` calls (its own
/// view) until none lacks what it gathers (an aggregate of aggregates takes one pass per
/// level): a cluster starts with `admin`, `edit` and `view` filled.
pub(crate) async fn fill(rbac: &Rbac, client: &Client, cluster: &str) -> ApiResult<()> {
    for _ in 0..8 {
        if !aggregate(rbac, client, cluster, false).await? {
            break;
        }
    }
    Ok(())
}

/// Runs the controller over `api` (the root cluster's) for as long as the process does.
pub(crate) async fn run(rbac: std::sync::Weak<Rbac>, api: Api) {
    let client = Client::new(api).with_field_manager(FIELD_MANAGER);
    loop {
        let Some(rbac) = rbac.upgrade() else {
            return;
        };
        let clusters = rbac.next_changed().await;
        let mut failed = Vec::new();
        for cluster in clusters {
            if let Err(e) = aggregate(&rbac, &client, &cluster, true).await {
                tracing::warn!(%cluster, error = %e, "cannot aggregate ClusterRoles; trying again in 1 s");
                failed.push(cluster);
            }
        }
        if !failed.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            rbac.roles_changed(failed);
        }
    }
}

/// Writes the rules of each aggregated ClusterRole of `cluster` that lacks what it
/// gathers (through the root API if `from_root`); whether it wrote any.
async fn aggregate(
    rbac: &Rbac,
    client: &Client,
    cluster: &str,
    from_root: bool,
) -> ApiResult<bool> {
    let changes = rbac.aggregations(cluster);
    for (name, rules) in &changes {
        let rules: Vec<_> = rules.iter().map(Rule::to_json).collect();
        let count = rules.len();
        match client
            .merge_patch(&path(cluster, name, from_root), &json!({"rules": rules}))
            .await
        {
            Ok(_) => tracing::debug!(%cluster, role = %name, rules = count, "aggregated"),
            // Deleted meanwhile, or its logical cluster is gone: nothing to keep filled.
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(!changes.is_empty())
}
