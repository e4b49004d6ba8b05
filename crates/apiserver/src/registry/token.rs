//! `serviceaccounts/NAME/token`: a TokenRequest (`authentication.k8s.io/v1`) issues a
//! bound ServiceAccount token; nothing is stored.
//!
//! ```text
//!  POST TokenRequest ─► metadata.name/namespace, if set, are the URL's (else 422)
//!     ─► the ServiceAccount (404 if missing) ─► spec.audiences (default: the API's),
//!        expirationSeconds (default 3600; < 600 or > 2^32 → 422; over the issuer's bound
//!        → shortened, with a warning)
//!     ─► boundObjectRef: a Pod (running as this ServiceAccount, else 400), a Secret or a
//!        Node, which must exist (404), with the uid given if any (else 409); another kind
//!        → 400
//!     ─► Issuer::issue ─► 201 TokenRequest with status.token and expirationTimestamp
//! ```

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::api::Api;
use crate::auth::serviceaccount::{
    DEFAULT_EXPIRATION_SECONDS, Grant, MAX_EXPIRATION_SECONDS, MIN_EXPIRATION_SECONDS, ObjectRef,
};
use crate::http::error::{ApiError, ApiResult, Cause, Reason};
use crate::http::request::parse_body;
use crate::http::response::{json_response, with_warnings};
use crate::http::route::Target;
use crate::registry::object::{self, meta_str};

const GROUP: &str = "authentication.k8s.io";
const KIND: &str = "TokenRequest";

fn invalid(name: &str, field: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(
        GROUP,
        KIND,
        name,
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message: message.into(),
            field: field.into(),
        }],
    )
}

impl Api {
    /// Issues a token for the ServiceAccount `name` of `target`'s namespace.
    pub(crate) async fn token_request(
        &self,
        target: &Target,
        name: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> ApiResult<Response> {
        let issuer = self.service_accounts.clone().ok_or_else(|| {
            ApiError::method_not_allowed("create", "serviceaccounts/token: no token issuer")
        })?;
        let namespace = target.namespace.clone().unwrap_or_default();
        let mut request = parse_body(body, headers)?;
        let body_name = meta_str(&request, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(invalid(
                name,
                "metadata.name",
                "must match the service account name if specified",
            ));
        }
        let body_namespace = meta_str(&request, "namespace");
        if !body_namespace.is_empty() && body_namespace != namespace {
            return Err(invalid(
                name,
                "metadata.namespace",
                "must match the service account namespace if specified",
            ));
        }
        let sa_type = self.resource("", "v1", "serviceaccounts")?;
        let (account, _) = self.get(&sa_type, &namespace, name).await?;
        let spec = &mut request["spec"];
        if !spec.is_object() {
            *spec = json!({});
        }
        let audiences: Vec<String> = match spec["audiences"].as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid(name, "spec.audiences", "must be strings"))?,
            _ => issuer.audiences().to_vec(),
        };
        spec["audiences"] = json!(audiences);
        let mut expiration = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_EXPIRATION_SECONDS,
            value => value
                .as_i64()
                .ok_or_else(|| invalid(name, "spec.expirationSeconds", "must be an integer"))?,
        };
        if expiration < MIN_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                "may not specify a duration less than 10 minutes",
            ));
        }
        if expiration > MAX_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        let mut warnings = Vec::new();
        if let Some(max) = issuer.max_expiration_seconds()
            && expiration > max
        {
            warnings.push(format!(
                "requested expiration of {expiration} seconds shortened to {max} seconds"
            ));
            expiration = max;
        }
        spec["expirationSeconds"] = json!(expiration);

        let mut grant = Grant {
            cluster: self.cluster.to_string(),
            namespace: namespace.clone(),
            service_account: ObjectRef {
                name: name.to_owned(),
                uid: meta_str(&account, "uid").to_owned(),
            },
            audiences,
            expiration_seconds: expiration,
            ..Grant::default()
        };
        if let Some(reference) = spec.get("boundObjectRef").filter(|r| !r.is_null()) {
            self.bind(&mut grant, reference, name, &namespace).await?;
        }

        let now = jiff::Timestamp::now();
        let (token, claims) = issuer
            .issue(&grant, now.as_second())
            .map_err(|e| ApiError::internal(format!("failed to generate token: {e}")))?;
        let expires = jiff::Timestamp::from_second(claims.exp.unwrap_or_default())
            .unwrap_or(now)
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let answer = json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "creationTimestamp": object::now(),
            },
            "spec": request["spec"],
            "status": {"token": token, "expirationTimestamp": expires},
        });
        Ok(with_warnings(
            json_response(StatusCode::CREATED, &answer),
            &warnings,
        ))
    }

    /// Binds `grant` to the object `reference` names, which must exist as it says.
    async fn bind(
        &self,
        grant: &mut Grant,
        reference: &Value,
        account: &str,
        namespace: &str,
    ) -> ApiResult<()> {
        let kind = reference["kind"].as_str().unwrap_or("");
        let api_version = reference["apiVersion"].as_str().unwrap_or("");
        let bound_name = reference["name"].as_str().unwrap_or("");
        let bound_uid = reference["uid"].as_str().unwrap_or("");
        // The core group: apiVersion `v1` (or none).
        let core = !api_version.contains('/');
        let (plural, scoped) = match (core, kind) {
            (true, "Pod") => ("pods", true),
            (true, "Secret") => ("secrets", true),
            (true, "Node") => ("nodes", false),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {api_version}, Kind={kind}"
                )));
            }
        };
        let rt = self.resource("", "v1", plural)?;
        let (object, _) = self
            .get(&rt, if scoped { namespace } else { "" }, bound_name)
            .await?;
        let uid = meta_str(&object, "uid").to_owned();
        if !bound_uid.is_empty() && bound_uid != uid {
            return Err(ApiError::new(
                409,
                Reason::Conflict,
                format!(
                    "Operation cannot be fulfilled on {kind} \"{bound_name}\": the UID in the \
                     bound object reference ({bound_uid}) does not match the UID in record. \
                     The object might have been deleted and then recreated"
                ),
            )
            .on("", kind, bound_name));
        }
        let found = ObjectRef {
            name: bound_name.to_owned(),
            uid,
        };
        match kind {
            "Pod" => {
                if object["spec"]["serviceAccountName"].as_str().unwrap_or("") != account {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount {account:?} to pod running with \
                         different serviceaccount name."
                    )));
                }
                // A Pod on a Node: the token names the Node too (its uid if it exists).
                if let Some(node) = object["spec"]["nodeName"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                {
                    let nodes = self.resource("", "v1", "nodes")?;
                    let uid = match self.get(&nodes, "", node).await {
                        Ok((node, _)) => meta_str(&node, "uid").to_owned(),
                        Err(e) if e.reason == Reason::NotFound => String::new(),
                        Err(e) => return Err(e),
                    };
                    grant.node = Some(ObjectRef {
                        name: node.to_owned(),
                        uid,
                    });
                }
                grant.pod = Some(found);
            }
            "Secret" => grant.secret = Some(found),
            _ => grant.node = Some(found),
        }
        Ok(())
    }
}
