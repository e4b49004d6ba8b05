//! The REST API: Kubernetes paths, verbs and their semantics over the store.
//!
//! ```text
//!  /api, /apis, /apis/{g}, /api/v1, /apis/{g}/{v}      discovery (aggregated or legacy)
//!  /version                                            the Kubernetes version emulated
//!  /api/v1/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]  objects of the core group
//!  /apis/{g}/{v}/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]
//! ```

use std::collections::HashMap;
use std::future::{IntoFuture, Ready};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use flotilla_store::{ListOptions, Store};
use futures_util::future::{BoxFuture, Either};
use serde_json::{Value, json};

use crate::admission::Admission;
use crate::auth::rbac::Rbac;
use crate::auth::{Attributes, Decision, Stages, UserInfo, audit};
use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult, Reason};
use crate::registry::crd;
use crate::registry::keys;
use crate::registry::object::{self, meta_str};
use crate::registry::resources::{Registry, ResourceType};
use crate::registry::tenancy;
use crate::watch::cache::{self as watchcache, WatchCache};

use crate::gc::collector::{Cleanup, Collector};
use crate::http::request::Query;
use crate::http::route::Target;
use crate::registry::store::Unreadable;
use crate::watch::serve;

/// What a stage of the pipeline answers: at once (an in-process decision, no allocation),
/// or later (a webhook, a remote key set). Awaited like a future either way.
pub enum Verdict<'a, T> {
    /// The answer, known now.
    Now(T),
    /// The answer, once this future completes.
    Later(BoxFuture<'a, T>),
}

impl<'a, T: 'a> IntoFuture for Verdict<'a, T> {
    type Output = T;
    type IntoFuture = Either<Ready<T>, BoxFuture<'a, T>>;

    fn into_future(self) -> Self::IntoFuture {
        match self {
            Verdict::Now(value) => Either::Left(std::future::ready(value)),
            Verdict::Later(future) => Either::Right(future),
        }
    }
}

/// The logical cluster the root API serves.
pub const ROOT_CLUSTER: &str = "root";

/// The namespaces that exist from the start.
pub const INITIAL_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Serves the Kubernetes API of one logical cluster over a store.
#[derive(Clone)]
pub struct Api {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) cluster: Arc<str>,
    /// The address clients reach the server at, for legacy discovery.
    pub(crate) address: Arc<str>,
    /// How often a watch that allows bookmarks gets one.
    pub(crate) bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` lasts this × [1, 2) (see `watch::lifetime`).
    pub(crate) min_request_timeout: Duration,
    /// The OpenAPI documents of the registry's current generation.
    pub(crate) openapi: Arc<openapi::Cache>,
    /// Every client watch is served from here, over one store watch.
    pub(crate) watch_cache: Arc<WatchCache>,
    /// Owners whose dependents are to be deleted (Background propagation).
    pub(crate) collector: Arc<Collector>,
    /// The views of the logical clusters served so far (shared by every view).
    pub(crate) logical: Arc<tokio::sync::Mutex<HashMap<String, Api>>>,
    /// Audit, impersonation and authorization (authentication is the HTTP edge's).
    pub(crate) stages: Arc<Stages>,
    /// What every write passes before it is stored.
    pub(crate) admission: Arc<Admission>,
    /// The RBAC authorizer, when requests are authorized by it: its default roles are
    /// created in each logical cluster, and writes of roles and bindings wait for it.
    pub(crate) rbac: Option<Arc<Rbac>>,
    /// Service cluster IPs, of every logical cluster (the service range's allocator).
    pub(crate) cluster_ips: Arc<crate::registry::services::ClusterIps>,
    /// Service node ports, of every logical cluster (the node port range's allocator).
    pub(crate) node_ports: Arc<crate::registry::services::NodePorts>,
    /// The ServiceAccount token issuer (TokenRequests, the issuer's discovery documents);
    /// none: neither is served.
    pub(crate) service_accounts: Option<Arc<crate::auth::serviceaccount::Issuer>>,
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
            min_request_timeout: serve::MIN_REQUEST_TIMEOUT,
            openapi: Arc::default(),
            watch_cache: Arc::new(WatchCache::new(store, watchcache::Config::default())),
            collector: Arc::default(),
            logical: Arc::default(),
            stages: Arc::default(),
            admission: Arc::default(),
            rbac: None,
            service_accounts: None,
            cluster_ips: Arc::default(),
            node_ports: Arc::default(),
        }
    }

    /// Allocates Services' cluster IPs from `cidr` (by default
    /// [`crate::registry::services::DEFAULT_SERVICE_CIDR`], as kube-apiserver's), in this
    /// API and every clone of it (set it before Services are written).
    pub fn with_service_cidr(self, cidr: crate::registry::services::ServiceCidr) -> Self {
        self.cluster_ips.set_cidr(cidr);
        self
    }

    /// Allocates NodePort and LoadBalancer Services' node ports from `range` (by default
    /// [`crate::registry::services::DEFAULT_NODE_PORT_RANGE`], as kube-apiserver's), in
    /// this API and every clone of it (set it before Services are written).
    pub fn with_node_port_range(self, range: crate::registry::services::NodePortRange) -> Self {
        self.node_ports.set_range(range);
        self
    }

    /// Issues ServiceAccount tokens with `issuer` (`serviceaccounts/token`) and serves
    /// its discovery documents (`/.well-known/openid-configuration`, `/openid/v1/jwks`).
    pub fn with_service_account_issuer(
        mut self,
        issuer: Arc<crate::auth::serviceaccount::Issuer>,
    ) -> Self {
        self.service_accounts = Some(issuer);
        self
    }

    /// Runs requests through these stages (by default: no audit log, impersonation
    /// headers ignored, every request allowed).
    pub fn with_stages(mut self, stages: Stages) -> Self {
        self.stages = Arc::new(stages);
        self
    }

    /// The stages requests run through.
    pub fn stages(&self) -> &Stages {
        &self.stages
    }

    /// Authorizes requests as kube-apiserver with `--authorization-mode=RBAC` does:
    /// `system:masters` may do everything, anyone else what `rbac`'s roles and bindings
    /// allow; impersonation headers are honoured ([`crate::auth::impersonation::Headers`]).
    /// The audit stage is kept. Run [`Api::bootstrap_rbac`] next.
    pub fn authorize_with_rbac(mut self, rbac: Arc<Rbac>) -> Self {
        use crate::auth::{MASTERS, PrivilegedGroup, Union, impersonation::Headers};
        self.stages = Arc::new(Stages {
            audit: self.stages.audit.clone(),
            impersonation: Arc::new(Headers),
            authorizer: Arc::new(Union::new(vec![
                Arc::new(PrivilegedGroup(MASTERS.to_owned())),
                rbac.clone(),
            ])),
        });
        self.rbac = Some(rbac);
        self
    }

    /// Creates or reconciles the default roles and bindings in this logical cluster (a
    /// logical cluster's view does so when it starts) and fills its aggregated
    /// ClusterRoles; in the root cluster, also starts the controller that keeps them
    /// filled. Nothing without RBAC.
    pub async fn bootstrap_rbac(&self) -> ApiResult<()> {
        let Some(rbac) = &self.rbac else {
            return Ok(());
        };
        let client = crate::client::Client::new(self.clone());
        // Boxed: its requests may start a logical cluster's view, whose bootstrap is this.
        Box::pin(crate::auth::rbac::bootstrap::reconcile(
            &client,
            &self.cluster,
            rbac.bootstrap(),
        ))
        .await?;
        Box::pin(crate::auth::rbac::aggregation::fill(
            rbac,
            &client,
            &self.cluster,
        ))
        .await?;
        if &*self.cluster == ROOT_CLUSTER {
            rbac.aggregate_through(self);
        }
        Ok(())
    }

    /// The authorizer requests are authorized by (for admission plugins that ask it
    /// about other objects: build them after [`Api::with_stages`] or
    /// [`Api::authorize_with_rbac`]).
    pub fn authorizer(&self) -> Arc<dyn crate::auth::Authorizer> {
        self.stages.authorizer.clone()
    }

    /// Admits writes through this chain (by default [`Admission::builtin`]).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = Arc::new(admission);
        self
    }

    /// The API of logical cluster `name`, if a `LogicalCluster` of that name exists in the
    /// root cluster: its own registry, OpenAPI documents and garbage collector over the
    /// shared store and watch cache.
    pub(crate) async fn logical_cluster(&self, name: &str) -> ApiResult<Api> {
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

    /// The logical cluster this API serves ([`ROOT_CLUSTER`] for the root).
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The resource types served in this logical cluster.
    pub fn registry(&self) -> &Registry {
        &self.registry
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
        if &*self.cluster == ROOT_CLUSTER {
            // What other servers on the store (hub replicas) define is served here too.
            crd::follow(self);
        }
        if &*self.cluster == ROOT_CLUSTER
            && self
                .registry
                .get(tenancy::GROUP, tenancy::VERSION, tenancy::PLURAL)
                .is_none()
        {
            let body = Bytes::from(tenancy::definition().to_string());
            let target = Target {
                user: UserInfo::loopback(),
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
        self.bootstrap_rbac().await
    }

    pub(crate) fn resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> ApiResult<Arc<ResourceType>> {
        self.registry
            .get(group, version, plural)
            .ok_or_else(|| ApiError::no_route(&format!("{group}/{version}/{plural}")))
    }

    /// Serves one request made from inside the process (the hub's controllers, the
    /// simulator, the CRD installer): it runs as the server itself
    /// ([`UserInfo::loopback`]) through every stage after authentication.
    pub async fn serve(
        &self,
        method: Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response {
        self.handle(UserInfo::loopback(), method, path, query, headers, body)
            .await
    }

    /// Serves one request of `user`, whom the HTTP edge authenticated: audited,
    /// impersonation applied, authorized, then routed to discovery or the registry (where
    /// admission runs on writes).
    pub async fn handle(
        &self,
        user: Arc<UserInfo>,
        method: Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response {
        self.handle_from(None, user, method, path, query, headers, body)
            .await
    }

    /// [`Api::handle`] of a request from `peer` (the client's address, for the audit
    /// log's `sourceIPs`).
    #[allow(clippy::too_many_arguments)]
    pub async fn handle_from(
        &self,
        peer: Option<IpAddr>,
        user: Arc<UserInfo>,
        method: Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response {
        let stages = &*self.stages;
        let audited = audit::begin(
            &*stages.audit,
            peer,
            &user,
            &method,
            path,
            query,
            headers,
            &body,
        );
        let served = async {
            match self.acting_as(user.clone(), path, headers).await {
                Ok(acting) => {
                    let response = self
                        .serve_as(&acting, method, path, query, headers, body)
                        .await;
                    (response, Some(acting))
                }
                Err(e) => (e.into_response(), None),
            }
        };
        let (response, acting) = audit::recording(audited.clone(), served).await;
        let Some(audited) = audited else {
            return response;
        };
        let impersonated = acting.filter(|a| !Arc::ptr_eq(a, &user));
        audit::answered(&stages.audit, audited, impersonated, response).await
    }

    /// The user a request of `user` for `path` with `headers` acts as: itself, or whom
    /// its impersonation headers name if it may impersonate them (in the logical cluster
    /// the path names); 403 if it may not.
    pub async fn acting_as(
        &self,
        user: Arc<UserInfo>,
        path: &str,
        headers: &HeaderMap,
    ) -> ApiResult<Arc<UserInfo>> {
        let cluster = match path.strip_prefix("/clusters/") {
            Some(rest) if &*self.cluster == ROOT_CLUSTER => rest.split('/').next().unwrap_or(""),
            _ => &self.cluster,
        };
        let stages = &*self.stages;
        stages
            .impersonation
            .impersonate(user, cluster, headers, &*stages.authorizer)
            .await
    }

    /// Whether `attributes` are allowed: `Ok`, or the 403 to answer.
    pub async fn authorize(&self, attributes: &Attributes<'_>) -> ApiResult<()> {
        match self.stages.authorizer.authorize(attributes).await {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(attributes.forbidden(&reason)),
            Decision::NoOpinion => Err(attributes.forbidden("")),
        }
    }

    /// A request of `user`, in this logical cluster or the one its path names.
    async fn serve_as(
        &self,
        user: &Arc<UserInfo>,
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
                    let rest = format!("/{rest}");
                    Box::pin(view.serve_as(user, method, &rest, query, headers, body)).await
                }
                Err(e) => e.into_response(),
            };
        }
        // A credential issued in one logical cluster (a ServiceAccount token) is valid
        // there alone.
        if let Some(bound) = user
            .extra
            .get(crate::auth::serviceaccount::CLUSTER_EXTRA)
            .and_then(|clusters| clusters.first())
            && bound.as_str() != &*self.cluster
        {
            let refusal = crate::auth::Refusal::Cluster {
                bound: bound.clone(),
                requested: self.cluster.to_string(),
            };
            tracing::info!(user = %user.name, reason = %refusal, "credentials refused");
            let mut response = ApiError::unauthorized().into_response();
            response.extensions_mut().insert(audit::Annotations(vec![(
                audit::AUTHENTICATION_FAILURE,
                refusal.to_string(),
            )]));
            return response;
        }
        let query = Query::parse(query);
        let served = async {
            let route = self.route(path, user)?;
            self.authorize(&route.attributes(&self.cluster, user, &method, path, &query))
                .await?;
            self.dispatch(method, route, &query, headers, body).await
        };
        served.await.unwrap_or_else(IntoResponse::into_response)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use axum::http::StatusCode;

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
}
