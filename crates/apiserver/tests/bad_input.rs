//! Bad requests get the right `Status` (code, reason, a message naming the problem), and
//! leave the store exactly as it was.

mod support;

use axum::http::Method;
use serde_json::{Value, json};
use support::Server;

impl Server {
    /// Sends a bad request; checks the Status and that nothing was written.
    async fn refused(
        &self,
        method: Method,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
        (code, reason, names): (u16, &str, &str),
    ) -> Value {
        let before = self.store.current_revision().await.unwrap();
        let request = self
            .client
            .request(method.clone(), path)
            .query(query.unwrap_or_default());
        let reply = match content_type {
            Some(content_type) => request.body(body.to_vec(), content_type),
            None => request.raw_body(body.to_vec()),
        }
        .send()
        .await;
        let (got, status) = (reply.code(), reply.json());
        assert_eq!(got, code, "{method} {path}?{query:?}: {status}");
        assert_eq!(status["kind"], "Status", "{status}");
        assert_eq!(status["apiVersion"], "v1", "{status}");
        assert_eq!(status["status"], "Failure", "{status}");
        assert_eq!(status["code"], code, "{status}");
        assert_eq!(status["reason"], reason, "{status}");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains(names),
            "{method} {path}: {message:?} should name {names:?}"
        );
        assert_eq!(
            self.store.current_revision().await.unwrap(),
            before,
            "{method} {path} wrote something"
        );
        status
    }
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str) -> Vec<u8> {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn malformed_bodies() {
    let s = Server::new().await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        Some("application/json"),
        b"{\"metadata\": ",
        (400, "BadRequest", "not valid JSON"),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        Some("application/yaml"),
        b"metadata: [unclosed",
        (400, "BadRequest", "not valid YAML"),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        b"[1, 2]",
        (400, "BadRequest", "must be an object"),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        Some("application/vnd.kubernetes.protobuf"),
        b"\x0a\x02{}",
        (400, "BadRequest", "protobuf body cannot be read"),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        Some("application/cbor"),
        b"\xa0",
        (415, "UnsupportedMediaType", "application/cbor"),
    )
    .await;
    // YAML that is well formed is accepted.
    let reply = s
        .client
        .request(Method::POST, CONFIGMAPS)
        .body(
            &b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n"[..],
            "application/yaml",
        )
        .send()
        .await;
    let (code, created) = (reply.code(), reply.json());
    assert_eq!(
        (code, created["data"]["k"].as_str()),
        (201, Some("v")),
        "{created}"
    );
}

#[tokio::test]
async fn type_and_name_problems() {
    let s = Server::new().await;
    let wrong_version =
        json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "a"}}).to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        wrong_version.as_bytes(),
        (
            400,
            "BadRequest",
            "(v2) does not match the expected API version (v1)",
        ),
    )
    .await;
    let wrong_kind =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}).to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        wrong_kind.as_bytes(),
        (
            400,
            "BadRequest",
            "(Secret) does not match the expected kind (ConfigMap)",
        ),
    )
    .await;
    let status = s
        .refused(
            Method::POST,
            CONFIGMAPS,
            None,
            None,
            &configmap("Bad_Name"),
            (422, "Invalid", "Bad_Name"),
        )
        .await;
    assert_eq!(
        status["details"]["causes"][0]["field"], "metadata.name",
        "{status}"
    );
    let nameless = json!({"metadata": {}}).to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        nameless.as_bytes(),
        (422, "Invalid", "name or generateName is required"),
    )
    .await;
    let other_ns = json!({"metadata": {"name": "a", "namespace": "kube-system"}}).to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        other_ns.as_bytes(),
        (400, "BadRequest", "does not match the namespace"),
    )
    .await;
    s.refused(
        Method::POST,
        "/api/v1/namespaces/nowhere/configmaps",
        None,
        None,
        &configmap("a"),
        (404, "NotFound", "namespaces \"nowhere\" not found"),
    )
    .await;
    s.refused(
        Method::POST,
        "/api/v1/widgets",
        None,
        None,
        &configmap("a"),
        (404, "NotFound", "/api/v1/widgets"),
    )
    .await;
}

#[tokio::test]
async fn size_and_field_validation() {
    let s = Server::new().await;
    // Past the request's limit (a ConfigMap over 1 MiB of data is refused by its own
    // validation, 422; the body's limit comes first).
    let huge =
        json!({"metadata": {"name": "huge"}, "data": {"k": "x".repeat(7 << 20)}}).to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        None,
        None,
        huge.as_bytes(),
        (413, "RequestEntityTooLarge", "over the limit"),
    )
    .await;
    let unknown = json!({"metadata": {"name": "u"}, "data": {}, "colour": "red", "spec": {"x": 1}})
        .to_string();
    s.refused(
        Method::POST,
        CONFIGMAPS,
        Some("fieldValidation=Strict"),
        None,
        unknown.as_bytes(),
        (
            400,
            "BadRequest",
            r#"strict decoding error: unknown field "colour", unknown field "spec""#,
        ),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        Some("fieldValidation=Loose"),
        None,
        &configmap("a"),
        (400, "BadRequest", "Loose"),
    )
    .await;
    s.refused(
        Method::POST,
        CONFIGMAPS,
        Some("dryRun=Some"),
        None,
        &configmap("a"),
        (400, "BadRequest", "Some"),
    )
    .await;
}

#[tokio::test]
async fn verbs_a_resource_does_not_have() {
    let s = Server::new().await;
    s.refused(
        Method::GET,
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        None,
        None,
        b"",
        (
            405,
            "MethodNotAllowed",
            "list is not supported on selfsubjectaccessreviews",
        ),
    )
    .await;
    s.refused(
        Method::DELETE,
        "/api/v1/namespaces",
        None,
        None,
        b"",
        (
            405,
            "MethodNotAllowed",
            "deletecollection is not supported on namespaces",
        ),
    )
    .await;
}

#[tokio::test]
async fn bad_queries() {
    let s = Server::new().await;
    let reply = s
        .client
        .request(Method::POST, CONFIGMAPS)
        .raw_body(configmap("a"))
        .send()
        .await;
    assert_eq!(reply.code(), 201);
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("labelSelector=app+in+db"),
        None,
        b"",
        (400, "BadRequest", "app in db"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("fieldSelector=spec.colour%3Dred"),
        None,
        b"",
        (400, "BadRequest", "spec.colour"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("resourceVersion=abc"),
        None,
        b"",
        (400, "BadRequest", "abc"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("watch=true&resourceVersion=-1"),
        None,
        b"",
        (400, "BadRequest", "-1"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("limit=ten"),
        None,
        b"",
        (400, "BadRequest", "ten"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("continue=garbage"),
        None,
        b"",
        (400, "BadRequest", "garbage"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("resourceVersion=999999&resourceVersionMatch=Exact"),
        None,
        b"",
        (504, "Timeout", "999999"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("resourceVersionMatch=Exact"),
        None,
        b"",
        (400, "BadRequest", "needs a resourceVersion"),
    )
    .await;
    s.refused(
        Method::GET,
        CONFIGMAPS,
        Some("watch=true&timeoutSeconds=soon"),
        None,
        b"",
        (400, "BadRequest", "soon"),
    )
    .await;
}

#[tokio::test]
async fn bad_updates_patches_and_deletes() {
    let s = Server::new().await;
    let created = s
        .client
        .request(Method::POST, CONFIGMAPS)
        .raw_body(configmap("a"))
        .send()
        .await
        .json();
    let object = format!("{CONFIGMAPS}/a");
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["data"]["k"] = json!("changed");
    s.refused(
        Method::PUT,
        &object,
        None,
        None,
        stale.to_string().as_bytes(),
        (409, "Conflict", "the object has been modified"),
    )
    .await;
    let mut renamed = created.clone();
    renamed["metadata"]["name"] = json!("b");
    s.refused(
        Method::PUT,
        &object,
        None,
        None,
        renamed.to_string().as_bytes(),
        (400, "BadRequest", "does not match the name on the URL"),
    )
    .await;
    let mut not_a_number = created.clone();
    not_a_number["metadata"]["resourceVersion"] = json!("twelve");
    s.refused(
        Method::PUT,
        &object,
        None,
        None,
        not_a_number.to_string().as_bytes(),
        (400, "BadRequest", "twelve"),
    )
    .await;
    s.refused(
        Method::PUT,
        &format!("{CONFIGMAPS}/missing"),
        None,
        None,
        &configmap("missing"),
        (404, "NotFound", "configmaps \"missing\" not found"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/json-patch+json"),
        br#"{"op": "add"}"#,
        (400, "BadRequest", "array of operations"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/json-patch+json"),
        br#"[{"op": "remove", "path": "/data/nothing"}]"#,
        (422, "Invalid", "/data/nothing"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/json-patch+json"),
        br#"[{"op": "test", "path": "/data/k", "value": "other"}]"#,
        (422, "Invalid", "/data/k"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/merge-patch+json"),
        b"{not json",
        (400, "BadRequest", "not valid JSON"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/xml"),
        b"<x/>",
        (415, "UnsupportedMediaType", "application/xml"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        None,
        Some("application/merge-patch+json"),
        br#"{"kind": "Secret"}"#,
        (400, "BadRequest", "(Secret) does not match"),
    )
    .await;
    s.refused(
        Method::DELETE,
        &object,
        None,
        None,
        b"{\"preconditions\": ",
        (400, "BadRequest", "not valid JSON"),
    )
    .await;
    s.refused(
        Method::DELETE,
        &object,
        None,
        None,
        br#"{"preconditions": {"uid": "someone-else"}}"#,
        (409, "Conflict", "the object has been modified"),
    )
    .await;
    s.refused(
        Method::DELETE,
        &format!("{CONFIGMAPS}/missing"),
        None,
        None,
        b"",
        (404, "NotFound", "\"missing\" not found"),
    )
    .await;
    // Server-side apply: a field manager is required, force only goes with apply, the
    // configuration must be YAML naming the URL's kind and name, and a conflict names the
    // other manager and the field.
    const APPLY: Option<&str> = Some("application/apply-patch+yaml");
    let config = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: mine}\n";
    s.refused(
        Method::PATCH,
        &object,
        None,
        APPLY,
        config,
        (422, "Invalid", "fieldManager: Required value"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me&force=true"),
        Some("application/merge-patch+json"),
        br#"{"data": {"k": "x"}}"#,
        (
            422,
            "Invalid",
            "force: Forbidden: may not be specified for non-apply patch",
        ),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me"),
        APPLY,
        b"data: [unclosed\n",
        (400, "BadRequest", "not valid YAML"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me"),
        APPLY,
        b"apiVersion: v1\nkind: Secret\nmetadata: {name: a}\n",
        (400, "BadRequest", "kind \"Secret\" does not match"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me"),
        APPLY,
        b"kind: ConfigMap\nmetadata: {name: a}\n",
        (400, "BadRequest", "has no apiVersion"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me"),
        APPLY,
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
        (400, "BadRequest", "does not match the name on the URL"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some(&format!("fieldManager={}", "m".repeat(129))),
        APPLY,
        config,
        (422, "Invalid", "fieldManager: Too long"),
    )
    .await;
    s.refused(
        Method::PATCH,
        &object,
        Some("fieldManager=me&force=maybe"),
        APPLY,
        config,
        (400, "BadRequest", "invalid force"),
    )
    .await;
    // The creator (an Update manager) owns data.k: a different value conflicts.
    let conflict = s
        .refused(
            Method::PATCH,
            &object,
            Some("fieldManager=me"),
            APPLY,
            config,
            (409, "Conflict", "Apply failed with 1 conflict"),
        )
        .await;
    assert_eq!(
        conflict["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"unknown\" using v1", "field": ".data.k"}),
        "{conflict}"
    );
    // After all that, the object is as it was created.
    let reply = s.client.request(Method::GET, &object).send().await;
    let (code, now) = (reply.code(), reply.json());
    assert_eq!((code, &now), (200, &created));
}

/// Kubernetes protobuf for `DeleteOptions{preconditions{uid}}`, as a typed Go client sends it.
fn protobuf_delete_options(uid: &str) -> Vec<u8> {
    fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(tag << 3) | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let preconditions = field(1, uid.as_bytes());
    let options = field(2, &preconditions);
    let type_meta = [field(1, b"meta.k8s.io/v1"), field(2, b"DeleteOptions")].concat();
    let unknown = [field(1, &type_meta), field(2, &options)].concat();
    [b"k8s\0".as_slice(), &unknown].concat()
}

#[tokio::test]
async fn typed_clients_delete_with_protobuf_options() {
    let s = Server::new().await;
    let created = s
        .client
        .request(Method::POST, CONFIGMAPS)
        .raw_body(configmap("a"))
        .send()
        .await
        .json();
    let object = format!("{CONFIGMAPS}/a");
    // The options are read: a wrong uid precondition is a conflict.
    s.refused(
        Method::DELETE,
        &object,
        None,
        Some("application/vnd.kubernetes.protobuf"),
        &protobuf_delete_options("someone-else"),
        (409, "Conflict", "the object has been modified"),
    )
    .await;
    let uid = created["metadata"]["uid"].as_str().unwrap();
    let reply = s
        .client
        .request(Method::DELETE, &object)
        .body(
            protobuf_delete_options(uid),
            "application/vnd.kubernetes.protobuf",
        )
        .send()
        .await;
    assert_eq!(reply.code(), 200);
    let reply = s.client.request(Method::GET, &object).send().await;
    assert_eq!(reply.code(), 404);
}

#[tokio::test]
async fn crds_must_be_structural_and_their_rules_must_compile() {
    let s = Server::new().await;
    let crd = |spec_schema: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "gadgets", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                    "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}
                }}]
            }
        })
        .to_string()
    };
    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    s.refused(
        Method::POST,
        CRDS,
        None,
        None,
        crd(json!({"type": "object", "properties": {"size": {"minimum": 1}}})).as_bytes(),
        (
            422,
            "Invalid",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value",
        ),
    )
    .await;
    s.refused(
        Method::POST,
        CRDS,
        None,
        None,
        crd(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.size >"}],
            "properties": {"size": {"type": "integer"}}}))
        .as_bytes(),
        (
            422,
            "Invalid",
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.size >\": compilation failed",
        ),
    )
    .await;
    // Int-or-string and preserved fields need no type; a rule that compiles is accepted.
    let reply = s
        .client
        .request(Method::POST, CRDS)
        .raw_body(crd(json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.size > 0"}],
        "properties": {
            "size": {"type": "integer"},
            "port": {"x-kubernetes-int-or-string": true},
            "extra": {"x-kubernetes-preserve-unknown-fields": true}
        }})))
        .send()
        .await;
    let (code, status) = (reply.code(), reply.json());
    assert_eq!(code, 201, "{status}");
}
