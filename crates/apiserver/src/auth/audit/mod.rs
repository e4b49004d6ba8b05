//! Auditing: a record of each request, by whom, and how it was answered.
//!
//! ```text
//!  Api::handle ─► Audit::enabled? (NoAudit: no; nothing is gathered, no clock is read)
//!     ─► RequestInfo (verb, object reference: from the path, as kube-apiserver's
//!        RequestInfo) ─► Audit::policy(user, info) ─► Level (None: not recorded)
//!     ─► AuditRequest (id, user, times, user agent, source IPs, body), in an Arc shared
//!        by every stage ─► record(RequestReceived) ─► … ─► record(ResponseComplete)
//!        (a streamed answer, a watch: ResponseStarted with the headers, ResponseComplete
//!        when its stream ends)
//! ```
//!
//! [`log::AuditLog`] is the implementation that writes `audit.k8s.io/v1` Events as JSON
//! lines under a [`policy::Policy`].

pub mod log;
pub mod policy;

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, Method, header};
use axum::response::Response;
use bytes::Bytes;

use super::UserInfo;
use crate::http::request::Query;
use crate::http::route::{non_resource_verb, resource_verb};

/// How much of a request is recorded (Kubernetes' audit levels), in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Not recorded.
    None,
    /// Who, what, when and the answer's code; no bodies.
    Metadata,
    /// Metadata and the request's body.
    Request,
    /// Metadata, the request's body and the answer's (not a watch's stream).
    RequestResponse,
}

impl Level {
    /// The level as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }

    /// The level Kubernetes writes as `text`.
    pub fn parse(text: &str) -> Option<Level> {
        [
            Level::None,
            Level::Metadata,
            Level::Request,
            Level::RequestResponse,
        ]
        .into_iter()
        .find(|l| l.as_str() == text)
    }
}

/// When in a request's life an audit record is made (Kubernetes' audit stages; its
/// `Panic` is accepted in a policy and never recorded: a panic here ends the connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The request was authenticated; nothing else has been decided.
    RequestReceived,
    /// A streamed answer's headers were sent (a watch); its body follows.
    ResponseStarted,
    /// The request was answered (a streamed answer: its stream ended).
    ResponseComplete,
}

impl Stage {
    /// The stage as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Stage::RequestReceived => 1,
            Stage::ResponseStarted => 2,
            Stage::ResponseComplete => 4,
        }
    }
}

/// A set of stages (those a policy omits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageSet(u8);

impl StageSet {
    /// No stage.
    pub const EMPTY: StageSet = StageSet(0);

    /// This set with `stage` in it.
    pub fn with(self, stage: Stage) -> StageSet {
        StageSet(self.0 | stage.bit())
    }

    /// Both sets.
    pub fn union(self, other: StageSet) -> StageSet {
        StageSet(self.0 | other.0)
    }

    /// Whether `stage` is in the set.
    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }
}

/// How a request is recorded: a policy's answer for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recording {
    /// How much of it.
    pub level: Level,
    /// The stages not recorded.
    pub omit: StageSet,
}

impl Recording {
    /// Every stage at `level`.
    pub fn at(level: Level) -> Recording {
        Recording {
            level,
            omit: StageSet::EMPTY,
        }
    }
}

/// What a request asks, read from its method, path and query alone, as kube-apiserver's
/// `RequestInfo` reads it (before routing, so a request for something that does not
/// exist has its verb and object reference too). A `/clusters/<name>` prefix (a logical
/// cluster) is not part of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// The Kubernetes verb of a resource request (`get`, `list`, `watch`, `create`,
    /// `update`, `patch`, `delete`, `deletecollection`); the lowercase method otherwise.
    pub verb: &'static str,
    /// Whether the path names objects (`/api/v1/…`, `/apis/{g}/{v}/…`).
    pub resource_request: bool,
    /// The API group (`""` for the core group).
    pub group: String,
    /// The version.
    pub version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, or `""`.
    pub subresource: String,
    /// The namespace (a Namespace's own name for the `namespaces` resource), or `""`.
    pub namespace: String,
    /// The object's name (a list's `metadata.name=` field selector), or `""`.
    pub name: String,
    /// The path without a logical cluster's prefix (what `nonResourceURLs` match).
    pub path: String,
}

impl RequestInfo {
    /// What a request with `method` for `path` and `query` asks.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let path = match path.strip_prefix("/clusters/") {
            Some(rest) => rest.find('/').map_or("/", |slash| &rest[slash..]),
            None => path,
        };
        let non_resource = || RequestInfo {
            verb: non_resource_verb(method),
            path: path.to_owned(),
            ..RequestInfo::default()
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        if parts.len() < 3 {
            return non_resource();
        }
        let (group, rest) = match parts[0] {
            "api" => ("", &parts[1..]),
            "apis" if parts.len() >= 4 => (parts[1], &parts[2..]),
            _ => return non_resource(),
        };
        let (version, mut rest) = (rest[0], &rest[1..]);
        // The legacy `/watch/` prefix.
        let legacy_watch = rest[0] == "watch" && rest.len() > 1;
        if legacy_watch {
            rest = &rest[1..];
        }
        let mut namespace = "";
        if rest[0] == "namespaces" && rest.len() > 1 {
            namespace = rest[1];
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        let part = |i: usize| rest.get(i).copied().unwrap_or("");
        let (resource, mut name, subresource) = (part(0), part(1), part(2));
        let query = Query::parse(query);
        let verb = match legacy_watch {
            true => "watch",
            false => resource_verb(method, !name.is_empty(), query.flag("watch")),
        };
        if name.is_empty() && matches!(verb, "list" | "watch") {
            name = query
                .get("fieldSelector")
                .and_then(exact_name)
                .unwrap_or("");
        }
        RequestInfo {
            verb,
            resource_request: true,
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=web`, `metadata.name==web`
/// among its terms).
fn exact_name(selector: &str) -> Option<&str> {
    selector.split(',').find_map(|term| {
        let value = term.trim().strip_prefix("metadata.name")?;
        let value = value
            .strip_prefix("==")
            .or_else(|| value.strip_prefix('='))?;
        (!value.is_empty() && !value.contains(['/', '%'])).then_some(value)
    })
}

/// What the audit log knows of one request, gathered once (when it is recorded at all)
/// and shared by each of its stages.
#[derive(Debug)]
pub struct AuditRequest {
    /// The request's audit ID, the same in each of its records.
    pub id: String,
    /// How it is recorded.
    pub recording: Recording,
    /// When it was received.
    pub received: jiff::Timestamp,
    /// Who authenticated.
    pub user: Arc<UserInfo>,
    /// The HTTP method.
    pub method: Method,
    /// The path, with the query string if any.
    pub uri: String,
    /// What it asks.
    pub info: RequestInfo,
    /// The `User-Agent` header.
    pub user_agent: Option<String>,
    /// The client's addresses: `X-Forwarded-For`'s, `X-Real-Ip`, then the peer's.
    pub source_ips: Vec<IpAddr>,
    /// The request's body, if it has one, and its content type (read by the log at
    /// Request level and above, and for the name of an object created).
    pub body: Option<(Bytes, String)>,
    /// What admission noted about the request (`annotations` of the events after it
    /// was received), in the order noted; a key keeps its first value.
    pub annotations: Mutex<Vec<(String, String)>>,
}

impl AuditRequest {
    /// Notes `key` = `value`, unless `key` is noted already.
    pub fn annotate(&self, key: String, value: String) {
        let mut annotations = self
            .annotations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !annotations.iter().any(|(k, _)| *k == key) {
            annotations.push((key, value));
        }
    }

    /// The annotations noted so far.
    pub fn annotations(&self) -> Vec<(String, String)> {
        self.annotations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

tokio::task_local! {
    /// The request the task serves, while it is recorded: what admission annotates.
    static RECORDED: Arc<AuditRequest>;
}

/// Runs `served` (a request's handling) with `request` as the one [`annotate`] notes on.
pub(crate) async fn recording<F: Future>(
    request: Option<Arc<AuditRequest>>,
    served: F,
) -> F::Output {
    match request {
        Some(request) => RECORDED.scope(request, served).await,
        None => served.await,
    }
}

/// Notes an annotation on the audit events of the request being served (Kubernetes'
/// `AddAnnotation` of admission: policies' audit annotations and validation failures,
/// webhooks' annotations and mutations); nothing when it is not recorded.
pub fn annotate(key: String, value: String) {
    let _ = RECORDED.try_with(|request| request.annotate(key, value));
}

/// Annotations a handler gives the audit event of its answer (an extension of the
/// response, taken off it by the audit log): why a request was refused, for one.
#[derive(Clone, Debug, Default)]
pub struct Annotations(pub Vec<(&'static str, String)>);

/// The annotation of a request refused for its credentials: why (what the client is
/// not told).
pub const AUTHENTICATION_FAILURE: &str = "authentication.flotilla.io/failure-reason";

/// Starts the record of a request, if `audit` records it: decides its level, gathers
/// what each of its stages shares, and records `RequestReceived`. `None`: it is not
/// recorded (and for [`NoAudit`] nothing at all was done).
#[allow(clippy::too_many_arguments)]
pub(crate) fn begin(
    audit: &dyn Audit,
    peer: Option<IpAddr>,
    user: &Arc<UserInfo>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Arc<AuditRequest>> {
    let request = Arc::new(gather(
        audit, peer, user, method, path, query, headers, body,
    )?);
    let recording = request.recording;
    if !recording.omit.contains(Stage::RequestReceived) {
        audit.record(AuditEvent {
            stage: Stage::RequestReceived,
            request: request.clone(),
            impersonated: None,
            at: request.received,
            code: None,
            response: None,
            annotations: Vec::new(),
        });
    }
    Some(request)
}

/// What the audit log knows of a request, if `audit` records it at all.
#[allow(clippy::too_many_arguments)]
fn gather(
    audit: &dyn Audit,
    peer: Option<IpAddr>,
    user: &Arc<UserInfo>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<AuditRequest> {
    if !audit.enabled() {
        return None;
    }
    let info = RequestInfo::parse(method, path, query);
    let recording = audit.policy(user, &info);
    if recording.level == Level::None {
        return None;
    }
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let media_type = text(header::CONTENT_TYPE)
        .and_then(|t| t.split(';').next())
        .unwrap_or("")
        .trim();
    Some(AuditRequest {
        id: crate::registry::object::new_uid(),
        recording,
        received: jiff::Timestamp::now(),
        user: user.clone(),
        method: method.clone(),
        uri: match query {
            Some(query) => format!("{path}?{query}"),
            None => path.to_owned(),
        },
        info,
        user_agent: text(header::USER_AGENT).map(str::to_owned),
        source_ips: source_ips(headers, peer),
        body: (!body.is_empty()).then(|| (body.clone(), media_type.to_owned())),
        annotations: Mutex::default(),
    })
}

/// Records a request refused at the edge for its credentials, as kube-apiserver records
/// one: a `ResponseStarted` event with code 401 and no user (the policy decides on an
/// empty one), and why it was refused as the [`AUTHENTICATION_FAILURE`] annotation.
/// `answer` is the 401's body (its `Status`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn unauthenticated(
    audit: &dyn Audit,
    peer: Option<IpAddr>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    reason: &str,
    answer: Bytes,
) {
    let nobody = Arc::new(UserInfo::default());
    let Some(request) = gather(
        audit,
        peer,
        &nobody,
        method,
        path,
        query,
        headers,
        &Bytes::new(),
    ) else {
        return;
    };
    if request.recording.omit.contains(Stage::ResponseStarted) {
        return;
    }
    audit.record(AuditEvent {
        stage: Stage::ResponseStarted,
        at: jiff::Timestamp::now(),
        request: Arc::new(request),
        impersonated: None,
        code: Some(401),
        response: Some(answer),
        annotations: vec![(AUTHENTICATION_FAILURE.to_owned(), reason.to_owned())],
    });
}

/// Records the answer to a request [`begin`] started. A streamed answer (a watch) is
/// recorded as `ResponseStarted` now and `ResponseComplete` when its stream ends; any
/// other as `ResponseComplete`, with its body when it is JSON and the level is
/// RequestResponse or the request failed (its `Status`: reason and message).
pub(crate) async fn answered(
    audit: &Arc<dyn Audit>,
    request: Arc<AuditRequest>,
    impersonated: Option<Arc<UserInfo>>,
    mut response: Response,
) -> Response {
    let code = response.status().as_u16();
    let mut annotations = request.annotations();
    let answer = response.extensions_mut().remove::<Annotations>();
    annotations.extend(
        answer
            .unwrap_or_default()
            .0
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value)),
    );
    let omit = request.recording.omit;
    let level = request.recording.level;
    let event = |stage, response| AuditEvent {
        stage,
        request: request.clone(),
        impersonated: impersonated.clone(),
        at: jiff::Timestamp::now(),
        code: Some(code),
        response,
        annotations: annotations.clone(),
    };
    let streamed = hyper::body::Body::size_hint(response.body())
        .exact()
        .is_none();
    if streamed {
        if !omit.contains(Stage::ResponseStarted) {
            audit.record(event(Stage::ResponseStarted, None));
        }
        if omit.contains(Stage::ResponseComplete) {
            return response;
        }
        let complete = event(Stage::ResponseComplete, None);
        let audit = audit.clone();
        return response.map(|body| {
            Body::new(Recorded {
                body,
                audit,
                complete: Some(complete),
            })
        });
    }
    if omit.contains(Stage::ResponseComplete) {
        return response;
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json || (level < Level::RequestResponse && code < 400) {
        audit.record(event(Stage::ResponseComplete, None));
        return response;
    }
    // The whole body is in memory already (its size is known): taking it waits for
    // nothing.
    let (parts, body) = response.into_parts();
    let (body, kept) = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => (Body::from(bytes.clone()), Some(bytes)),
        Err(e) => {
            tracing::warn!(error = %e, "an answer's body could not be read for the audit log");
            (Body::empty(), None)
        }
    };
    audit.record(event(Stage::ResponseComplete, kept));
    Response::from_parts(parts, body)
}

/// A streamed answer's body, recording `ResponseComplete` when it is dropped: when the
/// stream has ended and been sent, or the client went away.
struct Recorded {
    body: Body,
    audit: Arc<dyn Audit>,
    complete: Option<AuditEvent>,
}

impl hyper::body::Body for Recorded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        hyper::body::Body::poll_frame(Pin::new(&mut self.get_mut().body), cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if let Some(mut complete) = self.complete.take() {
            complete.at = jiff::Timestamp::now();
            self.audit.record(complete);
        }
    }
}

/// A request's source addresses as kube-apiserver lists them: those of
/// `X-Forwarded-For`, then `X-Real-Ip`, then the peer's, each once.
pub fn source_ips(headers: &HeaderMap, peer: Option<IpAddr>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let forwarded = text("x-forwarded-for")
        .into_iter()
        .flat_map(|v| v.split(','));
    let real = text("x-real-ip");
    for ip in forwarded.chain(real) {
        if let Ok(ip) = ip.trim().parse()
            && !ips.contains(&ip)
        {
            ips.push(ip);
        }
    }
    if let Some(peer) = peer
        && !ips.contains(&peer)
    {
        ips.push(peer);
    }
    ips
}

/// One record of one request.
#[derive(Clone, Debug)]
pub struct AuditEvent {
    /// Which record of the request this is.
    pub stage: Stage,
    /// The request.
    pub request: Arc<AuditRequest>,
    /// Who the request acted as, when impersonating someone else (known after
    /// `RequestReceived`).
    pub impersonated: Option<Arc<UserInfo>>,
    /// When this record was made.
    pub at: jiff::Timestamp,
    /// The HTTP status answered (after `RequestReceived`).
    pub code: Option<u16>,
    /// The answer's body, when it is JSON and was kept: at level RequestResponse (not a
    /// stream), and for a failure (its `Status`).
    pub response: Option<Bytes>,
    /// The event's `annotations`: what admission noted about the request (none when it
    /// was received), and such as why a request's credentials were refused.
    pub annotations: Vec<(String, String)>,
}

/// Records requests. Called on the request's path, so an implementation must not block:
/// a log writer queues and writes elsewhere.
pub trait Audit: Send + Sync {
    /// Whether requests are recorded at all; when not, nothing is gathered for them.
    fn enabled(&self) -> bool {
        true
    }

    /// How a request of `user` that asks `info` is recorded (its policy's level and
    /// stages); decided once, when it is received. Every stage at Metadata by default.
    fn policy(&self, user: &UserInfo, info: &RequestInfo) -> Recording {
        let _ = (user, info);
        Recording::at(Level::Metadata)
    }

    /// Records one stage of one request.
    fn record(&self, event: AuditEvent);
}

/// No audit log (the default).
pub struct NoAudit;

impl Audit for NoAudit {
    fn enabled(&self) -> bool {
        false
    }

    fn policy(&self, _: &UserInfo, _: &RequestInfo) -> Recording {
        Recording::at(Level::None)
    }

    fn record(&self, _: AuditEvent) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, path: &str, query: Option<&str>) -> String {
        let i = RequestInfo::parse(&method, path, query);
        if !i.resource_request {
            return format!("{} {}", i.verb, i.path);
        }
        format!(
            "{} {}/{}/{} sub={} ns={} name={}",
            i.verb, i.group, i.version, i.resource, i.subresource, i.namespace, i.name
        )
    }

    #[test]
    fn a_request_is_read_from_its_path_as_kubernetes_reads_it() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps/a",
                None,
                "get /v1/configmaps sub= ns=default name=a",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/default/configmaps",
                None,
                "list /v1/configmaps sub= ns=default name=",
            ),
            (
                Method::GET,
                "/api/v1/configmaps",
                Some("watch=true"),
                "watch /v1/configmaps sub= ns= name=",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/d/configmaps",
                Some("fieldSelector=metadata.name%3Dweb"),
                "list /v1/configmaps sub= ns=d name=web",
            ),
            (
                Method::GET,
                "/api/v1/watch/namespaces/d/pods",
                None,
                "watch /v1/pods sub= ns=d name=",
            ),
            (
                Method::POST,
                "/api/v1/namespaces",
                None,
                "create /v1/namespaces sub= ns= name=",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/web",
                None,
                "delete /v1/namespaces sub= ns=web name=web",
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/web/finalize",
                None,
                "update /v1/namespaces sub=finalize ns=web name=web",
            ),
            (
                Method::PATCH,
                "/apis/apps/v1/namespaces/web/deployments/front/scale",
                None,
                "patch apps/v1/deployments sub=scale ns=web name=front",
            ),
            (
                Method::DELETE,
                "/apis/apps/v1/namespaces/web/deployments",
                None,
                "deletecollection apps/v1/deployments sub= ns=web name=",
            ),
            (
                Method::GET,
                "/clusters/team/api/v1/nodes/n1",
                None,
                "get /v1/nodes sub= ns= name=n1",
            ),
            (Method::GET, "/apis/apps/v1", None, "get /apis/apps/v1"),
            (Method::GET, "/api/v1", None, "get /api/v1"),
            (Method::GET, "/version", None, "get /version"),
            (
                Method::POST,
                "/clusters/team/openapi/v3",
                None,
                "post /openapi/v3",
            ),
        ];
        for (method, path, query, expected) in cases {
            assert_eq!(info(method, path, query), expected, "{path}");
        }
    }

    #[test]
    fn source_ips_are_the_forwarded_then_the_peer_each_once() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", "10.0.0.1, 10.0.0.2".parse().unwrap());
        headers.insert("x-real-ip", "10.0.0.2".parse().unwrap());
        let peer = "127.0.0.1".parse().ok();
        let ips: Vec<String> = source_ips(&headers, peer)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ips, ["10.0.0.1", "10.0.0.2", "127.0.0.1"]);
        assert!(source_ips(&HeaderMap::new(), None).is_empty());
    }

    #[test]
    fn stage_sets_and_levels() {
        let set = StageSet::EMPTY.with(Stage::RequestReceived);
        assert!(set.contains(Stage::RequestReceived));
        assert!(!set.contains(Stage::ResponseComplete));
        assert!(
            set.union(StageSet::EMPTY.with(Stage::ResponseComplete))
                .contains(Stage::ResponseComplete)
        );
        assert!(Level::Request > Level::Metadata && Level::None < Level::Metadata);
        assert_eq!(
            Level::parse("RequestResponse"),
            Some(Level::RequestResponse)
        );
        assert_eq!(Level::parse("request"), None);
    }
}
