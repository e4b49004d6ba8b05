//! Routing: what a request path names (discovery, OpenAPI, /version, or objects of a resource).

use std::sync::Arc;

use crate::http::error::{ApiError, ApiResult};
use crate::registry::resources::ResourceType;

use crate::api::Api;
use axum::http::Method;

use crate::auth::{Attributes, UserInfo};
use crate::http::request::Query;

/// What a path names.
pub(crate) enum Route {
    Version,
    /// `/.well-known/openid-configuration` of the ServiceAccount issuer.
    OpenIdConfiguration,
    /// `/openid/v1/jwks`: the issuer's keys.
    Jwks,
    OpenApiIndex,
    OpenApiV2,
    OpenApiDocument(String),
    CoreGroups,
    Groups,
    Group(String),
    Resources(String, String),
    Objects(Target),
}

/// The objects a path names, and who asks for them.
pub(crate) struct Target {
    /// The user the request runs as.
    pub(crate) user: Arc<UserInfo>,
    pub(crate) rt: Arc<ResourceType>,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) sub: Option<String>,
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

impl Api {
    pub(crate) fn route(&self, path: &str, user: &Arc<UserInfo>) -> ApiResult<Route> {
        let mut buffer = [""; 10];
        let segments = segments(path, &mut buffer);
        let not_found = || ApiError::no_route(path);
        let (group, version, rest): (&str, &str, &[&str]) = match &*segments {
            ["version"] => return Ok(Route::Version),
            [".well-known", "openid-configuration"] => return Ok(Route::OpenIdConfiguration),
            ["openid", "v1", "jwks"] => return Ok(Route::Jwks),
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
            user: user.clone(),
            rt,
            namespace,
            name: name.map(str::to_owned),
            sub: sub.map(str::to_owned),
        }))
    }
}

impl Target {
    /// The verb a request with `method` is on these objects, as authorization and
    /// discovery name verbs (`""` for a method no verb stands for).
    pub(crate) fn verb(&self, method: &Method, query: &Query) -> &'static str {
        resource_verb(method, self.name.is_some(), query.flag("watch"))
    }
}

/// The Kubernetes verb of a request with `method` for one object (`named`) or a
/// collection, `watch` when its query asks for a watch; `""` for a method no verb stands
/// for. Authorization and the audit log name requests by it.
pub(crate) fn resource_verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        (&Method::GET | &Method::HEAD, true) => "get",
        (&Method::GET | &Method::HEAD, false) if watch => "watch",
        (&Method::GET | &Method::HEAD, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "",
    }
}

impl Route {
    /// What a request of `user` in logical cluster `cluster` for this route asks, for
    /// authorization. A list or watch whose field selector requires one `metadata.name`
    /// names that object, as kube-apiserver's `RequestInfo` reads it (so a rule limited to
    /// `resourceNames` allows watching the object it names).
    pub(crate) fn attributes<'a>(
        &'a self,
        cluster: &'a str,
        user: &'a UserInfo,
        method: &'a Method,
        path: &'a str,
        query: &'a Query,
    ) -> Attributes<'a> {
        match self {
            Route::Objects(target) => {
                let verb = target.verb(method, query);
                let name = match target.name.as_deref() {
                    Some(name) => name,
                    None if matches!(verb, "list" | "watch") => query
                        .get("fieldSelector")
                        .and_then(exact_name)
                        .unwrap_or(""),
                    None => "",
                };
                Attributes {
                    cluster,
                    user,
                    verb,
                    resource_request: true,
                    group: &target.rt.group,
                    version: &target.rt.version,
                    resource: &target.rt.plural,
                    subresource: target.sub.as_deref().unwrap_or(""),
                    namespace: target.namespace.as_deref().unwrap_or(""),
                    name,
                    path,
                }
            }
            _ => Attributes::path(cluster, user, non_resource_verb(method), path),
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=web`, or `==`), if it has
/// one such term and no other term on the name; a name that cannot be a path segment is
/// none.
fn exact_name(selector: &str) -> Option<&str> {
    let mut found = None;
    for term in selector.split(',') {
        let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) else {
            continue;
        };
        if field.trim() != "metadata.name" {
            continue;
        }
        if found.is_some() {
            return None;
        }
        found = Some(value.trim());
    }
    found.filter(|name| {
        !name.is_empty() && !matches!(*name, "." | "..") && !name.contains(['/', '%'])
    })
}

/// The verb of a request for a path that names no objects: the lowercase method.
pub(crate) fn non_resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "",
    }
}
