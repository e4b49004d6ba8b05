//! PATCH: merge, JSON and strategic merge patches, and server-side apply, each retried
//! on conflict as it must be.

use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::admission::schema::{self, FieldValidation, Schema};
use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::patch;
use crate::patch::managed::{self, Writer};
use crate::patch::strategic;
use crate::registry::object::{self, meta_str};

use crate::api::Api;
use crate::http::request::{
    Query, check_manager, content_type, field_manager, invalid_option, parse_apply_config,
    patch_keeps_version,
};
use crate::http::response::Answer;
use crate::http::route::Target;
use crate::registry::store::{FieldOwner, conflicted, retrying};

/// How a PATCH body applies.
#[derive(Clone, Copy)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    /// Strategic merge patch, with the kind's schema.
    Strategic(&'static Value),
}

impl Api {
    /// A PATCH; returns the object, whether it was created (an apply may create), and the
    /// warnings for the client.
    pub(crate) async fn patch(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> ApiResult<(Answer, bool, Vec<String>)> {
        let rt = &target.rt;
        let builtin_schema = openapi::builtin_definition(&rt.group, &rt.version, &rt.kind)
            .filter(|_| rt.schema.is_none())
            .map(|name| &openapi::builtin_schemas()[name]);
        let kind = match content_type(headers) {
            "application/merge-patch+json" => PatchKind::Merge,
            "application/json-patch+json" => PatchKind::Json,
            "application/strategic-merge-patch+json" => match builtin_schema {
                Some(schema) => PatchKind::Strategic(schema),
                None => {
                    return Err(ApiError::unsupported_media_type(format!(
                        "strategic merge patch is not supported for {}: use application/merge-patch+json",
                        rt.plural
                    )));
                }
            },
            "application/apply-patch+yaml" => return self.apply(target, name, query, body).await,
            other => {
                return Err(ApiError::unsupported_media_type(format!(
                    "the patch type {other:?} is not supported; use application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json or application/apply-patch+yaml"
                )));
            }
        };
        if query.get("force").is_some() {
            return Err(invalid_option(
                "force",
                "FieldValueForbidden",
                "Forbidden: may not be specified for non-apply patch",
            ));
        }
        let manager = field_manager(query, headers)?;
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
        let namespace = target.namespace.clone().unwrap_or_default();
        // Retry on conflict: a patch applies to whatever the object is now.
        let raced = |e: &ApiError| conflicted(e) && patch_keeps_version(&patch);
        let (namespace, patch, manager) = (&namespace, &patch, &manager);
        retrying(raced, || async move {
            let (current, revision) = self.get(&target.rt, namespace, name).await?;
            let mut patched = match kind {
                PatchKind::Merge => patch::merge(&current, patch),
                PatchKind::Json => patch::json_patch(&current, patch)?,
                PatchKind::Strategic(schema) => strategic::apply(&current, patch, schema)?,
            };
            // The patched object replaces the current one at its revision, or at the one the
            // patch itself names (a precondition, not retried).
            if meta_str(&patched, "resourceVersion").is_empty() {
                object::metadata_mut(&mut patched)?
                    .insert("resourceVersion".into(), json!(revision.get().to_string()));
            }
            let owner = FieldOwner::Update(manager);
            let read = Some((current, revision));
            self.update_from(target, name, query, patched, owner, read)
                .await
                .map(|(object, _, warnings)| (object, false, warnings))
        })
        .await
    }

    /// A server-side apply (`application/apply-patch+yaml`): the configuration merges into
    /// the object (created if missing) as `fieldManager`, conflicting with other managers'
    /// fields unless `force=true`.
    pub(crate) async fn apply(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        body: &Bytes,
    ) -> ApiResult<(Answer, bool, Vec<String>)> {
        let rt = &target.rt;
        let manager = query.get("fieldManager").ok_or_else(|| {
            invalid_option(
                "fieldManager",
                "FieldValueRequired",
                "Required value: is required for apply patch",
            )
        })?;
        check_manager(manager)?;
        let force = match query.get("force") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "invalid force {other:?}: must be true or false"
                )));
            }
        };
        let mut config = parse_apply_config(body)?;
        for (field, wanted) in [("apiVersion", rt.api_version()), ("kind", rt.kind.clone())] {
            match config[field].as_str() {
                None | Some("") => {
                    return Err(ApiError::bad_request(format!(
                        "the apply configuration has no {field}: it must say {wanted:?}"
                    )));
                }
                Some(given) if given != wanted => {
                    return Err(ApiError::bad_request(format!(
                        "the apply configuration's {field} {given:?} does not match the URL's {wanted:?}"
                    )));
                }
                Some(_) => {}
            }
        }
        match meta_str(&config, "name") {
            "" => {
                object::metadata_mut(&mut config)?.insert("name".into(), json!(name));
            }
            given if given != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the apply configuration ({given}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let validation = FieldValidation::parse(query.get("fieldValidation"))?;
        let unknown = match Schema::for_type(rt) {
            Some(schema) => schema.prune(&mut config),
            None => Vec::new(),
        };
        let mut warnings = schema::judge(unknown, validation)?;
        let writer = Writer {
            manager,
            subresource: target.sub.as_deref().unwrap_or(""),
        };
        let namespace = target.namespace.clone().unwrap_or_default();
        let raced = |e: &ApiError| conflicted(e) || e.reason == Reason::AlreadyExists;
        let (namespace, config) = (&namespace, &config);
        let (object, created, more) = retrying(raced, || async move {
            match self.get(rt, namespace, name).await {
                Ok((current, revision)) => {
                    let mut object = managed::apply(Some(&current), config, rt, writer, force)?;
                    object::metadata_mut(&mut object)?
                        .insert("resourceVersion".into(), json!(revision.get().to_string()));
                    let read = Some((current, revision));
                    self.update_from(target, name, query, object, FieldOwner::Applied, read)
                        .await
                }
                Err(e) if e.reason == Reason::NotFound && target.sub.is_none() => {
                    let object = managed::apply(None, config, rt, writer, force)?;
                    self.insert(target, query, object, FieldOwner::Applied)
                        .await
                        .map(|(object, more)| (object, true, more))
                }
                Err(e) => Err(e),
            }
        })
        .await?;
        warnings.extend(more);
        Ok((object, created, warnings))
    }
}
