//! CertificateSigningRequests (`certificates.k8s.io/v1`): what a create, an update, the
//! `status` and the `approval` subresources may write, as kube-apiserver's strategies.
//!
//! ```text
//!  create    spec.username/uid/groups/extra := the requesting user's (never the client's)
//!            spec.request: one PEM CERTIFICATE REQUEST whose signature verifies
//!            spec.signerName: required, a signer this hub knows (kube-apiserver-client)
//!            spec.usages: required, known, no duplicates; spec.expirationSeconds ≥ 600
//!            status: none                                 (any refusal: 422, nothing written)
//!  update    spec and status kept as stored
//!  approval  only the Approved/Denied conditions change (others kept as stored)
//!  status    everything but the Approved/Denied conditions; a certificate once set stays
//!  every write: conditions have a type and status True/False/Unknown (default True), at
//!            most one each of Approved, Denied, Failed; Approved and Denied never together;
//!            an Approved or Denied condition is never removed; times filled in
//!  approval  also needs verb `approve` on `signers` (certificates.k8s.io) named by the
//!            request's signerName, or its domain's wildcard (`kubernetes.io/*`): else 403
//! ```
//!
//! The hub signs approved requests of `kubernetes.io/kube-apiserver-client`
//! (`auth::signer`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::api::Api;
use crate::auth::{Attributes, Decision, UserInfo};
use crate::http::error::{ApiError, ApiResult, Cause, Reason};
use crate::registry::object::{self, meta_str};

/// The API group.
pub const GROUP: &str = "certificates.k8s.io";
/// The kind.
pub const KIND: &str = "CertificateSigningRequest";

/// The signer of client certificates for the API server, the one the hub signs for.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// The signers a request may name.
pub const KNOWN_SIGNERS: [&str; 1] = [KUBE_APISERVER_CLIENT];

/// The shortest certificate lifetime a request may ask for.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The key usages Kubernetes knows (`certificates.KeyUsage`).
pub const KNOWN_USAGES: [&str; 23] = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// The conditions of approval.
const APPROVED: &str = "Approved";
const DENIED: &str = "Denied";
/// The condition of a request the signer refused.
pub const FAILED: &str = "Failed";

fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

fn invalid(field: &str, message: impl Into<String>) -> Cause {
    cause("FieldValueInvalid", field, message)
}

fn required(field: &str) -> Cause {
    cause("FieldValueRequired", field, "Required value")
}

/// The PEM of `spec.request` (base64 in JSON), if it decodes.
pub fn request_pem(object: &Value) -> Option<Vec<u8>> {
    STANDARD.decode(object["spec"]["request"].as_str()?).ok()
}

/// Whether `object` has a condition of `kind` with status True.
pub fn has_condition(object: &Value, kind: &str) -> bool {
    conditions(object)
        .iter()
        .any(|c| c["type"] == kind && c["status"].as_str().unwrap_or("True") == "True")
}

fn conditions(object: &Value) -> Vec<Value> {
    object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Completes and checks a CSR `user` creates.
pub(crate) fn admit_create(user: &UserInfo, object: &mut Value) -> ApiResult<()> {
    let spec = &mut object["spec"];
    if !spec.is_object() {
        *spec = json!({});
    }
    spec["username"] = json!(user.name);
    match user.uid.as_str() {
        "" => {
            if let Some(spec) = spec.as_object_mut() {
                spec.remove("uid");
            }
        }
        uid => spec["uid"] = json!(uid),
    }
    spec["groups"] = json!(user.groups);
    let extra: BTreeMap<&String, &Vec<String>> = user.extra.iter().collect();
    if extra.is_empty() {
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("extra");
        }
    } else {
        spec["extra"] = json!(extra);
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let mut causes = Vec::new();
    check_spec(&object["spec"], &mut causes);
    refuse(object, causes)
}

fn refuse(object: &Value, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        GROUP,
        KIND,
        meta_str(object, "name"),
        causes,
    ))
}

fn check_spec(spec: &Value, causes: &mut Vec<Cause>) {
    match spec["request"].as_str() {
        None | Some("") => causes.push(required("spec.request")),
        Some(b64) => match STANDARD.decode(b64) {
            Err(_) => causes.push(invalid("spec.request", "must be base64 of a PEM block")),
            Ok(pem) => {
                if let Err(e) = flotilla_pki::CertificateRequest::parse(&pem) {
                    causes.push(invalid("spec.request", e.to_string()));
                }
            }
        },
    }
    match spec["signerName"].as_str() {
        None | Some("") => causes.push(required("spec.signerName")),
        Some(signer) if !KNOWN_SIGNERS.contains(&signer) => causes.push(cause(
            "FieldValueNotSupported",
            "spec.signerName",
            format!(
                "Unsupported value: {signer:?}: supported values: \"{}\"",
                KNOWN_SIGNERS.join("\", \"")
            ),
        )),
        Some(_) => {}
    }
    match spec["usages"].as_array() {
        None => causes.push(required("spec.usages")),
        Some(usages) if usages.is_empty() => causes.push(required("spec.usages")),
        Some(usages) => {
            let mut seen = Vec::new();
            for (i, usage) in usages.iter().enumerate() {
                let field = format!("spec.usages[{i}]");
                match usage.as_str() {
                    Some(u) if !KNOWN_USAGES.contains(&u) => causes.push(cause(
                        "FieldValueNotSupported",
                        &field,
                        format!("Unsupported value: {u:?}"),
                    )),
                    Some(u) if seen.contains(&u) => causes.push(cause(
                        "FieldValueDuplicate",
                        &field,
                        format!("Duplicate value: {u:?}"),
                    )),
                    Some(u) => seen.push(u),
                    None => causes.push(invalid(&field, "must be a string")),
                }
            }
        }
    }
    match &spec["expirationSeconds"] {
        Value::Null => {}
        seconds => match seconds.as_i64() {
            Some(s) if s >= MIN_EXPIRATION_SECONDS => {}
            _ => causes.push(invalid(
                "spec.expirationSeconds",
                format!("may not specify a duration less than {MIN_EXPIRATION_SECONDS} seconds"),
            )),
        },
    }
}

/// Completes and checks an update of a CSR through `sub` (`""`, `status`, `approval`):
/// `object` is the object to write (`current` with the request's changes, as the
/// generic update made it), `requested` the object sent.
pub(crate) fn admit_update(
    sub: &str,
    object: &mut Value,
    current: &Value,
    requested: &Value,
) -> ApiResult<()> {
    // The spec never changes after the create.
    object["spec"] = current["spec"].clone();
    let approval_type = |c: &Value| c["type"] == APPROVED || c["type"] == DENIED;
    match sub {
        "approval" => {
            // The approval conditions as sent; every other as stored.
            let mut kept: Vec<Value> = conditions(requested)
                .into_iter()
                .filter(approval_type)
                .collect();
            kept.extend(
                conditions(current)
                    .into_iter()
                    .filter(|c| !approval_type(c)),
            );
            object["status"] = current["status"].clone();
            object["status"]["conditions"] = json!(kept);
        }
        "status" => {
            let mut kept: Vec<Value> = conditions(current)
                .into_iter()
                .filter(approval_type)
                .collect();
            kept.extend(conditions(object).into_iter().filter(|c| !approval_type(c)));
            object["status"]["conditions"] = json!(kept);
        }
        _ => object["status"] = current["status"].clone(),
    }
    if object["status"]["conditions"]
        .as_array()
        .is_some_and(Vec::is_empty)
        && let Some(status) = object["status"].as_object_mut()
    {
        status.remove("conditions");
    }
    fill_condition_times(object, current);
    let mut causes = Vec::new();
    check_conditions(object, current, &mut causes);
    let certificate = &object["status"]["certificate"];
    let before = &current["status"]["certificate"];
    if !before.is_null() && before.as_str() != Some("") && certificate != before {
        causes.push(invalid(
            "status.certificate",
            "updates may not modify existing certificate content",
        ));
    } else if let Some(b64) = certificate.as_str().filter(|c| !c.is_empty())
        && !is_certificate_pem(b64)
    {
        causes.push(invalid(
            "status.certificate",
            "must be base64 of PEM CERTIFICATE blocks",
        ));
    }
    refuse(object, causes)
}

/// Refuses (403) an approval or denial of `object` (a write through its `approval`
/// subresource) by `user` in logical cluster `cluster` unless the user may `approve` its
/// signer, as Kubernetes' `certificates/approval` admission plugin does: verb `approve`
/// on `signers` of `certificates.k8s.io` named by `spec.signerName`, or by its domain's
/// wildcard (`kubernetes.io/*`).
pub(crate) async fn check_approver(
    api: &Api,
    user: &UserInfo,
    cluster: &str,
    object: &Value,
) -> ApiResult<()> {
    let signer = object["spec"]["signerName"].as_str().unwrap_or("");
    if may_sign_as(api, user, cluster, "approve", signer).await {
        return Ok(());
    }
    let name = meta_str(object, "name");
    tracing::debug!(user = %user.name, %name, %signer, "approval refused: approve on the signer missing");
    Err(ApiError::new(
        403,
        Reason::Forbidden,
        format!(
            "certificatesigningrequests.{GROUP} {name:?} is forbidden: user not permitted to approve requests with signerName {signer:?}"
        ),
    )
    .on(GROUP, "certificatesigningrequests", name))
}

/// Whether `user` may do `verb` on signer `signer`, or on every signer of its domain
/// (Kubernetes' `IsAuthorizedForSignerName`).
async fn may_sign_as(api: &Api, user: &UserInfo, cluster: &str, verb: &str, signer: &str) -> bool {
    let domain = signer.split('/').next().unwrap_or("");
    let wildcard = format!("{domain}/*");
    for name in [signer, wildcard.as_str()] {
        let attributes = Attributes {
            cluster,
            user,
            verb,
            resource_request: true,
            group: GROUP,
            version: "*",
            resource: "signers",
            subresource: "",
            namespace: "",
            name,
            path: "",
        };
        if api.stages.authorizer.authorize(&attributes).await == Decision::Allow {
            return true;
        }
    }
    false
}

fn is_certificate_pem(b64: &str) -> bool {
    let Ok(pem) = STANDARD.decode(b64) else {
        return false;
    };
    let mut count = 0;
    for item in rustls_pemfile::read_all(&mut pem.as_slice()) {
        match item {
            Ok(rustls_pemfile::Item::X509Certificate(_)) => count += 1,
            _ => return false,
        }
    }
    count > 0
}

/// Conditions new since `current` (or changed) get `lastUpdateTime` and
/// `lastTransitionTime` now when they have none; a status left empty is True.
fn fill_condition_times(object: &mut Value, current: &Value) {
    let before = conditions(current);
    let now = object::now();
    if let Some(list) = object["status"]["conditions"].as_array_mut() {
        for condition in list {
            if condition["status"].as_str().is_none_or(str::is_empty) {
                condition["status"] = json!("True");
            }
            let previous = before.iter().find(|c| c["type"] == condition["type"]);
            if condition["lastUpdateTime"].is_null() {
                condition["lastUpdateTime"] = json!(now);
            }
            if condition["lastTransitionTime"].is_null() {
                let kept = previous.filter(|p| p["status"] == condition["status"]);
                condition["lastTransitionTime"] = match kept {
                    Some(p) if !p["lastTransitionTime"].is_null() => {
                        p["lastTransitionTime"].clone()
                    }
                    _ => json!(now),
                };
            }
        }
    }
}

fn check_conditions(object: &Value, current: &Value, causes: &mut Vec<Cause>) {
    let list = conditions(object);
    let mut seen: Vec<&str> = Vec::new();
    for (i, condition) in list.iter().enumerate() {
        let field = format!("status.conditions[{i}]");
        let kind = condition["type"].as_str().unwrap_or("");
        if kind.is_empty() {
            causes.push(required(&format!("{field}.type")));
            continue;
        }
        let status = condition["status"].as_str().unwrap_or("");
        if !matches!(status, "True" | "False" | "Unknown") {
            causes.push(cause(
                "FieldValueNotSupported",
                &format!("{field}.status"),
                format!("Unsupported value: {status:?}: supported values: \"True\", \"False\", \"Unknown\""),
            ));
        }
        if matches!(kind, APPROVED | DENIED | FAILED) {
            if seen.contains(&kind) {
                causes.push(cause(
                    "FieldValueDuplicate",
                    &format!("{field}.type"),
                    format!("Duplicate value: {kind:?}"),
                ));
            }
            seen.push(kind);
        }
    }
    if has_condition(object, APPROVED) && has_condition(object, DENIED) {
        causes.push(invalid(
            "status.conditions",
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    for kind in [APPROVED, DENIED] {
        let was = conditions(current).into_iter().find(|c| c["type"] == kind);
        if let Some(was) = was {
            let now = list.iter().find(|c| c["type"] == kind);
            match now {
                None => causes.push(cause(
                    "FieldValueForbidden",
                    "status.conditions",
                    format!("updates may not remove a condition of type {kind:?}"),
                )),
                Some(now) if now["status"] != was["status"] => causes.push(cause(
                    "FieldValueForbidden",
                    "status.conditions",
                    format!("updates may not change the status of a condition of type {kind:?}"),
                )),
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn request(spec: Value) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": KIND,
            "metadata": {"name": "alice"}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({
            "request": STANDARD.encode(csr_pem()),
            "signerName": KUBE_APISERVER_CLIENT,
            "usages": ["client auth"],
            "expirationSeconds": 86400,
            "username": "mallory",
            "groups": ["system:masters"],
        })
    }

    fn alice() -> UserInfo {
        UserInfo::new("alice", &["team-a", "system:authenticated"])
    }

    fn messages(e: ApiError) -> Vec<String> {
        e.details
            .unwrap()
            .causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn the_requesting_user_is_written_whatever_the_client_says() {
        let mut csr = request(good_spec());
        csr["status"] = json!({"certificate": "Zm9v"});
        admit_create(&alice(), &mut csr).unwrap();
        assert_eq!(csr["spec"]["username"], "alice");
        assert_eq!(
            csr["spec"]["groups"],
            json!(["team-a", "system:authenticated"])
        );
        assert!(csr["spec"].get("uid").is_none() && csr["spec"].get("extra").is_none());
        assert!(csr.get("status").is_none());
    }

    #[test]
    fn a_malformed_request_an_unknown_signer_and_bad_usages_are_refused() {
        for (spec, expected) in [
            (
                json!({"request": STANDARD.encode("garbage")}),
                "spec.request: PEM block type must be CERTIFICATE REQUEST",
            ),
            (json!({"request": "%%%"}), "spec.request: must be base64"),
            (
                json!({"signerName": "example.com/mine"}),
                "spec.signerName: Unsupported value",
            ),
            (
                json!({"signerName": null}),
                "spec.signerName: Required value",
            ),
            (json!({"usages": []}), "spec.usages: Required value"),
            (
                json!({"usages": ["client auth", "client auth"]}),
                "spec.usages[1]: Duplicate",
            ),
            (
                json!({"usages": ["fly"]}),
                "spec.usages[0]: Unsupported value",
            ),
            (
                json!({"expirationSeconds": 599}),
                "spec.expirationSeconds: may not specify",
            ),
        ] {
            let mut merged = good_spec();
            for (k, v) in spec.as_object().unwrap() {
                merged[k] = v.clone();
            }
            let e = admit_create(&alice(), &mut request(merged)).unwrap_err();
            assert_eq!(e.code, 422);
            let found = messages(e);
            assert!(
                found.iter().any(|m| m.starts_with(expected)),
                "{expected}: {found:?}"
            );
        }
    }

    fn created() -> Value {
        let mut csr = request(good_spec());
        admit_create(&alice(), &mut csr).unwrap();
        csr
    }

    fn approved(kind: &str) -> Value {
        json!({"status": {"conditions": [{"type": kind, "status": "True", "reason": "KubectlApprove"}]}})
    }

    #[test]
    fn approval_writes_only_its_conditions_and_approved_excludes_denied() {
        let current = created();
        // Through approval: the condition is taken, the spec and certificate are not.
        let mut sent = approved(APPROVED);
        sent["spec"] = json!({"username": "mallory"});
        sent["status"]["certificate"] = json!("Zm9v");
        let mut object = current.clone();
        admit_update("approval", &mut object, &current, &sent).unwrap();
        assert!(has_condition(&object, APPROVED));
        assert_eq!(object["spec"], current["spec"]);
        assert!(object["status"]["certificate"].is_null());
        assert!(object["status"]["conditions"][0]["lastUpdateTime"].is_string());
        // Denied as well: refused.
        let mut both = approved(APPROVED);
        both["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": DENIED, "status": "True"}));
        let mut twice = object.clone();
        let e = admit_update("approval", &mut twice, &object, &both).unwrap_err();
        assert!(messages(e).iter().any(|m| m.contains("mutually exclusive")));
        // Removing the approval: refused.
        let mut none = object.clone();
        let e = admit_update("approval", &mut none, &object, &json!({"status": {}})).unwrap_err();
        assert!(messages(e).iter().any(|m| m.contains("may not remove")));
        // Through status: an Approved condition sent is ignored.
        let mut via_status = current.clone();
        via_status["status"] = approved(APPROVED)["status"].clone();
        admit_update("status", &mut via_status, &current, &approved(APPROVED)).unwrap();
        assert!(!has_condition(&via_status, APPROVED));
    }

    #[test]
    fn a_certificate_once_written_stays() {
        let current = created();
        let pem = rcgen::CertificateParams::new(vec!["x".into()])
            .unwrap()
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap()
            .pem();
        let mut signed = current.clone();
        signed["status"] = json!({"certificate": STANDARD.encode(&pem)});
        let sent = signed.clone();
        admit_update("status", &mut signed, &current, &sent).unwrap();
        let mut changed = signed.clone();
        changed["status"]["certificate"] = json!(STANDARD.encode(pem.replace('A', "B")));
        let sent = changed.clone();
        let e = admit_update("status", &mut changed, &signed, &sent).unwrap_err();
        assert!(messages(e).iter().any(|m| m.contains("may not modify")));
        let mut garbage = current.clone();
        garbage["status"] = json!({"certificate": STANDARD.encode("nope")});
        let sent = garbage.clone();
        assert!(admit_update("status", &mut garbage, &current, &sent).is_err());
    }
}
