//! A write as Kubernetes' `AdmissionRequest` describes it: what webhooks are sent (in an
//! `admission.k8s.io/v1` AdmissionReview) and what policies see as `request`.

use kube_cel::cel::{Context, Value as Cel};
use serde_json::{Map, Value, json};

use super::cel::Reads;
use super::matching::Match;
use super::{Attributes, Operation};
use crate::registry::resources::Subresource;

/// The kind of the object a write to `rt` carries, as `{group, version, kind}`.
fn kind_json(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

/// The `AdmissionRequest` of a write matched as `matched`, without its objects: uid,
/// kind and resource (as matched) and as requested, subresource, name, namespace,
/// operation, the user, dryRun and the operation's options.
pub(crate) fn request(attributes: &Attributes<'_>, matched: &Match, uid: &str) -> Value {
    let rt = attributes.rt;
    let sub = attributes.subresource;
    let kind = matched.kind(sub);
    let requested = match rt.subresource(sub) {
        Some(subresource) => subresource.response_kind(rt),
        None => Subresource::Status.response_kind(rt),
    };
    let mut request = Map::new();
    request.insert("uid".into(), json!(uid));
    request.insert(
        "kind".into(),
        kind_json(&kind.group, &kind.version, &kind.kind),
    );
    request.insert(
        "resource".into(),
        json!({"group": matched.rt.group, "version": matched.rt.version, "resource": matched.rt.plural}),
    );
    if !sub.is_empty() {
        request.insert("subResource".into(), json!(sub));
    }
    request.insert(
        "requestKind".into(),
        kind_json(&requested.group, &requested.version, &requested.kind),
    );
    request.insert(
        "requestResource".into(),
        json!({"group": rt.group, "version": rt.version, "resource": rt.plural}),
    );
    if !sub.is_empty() {
        request.insert("requestSubResource".into(), json!(sub));
    }
    if !attributes.name.is_empty() {
        request.insert("name".into(), json!(attributes.name));
    }
    if !attributes.namespace.is_empty() {
        request.insert("namespace".into(), json!(attributes.namespace));
    }
    request.insert("operation".into(), json!(attributes.operation.as_str()));
    request.insert("userInfo".into(), attributes.user.to_json());
    request.insert("dryRun".into(), json!(attributes.dry_run));
    request.insert("options".into(), options(attributes));
    Value::Object(request)
}

/// The `request` variable of CEL expressions: the [`request`], its fields that are empty
/// read as empty rather than missing (a typed object in Kubernetes).
fn cel_request(attributes: &Attributes<'_>, matched: &Match, uid: &str) -> Cel {
    use super::validation::default_field;
    let mut request = request(attributes, matched, uid);
    for field in ["name", "namespace", "subResource", "requestSubResource"] {
        default_field(&mut request, field, json!(""));
    }
    let user = &mut request["userInfo"];
    default_field(user, "uid", json!(""));
    default_field(user, "groups", json!([]));
    default_field(user, "extra", json!({}));
    super::cel::value(&request)
}

/// The options of the operation (`CreateOptions`, `UpdateOptions`, `DeleteOptions`).
fn options(attributes: &Attributes<'_>) -> Value {
    let kind = match attributes.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut options = match attributes.delete_options {
        Some(Value::Object(sent)) => sent.clone(),
        _ => Map::new(),
    };
    options.insert("kind".into(), json!(kind));
    options.insert("apiVersion".into(), json!("meta.k8s.io/v1"));
    if attributes.dry_run {
        options.insert("dryRun".into(), json!(["All"]));
    }
    if !attributes.field_manager.is_empty() && attributes.operation != Operation::Delete {
        options.insert("fieldManager".into(), json!(attributes.field_manager));
    }
    Value::Object(options)
}

/// A write as CEL expressions see it (policies, webhook match conditions): its variables
/// `object`, `oldObject`, `request` and `namespaceObject`, each made only when `reads` says
/// an expression reads it.
pub(crate) struct CelWrite<'w> {
    pub(crate) attributes: &'w Attributes<'w>,
    pub(crate) object: &'w Value,
    pub(crate) old: Option<&'w Value>,
    /// The `request.uid`: one per write, whatever scopes are made for it.
    pub(crate) uid: &'w str,
    /// The namespace's object, when it has one and it is read.
    pub(crate) namespace: Option<&'w Cel>,
    pub(crate) reads: Reads,
}

impl CelWrite<'_> {
    /// A scope under `base` with the write's variables that are read, shown as `matched`.
    pub(crate) fn inputs<'b>(&self, base: &'b Context<'static>, matched: &Match) -> Context<'b> {
        let mut scope = base.new_inner_scope();
        let operation = self.attributes.operation;
        if self.reads.object {
            let object = match operation {
                Operation::Delete => Cel::Null,
                _ => cel_shown(self.object, matched),
            };
            scope.add_variable_from_value("object", object);
        }
        if self.reads.old_object {
            let old = match self.old {
                Some(old) if operation != Operation::Create => cel_shown(old, matched),
                _ => Cel::Null,
            };
            scope.add_variable_from_value("oldObject", old);
        }
        if self.reads.request {
            let request = cel_request(self.attributes, matched, self.uid);
            scope.add_variable_from_value("request", request);
        }
        if self.reads.namespace_object {
            let namespace = self.namespace.cloned().unwrap_or(Cel::Null);
            scope.add_variable_from_value("namespaceObject", namespace);
        }
        scope
    }
}

/// [`shown_as`] as a CEL value, without a copy of the object when it is shown as stored.
fn cel_shown(object: &Value, matched: &Match) -> Cel {
    match matched.converted {
        true => super::cel::value(&shown_as(object, matched)),
        false => super::cel::value(object),
    }
}

/// `object` shown as `matched` (another version of its resource: the apiVersion it is
/// read with; no field of the built-in or custom kinds served here differs between
/// versions).
pub(crate) fn shown_as(object: &Value, matched: &Match) -> Value {
    let mut object = object.clone();
    if matched.converted
        && let Some(map) = object.as_object_mut()
    {
        map.insert("apiVersion".into(), json!(matched.rt.api_version()));
    }
    object
}
