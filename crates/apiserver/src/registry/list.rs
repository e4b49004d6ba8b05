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

/// The most keys one read of a filtered list asks the store for.
const MAX_CHUNK: usize = 10_000;

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
        let mut items = Vec::new();
        let mut unreadable = Vec::new();
        let selects_all = labels.is_empty() && fields.is_empty();
        // With selectors, a page is filled with matching objects: further reads of the same
        // snapshot, each twice the last (at most MAX_CHUNK keys), until `limit` match or
        // the keys end; the continue token then starts after the last key read for it.
        let (mut revision, mut after, mut chunk) = (revision, after.map(Bytes::from), limit);
        let (snapshot, next) = 'pages: loop {
            let page = self
                .store
                .list(
                    &prefix,
                    ListOptions {
                        revision,
                        limit: chunk,
                        after: after.clone(),
                    },
                )
                .await?;
            let last = page.kvs.len().saturating_sub(1);
            for (i, kv) in page.kvs.iter().enumerate() {
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
                    if limit > 0 && items.len() == limit {
                        let next = match i == last {
                            true => page.next.clone(),
                            false => Some(kv.key.clone()),
                        };
                        break 'pages (page.revision, next);
                    }
                }
            }
            if selects_all || limit == 0 || page.next.is_none() {
                break (page.revision, page.next);
            }
            revision = Some(page.revision);
            after = page.next;
            chunk = (chunk * 2).min(MAX_CHUNK).max(limit - items.len());
        };
        let mut metadata = json!({"resourceVersion": snapshot.get().to_string()});
        if let Some(next) = &next {
            metadata["continue"] = json!(encode_continue(snapshot, next));
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{HeaderMap, Method};
    use bytes::Bytes;
    use flotilla_store::Store;
    use serde_json::{Value, json};

    use crate::api::Api;
    use crate::registry::resources::Registry;

    async fn get(api: &Api, path: &str) -> Value {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let response = api
            .serve(
                Method::GET,
                path,
                Some(query),
                &HeaderMap::new(),
                Bytes::new(),
            )
            .await;
        assert!(response.status().is_success(), "{path}");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn names(list: &Value) -> Vec<&str> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    /// A list with `limit` and a selector returns `limit` matching objects (reading on
    /// past those that do not match) before a continue token, as kube-apiserver does.
    #[tokio::test]
    async fn a_filtered_page_is_filled_before_a_continue_token() {
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
        api.bootstrap().await.unwrap();
        let path = "/api/v1/namespaces/default/configmaps";
        for i in 0..40 {
            let labels = match i % 9 == 4 {
                true => json!({"pick": "yes"}),
                false => json!({}),
            };
            let body = json!({"metadata": {"name": format!("c-{i:02}"), "labels": labels}});
            let response = api
                .serve(
                    Method::POST,
                    path,
                    None,
                    &HeaderMap::new(),
                    Bytes::from(body.to_string()),
                )
                .await;
            assert!(response.status().is_success());
        }
        // c-04, c-13, c-22, c-31 match.
        let first = get(&api, &format!("{path}?labelSelector=pick%3Dyes&limit=3")).await;
        assert_eq!(names(&first), ["c-04", "c-13", "c-22"]);
        let token = first["metadata"]["continue"].as_str().unwrap();
        let rest = get(
            &api,
            &format!("{path}?labelSelector=pick%3Dyes&limit=3&continue={token}"),
        )
        .await;
        assert_eq!(names(&rest), ["c-31"]);
        assert!(rest["metadata"].get("continue").is_none(), "{rest}");
        // One at a time, every match once; the same through a field selector.
        let mut seen = Vec::new();
        let mut query = String::from("fieldSelector=metadata.name%21%3Dc-04&limit=1");
        for _ in 0..40 {
            let page = get(&api, &format!("{path}?{query}")).await;
            assert_eq!(names(&page).len(), 1, "{page}");
            seen.extend(names(&page).iter().map(|n| n.to_string()));
            match page["metadata"]["continue"].as_str() {
                Some(token) => {
                    query =
                        format!("fieldSelector=metadata.name%21%3Dc-04&limit=1&continue={token}")
                }
                None => break,
            }
        }
        assert_eq!(seen.len(), 39);
        assert!(!seen.contains(&"c-04".to_owned()));
    }
}
