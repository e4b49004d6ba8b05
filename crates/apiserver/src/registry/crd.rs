//! CustomResourceDefinitions: checking them, and the resource types they add.
//!
//! ```text
//!  POST/PUT customresourcedefinitions ─► admit(): validate, default names ─► Definition
//!        │                                     │
//!        │                     conflict(registry)? ─► status: NamesAccepted, Established
//!        ▼                                     ▼
//!      store ───────────────────────────► register(): one ResourceType per served version
//!  DELETE ─► deletionTimestamp ─► cleanup (api.rs): every object of the resource goes,
//!            then the finalizer ─► the CRD goes ─► unregister()
//! ```
//!
//! Every version of a resource shares one set of stored objects (keys name the group and
//! plural, not the version): conversion is `None`, so an object read through another
//! version differs only in `apiVersion`.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::http::error::{ApiError, ApiResult, Cause};
use crate::registry::object::{self, NameRule, check_name};
use crate::registry::resources::{
    PrinterColumns, Registry, ResourceType, ScalePaths, Schema, Subresource,
};
use crate::registry::strategy::Behaviour;

/// The finalizer that keeps a CRD until every object of its resource is gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// What a valid CRD defines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    /// The CRD's name, `<plural>.<group>`.
    pub name: String,
    /// The API group of its resource.
    pub group: String,
    /// The resource's plural name.
    pub plural: String,
    /// One resource type per served version.
    pub types: Vec<ResourceType>,
    /// The names as the spec gives them (with defaults filled in): `acceptedNames`.
    pub names: Value,
    /// The storage version.
    pub storage_version: String,
}

fn cause(field: &str, reason: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.to_owned(),
        message: message.into(),
        field: field.to_owned(),
    }
}

fn required(field: &str) -> Cause {
    cause(field, "FieldValueRequired", "Required value")
}

/// Checks that a version's schema is structural (every field and item has a type, unless
/// it is int-or-string or keeps unknown fields) and that its CEL rules compile.
fn check_schema(node: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(map) = node.as_object() else {
        return;
    };
    let free = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !map.contains_key("type") && !free {
        causes.push(cause(
            &format!("{path}.type"),
            "FieldValueRequired",
            "Required value: must not be empty for specified object fields (a structural schema types every field)",
        ));
    }
    if let Some(rules) = map
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        let compiled = kube_cel::compile_schema(node);
        for (j, result) in compiled.validations.iter().enumerate() {
            if let Err(error) = result {
                let rule = rules
                    .get(j)
                    .map_or("", |r| r["rule"].as_str().unwrap_or(""));
                causes.push(cause(
                    &format!("{path}.x-kubernetes-validations[{j}].rule"),
                    "FieldValueInvalid",
                    format!("Invalid value: {rule:?}: compilation failed: {error}"),
                ));
            }
        }
    }
    if let Some(properties) = map.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            check_schema(child, &format!("{path}.properties[{name}]"), causes);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get(key).filter(|c| c.is_object()) {
            check_schema(child, &format!("{path}.{key}"), causes);
        }
    }
}

/// Checks a CRD about to be stored and fills in the defaulted names (`singular`,
/// `listKind`). A 422 Invalid names every problem found.
pub fn admit(crd: &mut Value) -> ApiResult<Definition> {
    let name = object::meta_str(crd, "name").to_owned();
    let mut causes = Vec::new();
    let spec = &mut crd["spec"];
    if !spec.is_object() {
        let error = ApiError::invalid(
            GROUP,
            "CustomResourceDefinition",
            &name,
            vec![required("spec")],
        );
        return Err(error);
    }
    let group = spec["group"].as_str().unwrap_or("").to_owned();
    if group.is_empty() {
        causes.push(required("spec.group"));
    } else if check_name(&group, NameRule::Subdomain).is_some() || !group.contains('.') {
        causes.push(cause(
            "spec.group",
            "FieldValueInvalid",
            format!("Invalid value: {group:?}: should be a domain with at least one dot"),
        ));
    }
    let names = &mut spec["names"];
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or("").to_owned();
    let plural = text(names, "plural");
    let kind = text(names, "kind");
    let mut singular = text(names, "singular");
    if singular.is_empty() && !kind.is_empty() {
        singular = kind.to_ascii_lowercase();
        names["singular"] = json!(singular);
    }
    if text(names, "listKind").is_empty() && !kind.is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    for (field, value) in [("plural", &plural), ("singular", &singular)] {
        if value.is_empty() {
            causes.push(required(&format!("spec.names.{field}")));
        } else if check_name(value, NameRule::Label).is_some() {
            causes.push(cause(
                &format!("spec.names.{field}"),
                "FieldValueInvalid",
                format!("Invalid value: {value:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"),
            ));
        }
    }
    let kind_ok = |k: &str| {
        k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && k.chars().all(|c| c.is_ascii_alphanumeric())
    };
    if kind.is_empty() {
        causes.push(required("spec.names.kind"));
    } else if !kind_ok(&kind) {
        causes.push(cause(
            "spec.names.kind",
            "FieldValueInvalid",
            format!("Invalid value: {kind:?}: must be an alphanumeric name starting with a letter"),
        ));
    }
    let names = names.clone();
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        None => {
            causes.push(required("spec.scope"));
            true
        }
        Some(other) => {
            causes.push(cause(
                "spec.scope",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ),
            ));
            true
        }
    };
    match spec["conversion"]["strategy"].as_str() {
        None | Some("None") => {}
        Some(other) => causes.push(cause(
            "spec.conversion.strategy",
            "FieldValueNotSupported",
            format!("Unsupported value: {other:?}: only \"None\" is supported by this server"),
        )),
    }
    if spec["preserveUnknownFields"] == Value::Bool(true) {
        causes.push(cause(
            "spec.preserveUnknownFields",
            "FieldValueInvalid",
            "Invalid value: true: must be false",
        ));
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(required("spec.versions"));
    }
    let mut seen = BTreeSet::new();
    let mut storage = Vec::new();
    let mut types = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let at = |f: &str| format!("spec.versions[{i}].{f}");
        let v = version["name"].as_str().unwrap_or("");
        if v.is_empty() {
            causes.push(required(&at("name")));
            continue;
        }
        if check_name(v, NameRule::Label).is_some() {
            causes.push(cause(
                &at("name"),
                "FieldValueInvalid",
                format!("Invalid value: {v:?}: must be a DNS label"),
            ));
        }
        if !seen.insert(v.to_owned()) {
            causes.push(cause(
                &at("name"),
                "FieldValueDuplicate",
                format!("Duplicate value: {v:?}"),
            ));
        }
        if version["storage"] == Value::Bool(true) {
            storage.push(v.to_owned());
        }
        let schema = &version["schema"]["openAPIV3Schema"];
        if !schema.is_object() {
            causes.push(required(&at("schema.openAPIV3Schema")));
            continue;
        }
        if schema["type"] != "object" {
            causes.push(cause(
                &at("schema.openAPIV3Schema.type"),
                "FieldValueInvalid",
                "Invalid value: must be object at the root",
            ));
        }
        check_schema(schema, &at("schema.openAPIV3Schema"), &mut causes);
        if version["served"] != Value::Bool(true) {
            continue;
        }
        let mut rt = ResourceType::new(&group, v, &kind, &plural, namespaced);
        rt.behaviour = Behaviour::CustomResource;
        rt.singular = singular.clone();
        rt.short_names = strings(&names["shortNames"]);
        rt.categories = strings(&names["categories"]);
        if version["subresources"]["status"].is_object() {
            rt.subresources.push(Subresource::Status);
        }
        let scale = &version["subresources"]["scale"];
        if scale.is_object() {
            rt.subresources.push(Subresource::Scale);
            let path = |k: &str| scale[k].as_str().map(str::to_owned);
            rt.scale = Some(ScalePaths {
                spec_replicas: path("specReplicasPath").unwrap_or_else(|| ".spec.replicas".into()),
                status_replicas: path("statusReplicasPath")
                    .unwrap_or_else(|| ".status.replicas".into()),
                label_selector: path("labelSelectorPath"),
            });
        }
        rt.schema = Some(Schema(Arc::new(schema.clone())));
        rt.selectable_fields = version["selectableFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["jsonPath"].as_str())
            .map(|path| path.trim_start_matches('.').to_owned())
            .collect();
        if version["additionalPrinterColumns"].is_array() {
            rt.printer_columns = Some(PrinterColumns(Arc::new(
                version["additionalPrinterColumns"].clone(),
            )));
        }
        types.push(rt);
    }
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(cause(
            "spec.versions",
            "FieldValueInvalid",
            format!(
                "Invalid value: must have exactly one version marked as storage version, found {}",
                storage.len()
            ),
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            GROUP,
            "CustomResourceDefinition",
            &name,
            causes,
        ));
    }
    Ok(Definition {
        name,
        group,
        plural,
        types,
        names,
        storage_version: storage.remove(0),
    })
}

/// Why the definition's names cannot be served, if they clash with another resource.
pub fn conflict(definition: &Definition, registry: &Registry) -> Option<String> {
    for rt in &definition.types {
        if let Some(other) = registry.get(&rt.group, &rt.version, &rt.plural)
            && other.schema.is_none()
        {
            return Some(format!(
                "{:?} is already in use by a built-in resource",
                rt.plural
            ));
        }
        if let Some(other) = registry.by_kind(&rt.group, &rt.version, &rt.kind)
            && other.plural != rt.plural
        {
            return Some(format!(
                "{:?} is already in use by resource {:?}",
                rt.kind, other.plural
            ));
        }
    }
    None
}

fn condition(kind: &str, status: bool, reason: &str, message: &str, previous: &Value) -> Value {
    let status = if status { "True" } else { "False" };
    let since = previous["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind && c["status"] == status)
        .map(|c| c["lastTransitionTime"].clone())
        .unwrap_or_else(|| json!(object::now()));
    json!({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": since})
}

/// The CRD's status after an admitted write: names accepted and established unless they
/// clash; `Terminating` once deletion has begun.
pub fn status(
    definition: &Definition,
    clash: Option<&str>,
    previous: &Value,
    terminating: bool,
) -> Value {
    let mut stored: Vec<Value> = previous["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !stored
        .iter()
        .any(|v| v == definition.storage_version.as_str())
    {
        stored.push(json!(definition.storage_version));
    }
    let mut conditions = match clash {
        None => vec![
            condition(
                "NamesAccepted",
                true,
                "NoConflicts",
                "no conflicts found",
                previous,
            ),
            condition(
                "Established",
                true,
                "InitialNamesAccepted",
                "the initial names have been accepted",
                previous,
            ),
        ],
        Some(why) => vec![
            condition("NamesAccepted", false, "ConflictingNames", why, previous),
            condition(
                "Established",
                false,
                "NotAccepted",
                "not all names are accepted",
                previous,
            ),
        ],
    };
    if terminating {
        conditions.push(condition(
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            previous,
        ));
    }
    let accepted = if clash.is_none() {
        definition.names.clone()
    } else {
        previous["acceptedNames"].clone()
    };
    json!({
        "acceptedNames": if accepted.is_object() { accepted } else { json!({"plural": "", "kind": ""}) },
        "conditions": conditions,
        "storedVersions": stored,
    })
}

/// Serves the definition's resource types in place of whatever it served before.
pub fn register(registry: &Registry, definition: &Definition) {
    // In one step: a request meanwhile finds the old types or the new, never a 404.
    let refused = registry.define(&definition.group, &definition.plural, &definition.types);
    for (version, e) in refused {
        tracing::warn!(crd = %definition.name, %version, error = %e, "a version of the CRD cannot be served");
    }
}

/// Stops serving every version of `group`/`plural` defined by a CRD.
pub fn unregister(registry: &Registry, group: &str, plural: &str) {
    for rt in registry.all() {
        if rt.group == group && rt.plural == plural && rt.schema.is_some() {
            registry.remove(&rt.group, &rt.version, &rt.plural);
        }
    }
}

/// Follows every CRD of every logical cluster in the store, so that a CRD written by
/// another server on the same store (a hub replica) is served here too, and one deleted
/// there stops being served: the stored CRDs are listed, then watched; each change
/// registers or unregisters its resource types in its cluster's registry (the root's, or
/// the view of a logical cluster served so far: a view made later reads the stored CRDs
/// as it is made). This server's own writes register at once too (`Strategy::written`);
/// the follower's second registration of them is the same. Ends when the API is dropped.
pub(crate) fn follow(api: &crate::Api) {
    let store = api.store.clone();
    let root = Arc::downgrade(&api.registry);
    let views = Arc::downgrade(&api.logical);
    let cluster = api.cluster.clone();
    let span = tracing::info_span!("crd_follower");
    let follow = async move {
        let rt_prefix =
            crate::registry::keys::resource_prefix_of(GROUP, "customresourcedefinitions");
        let mut since = None;
        loop {
            let revision = match since {
                Some(revision) => revision,
                None => match store.list_all(&rt_prefix).await {
                    Ok((kvs, revision)) => {
                        for kv in kvs {
                            let event = Change::Put(&kv.key, &kv.value);
                            if !apply(&root, &views, &cluster, &rt_prefix, event).await {
                                return;
                            }
                        }
                        revision
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list CRDs; trying again in 1 s");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        continue;
                    }
                },
            };
            since = None;
            let mut stream = match store.watch(&rt_prefix, revision).await {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch CRDs; listing them again in 1 s");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            };
            while let Some(event) = futures_util::StreamExt::next(&mut stream).await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(error = %e, "the watch of CRDs failed; listing them again");
                        since = None;
                        break;
                    }
                };
                let change = match event.kind {
                    flotilla_store::EventKind::Put => Change::Put(&event.kv.key, &event.kv.value),
                    flotilla_store::EventKind::Delete => Change::Delete(&event.kv.key),
                };
                if !apply(&root, &views, &cluster, &rt_prefix, change).await {
                    return;
                }
                since = Some(event.revision());
            }
            // A watch that ends is followed by a new one from where it was, after a pause.
            if since.is_some() {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    };
    tokio::spawn(tracing::Instrument::instrument(follow, span));
}

/// A change of a stored CRD.
enum Change<'a> {
    /// Created or updated: its key and value.
    Put(&'a [u8], &'a [u8]),
    /// Deleted: its key.
    Delete(&'a [u8]),
}

/// Applies `change` to the registry of its logical cluster; `false` once the API is gone.
async fn apply(
    root: &std::sync::Weak<Registry>,
    views: &std::sync::Weak<tokio::sync::Mutex<std::collections::HashMap<String, crate::Api>>>,
    root_cluster: &str,
    rt_prefix: &[u8],
    change: Change<'_>,
) -> bool {
    let key = match change {
        Change::Put(key, _) | Change::Delete(key) => key,
    };
    let Some(place) = crate::registry::keys::place(key, rt_prefix) else {
        return true;
    };
    let registry = if place.cluster == root_cluster {
        match root.upgrade() {
            Some(registry) => registry,
            None => return false,
        }
    } else {
        let Some(views) = views.upgrade() else {
            return false;
        };
        let views = views.lock().await;
        match views.get(place.cluster) {
            Some(view) => view.registry.clone(),
            // Not served yet: the view reads the stored CRDs when it is made.
            None => return true,
        }
    };
    match change {
        Change::Put(_, value) => {
            let Ok(mut object) = serde_json::from_slice::<Value>(value) else {
                return true;
            };
            if let Ok(definition) = admit(&mut object)
                && conflict(&definition, &registry).is_none()
            {
                register(&registry, &definition);
            }
        }
        Change::Delete(_) => {
            // The name is `<plural>.<group>`.
            if let Some((plural, group)) = place.name.split_once('.') {
                unregister(&registry, group, plural);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1alpha1", "served": false, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    fn fields(error: &ApiError) -> Vec<String> {
        error
            .details
            .as_ref()
            .unwrap()
            .causes
            .iter()
            .map(|c| c.field.clone())
            .collect()
    }

    #[test]
    fn a_valid_crd_defines_one_type_per_served_version_and_gets_default_names() {
        let mut crd = widget_crd();
        let definition = admit(&mut crd).unwrap();
        assert_eq!(crd["spec"]["names"]["singular"], "widget");
        assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(
            (
                definition.name.as_str(),
                definition.group.as_str(),
                definition.plural.as_str()
            ),
            ("widgets.example.com", "example.com", "widgets")
        );
        assert_eq!(definition.storage_version, "v1");
        let versions: Vec<&str> = definition
            .types
            .iter()
            .map(|t| t.version.as_str())
            .collect();
        assert_eq!(versions, ["v1", "v1beta1"]);
        let v1 = &definition.types[0];
        assert_eq!(
            (v1.kind.as_str(), v1.singular.as_str(), v1.namespaced),
            ("Widget", "widget", true)
        );
        assert_eq!(v1.short_names, ["wd"]);
        assert_eq!(v1.categories, ["all"]);
        assert_eq!(v1.subresources, [Subresource::Status]);
        assert_eq!(
            v1.schema.as_ref().unwrap().0["properties"]["spec"]["type"],
            "object"
        );
        assert!(definition.types[1].subresources.is_empty());
    }

    #[test]
    fn every_problem_is_named() {
        let mut crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "nodot", "scope": "Everywhere",
            "names": {"plural": "Widgets", "kind": "wid get"},
            "conversion": {"strategy": "Webhook"},
            "versions": [{"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "string"}}},
                         {"name": "v1", "served": true, "storage": false}]}});
        let error = admit(&mut crd).unwrap_err();
        assert_eq!(error.code, 422);
        // The singular defaults to the lowercase kind, "wid get", itself invalid.
        assert_eq!(
            fields(&error),
            [
                "spec.group",
                "spec.names.plural",
                "spec.names.singular",
                "spec.names.kind",
                "metadata.name",
                "spec.scope",
                "spec.conversion.strategy",
                "spec.versions[0].schema.openAPIV3Schema.type",
                "spec.versions[1].name",
                "spec.versions[1].schema.openAPIV3Schema",
                "spec.versions",
            ]
        );
        assert!(
            error.message.contains("only \"None\" is supported"),
            "{}",
            error.message
        );
        let mut crd = widget_crd();
        crd["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(fields(&admit(&mut crd).unwrap_err()), ["metadata.name"]);
        let error = admit(&mut json!({"metadata": {"name": "x"}})).unwrap_err();
        assert_eq!(fields(&error), ["spec"]);
    }

    #[test]
    fn clashing_names_are_not_accepted() {
        let registry = Registry::builtin();
        let mut crd = widget_crd();
        let definition = admit(&mut crd).unwrap();
        assert_eq!(conflict(&definition, &registry), None);
        register(&registry, &definition);
        assert!(registry.get("example.com", "v1", "widgets").is_some());
        // The same CRD again (an update) does not clash with itself.
        assert_eq!(conflict(&definition, &registry), None);
        // Another plural with the same kind does.
        let mut other = widget_crd();
        other["metadata"]["name"] = json!("gizmos.example.com");
        other["spec"]["names"]["plural"] = json!("gizmos");
        let other = admit(&mut other).unwrap();
        assert!(
            conflict(&other, &registry)
                .unwrap()
                .contains("\"Widget\" is already in use")
        );
        // A built-in's plural in its own group.
        let mut pods = json!({"metadata": {"name": "deployments.apps"}, "spec": {"group": "apps", "scope": "Namespaced",
            "names": {"plural": "deployments", "kind": "Deployment2"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        let pods = admit(&mut pods);
        // "apps" has no dot: refused before any clash.
        assert!(pods.is_err());
        let before = registry.generation();
        unregister(&registry, "example.com", "widgets");
        assert!(registry.get("example.com", "v1", "widgets").is_none());
        assert!(registry.get("example.com", "v1beta1", "widgets").is_none());
        assert!(registry.generation() > before);
    }

    #[test]
    fn registering_again_is_never_a_moment_without_the_type() {
        let registry = Arc::new(Registry::builtin());
        let mut crd = widget_crd();
        let definition = admit(&mut crd).unwrap();
        register(&registry, &definition);
        // The same definition again changes nothing (discovery keeps its caches).
        let generation = registry.generation();
        register(&registry, &definition);
        assert_eq!(registry.generation(), generation);
        // A changed one (v1beta1 no longer served) while another thread reads v1: every
        // read finds it, before and after each change.
        let mut changed = widget_crd();
        changed["spec"]["versions"][1]["served"] = json!(false);
        let changed = admit(&mut changed).unwrap();
        let reader = {
            let registry = registry.clone();
            std::thread::spawn(move || {
                (0..200_000)
                    .filter(|_| registry.get("example.com", "v1", "widgets").is_none())
                    .count()
            })
        };
        for round in 0..2_000 {
            let next = if round % 2 == 0 {
                &changed
            } else {
                &definition
            };
            register(&registry, next);
        }
        assert_eq!(reader.join().unwrap(), 0, "reads found no widgets/v1");
        assert!(registry.get("example.com", "v1beta1", "widgets").is_some());
        register(&registry, &changed);
        assert!(registry.get("example.com", "v1beta1", "widgets").is_none());
        assert!(registry.get("example.com", "v1", "widgets").is_some());
    }

    #[test]
    fn status_reports_names_and_conditions() {
        let mut crd = widget_crd();
        let definition = admit(&mut crd).unwrap();
        let status = status(&definition, None, &Value::Null, false);
        assert_eq!(status["acceptedNames"]["kind"], "Widget");
        assert_eq!(status["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        let conditions: Vec<(&str, &str)> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            conditions,
            [("NamesAccepted", "True"), ("Established", "True")]
        );
        // Transition times stay while the condition holds.
        let mut previous = status.clone();
        previous["conditions"][1]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        let again = super::status(&definition, None, &previous, true);
        assert_eq!(
            again["conditions"][1]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(again["conditions"][2]["type"], "Terminating");
        let clash = super::status(&definition, Some("taken"), &Value::Null, false);
        assert_eq!(clash["conditions"][0]["status"], "False");
        assert_eq!(clash["conditions"][0]["message"], "taken");
        assert_eq!(clash["acceptedNames"]["kind"], "");
    }
}
