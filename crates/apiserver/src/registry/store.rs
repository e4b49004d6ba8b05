//! The generic registry over the store: reading, creating and updating objects of any
//! resource, the per-resource strategy deciding what differs.

use axum::http::HeaderMap;
use bytes::Bytes;
use flotilla_store::Revision;
use serde_json::Value;
use tracing::debug;

use crate::admission::schema::FieldValidation;
use crate::admission::{self, Operation};
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::patch::managed::{self, Writer};
use crate::registry::keys;
use crate::registry::object::{self, meta_str};
use crate::registry::resources::ResourceType;

use crate::api::Api;
use crate::http::request::{Query, field_manager, parse_body, parse_resource_version};
use crate::http::response::Answer;
use crate::http::route::Target;

/// How often a write without preconditions is retried when another write races with it
/// (Kubernetes retries such writes until its request deadline).
pub(crate) const CONFLICT_RETRIES: usize = 256;

/// Runs `attempt` until it succeeds or fails otherwise than by racing with another write
/// (`raced` says which errors are races), at most [`CONFLICT_RETRIES`] times more; its
/// last outcome. Every write that retries on conflict goes through here.
pub(crate) async fn retrying<T, F: Future<Output = ApiResult<T>>>(
    raced: impl Fn(&ApiError) -> bool,
    mut attempt: impl FnMut() -> F,
) -> ApiResult<T> {
    let mut retries = 0;
    loop {
        match attempt().await {
            Err(e) if retries < CONFLICT_RETRIES && raced(&e) => {
                retries += 1;
                tokio::task::yield_now().await;
            }
            outcome => return outcome,
        }
    }
}

/// Whether `e` is a write that lost a race on the object's resourceVersion.
pub(crate) fn conflicted(e: &ApiError) -> bool {
    e.reason == Reason::Conflict
}

/// Who a write's fields belong to.
#[derive(Clone, Copy)]
pub(crate) enum FieldOwner<'a> {
    /// A write that is not an apply, by this field manager: it owns what it changes.
    Update(&'a str),
    /// A server-side apply: the object's managed fields are already worked out.
    Applied,
}

/// The JSON the store holds for `object`, an object of `rt` named `name`: refused (422)
/// when it nests deeper than [`object::MAX_DEPTH`], or (413) when it is longer than
/// [`object::MAX_OBJECT_BYTES`], so that everything stored can be read back.
pub(crate) fn stored_json(object: &Value, rt: &ResourceType, name: &str) -> ApiResult<Bytes> {
    let mut json = Vec::with_capacity(1024);
    // The depth is checked by the walk that writes the JSON; only an object that nests too
    // deep is walked again, for the field to name.
    if !crate::http::json::write_within(&mut json, object, object::MAX_DEPTH) {
        object::check_depth(object, rt)?;
        json.clear();
        crate::http::json::write(&mut json, object);
    }
    object::check_size(json.len(), rt, name)?;
    // The bytes live on in the watch cache: not with the spare room of the last growth.
    json.shrink_to_fit();
    Ok(Bytes::from(json))
}

/// A stored object the server cannot read back ([`object::undecodable`], or not JSON): left
/// out of lists and watches with a warning, never failing them; it can still be deleted.
pub(crate) struct Unreadable {
    pub(crate) key: Bytes,
    pub(crate) reason: String,
}

impl Unreadable {
    /// Logs it (a tracing warning) and returns it.
    pub(crate) fn new(key: &Bytes, reason: String) -> Self {
        tracing::warn!(key = %String::from_utf8_lossy(key), %reason,
            "a stored object cannot be decoded; left out (it can still be deleted)");
        Unreadable {
            key: key.clone(),
            reason,
        }
    }

    /// Why `json` cannot be read back, if it cannot.
    pub(crate) fn check(key: &Bytes, json: &[u8]) -> Option<Self> {
        object::undecodable(json).map(|reason| Self::new(key, reason))
    }

    /// The `Warning` headers for objects left out (the first few named, then how many more).
    pub(crate) fn warnings(all: &[Unreadable]) -> Vec<String> {
        const NAMED: usize = 10;
        let mut warnings: Vec<String> = all
            .iter()
            .take(NAMED)
            .map(|u| {
                format!(
                    "the stored object {} cannot be decoded ({}) and is left out; it can still be deleted",
                    String::from_utf8_lossy(&u.key),
                    u.reason
                )
            })
            .collect();
        if all.len() > NAMED {
            warnings.push(format!(
                "{} more stored objects cannot be decoded and are left out",
                all.len() - NAMED
            ));
        }
        warnings
    }
}

/// 500 for a stored object that cannot be decoded (only a delete of it works).
pub(crate) fn unreadable_error(rt: &ResourceType, name: &str, reason: &str) -> ApiError {
    let what = if rt.group.is_empty() {
        rt.plural.clone()
    } else {
        format!("{}.{}", rt.plural, rt.group)
    };
    ApiError::internal(format!(
        "the stored object {what} \"{name}\" cannot be decoded: {reason}; it can only be deleted"
    ))
    .on(&rt.group, &rt.plural, name)
}

/// A stored object of `rt` decoded, or 500 if it cannot be ([`unreadable_error`]).
pub(crate) fn decode_stored(rt: &ResourceType, name: &str, json: &[u8]) -> ApiResult<Value> {
    if let Some(reason) = object::undecodable(json) {
        return Err(unreadable_error(rt, name, &reason));
    }
    serde_json::from_slice(json).map_err(|e| unreadable_error(rt, name, &e.to_string()))
}

/// A stored object's JSON with its resourceVersion, read as `rt` (a custom resource stored
/// through another of its versions is shown with this version's apiVersion: conversion
/// `None`), decoded only if it must be.
pub(crate) fn stored_with_version(
    value: &[u8],
    revision: Revision,
    rt: &ResourceType,
) -> ApiResult<Vec<u8>> {
    let wanted = reads_as(rt);
    if object::has_api_version(value, wanted.as_deref())
        && let Some(bytes) = object::with_resource_version_raw(value, revision.get())
    {
        return Ok(bytes);
    }
    let mut object: Value = serde_json::from_slice(value)
        .map_err(|e| ApiError::internal(format!("a stored object is not JSON: {e}")))?;
    if let Some(api_version) = wanted {
        crate::registry::events::show_as(&mut object, &api_version);
    }
    Ok(crate::http::json::to_vec(&object::with_resource_version(
        object,
        revision.get(),
    )))
}

/// The apiVersion objects of `rt` are shown with when it may differ from the stored one
/// (custom resources, whose versions share their objects; Events, whose two groups do).
pub(crate) fn reads_as(rt: &ResourceType) -> Option<String> {
    rt.strategy().reads_as(rt)
}

impl Api {
    /// Runs the admission chain on a write of `object` to `target` (`old` the stored
    /// object on an update).
    pub(crate) async fn admit(
        &self,
        target: &Target,
        operation: Operation,
        query: &Query,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<String>> {
        self.admit_with(target, operation, query, None, object, old)
            .await
    }

    /// [`Api::admit`] with a delete's options.
    pub(crate) async fn admit_with(
        &self,
        target: &Target,
        operation: Operation,
        query: &Query,
        delete_options: Option<&Value>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> ApiResult<Vec<String>> {
        let field_validation = FieldValidation::parse(query.get("fieldValidation"))?;
        let dry_run = query.dry_run()?;
        // A create names its object in the body (read before admission may change it).
        let from_body;
        let name = match target.name.as_deref() {
            Some(name) => name,
            None => {
                from_body = meta_str(object, "name").to_owned();
                &from_body
            }
        };
        let attributes = admission::Attributes {
            api: self,
            user: &target.user,
            cluster: &self.cluster,
            operation,
            rt: &target.rt,
            namespace: target.namespace.as_deref().unwrap_or(""),
            name,
            subresource: target.sub.as_deref().unwrap_or(""),
            field_validation,
            dry_run,
            field_manager: query.get("fieldManager").unwrap_or(""),
            delete_options,
        };
        self.admission.admit(&attributes, object, old).await
    }

    /// The objects of `rt` in `namespace` (`""`: cluster-scoped, or every namespace) that
    /// `selector` takes, read at one revision (objects that cannot be decoded are left
    /// out, with a warning in the log).
    pub(crate) async fn select(
        &self,
        rt: &ResourceType,
        namespace: &str,
        selector: &crate::registry::selector::LabelSelector,
    ) -> ApiResult<Vec<Value>> {
        let prefix = keys::prefix(rt, &self.cluster, Some(namespace).filter(|n| !n.is_empty()));
        let mut found = Vec::new();
        let (mut revision, mut after) = (None, None);
        loop {
            let options = flotilla_store::ListOptions {
                revision,
                limit: 500,
                after,
            };
            let page = self.store.list(&prefix, options).await?;
            for kv in &page.kvs {
                let Ok(mut object) = serde_json::from_slice::<Value>(&kv.value) else {
                    Unreadable::new(&kv.key, "not JSON".into());
                    continue;
                };
                if selector.matches(&object) {
                    rt.strategy().show_on_read(&mut object, rt);
                    found.push(object::with_resource_version(object, kv.mod_revision.get()));
                }
            }
            match page.next {
                Some(next) => {
                    revision = Some(page.revision);
                    after = Some(next);
                }
                None => return Ok(found),
            }
        }
    }

    /// The stored JSON and revision of the object under `key`, by a consistent read: from
    /// the watch cache when it is up to date with the store, else from the store.
    pub(crate) async fn read(&self, key: &[u8]) -> ApiResult<Option<(Bytes, Revision)>> {
        if let Some(found) = self.watch_cache.get(key).await {
            return Ok(found);
        }
        let kv = self.store.get(key, None).await?;
        Ok(kv.map(|kv| (kv.value, kv.mod_revision)))
    }

    /// An object and its revision; 500 if the stored object cannot be decoded.
    pub async fn get(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<(Value, Revision)> {
        let (value, revision) = self.get_stored(rt, namespace, name).await?;
        let mut object = decode_stored(rt, name, &value)?;
        // An Event written through the other version is read, updated and patched as this
        // one's.
        rt.strategy().show_on_read(&mut object, rt);
        Ok((
            object::with_resource_version(object, revision.get()),
            revision,
        ))
    }

    /// An object's stored JSON and its revision.
    pub(crate) async fn get_stored(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<(Bytes, Revision)> {
        let key = keys::key(rt, &self.cluster, namespace, name);
        let not_found = || ApiError::not_found(&rt.group, &rt.plural, name);
        // The key's latest revision from the store's index; its value from the watch
        // cache's history when the change is still there (a write moments ago), else read.
        let latest = self.store.mod_revision(&key).await?.ok_or_else(not_found)?;
        let (value, revision) = match self.watch_cache.written_at(&key, latest) {
            Some(value) => (value, latest),
            None => {
                let kv = self.store.get(&key, None).await?.ok_or_else(not_found)?;
                (kv.value, kv.mod_revision)
            }
        };
        Ok((value, revision))
    }

    pub(crate) async fn require_namespace(&self, namespace: &str) -> ApiResult<()> {
        let rt = self.resource("", "v1", "namespaces")?;
        let key = keys::key(&rt, &self.cluster, "", namespace);
        let (value, _) = self
            .read(&key)
            .await?
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, namespace))?;
        // Only the deletion timestamp matters: read it without decoding the namespace.
        let terminating = match object::is_being_deleted(&value) {
            Some(terminating) => terminating,
            None => {
                let ns: Value = serde_json::from_slice(&value).map_err(|e| {
                    ApiError::internal(format!("stored object {namespace} is not JSON: {e}"))
                })?;
                !ns["metadata"]["deletionTimestamp"].is_null()
            }
        };
        if terminating {
            return Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            )));
        }
        Ok(())
    }

    pub(crate) async fn create(
        &self,
        target: &Target,
        query: &Query,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> ApiResult<(Answer, Vec<String>)> {
        let rt = &target.rt;
        if target.sub.is_some() {
            return Err(ApiError::method_not_allowed("POST", "a subresource"));
        }
        if rt.namespaced && target.namespace.is_none() {
            return Err(ApiError::no_route(&format!(
                "POST {} without a namespace",
                rt.plural
            )));
        }
        let object = parse_body(body, headers)?;
        if let Some(answer) = rt.strategy().answer(self, target, &object) {
            return Ok((Answer::Object(answer.await?), Vec::new()));
        }
        let manager = field_manager(query, headers)?;
        self.insert(target, query, object, FieldOwner::Update(&manager))
            .await
    }

    /// Creates `object` (checked, defaulted and given its server-managed metadata).
    pub(crate) async fn insert(
        &self,
        target: &Target,
        query: &Query,
        mut object: Value,
        owner: FieldOwner<'_>,
    ) -> ApiResult<(Answer, Vec<String>)> {
        let rt = &target.rt;
        let namespace = target.namespace.clone().unwrap_or_default();
        let warnings = self
            .admit(target, Operation::Create, query, &mut object, None)
            .await?;
        let name = object::prepare_create(&mut object, rt, &namespace)?;
        if rt.namespaced {
            self.require_namespace(&namespace).await?;
        }
        let strategy = rt.strategy();
        strategy.prepare_create(rt, &mut object);
        strategy.complete_write(&target.user, "", &mut object, &Value::Null, &Value::Null)?;
        strategy
            .check_write(self, target, &mut object, None)
            .await?;
        let effect = strategy.admit(self, &mut object, &Value::Null)?;
        strategy.before_create(self, rt).await?;
        if let FieldOwner::Update(manager) = owner {
            let writer = Writer {
                manager,
                subresource: "",
            };
            managed::record_update(None, &mut object, rt, writer)?;
        }
        // Reserved now; released if anything below fails or this is a dry run.
        let allocation = strategy
            .allocate(self, &mut object, None, query.dry_run()?)
            .await?;
        let json = stored_json(&object, rt, &name)?;
        if query.dry_run()? {
            return Ok((Answer::Object(object), warnings));
        }
        let key = keys::key(rt, &self.cluster, &namespace, &name);
        let revision = self
            .store
            .create(&key, json.clone())
            .await
            .map_err(|e| match e {
                flotilla_store::Error::AlreadyExists { .. } => {
                    ApiError::already_exists(&rt.group, &rt.plural, &name)
                }
                e => e.into(),
            })?;
        allocation.commit().await;
        debug!(resource = %rt.plural, %namespace, %name, %revision, "created");
        strategy.written(self, &effect);
        strategy.settle(self, revision).await;
        Ok((
            Answer::Stored {
                object,
                json,
                revision,
            },
            warnings,
        ))
    }

    /// Replaces an object (or its status); returns the object, whether it was created, and
    /// the warnings for the client.
    pub(crate) async fn update(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        object: Value,
        owner: FieldOwner<'_>,
    ) -> ApiResult<(Answer, bool, Vec<String>)> {
        self.update_from(target, name, query, object, owner, None)
            .await
    }

    /// [`Api::update`], over `read`: the current object and its revision when the caller
    /// has just read them (a patch), so that they are not read and decoded again.
    pub(crate) async fn update_from(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        mut object: Value,
        owner: FieldOwner<'_>,
        read: Option<(Value, Revision)>,
    ) -> ApiResult<(Answer, bool, Vec<String>)> {
        let rt = &target.rt;
        let namespace = target.namespace.clone().unwrap_or_default();
        if meta_str(&object, "name") != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&object, "name")
            )));
        }
        let expected = match meta_str(&object, "resourceVersion") {
            "" => None,
            rv => Some(Revision::new(parse_resource_version(rv)?)),
        };
        let key = keys::key(rt, &self.cluster, &namespace, name);
        let (current, revision) = match read {
            Some(read) => read,
            None => self.get(rt, &namespace, name).await?,
        };
        if expected.is_some_and(|e| e != revision) {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let strategy = rt.strategy();
        let requested = match strategy.reads_request() {
            true => object.clone(),
            false => Value::Null,
        };
        if target.sub.as_deref() == Some("status") {
            let status = object.get("status").cloned().unwrap_or(Value::Null);
            object = current.clone();
            object["status"] = status;
        } else if rt.has_status() {
            match current.get("status") {
                Some(status) => object["status"] = status.clone(),
                None => {
                    if let Some(map) = object.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
        }
        strategy.complete_write(
            &target.user,
            target.sub.as_deref().unwrap_or(""),
            &mut object,
            &current,
            &requested,
        )?;
        let warnings = self
            .admit(
                target,
                Operation::Update,
                query,
                &mut object,
                Some(&current),
            )
            .await?;
        object::prepare_update(&mut object, &current, rt)?;
        if let FieldOwner::Update(manager) = owner {
            let writer = Writer {
                manager,
                subresource: target.sub.as_deref().unwrap_or(""),
            };
            managed::record_update(Some(&current), &mut object, rt, writer)?;
        }
        strategy
            .check_write(self, target, &mut object, Some(&current))
            .await?;
        let effect = strategy.admit(self, &mut object, &current["status"])?;
        let allocation = strategy
            .allocate(self, &mut object, Some(&current), query.dry_run()?)
            .await?;
        if query.dry_run()? {
            // Refused as the write would be.
            stored_json(&object, rt, name)?;
            return Ok((
                Answer::Object(object::with_resource_version(object, revision.get())),
                false,
                warnings,
            ));
        }
        let finished = !current["metadata"]["deletionTimestamp"].is_null()
            && object["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty);
        if finished {
            // The last finalizer is gone from an object being deleted: it goes now.
            let (deleted_at, _) = self
                .store
                .delete(&key, Some(revision))
                .await
                .map_err(|e| self.write_error(e, rt, name))?;
            strategy.removed(self, &effect);
            strategy.settle(self, deleted_at).await;
            self.collect_dependents(
                meta_str(&current, "uid"),
                rt.namespaced.then_some(namespace.as_str()),
            );
            return Ok((
                Answer::Object(object::with_resource_version(object, deleted_at.get())),
                false,
                warnings,
            ));
        }
        // A write that changes nothing is not made: the object keeps its resourceVersion.
        if object::same_but_resource_version(&current, &object) {
            return Ok((Answer::Object(current), false, warnings));
        }
        let json = stored_json(&object, rt, name)?;
        let new = self
            .store
            .update(&key, json.clone(), revision)
            .await
            .map_err(|e| self.write_error(e, rt, name))?;
        allocation.commit().await;
        strategy.written(self, &effect);
        strategy.settle(self, new).await;
        Ok((
            Answer::Stored {
                object,
                json,
                revision: new,
            },
            false,
            warnings,
        ))
    }

    pub(crate) fn write_error(
        &self,
        e: flotilla_store::Error,
        rt: &ResourceType,
        name: &str,
    ) -> ApiError {
        match e {
            flotilla_store::Error::Conflict { .. } => {
                ApiError::conflict(&rt.group, &rt.plural, name)
            }
            flotilla_store::Error::NotFound { .. } => {
                ApiError::not_found(&rt.group, &rt.plural, name)
            }
            e => e.into(),
        }
    }
}
