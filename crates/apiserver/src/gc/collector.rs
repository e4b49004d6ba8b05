//! Work that goes on after a request until it is done: emptying a deleted namespace or a
//! deleted CRD's resource, and garbage collection by ownerReferences.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flotilla_store::ListOptions;
use serde_json::Value;

use crate::auth::UserInfo;
use crate::gc;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::registry::crd;
use crate::registry::keys;
use crate::registry::object::{self, meta_str};
use crate::registry::resources::ResourceType;

use crate::api::Api;
use crate::http::request::Query;
use crate::http::route::Target;
use crate::registry::store::Unreadable;

impl Api {
    /// Queues the dependents of a deleted owner for deletion (Background propagation). One
    /// collector task takes everything queued at once and reads each scope once per pass,
    /// so deleting many objects does not read the namespace once per object.
    pub(crate) fn collect_dependents(&self, uid: &str, namespace: Option<&str>) {
        let first = {
            let mut queue = self
                .collector
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue
                .entry(namespace.map(str::to_owned))
                .or_default()
                .insert(uid.to_owned());
            !self
                .collector
                .running
                .swap(true, std::sync::atomic::Ordering::AcqRel)
        };
        if first {
            let api = self.clone();
            tokio::spawn(async move { api.run_collector().await });
        }
        self.collector.wake.notify_one();
    }

    pub(crate) async fn run_collector(self) {
        loop {
            self.collector.wake.notified().await;
            // Let a burst of deletions queue up before reading.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let batch = std::mem::take(
                &mut *self
                    .collector
                    .queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            for (namespace, uids) in batch {
                if let Err(e) = self.delete_dependents(&uids, namespace.as_deref()).await {
                    tracing::warn!(error = %e, "garbage collection failed; retrying");
                    self.collector
                        .queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .entry(namespace)
                        .or_default()
                        .extend(uids);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    self.collector.wake.notify_one();
                }
            }
        }
    }

    /// Every object that names one of the owners `uids` in its ownerReferences, in
    /// `namespace` (or anywhere when the owners are cluster-scoped).
    pub(crate) async fn dependents(
        &self,
        uids: &std::collections::HashSet<String>,
        namespace: Option<&str>,
    ) -> ApiResult<Vec<(Arc<ResourceType>, Value)>> {
        let mut found = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // Only an object whose text holds one of the uids can name it as an owner; the
        // others (nearly all, when a cluster-scoped owner's collection reads every
        // namespace) are not decoded. Past a few uids, one search for the field is cheaper.
        let finders: Vec<memchr::memmem::Finder> = if uids.len() <= 8 {
            uids.iter()
                .map(|uid| memchr::memmem::Finder::new(uid.as_bytes()))
                .collect()
        } else {
            vec![memchr::memmem::Finder::new(b"\"ownerReferences\"")]
        };
        for rt in self.registry.all() {
            // Every version of a resource shares its objects: look once per resource.
            if !seen.insert((rt.group.clone(), rt.plural.clone()))
                || (namespace.is_some() && !rt.namespaced)
            {
                continue;
            }
            let prefix = keys::prefix(&rt, &self.cluster, namespace);
            for kv in self.store.list(&prefix, ListOptions::default()).await?.kvs {
                if !finders.iter().any(|f| f.find(&kv.value).is_some()) {
                    continue;
                }
                // Its ownerReferences cannot be read: it stays (a delete of it works).
                if Unreadable::check(&kv.key, &kv.value).is_some() {
                    continue;
                }
                let object: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                if uids.iter().any(|uid| gc::owned_by(&object, uid)) {
                    found.push((rt.clone(), object));
                }
            }
        }
        Ok(found)
    }

    /// Deletes the dependents of `uids` (each in the background, so theirs go too); returns
    /// how many are still there (held by finalizers).
    pub(crate) async fn delete_dependents(
        &self,
        uids: &std::collections::HashSet<String>,
        namespace: Option<&str>,
    ) -> ApiResult<usize> {
        let mut left = 0;
        for (rt, object) in self.dependents(uids, namespace).await? {
            let name = meta_str(&object, "name").to_owned();
            let ns = meta_str(&object, "namespace");
            let target = Target {
                user: UserInfo::loopback(),
                rt,
                namespace: (!ns.is_empty()).then(|| ns.to_owned()),
                name: Some(name.clone()),
                sub: None,
            };
            match self
                .delete(&target, &name, &Query(HashMap::new()), &Bytes::new(), true)
                .await
            {
                Ok((_, object)) if !object["metadata"]["deletionTimestamp"].is_null() => left += 1,
                Ok(_) | Err(ApiError { code: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(left)
    }

    /// Foreground deletion: once the dependents are gone, the owner's finalizer goes.
    pub(crate) async fn finish_foreground(&self, owner: &Owner) -> ApiResult<bool> {
        if self
            .delete_dependents(&owner.uids(), owner.scope().as_deref())
            .await?
            > 0
        {
            return Ok(false);
        }
        self.release(owner, gc::FOREGROUND).await
    }

    /// Orphan deletion: the dependents lose their reference, then the owner's finalizer goes.
    pub(crate) async fn finish_orphan(&self, owner: &Owner) -> ApiResult<bool> {
        for (rt, mut object) in self
            .dependents(&owner.uids(), owner.scope().as_deref())
            .await?
        {
            let ns = meta_str(&object, "namespace").to_owned();
            let name = meta_str(&object, "name").to_owned();
            let key = keys::key(&rt, &self.cluster, &ns, &name);
            let Some(kv) = self.store.get(&key, None).await? else {
                continue;
            };
            object = serde_json::from_slice(&kv.value).unwrap_or(object);
            gc::disown(&mut object, &owner.uid);
            match self
                .store
                .update(&key, Bytes::from(object.to_string()), kv.mod_revision)
                .await
            {
                Ok(_) => {}
                Err(
                    flotilla_store::Error::Conflict { .. } | flotilla_store::Error::NotFound { .. },
                ) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        self.release(owner, gc::ORPHAN).await
    }

    /// Drops `finalizer` from a deleting owner; deletes it if it was the last one.
    pub(crate) async fn release(&self, owner: &Owner, finalizer: &str) -> ApiResult<bool> {
        let key = keys::key(&owner.rt, &self.cluster, &owner.namespace, &owner.name);
        let Some(kv) = self.store.get(&key, None).await? else {
            return Ok(true);
        };
        let mut object: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("a stored object is not JSON: {e}")))?;
        if meta_str(&object, "uid") != owner.uid {
            return Ok(true); // a new object of the same name
        }
        let written = if gc::drop_finalizer(&mut object, finalizer) {
            self.store
                .delete(&key, Some(kv.mod_revision))
                .await
                .map(drop)
        } else {
            self.store
                .update(&key, Bytes::from(object.to_string()), kv.mod_revision)
                .await
                .map(drop)
        };
        match written {
            Ok(()) => Ok(true),
            Err(flotilla_store::Error::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs a cleanup in the background, pass after pass, until it is done.
    pub(crate) fn spawn_cleanup(&self, cleanup: Cleanup) {
        let api = self.clone();
        tokio::spawn(async move {
            for attempt in 0u32.. {
                let pass = match &cleanup {
                    Cleanup::Namespace(namespace) => api.empty_namespace(namespace).await,
                    Cleanup::CustomResources(name) => api.empty_custom_resource(name).await,
                    Cleanup::Foreground(owner) => api.finish_foreground(owner).await,
                    Cleanup::Orphan(owner) => api.finish_orphan(owner).await,
                };
                match pass {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => tracing::warn!(?cleanup, error = %e, "cleanup failed; retrying"),
                }
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt.min(50)) + 50))
                    .await;
            }
        });
    }

    /// Deletes every object of `rt` under `prefix` (finalizers are honoured); returns how
    /// many are still there.
    pub(crate) async fn delete_all(
        &self,
        rt: &Arc<ResourceType>,
        prefix: &[u8],
        collect: bool,
    ) -> ApiResult<usize> {
        let mut left = 0;
        let page = self.store.list(prefix, ListOptions::default()).await?;
        for kv in page.kvs {
            // Named by its key, not its contents: a stored object that cannot be decoded
            // goes too (see `delete_unreadable`).
            let Some((namespace, name)) = self.identity(rt, &kv.key) else {
                tracing::warn!(key = %String::from_utf8_lossy(&kv.key), "a stored key names no object; left");
                left += 1;
                continue;
            };
            let target = Target {
                user: UserInfo::loopback(),
                rt: rt.clone(),
                namespace,
                name: Some(name.clone()),
                sub: None,
            };
            match self
                .delete(
                    &target,
                    &name,
                    &Query(HashMap::new()),
                    &Bytes::new(),
                    collect,
                )
                .await
            {
                Ok((_, object)) if !object["metadata"]["deletionTimestamp"].is_null() => left += 1,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.reason,
                        Reason::NotFound | Reason::Conflict | Reason::AlreadyExists
                    ) =>
                {
                    left += 1
                }
                Err(e) => return Err(e),
            }
        }
        Ok(left)
    }

    /// One pass of namespace cleanup; true once the namespace is gone.
    pub(crate) async fn empty_namespace(&self, namespace: &str) -> ApiResult<bool> {
        let mut left = 0;
        for rt in self.registry.all() {
            if rt.namespaced {
                let prefix = keys::prefix(&rt, &self.cluster, Some(namespace));
                left += self.delete_all(&rt, &prefix, false).await?;
            }
        }
        if left > 0 {
            return Ok(false);
        }
        let rt = self.resource("", "v1", "namespaces")?;
        let key = keys::key(&rt, &self.cluster, "", namespace);
        match self.store.delete(&key, None).await {
            Ok(_) | Err(flotilla_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// One pass of a deleted CRD's cleanup: its objects go (every version shares them), then
    /// its finalizer, then it stops being served. True once done.
    pub(crate) async fn empty_custom_resource(&self, name: &str) -> ApiResult<bool> {
        let crd_type = self.resource(crd::GROUP, "v1", "customresourcedefinitions")?;
        let (mut current, revision) = match self.get(&crd_type, "", name).await {
            Ok(found) => found,
            Err(e) if e.reason == Reason::NotFound => return Ok(true),
            Err(e) => return Err(e),
        };
        let (group, plural) = name
            .split_once('.')
            .map(|(p, g)| (g.to_owned(), p.to_owned()))
            .unwrap_or_default();
        let served = self
            .registry
            .all()
            .into_iter()
            .find(|t| t.group == group && t.plural == plural && t.schema.is_some());
        if let Some(rt) = served {
            let prefix = keys::prefix(&rt, &self.cluster, None);
            if self.delete_all(&rt, &prefix, true).await? > 0 {
                return Ok(false);
            }
        }
        let meta = object::metadata_mut(&mut current)?;
        if let Some(finalizers) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
            finalizers.retain(|f| f != crd::CLEANUP_FINALIZER);
        }
        let done = meta
            .get("finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        meta.remove("resourceVersion");
        let key = keys::key(&crd_type, &self.cluster, "", name);
        let written = if done {
            self.store.delete(&key, Some(revision)).await.map(drop)
        } else {
            self.store
                .update(&key, Bytes::from(current.to_string()), revision)
                .await
                .map(drop)
        };
        match written {
            Ok(()) => {}
            Err(flotilla_store::Error::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        if done {
            crd::unregister(&self.registry, &group, &plural);
        }
        Ok(true)
    }
}

/// The queue of the garbage collector: owner uids by the scope of their dependents.
#[derive(Default)]
pub(crate) struct Collector {
    queue: std::sync::Mutex<HashMap<Option<String>, std::collections::HashSet<String>>>,
    wake: tokio::sync::Notify,
    running: std::sync::atomic::AtomicBool,
}

/// Work that goes on after a request, until done.
#[derive(Debug)]
pub(crate) enum Cleanup {
    /// Empty a terminating namespace, then delete it.
    Namespace(String),
    /// Delete every object of a deleted CRD's resource, then the CRD.
    CustomResources(String),
    /// Delete an owner's dependents, then drop its `foregroundDeletion` finalizer.
    Foreground(Owner),
    /// Remove the references to an owner from its dependents, then drop its `orphan`
    /// finalizer.
    Orphan(Owner),
}

/// An object whose deletion waits for its dependents.
#[derive(Debug)]
pub(crate) struct Owner {
    pub(crate) rt: Arc<ResourceType>,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

impl Owner {
    /// Where its dependents may be: its namespace, or everywhere for a cluster-scoped one.
    pub(crate) fn scope(&self) -> Option<String> {
        self.rt.namespaced.then(|| self.namespace.clone())
    }

    pub(crate) fn uids(&self) -> std::collections::HashSet<String> {
        std::iter::once(self.uid.clone()).collect()
    }
}
