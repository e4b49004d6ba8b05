//! Routing: what a request path names (discovery, OpenAPI, /version, or objects of a resource).

use std::sync::Arc;

use crate::http::error::{ApiError, ApiResult};
use crate::registry::resources::ResourceType;

use crate::api::Api;

/// What a path names.
pub(crate) enum Route {
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

/// The objects a path names.
pub(crate) struct Target {
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
    pub(crate) fn route(&self, path: &str) -> ApiResult<Route> {
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
}
