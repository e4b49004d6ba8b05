//! Impersonation: acting as another user (`Impersonate-User`, `Impersonate-Group`, …).

use std::sync::Arc;

use crate::api::Verdict;
use axum::http::HeaderMap;

use super::{Authorizer, UserInfo};
use crate::http::error::ApiResult;

/// Turns the authenticated user into the one the request acts as. An implementation that
/// honours the headers asks `authorizer` whether the user may impersonate (verb
/// `impersonate` on users, groups, …) and refuses with 403 otherwise.
pub trait Impersonation: Send + Sync {
    /// The user the request acts as.
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        headers: &'a HeaderMap,
        authorizer: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>>;
}

/// Impersonation headers are not read: every request acts as its authenticated user
/// (today's server, which has one user).
pub struct IgnoreHeaders;

impl Impersonation for IgnoreHeaders {
    fn impersonate<'a>(
        &'a self,
        user: Arc<UserInfo>,
        _: &'a HeaderMap,
        _: &'a dyn Authorizer,
    ) -> Verdict<'a, ApiResult<Arc<UserInfo>>> {
        Verdict::Now(Ok(user))
    }
}
