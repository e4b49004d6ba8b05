//! Serving one request: the verb on a route, through the registry, shaped as the client
//! asked (object, Table, metadata alone).

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::discovery;
use crate::discovery::table;
use crate::http::error::{ApiError, ApiResult};
use crate::registry::keys;
use crate::registry::object::{self, MAX_REQUEST_BYTES, meta_str};
use crate::registry::resources::ResourceType;

use crate::api::Api;
use crate::http::negotiate::{self, Shape};
use crate::http::request::{Query, delete_options, field_manager, parse_body};
use crate::http::response::{json_bytes_response, json_response, with_warnings};
use crate::http::route::Route;
use crate::registry::store::{
    FieldOwner, Unreadable, conflicted, retrying, stored_with_version, unreadable_error,
};

impl Api {
    pub(crate) async fn dispatch(
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
            Route::OpenIdConfiguration | Route::Jwks => {
                let issuer = self
                    .service_accounts
                    .as_ref()
                    .ok_or_else(|| ApiError::no_route("the ServiceAccount issuer"))?;
                let (document, content_type) = match route {
                    Route::Jwks => (issuer.jwks(), "application/jwk-set+json"),
                    _ => (issuer.discovery(), "application/json"),
                };
                let mut response = json_response(StatusCode::OK, &document);
                let headers = response.headers_mut();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
                // As kube-apiserver: the documents change only with the key.
                headers.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=3600"),
                );
                return Ok(response);
            }
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
            let verb = target.verb(&method, query);
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
        if target.sub.as_deref() == Some("token")
            && let Some(name) = &target.name
        {
            return match method {
                Method::POST => self.token_request(&target, name, headers, &body).await,
                _ => Err(ApiError::method_not_allowed(
                    method.as_str(),
                    "serviceaccounts/token",
                )),
            };
        }
        let shape = match method {
            Method::GET => negotiate::shape(accept),
            _ => Shape::Object,
        };
        match (method, target.name.clone()) {
            (Method::GET, None) if query.flag("watch") => self.watch(&target, query, shape).await,
            (Method::GET, None) if shape == Shape::Table => {
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
            (Method::GET, None) if let Shape::Metadata(api_version) = shape => {
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
                if shape == Shape::Table {
                    let object: Value = serde_json::from_slice(&object).map_err(|e| {
                        ApiError::internal(format!("a stored object is not JSON: {e}"))
                    })?;
                    let rv = revision.get().to_string();
                    return Ok(json_response(
                        StatusCode::OK,
                        &self.table(rt, &[object], &rv, query),
                    ));
                }
                if let Shape::Metadata(api_version) = shape {
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
                let raced = |e: &ApiError| unconditional && conflicted(e);
                let (target, name, object, manager) = (&target, &name, &object, &manager);
                let (object, created, warnings) = retrying(raced, || async move {
                    let owner = FieldOwner::Update(manager);
                    self.update(target, name, query, object.clone(), owner)
                        .await
                })
                .await?;
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

    /// A Table of `objects` of `rt` (`includeObject` as the query asks).
    pub(crate) fn table(
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
}
