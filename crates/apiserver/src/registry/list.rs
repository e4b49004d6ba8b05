//! LIST: pages at a revision, continue tokens, selectors.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use flotilla_store::{ListOptions, Revision};
use serde_json::{Value, json};

use crate::http::error::{ApiError, ApiResult};
use crate::registry::keys;
use crate::registry::object::{self};
use crate::registry::selector::{FieldSelector, LabelSelector};

use crate::api::Api;
use crate::http::request::{Query, parse_resource_version};
use crate::http::route::Target;
use crate::registry::store::{Unreadable, reads_as, stored_with_version};

/// The continue token of a list: the snapshot revision and the last key returned.
pub(crate) fn encode_continue(revision: Revision, after: &[u8]) -> String {
    let token =
        json!({"v": "flotilla/v1", "rv": revision.get(), "start": URL_SAFE_NO_PAD.encode(after)});
    URL_SAFE_NO_PAD.encode(token.to_string())
}

pub(crate) fn decode_continue(token: &str) -> ApiResult<(Revision, Vec<u8>)> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let json = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&json).map_err(|_| bad())?;
    let rv = value["rv"].as_u64().ok_or_else(bad)?;
    let start = URL_SAFE_NO_PAD
        .decode(value["start"].as_str().ok_or_else(bad)?)
        .map_err(|_| bad())?;
    Ok((Revision::new(rv), start))
}

/// A page of a list: each item's JSON already rendered, so that a list without selectors
/// never decodes its objects.
pub(crate) struct Listed {
    pub(crate) kind: String,
    pub(crate) api_version: String,
    pub(crate) metadata: Value,
    pub(crate) items: Vec<Vec<u8>>,
    /// The stored objects of the page that cannot be decoded, left out.
    pub(crate) unreadable: Vec<Unreadable>,
}

impl Listed {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let size: usize = self.items.iter().map(|i| i.len() + 1).sum();
        let mut out = Vec::with_capacity(size + 128);
        let head =
            json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": self.metadata});
        let head = crate::http::json::to_vec(&head);
        // `{…head fields…,"items":[…]}`
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(b",\"items\":[");
        for (i, item) in self.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item);
        }
        out.extend_from_slice(b"]}");
        out
    }

    pub(crate) fn to_value(&self) -> ApiResult<Value> {
        serde_json::from_slice(&self.to_bytes())
            .map_err(|e| ApiError::internal(format!("a stored object is not JSON: {e}")))
    }
}

impl Api {
    /// The list's revision, start key and limit, from resourceVersion, resourceVersionMatch,
    /// continue and limit.
    pub(crate) async fn list_position(
        &self,
        query: &Query,
    ) -> ApiResult<(Option<Revision>, Option<Vec<u8>>, usize)> {
        let limit = match query.get("limit") {
            None => 0,
            Some(n) => n
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {n:?}")))?,
        };
        if let Some(token) = query.get("continue") {
            let (revision, after) = decode_continue(token)?;
            return Ok((Some(revision), Some(after), limit));
        }
        let current = self.store.current_revision().await?;
        let revision = match (
            query.get("resourceVersion"),
            query.get("resourceVersionMatch"),
        ) {
            (None, None) => None,
            (None, Some(m)) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch {m} needs a resourceVersion"
                )));
            }
            (Some(rv), matching) => {
                let rv = parse_resource_version(rv)?;
                if rv > current.get() {
                    return Err(ApiError::too_large_resource_version(rv, current.get()));
                }
                match matching {
                    Some("Exact") => Some(Revision::new(rv)),
                    None | Some("NotOlderThan") => None,
                    Some(other) => {
                        return Err(ApiError::bad_request(format!(
                            "unsupported resourceVersionMatch {other:?}"
                        )));
                    }
                }
            }
        };
        Ok((revision, None, limit))
    }

    pub(crate) async fn list(&self, target: &Target, query: &Query) -> ApiResult<Listed> {
        let rt = &target.rt;
        let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
        let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), rt)?;
        let (revision, after, limit) = self.list_position(query).await?;
        let prefix = keys::prefix(rt, &self.cluster, target.namespace.as_deref());
        let page = self
            .store
            .list(
                &prefix,
                ListOptions {
                    revision,
                    limit,
                    after: after.map(Bytes::from),
                },
            )
            .await?;
        let mut items = Vec::with_capacity(page.kvs.len());
        let mut unreadable = Vec::new();
        let selects_all = labels.is_empty() && fields.is_empty();
        for kv in &page.kvs {
            if let Some(left_out) = Unreadable::check(&kv.key, &kv.value) {
                unreadable.push(left_out);
                continue;
            }
            if selects_all {
                match stored_with_version(&kv.value, kv.mod_revision, rt) {
                    Ok(item) => items.push(item),
                    Err(e) => unreadable.push(Unreadable::new(&kv.key, e.message)),
                }
                continue;
            }
            let object: Value = match serde_json::from_slice(&kv.value) {
                Ok(object) => object,
                Err(e) => {
                    unreadable.push(Unreadable::new(&kv.key, e.to_string()));
                    continue;
                }
            };
            if labels.matches(&object) && fields.matches(&object) {
                let mut object = object::with_resource_version(object, kv.mod_revision.get());
                if let Some(api_version) = reads_as(rt) {
                    crate::registry::events::show_as(&mut object, &api_version);
                }
                items.push(crate::http::json::to_vec(&object));
            }
        }
        let mut metadata = json!({"resourceVersion": page.revision.get().to_string()});
        if let Some(next) = &page.next {
            metadata["continue"] = json!(encode_continue(page.revision, next));
        }
        Ok(Listed {
            kind: rt.list_kind(),
            api_version: rt.api_version(),
            metadata,
            items,
            unreadable,
        })
    }
}
