//! OpenAPI v3: the index at `/openapi/v3` and one document per group/version.
//!
//! ```text
//!  generated/builtin-schemas.json ─┐   (gen/schemas.py, from the Kubernetes v1.32 schema)
//!  CRD versions' openAPIV3Schema  ─┼─► components.schemas ─┐
//!  Registry (resource types)      ─┴─► paths (operations) ──┴─► /openapi/v3/apis/{g}/{v}
//! ```
//!
//! kubectl reads the PATCH operation of a kind (found by `x-kubernetes-group-version-kind`)
//! to learn that the server validates fields itself (`fieldValidation`); `kubectl explain`
//! renders the component schema carrying the kind's group-version-kind.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::{Map, Value, json};

use crate::discovery;
use crate::registry::resources::{Registry, ResourceType, Subresource};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// The strategic merge patch content type, accepted for built-in kinds only.
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// The patch content types the server accepts for every kind.
pub const PATCH_CONTENT_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// The component schemas of the built-in kinds and everything they reference, by
/// definition name (`io.k8s.api.apps.v1.Deployment`).
pub fn builtin_schemas() -> &'static Map<String, Value> {
    static SCHEMAS: OnceLock<Map<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        serde_json::from_str(include_str!("../generated/builtin-schemas.json"))
            .expect("the generated schemas are JSON")
    })
}

/// A built-in schema by definition name, through an index (the map of every definition is
/// ordered, so a lookup in it compares many long names that share a prefix).
pub fn builtin_schema(name: &str) -> Option<&'static Value> {
    static BY_NAME: OnceLock<HashMap<&'static str, &'static Value>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            builtin_schemas()
                .iter()
                .map(|(name, schema)| (name.as_str(), schema))
                .collect()
        })
        .get(name)
        .copied()
}

/// The definition name of a built-in kind's schema, if the generated table has it.
pub fn builtin_definition(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    /// (group, version, definition name) of each kind.
    type ByKind = HashMap<&'static str, Vec<(&'static str, &'static str, &'static str)>>;
    static BY_KIND: OnceLock<ByKind> = OnceLock::new();
    let by_kind = BY_KIND.get_or_init(|| {
        let mut map: ByKind = HashMap::new();
        for (name, schema) in builtin_schemas() {
            for gvk in schema["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let part = |k: &str| gvk[k].as_str().unwrap_or_default();
                let versions = map.entry(part("kind")).or_default();
                // As a map by (group, version, kind) would, the last definition wins.
                versions.retain(|(g, v, _)| (*g, *v) != (part("group"), part("version")));
                versions.push((part("group"), part("version"), name.as_str()));
            }
        }
        map
    });
    by_kind
        .get(kind)?
        .iter()
        .find(|(g, v, _)| *g == group && *v == version)
        .map(|(_, _, name)| *name)
}

/// The schema of a built-in kind, if the generated table has it.
pub fn builtin_kind_schema(group: &str, version: &str, kind: &str) -> Option<&'static Value> {
    builtin_schema(builtin_definition(group, version, kind)?)
}

/// The component name of a custom resource's schema, as Kubernetes names it: the group
/// reversed, then version and kind (`com.example.v1.Widget`).
pub fn custom_definition(rt: &ResourceType) -> String {
    let reversed: Vec<&str> = rt.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), rt.version, rt.kind)
}

/// The definition name of `rt`'s objects in the documents.
pub fn definition_name(rt: &ResourceType) -> Option<String> {
    if rt.schema.is_some() {
        return Some(custom_definition(rt));
    }
    builtin_definition(&rt.group, &rt.version, &rt.kind).map(str::to_owned)
}

/// The URL path of a group/version's document, without the leading `/openapi/v3/`.
fn document_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Documents built for one registry generation (a CRD change makes new ones).
#[derive(Default)]
pub struct Cache {
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    generation: Option<u64>,
    documents: HashMap<String, Arc<(Vec<u8>, String)>>,
}

impl Cache {
    /// The serialized document at `path` (`api/v1`, `apis/apps/v1`) and its hash, built
    /// on first use for the registry's current generation; `None` if nothing is served there.
    pub fn document(&self, registry: &Registry, path: &str) -> Option<Arc<(Vec<u8>, String)>> {
        let generation = registry.generation();
        {
            let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if inner.generation != Some(generation) {
                inner.generation = Some(generation);
                inner.documents.clear();
            }
            if let Some(found) = inner.documents.get(path) {
                return Some(found.clone());
            }
        }
        let (group, version) = match path.split('/').collect::<Vec<_>>().as_slice() {
            ["api", version] => (String::new(), (*version).to_owned()),
            ["apis", group, version] => ((*group).to_owned(), (*version).to_owned()),
            _ => return None,
        };
        let document = group_version_document(registry, &group, &version)?;
        let bytes = serde_json::to_vec(&document).unwrap_or_default();
        let hash = content_hash(&bytes);
        let built = Arc::new((bytes, hash));
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.generation == Some(generation) {
            inner.documents.insert(path.to_owned(), built.clone());
        }
        Some(built)
    }

    /// The `/openapi/v3` index: every served group/version with the URL of its document,
    /// whose `hash` parameter changes with the document's content.
    pub fn index(&self, registry: &Registry) -> Value {
        let mut paths = Map::new();
        for group in registry.groups() {
            for version in &group.versions {
                let path = document_path(&group.name, version);
                if let Some(document) = self.document(registry, &path) {
                    paths.insert(
                        path.clone(),
                        json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", document.1)}),
                    );
                }
            }
        }
        json!({"paths": paths})
    }
}

/// A stable 64-bit FNV-1a hash of the bytes, as 16 uppercase hex digits.
fn content_hash(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016X}")
}

/// The OpenAPI v3 document of one group/version: paths for every resource served there
/// and the component schemas they use; `None` if the group/version serves nothing.
pub fn group_version_document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.group_version(group, version);
    if types.is_empty() {
        return None;
    }
    let mut schemas = BTreeMap::new();
    let mut wanted: BTreeSet<String> = [OBJECT_META, LIST_META, STATUS, DELETE_OPTIONS, PATCH]
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut paths = Map::new();
    for rt in &types {
        let Some(definition) = definition_name(rt) else {
            continue;
        };
        if let Some(schema) = &rt.schema {
            schemas.insert(definition.clone(), custom_schema(rt, &schema.0));
        } else {
            wanted.insert(definition.clone());
        }
        let list = format!("{definition}List");
        schemas.insert(list.clone(), list_schema(rt, &definition));
        resource_paths(rt, &definition, &list, &mut paths);
    }
    // The closure of the built-in definitions referenced.
    let builtins = builtin_schemas();
    let mut todo: Vec<String> = wanted.into_iter().collect();
    while let Some(name) = todo.pop() {
        if schemas.contains_key(&name) {
            continue;
        }
        let Some(schema) = builtins.get(&name) else {
            continue;
        };
        references(schema, &mut |r| todo.push(r.to_owned()));
        schemas.insert(name, schema.clone());
    }
    let title = if group.is_empty() {
        "Kubernetes".to_owned()
    } else {
        format!("Kubernetes {group}")
    };
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": title, "version": discovery::GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// Calls `found` with the definition name of every `$ref` inside `schema`.
fn references(schema: &Value, found: &mut impl FnMut(&str)) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                if key == "$ref" {
                    if let Some(name) = value
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                    {
                        found(name);
                    }
                } else {
                    references(value, found);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| references(v, found)),
        _ => {}
    }
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn gvk(rt: &ResourceType, kind: &str) -> Value {
    json!({"group": rt.group, "version": rt.version, "kind": kind})
}

/// A custom resource's component schema: its `openAPIV3Schema` with apiVersion, kind and
/// metadata described as Kubernetes describes them.
fn custom_schema(rt: &ResourceType, schema: &Value) -> Value {
    let mut schema = schema.clone();
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    let builtins = builtin_schemas();
    let field = |name: &str| -> Value {
        builtins
            .get(STATUS)
            .and_then(|s| s["properties"].get(name))
            .cloned()
            .unwrap_or_else(|| json!({"type": "string"}))
    };
    let properties = schema
        .as_object_mut()
        .map(|m| m.entry("properties").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut);
    if let Some(properties) = properties {
        properties.insert("apiVersion".into(), field("apiVersion"));
        properties.insert("kind".into(), field("kind"));
        properties.insert(
            "metadata".into(),
            json!({"allOf": [reference(OBJECT_META)],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk(rt, &rt.kind)]);
    schema
}

fn list_schema(rt: &ResourceType, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", rt.list_kind(), rt.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": reference(item)},
            "metadata": {"allOf": [reference(LIST_META)]},
        },
        "x-kubernetes-group-version-kind": [gvk(rt, &rt.list_kind())],
    })
}

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut params = vec![
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted. The only valid value is All.",
        ),
        query(
            "fieldManager",
            "A name associated with the actor or entity that is making these changes.",
        ),
        query(
            "fieldValidation",
            "How the server treats unknown or duplicate fields in the request: Ignore, Warn (the default) or Strict.",
        ),
    ];
    if patch {
        params.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}));
    }
    params
}

fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

fn operation(
    id: String,
    action: &str,
    rt: &ResourceType,
    kind: &str,
    response: &str,
    params: Vec<Value>,
) -> Value {
    json!({
        "operationId": id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(rt, kind),
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": json_content(reference(response))},
            "401": {"description": "Unauthorized"}},
    })
}

/// The paths of one resource (collection, object, subresources) with their operations.
fn resource_paths(rt: &ResourceType, definition: &str, list: &str, paths: &mut Map<String, Value>) {
    let root = if rt.group.is_empty() {
        format!("/api/{}", rt.version)
    } else {
        format!("/apis/{}/{}", rt.group, rt.version)
    };
    let scoped = if rt.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", rt.plural)
    } else {
        format!("{root}/{}", rt.plural)
    };
    let id = |verb: &str, suffix: &str| {
        format!(
            "{verb}{}{}{suffix}",
            rt.kind,
            if rt.namespaced { "Namespaced" } else { "" }
        )
    };
    let mut scope_params = Vec::new();
    if rt.namespaced {
        scope_params.push(path_param(
            "namespace",
            "object name and auth scope, such as for teams and projects",
        ));
    }
    let kind = rt.kind.as_str();

    let mut collection = Map::new();
    collection.insert(
        "get".into(),
        operation(id("list", ""), "list", rt, kind, list, Vec::new()),
    );
    let mut post = operation(
        id("create", ""),
        "post",
        rt,
        kind,
        definition,
        write_params(false),
    );
    post["requestBody"] = json!({"content": json_content(reference(definition)), "required": true});
    collection.insert("post".into(), post);
    if rt.supports("deletecollection") {
        collection.insert(
            "delete".into(),
            operation(
                id("deletecollection", ""),
                "deletecollection",
                rt,
                kind,
                STATUS,
                Vec::new(),
            ),
        );
    }
    collection.insert("parameters".into(), Value::Array(scope_params.clone()));
    paths.insert(scoped.clone(), Value::Object(collection));

    let mut object_params = scope_params.clone();
    object_params.insert(0, path_param("name", &format!("name of the {}", rt.kind)));
    let object_path = format!("{scoped}/{{name}}");
    paths.insert(
        object_path.clone(),
        object_operations(rt, kind, definition, "", object_params.clone(), &id),
    );
    for sub in &rt.subresources {
        if *sub == Subresource::Status {
            paths.insert(
                format!("{object_path}/status"),
                object_operations(rt, kind, definition, "Status", object_params.clone(), &id),
            );
        }
    }
    if rt.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            operation(
                format!("list{}ForAllNamespaces", rt.kind),
                "list",
                rt,
                kind,
                list,
                Vec::new(),
            ),
        );
        paths.insert(format!("{root}/{}", rt.plural), Value::Object(all));
    }
}

fn object_operations(
    rt: &ResourceType,
    kind: &str,
    definition: &str,
    suffix: &str,
    params: Vec<Value>,
    id: &dyn Fn(&str, &str) -> String,
) -> Value {
    let mut ops = Map::new();
    ops.insert(
        "get".into(),
        operation(id("read", suffix), "get", rt, kind, definition, Vec::new()),
    );
    let mut put = operation(
        id("replace", suffix),
        "put",
        rt,
        kind,
        definition,
        write_params(false),
    );
    put["requestBody"] = json!({"content": json_content(reference(definition)), "required": true});
    ops.insert("put".into(), put);
    let mut patch = operation(
        id("patch", suffix),
        "patch",
        rt,
        kind,
        definition,
        write_params(true),
    );
    let mut content: Map<String, Value> = PATCH_CONTENT_TYPES
        .iter()
        .map(|t| ((*t).to_owned(), json!({"schema": reference(PATCH)})))
        .collect();
    // Strategic merge patch only where the server has the kind's patch strategies.
    if rt.schema.is_none() {
        content.insert(STRATEGIC.to_owned(), json!({"schema": reference(PATCH)}));
    }
    patch["requestBody"] = json!({"content": content, "required": true});
    ops.insert("patch".into(), patch);
    if suffix.is_empty() {
        let mut delete = operation(
            id("delete", ""),
            "delete",
            rt,
            kind,
            STATUS,
            vec![query(
                "dryRun",
                "When present, indicates that modifications should not be persisted.",
            )],
        );
        delete["requestBody"] = json!({"content": json_content(reference(DELETE_OPTIONS))});
        ops.insert("delete".into(), delete);
    }
    ops.insert("parameters".into(), Value::Array(params));
    Value::Object(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Schema;

    #[test]
    fn every_builtin_kind_has_a_generated_schema() {
        for rt in Registry::builtin().all() {
            let name = builtin_definition(&rt.group, &rt.version, &rt.kind)
                .unwrap_or_else(|| panic!("no schema for {}/{} {}", rt.group, rt.version, rt.kind));
            let schema = &builtin_schemas()[name];
            assert!(schema["properties"]["metadata"].is_object(), "{name}");
            assert!(
                schema["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{name}"
            );
        }
    }

    #[test]
    fn generated_schemas_are_openapi_v3_with_resolvable_references() {
        let schemas = builtin_schemas();
        for (name, schema) in schemas {
            references(schema, &mut |r| {
                assert!(schemas.contains_key(r), "{name} refers to missing {r}")
            });
            let text = schema.to_string();
            assert!(
                !text.contains("#/$defs/") && !text.contains("\"null\""),
                "{name}: {text:.200}"
            );
        }
        let int_or_string = &schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
        assert_eq!(int_or_string["format"], "int-or-string");
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    }

    #[test]
    fn a_document_has_every_resource_with_its_patch_operation() {
        let registry = Registry::builtin();
        let doc = group_version_document(&registry, "apps", "v1").unwrap();
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        let params: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            params,
            ["dryRun", "fieldManager", "fieldValidation", "force"]
        );
        let types: Vec<&String> = patch["requestBody"]["content"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert!(types.iter().any(|t| *t == STRATEGIC), "{types:?}");
        assert!(
            doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/status"]["put"]
                .is_object()
        );
        assert!(doc["paths"]["/apis/apps/v1/deployments"]["get"].is_object());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "io.k8s.api.apps.v1.Deployment",
            "io.k8s.api.core.v1.PodSpec",
            OBJECT_META,
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
        ] {
            assert!(schemas.contains_key(name), "{name}");
        }
        // Only what the group/version needs: no ConfigMap in apps/v1.
        assert!(!schemas.contains_key("io.k8s.api.core.v1.ConfigMap"));
        // Cluster-scoped resources have no namespace segment.
        let core = group_version_document(&registry, "", "v1").unwrap();
        assert!(core["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(group_version_document(&registry, "nothing.example", "v1").is_none());
    }

    #[test]
    fn custom_resources_get_their_schema_and_the_index_follows_the_registry() {
        let registry = Registry::builtin();
        let cache = Cache::default();
        let before = cache.index(&registry);
        assert!(before["paths"]["apis/example.com/v1"].is_null());
        assert!(
            before["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/api/v1?hash=")
        );
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(Schema(Arc::new(
            json!({"type": "object", "description": "A widget.",
            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "description": "How big."}}}}}),
        )));
        registry.add(rt).unwrap();
        let after = cache.index(&registry);
        let url = after["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(
            url.starts_with("/openapi/v3/apis/example.com/v1?hash="),
            "{url}"
        );
        let (bytes, _) = &*cache.document(&registry, "apis/example.com/v1").unwrap();
        let doc: Value = serde_json::from_slice(bytes).unwrap();
        let widget = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            widget["properties"]["spec"]["properties"]["size"]["description"],
            "How big."
        );
        assert_eq!(
            widget["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("#/components/schemas/{OBJECT_META}")
        );
        assert_eq!(
            widget["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert!(doc["components"]["schemas"][OBJECT_META].is_object());
        let patch_types = doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]["requestBody"]["content"]
            .as_object()
            .unwrap();
        assert!(
            !patch_types.contains_key(STRATEGIC),
            "no strategic merge patch for custom resources"
        );
        assert!(
            doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
                .is_object()
        );
    }

    #[test]
    fn the_hash_changes_with_the_content() {
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
        assert_eq!(content_hash(b"a"), content_hash(b"a"));
        assert_eq!(content_hash(b"").len(), 16);
    }
}
