//! Auditing: a record of each request, by whom, and how it was answered.

use std::sync::Arc;

use super::UserInfo;

/// When in a request's life an audit record is made (Kubernetes' audit stages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The request was authenticated; nothing else has been decided.
    RequestReceived,
    /// The request was answered (for a watch, when its stream began).
    ResponseComplete,
}

/// One audit record.
#[derive(Clone, Debug)]
pub struct AuditEvent<'a> {
    /// Which record of the request this is.
    pub stage: Stage,
    /// Who authenticated.
    pub user: &'a UserInfo,
    /// Who the request acted as, when impersonating someone else.
    pub impersonated: Option<&'a Arc<UserInfo>>,
    /// The HTTP method.
    pub method: &'a str,
    /// The path, with the query string if any.
    pub path: &'a str,
    /// The query string.
    pub query: Option<&'a str>,
    /// The HTTP status answered (at `ResponseComplete`).
    pub code: Option<u16>,
}

/// Records requests. Called on the request's path, so an implementation must not block:
/// a log writer queues and writes elsewhere.
pub trait Audit: Send + Sync {
    /// Records one stage of one request.
    fn record(&self, event: &AuditEvent<'_>);
}

/// No audit log (today's server).
pub struct NoAudit;

impl Audit for NoAudit {
    fn record(&self, _: &AuditEvent<'_>) {}
}
