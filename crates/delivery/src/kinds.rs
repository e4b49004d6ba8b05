//! The kinds a member serves: (apiVersion, kind) → resource and scope, learnt from
//! discovery one group version at a time and looked up again when a kind is missing
//! (a CRD applied since, or removed).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersion;
use kube::discovery::{self, ApiResource, Scope};
use tracing::debug;

/// A served kind: where its objects live.
#[derive(Clone, Debug)]
pub(crate) struct Kind {
    pub resource: ApiResource,
    pub namespaced: bool,
}

impl Kind {
    /// The API for this kind's objects in `namespace` (ignored for cluster-scoped kinds).
    pub(crate) fn api(&self, client: &kube::Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(namespace) if self.namespaced => {
                Api::namespaced_with(client.clone(), namespace, &self.resource)
            }
            _ => Api::all_with(client.clone(), &self.resource),
        }
    }
}

/// The discovery cache, shared by the clones of a [`crate::Member`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Kinds {
    known: Arc<RwLock<HashMap<(String, String), Kind>>>,
}

impl Kinds {
    /// The kind, from the cache or else from a fresh discovery of its group version;
    /// `None` if the member does not serve it. Errors are the member's failures to
    /// answer (a group version it does not serve is `None`, not an error).
    pub(crate) async fn resolve(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<Kind>, kube::Error> {
        if let Some(found) = self.cached(api_version, kind) {
            return Ok(Some(found));
        }
        self.refresh(client, api_version).await?;
        Ok(self.cached(api_version, kind))
    }

    /// Drops what is known of a kind, so the next [`Kinds::resolve`] asks the member.
    pub(crate) fn forget(&self, api_version: &str, kind: &str) {
        self.write()
            .remove(&(api_version.to_owned(), kind.to_owned()));
    }

    fn cached(&self, api_version: &str, kind: &str) -> Option<Kind> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known
            .get(&(api_version.to_owned(), kind.to_owned()))
            .cloned()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(String, String), Kind>> {
        self.known.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces what is known of one group version with what the member serves now.
    async fn refresh(&self, client: &kube::Client, api_version: &str) -> Result<(), kube::Error> {
        let Ok(gv) = api_version.parse::<GroupVersion>() else {
            return Ok(());
        };
        let served = match discovery::pinned_group(client, &gv).await {
            Ok(group) => group.versioned_resources(&gv.version),
            Err(kube::Error::Api(status)) if status.is_not_found() => Vec::new(),
            Err(e) => return Err(e),
        };
        debug!(api_version, kinds = served.len(), "discovered");
        let mut known = self.write();
        known.retain(|(version, _), _| version != api_version);
        for (resource, capabilities) in served {
            let kind = Kind {
                namespaced: capabilities.scope == Scope::Namespaced,
                resource,
            };
            known.insert((api_version.to_owned(), kind.resource.kind.clone()), kind);
        }
        Ok(())
    }
}
