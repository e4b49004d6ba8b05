//! DELETE and deletecollection: finalizers, preconditions, garbage collection, and
//! stored objects that cannot be read.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use bytes::Bytes;
use flotilla_store::Revision;
use serde_json::{Value, json};

use crate::admission::Operation;
use crate::gc;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::registry::keys;
use crate::registry::object::{self, meta_str};
use crate::registry::resources::ResourceType;

use crate::api::Api;
use crate::gc::collector::{Cleanup, Owner};
use crate::http::request::{Query, parse_resource_version};
use crate::http::route::Target;
use crate::registry::store::{Unreadable, conflicted, decode_stored, retrying};

impl Api {
    /// Deletes an object (or marks it for deletion while finalizers remain). A write that
    /// races with it is retried: each try reads the object again and checks the client's
    /// preconditions against what it read, so a precondition that no longer holds ends it
    /// (409) and one that still does — a uid, after a write to the object's status — lets
    /// it through, as in Kubernetes' store.
    pub(crate) async fn delete(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        body: &Bytes,
        collect: bool,
    ) -> ApiResult<(StatusCode, Value)> {
        let refused = AtomicBool::new(false);
        let raced = |e: &ApiError| conflicted(e) && !refused.load(Ordering::Relaxed);
        retrying(raced, || {
            self.delete_once(target, name, query, body, collect, &refused)
        })
        .await
    }

    /// One try of a delete; `collect` runs garbage collection of the object's dependents
    /// (off when a whole namespace is being emptied anyway). `refused` is set when the
    /// client's preconditions do not hold (a conflict not to be tried again).
    async fn delete_once(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        body: &Bytes,
        collect: bool,
        refused: &AtomicBool,
    ) -> ApiResult<(StatusCode, Value)> {
        let rt = &target.rt;
        let namespace = target.namespace.clone().unwrap_or_default();
        let options: Value = if body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("the delete options are not valid JSON: {e}"))
            })?
        };
        let (value, revision) = self.get_stored(rt, &namespace, name).await?;
        let decoded = decode_stored(rt, name, &value);
        let stale = match options["preconditions"]["resourceVersion"].as_str() {
            Some(rv) => parse_resource_version(rv)? != revision.get(),
            None => false,
        };
        // An object that cannot be read must at least hold the uid in its stored bytes.
        let other = options["preconditions"]["uid"]
            .as_str()
            .is_some_and(|uid| match &decoded {
                Ok(object) => uid != meta_str(object, "uid"),
                Err(_) => memchr::memmem::find(&value, uid.as_bytes()).is_none(),
            });
        if stale || other {
            refused.store(true, Ordering::Relaxed);
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let mut current = match decoded {
            Ok(object) => object::with_resource_version(object, revision.get()),
            Err(e) => {
                return self
                    .delete_unreadable(rt, &namespace, name, query, revision, &e)
                    .await;
            }
        };
        let dry_run = query.dry_run()?;
        let sent = (!body.is_empty()).then_some(&options);
        self.admit_with(
            target,
            Operation::Delete,
            query,
            sent,
            &mut Value::Null,
            Some(&current),
        )
        .await?;
        let propagation = gc::Propagation::from_request(&options, query.get("propagationPolicy"))?;
        let key = keys::key(rt, &self.cluster, &namespace, name);
        let strategy = rt.strategy();
        let by_server = strategy.finalized_by_server();
        let uid = meta_str(&current, "uid").to_owned();
        let waits_for = propagation.finalizer().filter(|_| collect && !by_server);
        if let Some(finalizer) = waits_for
            && current["metadata"]["deletionTimestamp"].is_null()
        {
            let meta = object::metadata_mut(&mut current)?;
            let list = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut()
                && !list.iter().any(|f| f == finalizer)
            {
                list.push(json!(finalizer));
            }
        }
        let has_finalizers = current["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
            || by_server;
        if has_finalizers {
            if !current["metadata"]["deletionTimestamp"].is_null() || dry_run {
                return Ok((StatusCode::OK, current));
            }
            let meta = object::metadata_mut(&mut current)?;
            meta.insert("deletionTimestamp".into(), json!(object::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.remove("resourceVersion");
            strategy.begin_deletion(&mut current);
            let new = self
                .store
                .update(&key, Bytes::from(current.to_string()), revision)
                .await
                .map_err(|e| self.write_error(e, rt, name))?;
            strategy.settle(self, new).await;
            if let Some(cleanup) = strategy.cleanup(name) {
                self.spawn_cleanup(cleanup);
            }
            if let Some(finalizer) = waits_for {
                let owner = Owner {
                    rt: rt.clone(),
                    namespace: namespace.clone(),
                    name: name.to_owned(),
                    uid: uid.clone(),
                };
                self.spawn_cleanup(if finalizer == gc::ORPHAN {
                    Cleanup::Orphan(owner)
                } else {
                    Cleanup::Foreground(owner)
                });
            }
            return Ok((
                StatusCode::OK,
                object::with_resource_version(current, new.get()),
            ));
        }
        if dry_run {
            return Ok((StatusCode::OK, current));
        }
        let (deleted_at, _) = self
            .store
            .delete(&key, Some(revision))
            .await
            .map_err(|e| self.write_error(e, rt, name))?;
        strategy.settle(self, deleted_at).await;
        if collect {
            self.collect_dependents(&uid, rt.namespaced.then_some(namespace.as_str()));
        }
        Ok((
            StatusCode::OK,
            object::with_resource_version(current, deleted_at.get()),
        ))
    }

    /// Deletes a stored object that cannot be decoded ([`decode_stored`]): at once, without
    /// its finalizers or garbage collection, which need the object (a namespace is still
    /// emptied after it). Answers a `Status` of success. The caller has checked the
    /// client's preconditions.
    pub(crate) async fn delete_unreadable(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        query: &Query,
        revision: Revision,
        why: &ApiError,
    ) -> ApiResult<(StatusCode, Value)> {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success", "details": {"name": name, "group": rt.group, "kind": rt.plural}});
        if query.dry_run()? {
            return Ok((StatusCode::OK, status));
        }
        let key = keys::key(rt, &self.cluster, namespace, name);
        self.store
            .delete(&key, Some(revision))
            .await
            .map_err(|e| self.write_error(e, rt, name))?;
        tracing::warn!(resource = %rt.plural, %namespace, %name, error = %why.message,
            "deleted a stored object that cannot be decoded, without its finalizers or garbage collection");
        if let Some(cleanup) = rt.strategy().cleanup_unreadable(name) {
            self.spawn_cleanup(cleanup);
        }
        Ok((StatusCode::OK, status))
    }

    /// The namespace and name of the object of `rt` under `key` in this logical cluster.
    pub(crate) fn identity(
        &self,
        rt: &ResourceType,
        key: &[u8],
    ) -> Option<(Option<String>, String)> {
        let prefix = keys::prefix(rt, &self.cluster, None);
        let rest = std::str::from_utf8(key.strip_prefix(prefix.as_slice())?).ok()?;
        if rt.namespaced {
            let (namespace, name) = rest.split_once('/')?;
            Some((Some(namespace.to_owned()), name.to_owned()))
        } else {
            Some((None, rest.to_owned()))
        }
    }

    /// A deletecollection; returns the list of objects deleted, and warnings for stored
    /// objects that cannot be decoded (deleted too when no selector is given, since they
    /// are in the collection whatever they hold).
    pub(crate) async fn delete_collection(
        &self,
        target: &Target,
        query: &Query,
        body: &Bytes,
    ) -> ApiResult<(Value, Vec<String>)> {
        let listed = self.list(target, query).await?;
        let warnings = Unreadable::warnings(&listed.unreadable);
        let selects_all =
            query.get("labelSelector").is_none() && query.get("fieldSelector").is_none();
        for unreadable in listed.unreadable.iter().filter(|_| selects_all) {
            let Some((namespace, name)) = self.identity(&target.rt, &unreadable.key) else {
                continue;
            };
            let one = Target {
                user: target.user.clone(),
                rt: target.rt.clone(),
                namespace,
                name: Some(name.clone()),
                sub: None,
            };
            match self.delete(&one, &name, query, body, true).await {
                Ok(_) => {}
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let list = listed.to_value()?;
        let mut deleted = Vec::new();
        for item in list["items"].as_array().into_iter().flatten() {
            let name = meta_str(item, "name").to_owned();
            let namespace = meta_str(item, "namespace");
            let one = Target {
                user: target.user.clone(),
                rt: target.rt.clone(),
                namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
                name: Some(name.clone()),
                sub: None,
            };
            match self.delete(&one, &name, query, body, true).await {
                Ok((_, object)) => deleted.push(object),
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok((
            json!({"kind": target.rt.list_kind(), "apiVersion": target.rt.api_version(),
            "metadata": {"resourceVersion": list["metadata"]["resourceVersion"]}, "items": deleted}),
            warnings,
        ))
    }
}
