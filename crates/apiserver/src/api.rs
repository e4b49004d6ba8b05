//! The REST API: Kubernetes paths, verbs and their semantics over the store.
//!
//! ```text
//!  /api, /apis, /apis/{g}, /api/v1, /apis/{g}/{v}      discovery (aggregated or legacy)
//!  /version                                            the Kubernetes version emulated
//!  /api/v1/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]  objects of the core group
//!  /apis/{g}/{v}/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use flotilla_store::{EventKind, ListOptions, Revision, Store};
use serde_json::{Value, json};
use tracing::debug;

use crate::admission::schema::{self, FieldValidation, Schema, Structural};
use crate::discovery;
use crate::discovery::openapi;
use crate::discovery::table;
use crate::gc;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::patch;
use crate::patch::managed::{self, Writer};
use crate::patch::strategic;
use crate::registry::crd;
use crate::registry::keys;
use crate::registry::object::{self, MAX_REQUEST_BYTES, meta_str};
use crate::registry::resources::{Registry, ResourceType};
use crate::registry::review;
use crate::registry::scale;
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::registry::tenancy;
use crate::watch::cache::{self as watchcache, Change, Next, Subscription, WatchCache};

mod cleanup;
mod watch;

use cleanup::{Cleanup, Collector, Owner};
use watch::Shape;

/// The logical cluster the root API serves.
pub const ROOT_CLUSTER: &str = "root";

/// How often a write without preconditions is retried when another write races with it
/// (Kubernetes retries such writes until its request deadline).
const CONFLICT_RETRIES: usize = 256;

/// The namespaces that exist from the start.
pub const INITIAL_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Serves the Kubernetes API of one logical cluster over a store.
#[derive(Clone)]
pub struct Api {
    store: Arc<dyn Store>,
    registry: Arc<Registry>,
    cluster: Arc<str>,
    /// The address clients reach the server at, for legacy discovery.
    address: Arc<str>,
    /// How often a watch that allows bookmarks gets one.
    bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` lasts this × [1, 2) (see `watch::lifetime`).
    min_request_timeout: Duration,
    /// The OpenAPI documents of the registry's current generation.
    openapi: Arc<openapi::Cache>,
    /// Every client watch is served from here, over one store watch.
    watch_cache: Arc<WatchCache>,
    /// Owners whose dependents are to be deleted (Background propagation).
    collector: Arc<Collector>,
    /// The views of the logical clusters served so far (shared by every view).
    logical: Arc<tokio::sync::Mutex<HashMap<String, Api>>>,
}

/// What a path names.
enum Route {
    Version,
    OpenApiIndex,
    OpenApiV2,
    OpenApiDocument(String),
    CoreGroups,
    Groups,
    Group(String),
    Resources(String, String),
    Objects(Target),
}

/// How a PATCH body applies.
#[derive(Clone, Copy)]
enum PatchKind {
    Merge,
    Json,
    /// Strategic merge patch, with the kind's schema.
    Strategic(&'static Value),
}

/// Who a write's fields belong to.
#[derive(Clone, Copy)]
enum FieldOwner<'a> {
    /// A write that is not an apply, by this field manager: it owns what it changes.
    Update(&'a str),
    /// A server-side apply: the object's managed fields are already worked out.
    Applied,
}

/// The objects a path names.
struct Target {
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

/// The decoded query string.
struct Query(HashMap<String, String>);

impl Query {
    fn parse(raw: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(k), decode(v));
        }
        Query(map)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: only \"All\" is supported"
            ))),
        }
    }
}

/// The `/`-separated segments of a path without its outer slashes, in `buffer` when they
/// fit (no allocation), else in a vector.
pub(crate) fn segments<'p, 'b, const N: usize>(
    path: &'p str,
    buffer: &'b mut [&'p str; N],
) -> std::borrow::Cow<'b, [&'p str]> {
    let trimmed = path.trim_matches('/');
    let mut count = 0;
    for segment in trimmed.split('/') {
        if count == N {
            return std::borrow::Cow::Owned(trimmed.split('/').collect());
        }
        buffer[count] = segment;
        count += 1;
    }
    std::borrow::Cow::Borrowed(&buffer[..count])
}

/// Percent-decoding of one query component (`+` is a space).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (byte, _) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The continue token of a list: the snapshot revision and the last key returned.
fn encode_continue(revision: Revision, after: &[u8]) -> String {
    let token =
        json!({"v": "flotilla/v1", "rv": revision.get(), "start": URL_SAFE_NO_PAD.encode(after)});
    URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str) -> ApiResult<(Revision, Vec<u8>)> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    let json = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&json).map_err(|_| bad())?;
    let rv = value["rv"].as_u64().ok_or_else(bad)?;
    let start = URL_SAFE_NO_PAD
        .decode(value["start"].as_str().ok_or_else(bad)?)
        .map_err(|_| bad())?;
    Ok((Revision::new(rv), start))
}

fn parse_resource_version(text: &str) -> ApiResult<u64> {
    text.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resourceVersion {text:?}: must be a number"
        ))
    })
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    json_bytes_response(code, crate::http::json::to_vec(value))
}

/// The object a write answers with.
enum Answer {
    /// An object as it is (not stored, or already carrying its resourceVersion).
    Object(Value),
    /// An object as stored at `revision` (without its resourceVersion) and its stored JSON,
    /// from which the answer is made without serialising the object again.
    Stored {
        object: Value,
        json: Bytes,
        revision: Revision,
    },
}

impl Answer {
    /// The object, with its resourceVersion.
    fn into_value(self) -> Value {
        match self {
            Answer::Object(object) => object,
            Answer::Stored {
                object, revision, ..
            } => object::with_resource_version(object, revision.get()),
        }
    }

    fn response(self, code: StatusCode) -> Response {
        if let Answer::Stored { json, revision, .. } = &self
            && let Some(body) = object::with_resource_version_raw(json, revision.get())
        {
            return json_bytes_response(code, body);
        }
        json_response(code, &self.into_value())
    }
}

/// The JSON the store holds for `object`, an object of `rt` named `name`: refused (422)
/// when it nests deeper than [`object::MAX_DEPTH`], or (413) when it is longer than
/// [`object::MAX_OBJECT_BYTES`], so that everything stored can be read back.
fn stored_json(object: &Value, rt: &ResourceType, name: &str) -> ApiResult<Bytes> {
    object::check_depth(object, rt)?;
    let mut json = Vec::with_capacity(1024);
    crate::http::json::write(&mut json, object);
    object::check_size(json.len(), rt, name)?;
    // The bytes live on in the watch cache: not with the spare room of the last growth.
    json.shrink_to_fit();
    Ok(Bytes::from(json))
}

/// A stored object the server cannot read back ([`object::undecodable`], or not JSON): left
/// out of lists and watches with a warning, never failing them; it can still be deleted.
struct Unreadable {
    key: Bytes,
    reason: String,
}

impl Unreadable {
    /// Logs it (a tracing warning) and returns it.
    fn new(key: &Bytes, reason: String) -> Self {
        tracing::warn!(key = %String::from_utf8_lossy(key), %reason,
            "a stored object cannot be decoded; left out (it can still be deleted)");
        Unreadable {
            key: key.clone(),
            reason,
        }
    }

    /// Why `json` cannot be read back, if it cannot.
    fn check(key: &Bytes, json: &[u8]) -> Option<Self> {
        object::undecodable(json).map(|reason| Self::new(key, reason))
    }

    /// The `Warning` headers for objects left out (the first few named, then how many more).
    fn warnings(all: &[Unreadable]) -> Vec<String> {
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
fn unreadable_error(rt: &ResourceType, name: &str, reason: &str) -> ApiError {
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
fn decode_stored(rt: &ResourceType, name: &str, json: &[u8]) -> ApiResult<Value> {
    if let Some(reason) = object::undecodable(json) {
        return Err(unreadable_error(rt, name, &reason));
    }
    serde_json::from_slice(json).map_err(|e| unreadable_error(rt, name, &e.to_string()))
}

impl Api {
    /// The API of the root logical cluster over `store`.
    pub fn new(store: Arc<dyn Store>, registry: Arc<Registry>, address: impl Into<String>) -> Self {
        Api {
            store: store.clone(),
            registry,
            cluster: Arc::from(ROOT_CLUSTER),
            address: Arc::from(address.into()),
            bookmark_interval: Duration::from_secs(60),
            min_request_timeout: watch::MIN_REQUEST_TIMEOUT,
            openapi: Arc::default(),
            watch_cache: Arc::new(WatchCache::new(store, watchcache::Config::default())),
            collector: Arc::default(),
            logical: Arc::default(),
        }
    }

    /// The API of logical cluster `name`, if a `LogicalCluster` of that name exists in the
    /// root cluster: its own registry, OpenAPI documents and garbage collector over the
    /// shared store and watch cache.
    async fn logical_cluster(&self, name: &str) -> ApiResult<Api> {
        let missing = || {
            ApiError::new(
                404,
                Reason::NotFound,
                format!("logical cluster {name:?} not found"),
            )
        };
        if tenancy::check_name(name).is_some() {
            return Err(missing());
        }
        let rt = self
            .registry
            .get(tenancy::GROUP, tenancy::VERSION, tenancy::PLURAL)
            .ok_or_else(missing)?;
        match self.get(&rt, "", name).await {
            Ok((object, _)) if object["metadata"]["deletionTimestamp"].is_null() => {}
            Ok(_) => return Err(missing()),
            Err(e) if e.reason == Reason::NotFound => return Err(missing()),
            Err(e) => return Err(e),
        }
        let mut views = self.logical.lock().await;
        if let Some(view) = views.get(name) {
            return Ok(view.clone());
        }
        let view = Api {
            registry: Arc::new(Registry::builtin()),
            cluster: Arc::from(name),
            openapi: Arc::default(),
            collector: Arc::default(),
            ..self.clone()
        };
        view.bootstrap().await?;
        views.insert(name.to_owned(), view.clone());
        Ok(view)
    }

    /// The store's current revision.
    pub async fn revision(&self) -> ApiResult<u64> {
        Ok(self.store.current_revision().await?.get())
    }

    /// The watch cache every client watch is served from (for metrics and tests).
    pub fn watch_cache(&self) -> &WatchCache {
        &self.watch_cache
    }

    /// Sends watch bookmarks at this interval (60 s by default).
    pub fn with_bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Ends a watch without `timeoutSeconds` after this × [1, 2), drawn at random
    /// (kube-apiserver's `--min-request-timeout`; 1800 s by default).
    pub fn with_min_request_timeout(mut self, timeout: Duration) -> Self {
        self.min_request_timeout = timeout;
        self
    }

    /// Creates the initial namespaces that are missing.
    pub async fn bootstrap(&self) -> ApiResult<()> {
        let rt = self.resource("", "v1", "namespaces")?;
        for name in INITIAL_NAMESPACES {
            let key = keys::key(&rt, &self.cluster, "", name);
            if self.store.get(&key, None).await?.is_some() {
                continue;
            }
            let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
            object::prepare_create(&mut ns, &rt, "")?;
            match self.store.create(&key, Bytes::from(ns.to_string())).await {
                Ok(_) | Err(flotilla_store::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Serve the stored CRDs; finish deletions an earlier run left half done. The root
        // cluster also holds the definition of logical clusters.
        let crd_type = self.resource(crd::GROUP, "v1", "customresourcedefinitions")?;
        let page = self
            .store
            .list(
                &keys::prefix(&crd_type, &self.cluster, None),
                ListOptions::default(),
            )
            .await?;
        for kv in page.kvs {
            let mut object: Value = match serde_json::from_slice(&kv.value) {
                Ok(object) => object,
                Err(e) => {
                    Unreadable::new(&kv.key, e.to_string());
                    continue;
                }
            };
            let name = meta_str(&object, "name").to_owned();
            match crd::admit(&mut object) {
                Ok(definition) if crd::conflict(&definition, &self.registry).is_none() => {
                    crd::register(&self.registry, &definition);
                }
                Ok(_) => tracing::warn!(crd = %name, "the CRD's names clash; not served"),
                Err(e) => {
                    tracing::warn!(crd = %name, error = %e, "a stored CRD is invalid; not served")
                }
            }
            if !object["metadata"]["deletionTimestamp"].is_null() {
                self.spawn_cleanup(Cleanup::CustomResources(name));
            }
        }
        let page = self
            .store
            .list(
                &keys::prefix(&rt, &self.cluster, None),
                ListOptions::default(),
            )
            .await?;
        for kv in page.kvs {
            let object: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            if !object["metadata"]["deletionTimestamp"].is_null() {
                self.spawn_cleanup(Cleanup::Namespace(meta_str(&object, "name").to_owned()));
            }
        }
        if &*self.cluster == ROOT_CLUSTER
            && self
                .registry
                .get(tenancy::GROUP, tenancy::VERSION, tenancy::PLURAL)
                .is_none()
        {
            let body = Bytes::from(tenancy::definition().to_string());
            let target = Target {
                rt: crd_type,
                namespace: None,
                name: None,
                sub: None,
            };
            match self
                .create(&target, &Query(HashMap::new()), &HeaderMap::new(), &body)
                .await
            {
                Ok(_) => {}
                Err(e) if e.reason == Reason::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn resource(&self, group: &str, version: &str, plural: &str) -> ApiResult<Arc<ResourceType>> {
        self.registry
            .get(group, version, plural)
            .ok_or_else(|| ApiError::no_route(&format!("{group}/{version}/{plural}")))
    }

    /// Serves one request.
    pub async fn serve(
        &self,
        method: Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response {
        if let Some(rest) = path.strip_prefix("/clusters/") {
            if &*self.cluster != ROOT_CLUSTER {
                return ApiError::no_route(path).into_response();
            }
            let (name, rest) = rest.split_once('/').unwrap_or((rest, ""));
            return match self.logical_cluster(name).await {
                Ok(view) => {
                    Box::pin(view.serve(method, &format!("/{rest}"), query, headers, body)).await
                }
                Err(e) => e.into_response(),
            };
        }
        match self.route(path) {
            Ok(route) => {
                let query = Query::parse(query);
                match self.dispatch(method, route, &query, headers, body).await {
                    Ok(response) => response,
                    Err(e) => e.into_response(),
                }
            }
            Err(e) => e.into_response(),
        }
    }

    fn route(&self, path: &str) -> ApiResult<Route> {
        let mut buffer = [""; 10];
        let segments = segments(path, &mut buffer);
        let not_found = || ApiError::no_route(path);
        let (group, version, rest): (&str, &str, &[&str]) = match &*segments {
            ["version"] => return Ok(Route::Version),
            ["openapi", "v3"] => return Ok(Route::OpenApiIndex),
            ["openapi", "v2"] => return Ok(Route::OpenApiV2),
            ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApiDocument(rest.join("/"))),
            ["api"] => return Ok(Route::CoreGroups),
            ["apis"] => return Ok(Route::Groups),
            ["api", version] => return Ok(Route::Resources(String::new(), (*version).to_owned())),
            ["apis", group] => return Ok(Route::Group((*group).to_owned())),
            ["apis", group, version] => {
                return Ok(Route::Resources((*group).to_owned(), (*version).to_owned()));
            }
            ["api", version, rest @ ..] => ("", *version, rest),
            ["apis", group, version, rest @ ..] => (*group, *version, rest),
            _ => return Err(not_found()),
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, plural, ..] if *plural != "status" && *plural != "finalize" => {
                (Some((*ns).to_owned()), &rest[2..])
            }
            _ => (None, rest),
        };
        let (plural, name, sub) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(*name), None),
            [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
            _ => return Err(not_found()),
        };
        let rt = self
            .registry
            .get(group, version, plural)
            .ok_or_else(not_found)?;
        if namespace.is_some() && !rt.namespaced {
            return Err(not_found());
        }
        if let Some(sub) = sub {
            let known = rt.subresource(sub).is_some();
            if !known {
                return Err(not_found());
            }
        }
        if rt.namespaced && namespace.is_none() && name.is_some() {
            return Err(not_found());
        }
        Ok(Route::Objects(Target {
            rt,
            namespace,
            name: name.map(str::to_owned),
            sub: sub.map(str::to_owned),
        }))
    }

    async fn dispatch(
        &self,
        method: Method,
        route: Route,
        query: &Query,
        headers: &HeaderMap,
        body: Bytes,
    ) -> ApiResult<Response> {
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        let discovery_doc =
            |value: Option<Value>, content_type: &'static str| -> ApiResult<Response> {
                let value = value.ok_or_else(|| ApiError::no_route("discovery"))?;
                let mut response = json_response(StatusCode::OK, &value);
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                response
                    .headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept"));
                Ok(response)
            };
        let target = match route {
            Route::Version => return Ok(json_response(StatusCode::OK, &discovery::version())),
            Route::OpenApiV2 => {
                let bytes = crate::discovery::openapi_v2::document(&self.registry)
                    .ok_or_else(|| ApiError::no_route("/openapi/v2"))?;
                let mut response = (StatusCode::OK, bytes).into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(crate::discovery::openapi_v2::PROTOBUF),
                );
                return Ok(response);
            }
            Route::OpenApiIndex => {
                return Ok(json_response(
                    StatusCode::OK,
                    &self.openapi.index(&self.registry),
                ));
            }
            Route::OpenApiDocument(path) => {
                let document = self
                    .openapi
                    .document(&self.registry, &path)
                    .ok_or_else(|| ApiError::no_route(&format!("/openapi/v3/{path}")))?;
                let mut response = (StatusCode::OK, document.0.clone()).into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", document.1)) {
                    response.headers_mut().insert(header::ETAG, etag);
                }
                return Ok(response);
            }
            Route::CoreGroups | Route::Groups => {
                let core = matches!(route, Route::CoreGroups);
                let format = discovery::negotiate(accept);
                return match format {
                    discovery::Format::Legacy if core => discovery_doc(
                        Some(discovery::api_versions(&self.address)),
                        format.content_type(),
                    ),
                    discovery::Format::Legacy => discovery_doc(
                        Some(discovery::api_group_list(&self.registry)),
                        format.content_type(),
                    ),
                    _ => {
                        let content_type = format.content_type();
                        discovery_doc(
                            Some(discovery::aggregated(&self.registry, core, format)),
                            content_type,
                        )
                    }
                };
            }
            Route::Group(group) => {
                return discovery_doc(
                    discovery::api_group(&self.registry, &group),
                    "application/json",
                );
            }
            Route::Resources(group, version) => {
                return discovery_doc(
                    discovery::resource_list(&self.registry, &group, &version),
                    "application/json",
                );
            }
            Route::Objects(target) => target,
        };
        if body.len() > MAX_REQUEST_BYTES {
            return Err(ApiError::too_large(format!(
                "the request body is {} bytes, over the limit of {MAX_REQUEST_BYTES} bytes",
                body.len()
            )));
        }
        let namespace = target.namespace.clone().unwrap_or_default();
        if target.sub.is_none() {
            let verb = match (&method, target.name.is_some()) {
                (&Method::GET, true) => "get",
                (&Method::GET, false) if query.flag("watch") => "watch",
                (&Method::GET, false) => "list",
                (&Method::POST, _) => "create",
                (&Method::PUT, _) => "update",
                (&Method::PATCH, _) => "patch",
                (&Method::DELETE, true) => "delete",
                (&Method::DELETE, false) => "deletecollection",
                _ => "",
            };
            if !verb.is_empty() && !target.rt.supports(verb) {
                return Err(ApiError::method_not_allowed(verb, &target.rt.plural));
            }
        }
        if target.sub.as_deref() == Some("scale")
            && let Some(name) = &target.name
        {
            return self
                .scale(&target, name, method, query, headers, &body)
                .await;
        }
        match (method, target.name.clone()) {
            (Method::GET, None) if query.flag("watch") => {
                let shape = if table::wants_table(accept) {
                    Shape::Table
                } else {
                    table::wants_metadata(accept).map_or(Shape::Object, Shape::Metadata)
                };
                self.watch(&target, query, shape).await
            }
            (Method::GET, None) if table::wants_table(accept) => {
                let listed = self.list(&target, query).await?;
                let warnings = Unreadable::warnings(&listed.unreadable);
                let list = listed.to_value()?;
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let rv = list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                let mut table = self.table(&target.rt, &items, &rv, query);
                if let Some(next) = list["metadata"].get("continue") {
                    table["metadata"]["continue"] = next.clone();
                }
                Ok(with_warnings(
                    json_response(StatusCode::OK, &table),
                    &warnings,
                ))
            }
            (Method::GET, None) if let Some(api_version) = table::wants_metadata(accept) => {
                let listed = self.list(&target, query).await?;
                let warnings = Unreadable::warnings(&listed.unreadable);
                let mut list = listed.to_value()?;
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .map(|o| table::partial(o, api_version))
                            .collect()
                    })
                    .unwrap_or_default();
                list["items"] = Value::Array(items);
                list["kind"] = json!("PartialObjectMetadataList");
                list["apiVersion"] = json!(api_version);
                Ok(with_warnings(
                    json_response(StatusCode::OK, &list),
                    &warnings,
                ))
            }
            (Method::GET, None) => self.list(&target, query).await.map(|listed| {
                let warnings = Unreadable::warnings(&listed.unreadable);
                with_warnings(
                    json_bytes_response(StatusCode::OK, listed.to_bytes()),
                    &warnings,
                )
            }),
            (Method::GET, Some(name)) => {
                let rt = &target.rt;
                let key = keys::key(rt, &self.cluster, &namespace, &name);
                let (value, revision) = self
                    .read(&key)
                    .await?
                    .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &name))?;
                if let Some(reason) = object::undecodable(&value) {
                    return Err(unreadable_error(rt, &name, &reason));
                }
                let object = stored_with_version(&value, revision, rt)?;
                if table::wants_table(accept) {
                    let object: Value = serde_json::from_slice(&object).map_err(|e| {
                        ApiError::internal(format!("a stored object is not JSON: {e}"))
                    })?;
                    let rv = revision.get().to_string();
                    return Ok(json_response(
                        StatusCode::OK,
                        &self.table(rt, &[object], &rv, query),
                    ));
                }
                if let Some(api_version) = table::wants_metadata(accept) {
                    let object: Value = serde_json::from_slice(&object).map_err(|e| {
                        ApiError::internal(format!("a stored object is not JSON: {e}"))
                    })?;
                    return Ok(json_response(
                        StatusCode::OK,
                        &table::partial(&object, api_version),
                    ));
                }
                Ok(json_bytes_response(StatusCode::OK, object))
            }
            (Method::POST, None) => {
                let (answer, warnings) = self.create(&target, query, headers, &body).await?;
                Ok(with_warnings(
                    answer.response(StatusCode::CREATED),
                    &warnings,
                ))
            }
            (Method::PUT, Some(name)) => {
                let object = parse_body(&body, headers)?;
                let manager = field_manager(query, headers)?;
                // Without a resourceVersion the replace is unconditional: a write that
                // races with it is retried, never reported.
                let unconditional = meta_str(&object, "resourceVersion").is_empty();
                let mut attempts = 0;
                let (object, created, warnings) = loop {
                    let owner = FieldOwner::Update(&manager);
                    match self
                        .update(&target, &name, query, object.clone(), owner)
                        .await
                    {
                        Err(e)
                            if e.reason == Reason::Conflict
                                && unconditional
                                && attempts < CONFLICT_RETRIES =>
                        {
                            attempts += 1;
                            tokio::task::yield_now().await;
                        }
                        other => break other?,
                    }
                };
                let code = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(with_warnings(object.response(code), &warnings))
            }
            (Method::PATCH, Some(name)) => {
                let (object, created, warnings) =
                    self.patch(&target, &name, query, headers, &body).await?;
                let code = match created {
                    true => StatusCode::CREATED,
                    false => StatusCode::OK,
                };
                Ok(with_warnings(object.response(code), &warnings))
            }
            (Method::DELETE, Some(name)) => {
                let body = delete_options(body, headers)?;
                let (code, object) = self.delete(&target, &name, query, &body, true).await?;
                Ok(json_response(code, &object))
            }
            (Method::DELETE, None) => self
                .delete_collection(&target, query, &delete_options(body, headers)?)
                .await
                .map(|(v, warnings)| with_warnings(json_response(StatusCode::OK, &v), &warnings)),
            (method, _) => Err(ApiError::method_not_allowed(
                method.as_str(),
                &target.rt.plural,
            )),
        }
    }

    /// The stored JSON and revision of the object under `key`, by a consistent read: from
    /// the watch cache when it is up to date with the store, else from the store.
    async fn read(&self, key: &[u8]) -> ApiResult<Option<(Bytes, Revision)>> {
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
        if crate::registry::events::is_event(rt) {
            crate::registry::events::show_as(&mut object, &rt.api_version());
        }
        Ok((
            object::with_resource_version(object, revision.get()),
            revision,
        ))
    }

    /// An object's stored JSON and its revision.
    async fn get_stored(
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

    async fn require_namespace(&self, namespace: &str) -> ApiResult<()> {
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

    async fn create(
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
        if let Some(answer) = review::answer(rt, &object) {
            return Ok((Answer::Object(answer), Vec::new()));
        }
        let manager = field_manager(query, headers)?;
        self.insert(target, query, object, FieldOwner::Update(&manager))
            .await
    }

    /// Creates `object` (checked, defaulted and given its server-managed metadata).
    async fn insert(
        &self,
        target: &Target,
        query: &Query,
        mut object: Value,
        owner: FieldOwner<'_>,
    ) -> ApiResult<(Answer, Vec<String>)> {
        let rt = &target.rt;
        let namespace = target.namespace.clone().unwrap_or_default();
        let warnings = admit_fields(rt, &mut object, None, query)?;
        let name = object::prepare_create(&mut object, rt, &namespace)?;
        if rt.namespaced {
            self.require_namespace(&namespace).await?;
        }
        if rt.has_status()
            && !(rt.group.is_empty() && rt.plural == "namespaces")
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            object["spec"]["finalizers"] = json!(["kubernetes"]);
            object["status"] = json!({"phase": "Active"});
        }
        let definition = match crd::is_crd_type(rt) {
            true => Some(self.admit_crd(&mut object, &Value::Null)?),
            false => None,
        };
        if rt.schema.is_some() {
            self.require_served(rt).await?;
        }
        if let FieldOwner::Update(manager) = owner {
            let writer = Writer {
                manager,
                subresource: "",
            };
            managed::record_update(None, &mut object, rt, writer)?;
        }
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
        debug!(resource = %rt.plural, %namespace, %name, %revision, "created");
        if let Some((definition, true)) = definition {
            crd::register(&self.registry, &definition);
        }
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
    async fn update(
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
    async fn update_from(
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
        let warnings = admit_fields(rt, &mut object, Some(&current), query)?;
        object::prepare_update(&mut object, &current, rt)?;
        if let FieldOwner::Update(manager) = owner {
            let writer = Writer {
                manager,
                subresource: target.sub.as_deref().unwrap_or(""),
            };
            managed::record_update(Some(&current), &mut object, rt, writer)?;
        }
        let definition = match crd::is_crd_type(rt) {
            true => Some(self.admit_crd(&mut object, &current["status"])?),
            false => None,
        };
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
            if let Some((definition, _)) = &definition {
                crd::unregister(&self.registry, &definition.group, &definition.plural);
            }
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
        if let Some((definition, true)) = &definition {
            crd::register(&self.registry, definition);
        }
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

    /// The `scale` subresource: an `autoscaling/v1` Scale view of the object's replicas;
    /// writing it (PUT, or a merge or JSON patch of the view) sets the desired replicas.
    async fn scale(
        &self,
        target: &Target,
        name: &str,
        method: Method,
        query: &Query,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> ApiResult<Response> {
        let rt = &target.rt;
        let paths = rt.scale.clone().unwrap_or_default();
        let namespace = target.namespace.clone().unwrap_or_default();
        let parent = Target {
            rt: rt.clone(),
            namespace: target.namespace.clone(),
            name: Some(name.to_owned()),
            sub: None,
        };
        for _ in 0..CONFLICT_RETRIES {
            let (current, revision) = self.get(rt, &namespace, name).await?;
            let view = scale::view(&current, &paths);
            let wanted = match method {
                Method::GET => return Ok(json_response(StatusCode::OK, &view)),
                Method::PUT => parse_body(body, headers)?,
                Method::PATCH => {
                    let patch: Value = serde_json::from_slice(body).map_err(|e| {
                        ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                    })?;
                    match content_type(headers) {
                        "application/merge-patch+json" => patch::merge(&view, &patch),
                        "application/json-patch+json" => patch::json_patch(&view, &patch)?,
                        other => {
                            return Err(ApiError::unsupported_media_type(format!(
                                "the patch type {other:?} is not supported on scale; use application/merge-patch+json or application/json-patch+json"
                            )));
                        }
                    }
                }
                other => return Err(ApiError::method_not_allowed(other.as_str(), "scale")),
            };
            let conditional = match meta_str(&wanted, "resourceVersion") {
                "" => false,
                rv if parse_resource_version(rv)? != revision.get() => {
                    return Err(ApiError::conflict(&rt.group, &rt.plural, name));
                }
                _ => true,
            };
            let replicas = wanted["spec"]["replicas"].as_i64().ok_or_else(|| {
                ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![crate::http::error::Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: an integer".into(),
                        field: "spec.replicas".into(),
                    }],
                )
            })?;
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![crate::http::error::Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: {replicas}: must be greater than or equal to 0"
                        ),
                        field: "spec.replicas".into(),
                    }],
                ));
            }
            let mut updated = current.clone();
            scale::set(&mut updated, &paths.spec_replicas, json!(replicas))?;
            object::metadata_mut(&mut updated)?
                .insert("resourceVersion".into(), json!(revision.get().to_string()));
            let manager = field_manager(query, headers)?;
            match self
                .update(&parent, name, query, updated, FieldOwner::Update(&manager))
                .await
            {
                Ok((object, _, _)) => {
                    let object = object.into_value();
                    return Ok(json_response(StatusCode::OK, &scale::view(&object, &paths)));
                }
                Err(e) if e.reason == Reason::Conflict && !conditional => {
                    tokio::task::yield_now().await
                }
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::conflict(&rt.group, &rt.plural, name))
    }

    /// A Table of `objects` of `rt` (`includeObject` as the query asks).
    fn table(
        &self,
        rt: &ResourceType,
        objects: &[Value],
        resource_version: &str,
        query: &Query,
    ) -> Value {
        let printer_columns = rt.printer_columns.as_ref().map_or(&Value::Null, |c| &*c.0);
        let include = query.get("includeObject").unwrap_or("Metadata");
        table::table(rt, printer_columns, objects, resource_version, include)
    }

    /// Checks a CRD about to be written and sets its status; returns what it defines and
    /// whether its names can be served.
    fn admit_crd(
        &self,
        object: &mut Value,
        previous: &Value,
    ) -> ApiResult<(crd::Definition, bool)> {
        let definition = crd::admit(object)?;
        let clash = crd::conflict(&definition, &self.registry);
        let terminating = !object["metadata"]["deletionTimestamp"].is_null();
        if previous.is_null() {
            let meta = object::metadata_mut(object)?;
            let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(list) = finalizers.as_array_mut()
                && !list.iter().any(|f| f == crd::CLEANUP_FINALIZER)
            {
                list.push(json!(crd::CLEANUP_FINALIZER));
            }
        }
        object["status"] = crd::status(&definition, clash.as_deref(), previous, terminating);
        Ok((definition, clash.is_none()))
    }

    /// Refuses new custom resources while their CRD is being deleted.
    async fn require_served(&self, rt: &ResourceType) -> ApiResult<()> {
        let crd_type = self.resource(crd::GROUP, "v1", "customresourcedefinitions")?;
        let name = format!("{}.{}", rt.plural, rt.group);
        match self.get(&crd_type, "", &name).await {
            Ok((crd, _)) if crd["metadata"]["deletionTimestamp"].is_null() => Ok(()),
            Ok(_) => Err(ApiError::method_not_allowed(
                "create",
                &format!("{name}: the CustomResourceDefinition is being deleted"),
            )),
            Err(e) if e.reason == Reason::NotFound => Err(ApiError::no_route(&rt.plural)),
            Err(e) => Err(e),
        }
    }

    fn write_error(&self, e: flotilla_store::Error, rt: &ResourceType, name: &str) -> ApiError {
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

    /// A PATCH; returns the object, whether it was created (an apply may create), and the
    /// warnings for the client.
    async fn patch(
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
        for _ in 0..CONFLICT_RETRIES {
            let (current, revision) = self.get(&target.rt, &namespace, name).await?;
            let mut patched = match kind {
                PatchKind::Merge => patch::merge(&current, &patch),
                PatchKind::Json => patch::json_patch(&current, &patch)?,
                PatchKind::Strategic(schema) => strategic::apply(&current, &patch, schema)?,
            };
            // The patched object replaces the current one at its revision, or at the one the
            // patch itself names (a precondition, not retried).
            if meta_str(&patched, "resourceVersion").is_empty() {
                object::metadata_mut(&mut patched)?
                    .insert("resourceVersion".into(), json!(revision.get().to_string()));
            }
            let owner = FieldOwner::Update(&manager);
            let read = Some((current, revision));
            match self
                .update_from(target, name, query, patched, owner, read)
                .await
            {
                Err(e) if e.reason == Reason::Conflict && patch_keeps_version(&patch) => {
                    tokio::task::yield_now().await;
                }
                other => return other.map(|(object, _, warnings)| (object, false, warnings)),
            }
        }
        Err(ApiError::conflict(
            &target.rt.group,
            &target.rt.plural,
            name,
        ))
    }

    /// A server-side apply (`application/apply-patch+yaml`): the configuration merges into
    /// the object (created if missing) as `fieldManager`, conflicting with other managers'
    /// fields unless `force=true`.
    async fn apply(
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
        for _ in 0..CONFLICT_RETRIES {
            let outcome = match self.get(rt, &namespace, name).await {
                Ok((current, revision)) => {
                    let mut object = managed::apply(Some(&current), &config, rt, writer, force)?;
                    object::metadata_mut(&mut object)?
                        .insert("resourceVersion".into(), json!(revision.get().to_string()));
                    let read = Some((current, revision));
                    self.update_from(target, name, query, object, FieldOwner::Applied, read)
                        .await
                }
                Err(e) if e.reason == Reason::NotFound && target.sub.is_none() => {
                    let object = managed::apply(None, &config, rt, writer, force)?;
                    self.insert(target, query, object, FieldOwner::Applied)
                        .await
                        .map(|(object, more)| (object, true, more))
                }
                Err(e) => Err(e),
            };
            match outcome {
                Err(e) if e.reason == Reason::Conflict || e.reason == Reason::AlreadyExists => {
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(e),
                Ok((object, created, more)) => {
                    warnings.extend(more);
                    return Ok((object, created, warnings));
                }
            }
        }
        Err(ApiError::conflict(&rt.group, &rt.plural, name))
    }

    /// Deletes an object (or marks it for deletion while finalizers remain). A write that
    /// races with it is retried, unless the client gave preconditions.
    async fn delete(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        body: &Bytes,
        collect: bool,
    ) -> ApiResult<(StatusCode, Value)> {
        let mut attempts = 0;
        loop {
            match self.delete_once(target, name, query, body, collect).await {
                Err(e)
                    if e.reason == Reason::Conflict
                        && attempts < CONFLICT_RETRIES
                        && !has_preconditions(body) =>
                {
                    attempts += 1;
                    tokio::task::yield_now().await;
                }
                other => return other,
            }
        }
    }

    /// One try of a delete; `collect` runs garbage collection of the object's dependents
    /// (off when a whole namespace is being emptied anyway).
    async fn delete_once(
        &self,
        target: &Target,
        name: &str,
        query: &Query,
        body: &Bytes,
        collect: bool,
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
        let mut current = match decode_stored(rt, name, &value) {
            Ok(object) => object::with_resource_version(object, revision.get()),
            Err(e) => {
                let stored = (&value[..], revision);
                return self
                    .delete_unreadable(rt, &namespace, name, &options, query, stored, &e)
                    .await;
            }
        };
        if let Some(rv) = options["preconditions"]["resourceVersion"].as_str()
            && parse_resource_version(rv)? != revision.get()
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        if let Some(uid) = options["preconditions"]["uid"].as_str()
            && uid != meta_str(&current, "uid")
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let dry_run = query.dry_run()?;
        let propagation = gc::Propagation::from_request(&options, query.get("propagationPolicy"))?;
        let key = keys::key(rt, &self.cluster, &namespace, name);
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        let uid = meta_str(&current, "uid").to_owned();
        let waits_for = propagation.finalizer().filter(|_| collect && !is_namespace);
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
            || is_namespace;
        if has_finalizers {
            if !current["metadata"]["deletionTimestamp"].is_null() || dry_run {
                return Ok((StatusCode::OK, current));
            }
            let meta = object::metadata_mut(&mut current)?;
            meta.insert("deletionTimestamp".into(), json!(object::now()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            meta.remove("resourceVersion");
            if is_namespace {
                current["status"]["phase"] = json!("Terminating");
            }
            let is_crd = crd::is_crd_type(rt);
            if is_crd && let Ok(definition) = crd::admit(&mut current.clone()) {
                let previous = current["status"].clone();
                current["status"] = crd::status(&definition, None, &previous, true);
            }
            let new = self
                .store
                .update(&key, Bytes::from(current.to_string()), revision)
                .await
                .map_err(|e| self.write_error(e, rt, name))?;
            if is_namespace {
                self.spawn_cleanup(Cleanup::Namespace(name.to_owned()));
            } else if is_crd {
                self.spawn_cleanup(Cleanup::CustomResources(name.to_owned()));
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
    /// emptied after it). Answers a `Status` of success.
    #[allow(clippy::too_many_arguments)]
    async fn delete_unreadable(
        &self,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
        options: &Value,
        query: &Query,
        (value, revision): (&[u8], Revision),
        why: &ApiError,
    ) -> ApiResult<(StatusCode, Value)> {
        if let Some(rv) = options["preconditions"]["resourceVersion"].as_str()
            && parse_resource_version(rv)? != revision.get()
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        // The uid cannot be read: it must at least be in the stored bytes.
        if let Some(uid) = options["preconditions"]["uid"].as_str()
            && memchr::memmem::find(value, uid.as_bytes()).is_none()
        {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
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
        if rt.group.is_empty() && rt.plural == "namespaces" {
            self.spawn_cleanup(Cleanup::Namespace(name.to_owned()));
        }
        Ok((StatusCode::OK, status))
    }

    /// The namespace and name of the object of `rt` under `key` in this logical cluster.
    fn identity(&self, rt: &ResourceType, key: &[u8]) -> Option<(Option<String>, String)> {
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
    async fn delete_collection(
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

    /// The list's revision, start key and limit, from resourceVersion, resourceVersionMatch,
    /// continue and limit.
    async fn list_position(
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

    async fn list(&self, target: &Target, query: &Query) -> ApiResult<Listed> {
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

/// A page of a list: each item's JSON already rendered, so that a list without selectors
/// never decodes its objects.
struct Listed {
    kind: String,
    api_version: String,
    metadata: Value,
    items: Vec<Vec<u8>>,
    /// The stored objects of the page that cannot be decoded, left out.
    unreadable: Vec<Unreadable>,
}

impl Listed {
    fn to_bytes(&self) -> Vec<u8> {
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

    fn to_value(&self) -> ApiResult<Value> {
        serde_json::from_slice(&self.to_bytes())
            .map_err(|e| ApiError::internal(format!("a stored object is not JSON: {e}")))
    }
}

/// A stored object's JSON with its resourceVersion, read as `rt` (a custom resource stored
/// through another of its versions is shown with this version's apiVersion: conversion
/// `None`), decoded only if it must be.
fn stored_with_version(value: &[u8], revision: Revision, rt: &ResourceType) -> ApiResult<Vec<u8>> {
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
fn reads_as(rt: &ResourceType) -> Option<String> {
    (rt.schema.is_some() || crate::registry::events::is_event(rt)).then(|| rt.api_version())
}

fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The delete options of a request as JSON (typed clients may send them as protobuf).
fn delete_options(body: Bytes, headers: &HeaderMap) -> ApiResult<Bytes> {
    if body.is_empty() || content_type(headers) != "application/vnd.kubernetes.protobuf" {
        return Ok(body);
    }
    Ok(Bytes::from(
        crate::http::protobuf::decode(&body)?.to_string(),
    ))
}

/// Whether delete options carry preconditions (then a conflict is the client's answer).
fn has_preconditions(body: &Bytes) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|options| {
        options["preconditions"]
            .as_object()
            .is_some_and(|p| p.values().any(|v| !v.is_null()))
    })
}

/// Whether a patch leaves `metadata.resourceVersion` alone (then a conflict is retried).
fn patch_keeps_version(patch: &Value) -> bool {
    match patch {
        Value::Object(map) => map
            .get("metadata")
            .and_then(|m| m.get("resourceVersion"))
            .is_none(),
        Value::Array(ops) => !ops.iter().any(|op| {
            op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/resourceVersion"))
        }),
        _ => true,
    }
}

/// The media type of a request body, without parameters (`""` when absent).
fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
}

/// An object sent to create or replace: JSON, YAML (`application/yaml`), or Kubernetes
/// protobuf for the built-in kinds (kubectl's typed commands send it). Anything else gets
/// 415 with a message saying what to send.
fn parse_body(body: &Bytes, headers: &HeaderMap) -> ApiResult<Value> {
    let value: Value = match content_type(headers) {
        "" | "application/json" | "*/*" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?,
        "application/vnd.kubernetes.protobuf" => crate::http::protobuf::decode(body)?,
        "application/yaml" => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the request body is not UTF-8 YAML"))?;
            serde_saphyr::from_str(text).map_err(|e| {
                ApiError::bad_request(format!("the request body is not valid YAML: {e}"))
            })?
        }
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body's content type {other:?} is not supported: send application/json, application/yaml or application/vnd.kubernetes.protobuf"
            )));
        }
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(value)
}

/// Checks an object's fields against its kind's schema: unknown fields are dropped, and
/// fail the request or become warnings as `fieldValidation` asks; a custom resource is
/// then defaulted and validated (422 Invalid naming every broken rule).
fn admit_fields(
    rt: &ResourceType,
    object: &mut Value,
    old: Option<&Value>,
    query: &Query,
) -> ApiResult<Vec<String>> {
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let unknown = match Schema::for_type(rt) {
        Some(schema) => schema.prune(object),
        None => Vec::new(),
    };
    let warnings = schema::judge(unknown, validation)?;
    if let Some(structural) = Structural::for_type(rt) {
        structural.default(object);
        let mut causes = structural.validate(object);
        if causes.is_empty() {
            causes = structural.rules(object, old);
        }
        if !causes.is_empty() {
            let name = match meta_str(object, "name") {
                "" => meta_str(object, "generateName"),
                name => name,
            };
            return Err(ApiError::invalid(&rt.group, &rt.kind, name, causes));
        }
    }
    Ok(warnings)
}

/// Adds a `Warning: 299 - "…"` header per warning, as the Kubernetes API server does.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let text = format!(
            "299 - \"{}\"",
            warning.replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// The field manager of a write that is not an apply: `fieldManager`, else the client's
/// User-Agent up to its first `/` (as the Kubernetes API server names it).
fn field_manager(query: &Query, headers: &HeaderMap) -> ApiResult<String> {
    if let Some(manager) = query.get("fieldManager") {
        check_manager(manager)?;
        return Ok(manager.to_owned());
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let prefix: String = agent
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(128)
        .collect();
    Ok(match prefix.trim() {
        "" => "unknown".to_owned(),
        name => name.to_owned(),
    })
}

/// A field manager's name: at most 128 printable characters.
fn check_manager(manager: &str) -> ApiResult<()> {
    if manager.chars().count() > 128 {
        return Err(invalid_option(
            "fieldManager",
            "FieldValueTooLong",
            "Too long: may not be more than 128 characters",
        ));
    }
    if manager.chars().any(char::is_control) {
        return Err(invalid_option(
            "fieldManager",
            "FieldValueInvalid",
            "Invalid value: may only contain printable characters",
        ));
    }
    Ok(())
}

/// 422 for a bad write option (`PatchOptions` as Kubernetes names them).
fn invalid_option(field: &str, reason: &str, message: &str) -> ApiError {
    ApiError::invalid(
        "meta.k8s.io",
        "PatchOptions",
        "",
        vec![crate::http::error::Cause {
            reason: reason.into(),
            message: message.into(),
            field: field.into(),
        }],
    )
}

/// An apply configuration: YAML (or JSON, which is YAML too), an object.
fn parse_apply_config(body: &Bytes) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply configuration is not UTF-8"))?;
    // JSON is YAML, and what kubectl, client-go and kube-rs send: read by the JSON parser,
    // several times faster than the YAML one; anything else by the YAML parser.
    let json = text
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten();
    let config: Value = match json {
        Some(config) => config,
        None => serde_saphyr::from_str(text).map_err(|e| {
            ApiError::bad_request(format!("the apply configuration is not valid YAML: {e}"))
        })?,
    };
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Creates `object` at `path` through the API; returns it as stored.
    async fn create(api: &Api, path: &str, object: Value) -> Value {
        let response = api
            .serve(
                Method::POST,
                path,
                None,
                &HeaderMap::new(),
                Bytes::from(object.to_string()),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED, "{path}");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    #[tokio::test]
    async fn the_dependents_of_few_owners_or_of_many_are_those_that_name_them() {
        let store: Arc<dyn Store> = Arc::new(flotilla_store_memory::MemoryStore::new());
        let api = Api::new(store, Arc::new(Registry::builtin()), "127.0.0.1");
        api.bootstrap().await.unwrap();
        let mut uids = Vec::new();
        for i in 0..10 {
            let owner = create(
                &api,
                "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": format!("owner-{i}")}}),
            )
            .await;
            let uid = owner["metadata"]["uid"].as_str().unwrap().to_owned();
            create(
                &api,
                "/api/v1/namespaces/default/configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("dep-{i}"),
                    "ownerReferences": [{"apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "ClusterRole", "name": format!("owner-{i}"), "uid": uid}]}}),
            )
            .await;
            // Names the uid, but not as an owner.
            create(
                &api,
                "/api/v1/namespaces/default/configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("mentions-{i}")}, "data": {"owner": uid}}),
            )
            .await;
            uids.push(uid);
        }
        let names = |found: Vec<(Arc<ResourceType>, Value)>| -> Vec<String> {
            let mut names: Vec<String> = found
                .iter()
                .map(|(_, o)| meta_str(o, "name").to_owned())
                .collect();
            names.sort();
            names
        };
        // One owner: searched for by its uid.
        let one = HashSet::from([uids[3].clone()]);
        assert_eq!(names(api.dependents(&one, None).await.unwrap()), ["dep-3"]);
        // Ten: searched for by the field, then matched exactly.
        let all: HashSet<String> = uids.iter().cloned().collect();
        let expected: Vec<String> = (0..10).map(|i| format!("dep-{i}")).collect();
        assert_eq!(names(api.dependents(&all, None).await.unwrap()), expected);
        // In a namespace without them: none.
        assert!(
            api.dependents(&all, Some("kube-system"))
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_apply_configuration_reads_the_same_as_json_or_as_yaml() {
        let json = Bytes::from_static(
            br#"  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"n": "1", "big": 12345678901234567890}}"#,
        );
        let yaml = Bytes::from_static(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  n: \"1\"\n  big: 12345678901234567890\n",
        );
        assert_eq!(
            parse_apply_config(&json).unwrap(),
            parse_apply_config(&yaml).unwrap()
        );
        // YAML in flow style also starts with a brace, and is not JSON.
        let flow = Bytes::from_static(b"{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}");
        assert_eq!(parse_apply_config(&flow).unwrap()["metadata"]["name"], "a");
        // Neither: a readable error; not an object: refused.
        let broken = parse_apply_config(&Bytes::from_static(b"{\"a\": [}")).unwrap_err();
        assert!(
            broken.status().to_string().contains("not valid YAML"),
            "{}",
            broken.status()
        );
        assert!(parse_apply_config(&Bytes::from_static(b"[1, 2]")).is_err());
    }
}
