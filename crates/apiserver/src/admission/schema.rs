//! Objects checked against their kind's OpenAPI v3 schema: fields the schema does not know.
//!
//! ```text
//!  request object ─► Schema::for_type(rt) ─► prune(): unknown fields removed, their paths
//!                    (built-in: generated table,         returned ─► fieldValidation:
//!                     custom: the CRD's schema)                       Strict 400 | Warn | Ignore
//! ```
//!
//! A built-in kind's object keeps only the fields of its Go type, as the Kubernetes API
//! server decodes it; a custom resource is pruned to its structural schema. Either way the
//! store never holds a field the schema does not describe, and `fieldValidation` decides
//! whether a request naming one fails, warns or passes silently.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError, Weak};

use serde_json::{Map, Value};

use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult, Cause};
use crate::registry::resources::ResourceType;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// How a request treats unknown fields (the `fieldValidation` query parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    /// Fail the request, naming every unknown field.
    Strict,
    /// Drop unknown fields and warn about each (the default).
    Warn,
    /// Drop unknown fields silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter; absent means `Warn`.
    pub fn parse(value: Option<&str>) -> ApiResult<Self> {
        match value {
            None | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid fieldValidation {other:?}: must be one of Ignore, Warn or Strict"
            ))),
        }
    }
}

/// The schema an object of some kind is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Schema<'a> {
    root: &'a Value,
    /// Built-in schemas describe free-form values (`RawExtension`, `FieldsV1`) as objects
    /// without properties; a structural schema of a custom resource means "no fields".
    builtin: bool,
}

impl<'a> Schema<'a> {
    /// The schema of `rt`'s objects, if the server has one.
    pub fn for_type(rt: &'a ResourceType) -> Option<Schema<'a>> {
        if let Some(schema) = &rt.schema {
            return Some(Schema {
                root: &schema.0,
                builtin: false,
            });
        }
        Some(Schema {
            root: openapi::builtin_kind_schema(&rt.group, &rt.version, &rt.kind)?,
            builtin: true,
        })
    }

    /// The schema of a built-in kind whose root is `root`.
    pub(crate) fn builtin_root(root: &'a Value) -> Schema<'a> {
        Schema {
            root,
            builtin: true,
        }
    }

    /// Removes the fields of `object` that the schema does not describe and returns their
    /// paths (`spec.template.spec.containers[0].colour`), fields in key order at each level.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        let Some(map) = object.as_object_mut() else {
            return unknown;
        };
        let properties = resolve(self.root)["properties"].as_object();
        let meta = openapi::builtin_schema(OBJECT_META).unwrap_or(&Value::Null);
        let mut path = String::new();
        map.retain(|key, value| {
            let field = match key.as_str() {
                "apiVersion" | "kind" => return true,
                "metadata" => Some(meta),
                _ => properties.and_then(|p| p.get(key)),
            };
            match field {
                Some(field) => {
                    path.clear();
                    path.push_str(key);
                    // Metadata is ObjectMeta for every kind: a built-in schema.
                    let builtin = self.builtin || key == "metadata";
                    walk(field, value, &mut path, builtin, &mut unknown);
                    true
                }
                None if self.preserves(self.root) => true,
                None => {
                    unknown.push(key.clone());
                    false
                }
            }
        });
        unknown
    }

    fn preserves(&self, schema: &Value) -> bool {
        preserves_unknown(resolve(schema), self.builtin)
    }
}

/// The schema a node stands for: `$ref` and a single `allOf` reference into the built-in
/// schemas are followed.
pub(crate) fn resolve(schema: &Value) -> &Value {
    match builtin_node(schema) {
        Some(node) => node.schema,
        None => resolve_by_name(schema),
    }
}

/// A node of the built-in schemas, with its references already followed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BuiltinNode {
    /// The definition the node refers to by `$ref` or a single `allOf` (its name without
    /// `#/components/schemas/`), if it refers to one.
    pub(crate) reference: Option<&'static str>,
    /// What [`resolve`] makes of the node.
    pub(crate) schema: &'static Value,
    /// What the walks read of that resolved node.
    pub(crate) facts: Facts<'static>,
}

/// What the walks of an object against its schema read of a resolved schema node, read
/// once: for a built-in node when the index is built, for any other when it is met.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts<'a> {
    /// `type`.
    pub(crate) type_name: Option<&'a str>,
    /// `format`, `""` if none.
    pub(crate) format: &'a str,
    /// `x-kubernetes-int-or-string: true`.
    pub(crate) int_or_string: bool,
    /// `properties`, if an object.
    pub(crate) properties: Option<&'a Map<String, Value>>,
    /// `additionalProperties` when it is a schema (an object).
    pub(crate) additional: Option<&'a Value>,
    /// `items`, whatever its value.
    pub(crate) items: Option<&'a Value>,
    /// `required`.
    pub(crate) required: &'a [Value],
    /// Unknown fields are kept whatever else the node says: it preserves unknown fields,
    /// is an embedded resource, or has `additionalProperties: true`.
    keeps_unknown: bool,
    /// It has `properties` / `additionalProperties` (of any value).
    pub(crate) has_properties: bool,
    has_additional: bool,
}

impl<'a> Facts<'a> {
    /// The facts of `schema`, a resolved node.
    pub(crate) fn of(schema: &'a Value) -> Self {
        Facts {
            type_name: schema["type"].as_str(),
            format: schema["format"].as_str().unwrap_or(""),
            int_or_string: schema["x-kubernetes-int-or-string"] == Value::Bool(true),
            properties: schema["properties"].as_object(),
            additional: schema.get("additionalProperties").filter(|a| a.is_object()),
            items: schema.get("items"),
            required: schema["required"].as_array().map_or(&[], Vec::as_slice),
            keeps_unknown: schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
                || schema["x-kubernetes-embedded-resource"] == Value::Bool(true)
                || schema["additionalProperties"] == Value::Bool(true),
            has_properties: schema.get("properties").is_some(),
            has_additional: schema.get("additionalProperties").is_some(),
        }
    }

    /// Whether unknown fields under an object of this node are kept ([`preserves_unknown`]).
    pub(crate) fn preserves_unknown(&self, builtin: bool) -> bool {
        // A built-in object with neither properties nor additionalProperties is free-form.
        self.keeps_unknown || (builtin && !self.has_properties && !self.has_additional)
    }
}

/// A node resolved ([`resolve`]) and its [`Facts`]: from the index for a built-in node.
pub(crate) fn resolved_facts(schema: &Value) -> (&Value, Facts<'_>) {
    match builtin_node(schema) {
        Some(node) => (node.schema, node.facts),
        None => {
            let resolved = resolve_by_name(schema);
            (resolved, Facts::of(resolved))
        }
    }
}

/// The node `schema` is, if it is an object node of the built-in schemas: every walk of an
/// object against its schema asks this at every value, so the answer is found by the node's
/// address (the built-in schemas are loaded once and never move, about 3,000 object nodes)
/// rather than by reading the node's `$ref`/`allOf` and hashing a definition's name. Any
/// other node (a custom resource's schema, a copy) is not found here.
pub(crate) fn builtin_node(schema: &Value) -> Option<BuiltinNode> {
    static INDEX: OnceLock<AddressTable> = OnceLock::new();
    fn add(node: &'static Value, nodes: &mut Vec<(usize, BuiltinNode)>) {
        match node {
            Value::Object(map) => {
                let schema = resolve_by_name(node);
                let found = BuiltinNode {
                    reference: reference(node),
                    schema,
                    facts: Facts::of(schema),
                };
                nodes.push((std::ptr::from_ref(node) as usize, found));
                map.values().for_each(|child| add(child, nodes));
            }
            Value::Array(items) => items.iter().for_each(|item| add(item, nodes)),
            _ => {}
        }
    }
    INDEX
        .get_or_init(|| {
            let mut nodes = Vec::new();
            openapi::builtin_schemas()
                .values()
                .for_each(|definition| add(definition, &mut nodes));
            AddressTable::new(nodes)
        })
        .get(std::ptr::from_ref(schema) as usize)
}

/// The built-in nodes by address: an open-addressed table (linear probing, at most half
/// full) whose slot is the address multiplied by a large odd constant, its high bits kept
/// (an address's low bits are all zero from alignment). A lookup, made at every value of
/// every walk, is a multiply, a shift and a compare or two.
struct AddressTable {
    slots: Vec<Option<(usize, BuiltinNode)>>,
    /// 64 − log2(the number of slots).
    shift: u32,
}

impl AddressTable {
    fn new(nodes: Vec<(usize, BuiltinNode)>) -> Self {
        let size = (nodes.len() * 2).next_power_of_two().max(2);
        let mut table = AddressTable {
            slots: vec![None; size],
            shift: 64 - size.trailing_zeros(),
        };
        for (address, node) in nodes {
            let mut slot = table.slot(address);
            while table.slots[slot].is_some() {
                slot = (slot + 1) & (size - 1);
            }
            table.slots[slot] = Some((address, node));
        }
        table
    }

    fn slot(&self, address: usize) -> usize {
        ((address as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    fn get(&self, address: usize) -> Option<BuiltinNode> {
        let mask = self.slots.len() - 1;
        let mut slot = self.slot(address);
        loop {
            match &self.slots[slot] {
                Some((at, node)) if *at == address => return Some(*node),
                Some(_) => slot = (slot + 1) & mask,
                None => return None,
            }
        }
    }
}

/// The definition `schema` refers to by `$ref` (or a single `allOf`), if it refers to one.
pub(crate) fn reference(schema: &Value) -> Option<&str> {
    schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
}

/// [`resolve`] by reading the node's references and looking their definitions up by name.
fn resolve_by_name(schema: &Value) -> &Value {
    let mut schema = schema;
    for _ in 0..8 {
        let Some(map) = schema.as_object() else {
            break;
        };
        let reference = match map.get("$ref") {
            Some(reference) => reference,
            None => match map.get("allOf") {
                Some(all) => &all[0]["$ref"],
                None => break,
            },
        };
        let target = reference
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"));
        match target.and_then(definition) {
            Some(next) => schema = next,
            None => break,
        }
    }
    schema
}

/// A built-in definition by name, for [`resolve`]: the index of `openapi::builtin_schema`
/// with a cheaper hash (FNV-1a; the keys are the generated definitions' names, and a
/// lookup is made for every reference of every object admitted).
pub(crate) fn definition(name: &str) -> Option<&'static Value> {
    type Index = HashMap<&'static str, &'static Value, BuildHasherDefault<Fnv>>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            openapi::builtin_schemas()
                .iter()
                .map(|(name, schema)| (name.as_str(), schema))
                .collect()
        })
        .get(name)
        .copied()
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Whether unknown fields under an object node are kept.
fn preserves_unknown(schema: &Value, builtin: bool) -> bool {
    if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
        || schema["x-kubernetes-embedded-resource"] == Value::Bool(true)
        || schema["additionalProperties"] == Value::Bool(true)
    {
        return true;
    }
    // A built-in object with neither properties nor additionalProperties is free-form.
    builtin && schema.get("properties").is_none() && schema.get("additionalProperties").is_none()
}

fn walk(
    schema: &Value,
    value: &mut Value,
    path: &mut String,
    builtin: bool,
    unknown: &mut Vec<String>,
) {
    let (_, facts) = resolved_facts(schema);
    match value {
        Value::Object(map) => {
            if facts.preserves_unknown(builtin) && !facts.has_properties {
                return;
            }
            walk_object(&facts, map, path, builtin, unknown);
        }
        Value::Array(items) => {
            let Some(item_schema) = facts.items else {
                return;
            };
            let base = path.len();
            for (i, item) in items.iter_mut().enumerate() {
                // Into the path itself: no string of its own per item.
                let _ = std::fmt::Write::write_fmt(path, format_args!("[{i}]"));
                walk(item_schema, item, path, builtin, unknown);
                path.truncate(base);
            }
        }
        _ => {}
    }
}

fn walk_object(
    facts: &Facts<'_>,
    map: &mut Map<String, Value>,
    path: &mut String,
    builtin: bool,
    unknown: &mut Vec<String>,
) {
    let properties = facts.properties;
    let additional = facts.additional;
    let keep_unknown = facts.preserves_unknown(builtin);
    let base = path.len();
    map.retain(|key, value| {
        let field = properties.and_then(|p| p.get(key)).or(additional);
        if let Some(field) = field {
            path.push('.');
            path.push_str(key);
            walk(field, value, path, builtin, unknown);
            path.truncate(base);
            return true;
        }
        if keep_unknown {
            return true;
        }
        unknown.push(if base == 0 {
            key.clone()
        } else {
            format!("{}.{key}", &path[..base])
        });
        false
    });
}

/// A custom resource's structural schema: defaults and value checks (built-in kinds have
/// neither here; their Go validation is not emulated).
#[derive(Clone, Copy, Debug)]
pub struct Structural<'a> {
    root: &'a Value,
    /// The schema as the resource type shares it, which its compiled rules are cached by.
    shared: &'a Arc<Value>,
}

impl<'a> Structural<'a> {
    /// The structural schema of a custom resource type; `None` for built-in kinds.
    pub fn for_type(rt: &'a ResourceType) -> Option<Structural<'a>> {
        rt.schema.as_ref().map(|s| Structural {
            root: &s.0,
            shared: &s.0,
        })
    }

    /// Fills in every `default` the schema gives for a field that is absent, at every depth
    /// (a defaulted object is itself defaulted). Metadata, apiVersion and kind are left alone.
    pub fn default(&self, object: &mut Value) {
        apply_defaults(self.root, object, true);
    }

    /// Every way the object breaks the schema, as causes with field paths.
    pub fn validate(&self, object: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(map) = object.as_object() {
            check_fields(self.root, map, &At::Root, &mut causes);
        }
        causes
    }
}

impl Structural<'_> {
    /// The causes of every `x-kubernetes-validations` CEL rule the object breaks; rules
    /// with `oldSelf` (transition rules) run only on updates, against `old`. Evaluated by
    /// kube-cel, which implements the Kubernetes CEL libraries.
    pub fn rules(&self, object: &Value, old: Option<&Value>) -> Vec<Cause> {
        let Some(compiled) = compiled_rules(self.shared) else {
            return Vec::new();
        };
        compiled
            .validate(object, old)
            .into_iter()
            .map(|e| {
                let field = if e.field_path.is_empty() {
                    "<root>".to_owned()
                } else {
                    e.field_path.clone()
                };
                let message = match e.kind {
                    kube_cel::ErrorKind::ValidationFailure => {
                        format!("Invalid value: \"object\": {}", e.message)
                    }
                    _ => format!(
                        "the validation rule {:?} could not be evaluated: {}",
                        e.rule, e.message
                    ),
                };
                cause(
                    &field,
                    e.reason.as_deref().unwrap_or("FieldValueInvalid"),
                    message,
                )
            })
            .collect()
    }
}

thread_local! {
    /// A CEL environment with the Kubernetes libraries, made once per thread (making one
    /// registers every function).
    static VALIDATOR: kube_cel::Validator = kube_cel::Validator::new();
}

/// A schema's rules, compiled once, in two parts: the rules on the object itself (whose
/// `self` is the whole object) and every rule below it. A status write then need not turn
/// the whole status into CEL values for root rules that never read it.
struct CompiledRules {
    /// The root's rules, nested rules stripped.
    root: Option<kube_cel::CompiledSchema>,
    /// Whether a root rule (or its message expression) mentions `status`; if not, root
    /// rules see the object without it.
    root_reads_status: bool,
    /// Every rule below the root.
    nested: Option<kube_cel::CompiledSchema>,
    /// The top-level properties whose schemas hold rules, when every rule below the root
    /// is under one (`None`: some other part of the schema holds rules).
    ruled: Option<Vec<String>>,
}

impl CompiledRules {
    fn compile(schema: &Value) -> Option<CompiledRules> {
        if !has_rules(schema) {
            return None;
        }
        let root_rules = &schema["x-kubernetes-validations"];
        let mut root = schema.clone();
        if let Some(map) = root.as_object_mut() {
            for (key, value) in map.iter_mut() {
                if key != "x-kubernetes-validations" {
                    strip_rules(value);
                }
            }
        }
        let mut nested = schema.clone();
        if let Some(map) = nested.as_object_mut() {
            map.remove("x-kubernetes-validations");
        }
        Some(CompiledRules {
            root: root_rules
                .as_array()
                .is_some_and(|r| !r.is_empty())
                .then(|| kube_cel::compile_schema(&root)),
            root_reads_status: root_rules.to_string().contains("status"),
            nested: has_rules(&nested).then(|| kube_cel::compile_schema(&nested)),
            ruled: ruled_properties(&nested),
        })
    }

    /// The errors of the rules on `object`; on an update (`old` given), rules whose value
    /// did not change are not evaluated again (ratcheting, as Kubernetes does since 1.30:
    /// an unchanged value is not rejected), so that a status write does not evaluate the
    /// spec's rules.
    fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<kube_cel::ValidationError> {
        let mut errors = Vec::new();
        VALIDATOR.with(|v| {
            let root_unchanged =
                old.is_some_and(|old| root_view_equal(object, old, self.root_reads_status));
            if let Some(root) = self.root.as_ref().filter(|_| !root_unchanged) {
                let result = if self.root_reads_status {
                    v.validate_compiled(root, object, old)
                } else {
                    let old = old.map(without_status);
                    v.validate_compiled(root, &without_status(object), old.as_ref())
                };
                errors.extend(result.err().map(|e| e.into_vec()).unwrap_or_default());
            }
            if let Some(nested) = &self.nested {
                let result = match (&self.ruled, old) {
                    (Some(ruled), Some(old)) => {
                        let (changed, before) = changed_properties(ruled, object, old);
                        if changed.is_empty() {
                            Ok(())
                        } else {
                            v.validate_compiled(
                                nested,
                                &Value::Object(changed),
                                Some(&Value::Object(before)),
                            )
                        }
                    }
                    _ => v.validate_compiled(nested, object, old),
                };
                errors.extend(result.err().map(|e| e.into_vec()).unwrap_or_default());
            }
        });
        errors
    }
}

/// Whether what root rules can see of `object` and `old` is the same: every top-level
/// field but `metadata` (of which rules see the name and generateName) and, unless they
/// read it, `status`.
fn root_view_equal(object: &Value, old: &Value, reads_status: bool) -> bool {
    let (Some(new_map), Some(old_map)) = (object.as_object(), old.as_object()) else {
        return object == old;
    };
    let visible = |key: &str| key != "metadata" && (reads_status || key != "status");
    let same_fields = new_map
        .iter()
        .filter(|(k, _)| visible(k))
        .all(|(k, v)| old_map.get(k) == Some(v))
        && old_map
            .keys()
            .filter(|k| visible(k))
            .all(|k| new_map.contains_key(k));
    let meta = |value: &Value, field: &str| value["metadata"][field].clone();
    same_fields
        && ["name", "generateName"]
            .iter()
            .all(|f| meta(object, f) == meta(old, f))
}

/// The `ruled` top-level fields whose value differs between `object` and `old`: their new
/// values, and their old ones.
fn changed_properties(
    ruled: &[String],
    object: &Value,
    old: &Value,
) -> (Map<String, Value>, Map<String, Value>) {
    let (mut changed, mut before) = (Map::new(), Map::new());
    for key in ruled {
        let (new, was) = (object.get(key), old.get(key));
        if new == was {
            continue;
        }
        if let Some(new) = new {
            changed.insert(key.clone(), new.clone());
        }
        if let Some(was) = was {
            before.insert(key.clone(), was.clone());
        }
    }
    (changed, before)
}

/// The top-level properties of `schema` whose schemas hold rules, if no rule lies outside
/// them.
fn ruled_properties(schema: &Value) -> Option<Vec<String>> {
    let map = schema.as_object()?;
    let outside = map
        .iter()
        .filter(|(key, _)| key.as_str() != "properties")
        .any(|(_, value)| has_rules(value));
    if outside {
        return None;
    }
    Some(
        map.get("properties")
            .and_then(Value::as_object)
            .map(|properties| {
                properties
                    .iter()
                    .filter(|(_, schema)| has_rules(schema))
                    .map(|(key, _)| key.clone())
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// The object without its `status`.
fn without_status(object: &Value) -> Value {
    match object {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "status")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Removes every `x-kubernetes-validations` under `schema`.
fn strip_rules(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("x-kubernetes-validations");
            map.values_mut().for_each(strip_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_rules),
        _ => {}
    }
}

/// Compiled rules by the schema's address, checked against a weak reference so that a
/// schema dropped and another allocated in its place is not mistaken for it.
type CompiledCache = HashMap<usize, (Weak<Value>, Option<Arc<CompiledRules>>)>;

static COMPILED: LazyLock<Mutex<CompiledCache>> = LazyLock::new(Mutex::default);

/// The compiled `x-kubernetes-validations` rules of `schema`; `None` when it has none.
fn compiled_rules(schema: &Arc<Value>) -> Option<Arc<CompiledRules>> {
    let address = Arc::as_ptr(schema) as usize;
    let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((weak, rules)) = compiled.get(&address)
        && weak
            .upgrade()
            .is_some_and(|live| Arc::ptr_eq(&live, schema))
    {
        return rules.clone();
    }
    // Entries of schemas gone (CRDs changed or deleted) go with this one's arrival.
    compiled.retain(|_, (weak, _)| weak.strong_count() > 0);
    let rules = CompiledRules::compile(schema).map(Arc::new);
    compiled.insert(address, (Arc::downgrade(schema), rules.clone()));
    rules
}

/// Whether a schema holds any `x-kubernetes-validations` rule.
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.contains_key("x-kubernetes-validations") || map.values().any(has_rules)
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// Fills in defaults under `value`; at the `root` of an object, its identity and metadata
/// are not the schema's to default.
fn apply_defaults(schema: &Value, value: &mut Value, root: bool) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema["properties"].as_object() {
                for (key, field) in properties {
                    if root && matches!(key.as_str(), "metadata" | "apiVersion" | "kind") {
                        continue;
                    }
                    if !map.contains_key(key)
                        && let Some(default) = field.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(field, child, false);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                map.values_mut()
                    .for_each(|child| apply_defaults(additional, child, false));
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                items
                    .iter_mut()
                    .for_each(|child| apply_defaults(item, child, false));
            }
        }
        _ => {}
    }
}

fn cause(field: &str, reason: &str, message: String) -> Cause {
    Cause {
        reason: reason.to_owned(),
        message,
        field: field.to_owned(),
    }
}

/// The value as Kubernetes quotes it in messages (strings quoted, the rest as JSON).
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(schema: &Value, value: &Value) -> bool {
    if value.is_null() {
        return schema["nullable"] == Value::Bool(true);
    }
    if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
        return matches!(type_name(value), "integer" | "string");
    }
    match schema["type"].as_str() {
        None => true,
        Some("number") => value.is_number(),
        Some(expected) => type_name(value) == expected,
    }
}

/// Where a checked value sits (`spec.containers[0].name`): made into text only for a
/// cause, so that a valid object's check allocates no paths.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Field(&'a At<'a>, &'a str),
    Item(&'a At<'a>, usize),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root => Ok(()),
            At::Field(At::Root, key) => f.write_str(key),
            At::Field(parent, key) => write!(f, "{parent}.{key}"),
            At::Item(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

fn check(schema: &Value, value: &Value, at: &At<'_>, causes: &mut Vec<Cause>) {
    if !type_matches(schema, value) {
        let path = at.to_string();
        let expected = schema["type"].as_str().unwrap_or("integer or string");
        let message = format!(
            "Invalid value: {}: {path} in body must be of type {expected}: {:?}",
            shown(value),
            type_name(value)
        );
        causes.push(cause(&path, "FieldValueTypeInvalid", message));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        let message = format!(
            "Unsupported value: {}: supported values: {}",
            shown(value),
            list.join(", ")
        );
        causes.push(cause(&at.to_string(), "FieldValueNotSupported", message));
    }
    let invalid = |causes: &mut Vec<Cause>, rule: String| {
        let path = at.to_string();
        causes.push(cause(
            &path,
            "FieldValueInvalid",
            format!("Invalid value: {}: {path} in body {rule}", shown(value)),
        ));
    };
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            let exclusive = |k: &str| schema[k] == Value::Bool(true);
            if let Some(min) = schema["minimum"].as_f64() {
                if exclusive("exclusiveMinimum") && x <= min {
                    invalid(
                        causes,
                        format!("should be greater than {}", schema["minimum"]),
                    );
                } else if x < min {
                    invalid(
                        causes,
                        format!("should be greater than or equal to {}", schema["minimum"]),
                    );
                }
            }
            if let Some(max) = schema["maximum"].as_f64() {
                if exclusive("exclusiveMaximum") && x >= max {
                    invalid(causes, format!("should be less than {}", schema["maximum"]));
                } else if x > max {
                    invalid(
                        causes,
                        format!("should be less than or equal to {}", schema["maximum"]),
                    );
                }
            }
            if let Some(m) = schema["multipleOf"].as_f64()
                && m > 0.0
                && (x / m).fract() != 0.0
            {
                invalid(
                    causes,
                    format!("should be a multiple of {}", schema["multipleOf"]),
                );
            }
        }
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(min) = schema["minLength"].as_u64()
                && length < min
            {
                invalid(causes, format!("should be at least {min} chars long"));
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && length > max
            {
                causes.push(cause(
                    &at.to_string(),
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(pattern) = schema["pattern"].as_str() {
                match regex::Regex::new(pattern) {
                    Ok(re) if re.is_match(text) => {}
                    Ok(_) => invalid(causes, format!("should match '{pattern}'")),
                    Err(_) => invalid(
                        causes,
                        format!("cannot be checked: the pattern '{pattern}' does not compile"),
                    ),
                }
            }
        }
        Value::Array(items) => {
            check_count(
                schema,
                items.len(),
                ("minItems", "maxItems", "items"),
                at,
                value,
                causes,
            );
            check_list_uniqueness(schema, items, at, causes);
            if let Some(item) = schema.get("items") {
                for (i, child) in items.iter().enumerate() {
                    check(item, child, &At::Item(at, i), causes);
                }
            }
        }
        Value::Object(map) => {
            check_count(
                schema,
                map.len(),
                ("minProperties", "maxProperties", "properties"),
                at,
                value,
                causes,
            );
            check_fields(schema, map, at, causes);
        }
        _ => {}
    }
}

/// The required fields of an object and the checks of each field it has. At the root
/// identity and metadata are not the schema's to check.
fn check_fields(schema: &Value, map: &Map<String, Value>, at: &At<'_>, causes: &mut Vec<Cause>) {
    let root = matches!(at, At::Root);
    for required in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(required) {
            causes.push(cause(
                &At::Field(at, required).to_string(),
                "FieldValueRequired",
                "Required value".into(),
            ));
        }
    }
    let properties = schema["properties"].as_object();
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, child) in map {
        if root && matches!(key.as_str(), "metadata" | "apiVersion" | "kind") {
            continue;
        }
        if let Some(field) = properties.and_then(|p| p.get(key)).or(additional) {
            check(field, child, &At::Field(at, key), causes);
        }
    }
}

/// The bounds on how many items or properties a value has.
fn check_count(
    schema: &Value,
    count: usize,
    (min_key, max_key, noun): (&str, &str, &str),
    at: &At<'_>,
    value: &Value,
    causes: &mut Vec<Cause>,
) {
    let count = count as u64;
    if let Some(min) = schema[min_key].as_u64()
        && count < min
    {
        let path = at.to_string();
        let message = format!(
            "Invalid value: {}: {path} in body should have at least {min} {noun}",
            shown(value)
        );
        causes.push(cause(&path, "FieldValueInvalid", message));
    }
    if let Some(max) = schema[max_key].as_u64()
        && count > max
    {
        let message = format!("Too many: {count}: must have at most {max} {noun}");
        causes.push(cause(&at.to_string(), "FieldValueTooMany", message));
    }
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique.
fn check_list_uniqueness(schema: &Value, items: &[Value], at: &At<'_>, causes: &mut Vec<Cause>) {
    let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let identity = |item: &Value| -> Value {
        match schema["x-kubernetes-list-type"].as_str() {
            Some("map") => Value::Array(keys.iter().map(|k| item[*k].clone()).collect()),
            _ => item.clone(),
        }
    };
    if !matches!(
        schema["x-kubernetes-list-type"].as_str(),
        Some("set" | "map")
    ) {
        return;
    }
    let mut seen = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let id = identity(item);
        if seen.contains(&id) {
            causes.push(cause(
                &At::Item(at, i).to_string(),
                "FieldValueDuplicate",
                format!("Duplicate value: {}", shown(&id)),
            ));
        } else {
            seen.push(id);
        }
    }
}

/// Applies `validation` to the unknown fields `prune` found: `Strict` fails the request
/// as Kubernetes does; otherwise the warnings to send (none under `Ignore`).
pub fn judge(unknown: Vec<String>, validation: FieldValidation) -> ApiResult<Vec<String>> {
    if unknown.is_empty() {
        return Ok(unknown);
    }
    let messages = unknown.iter().map(|path| format!("unknown field {path:?}"));
    match validation {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.collect::<Vec<_>>().join(", ")
        ))),
        FieldValidation::Warn => Ok(messages.collect()),
        FieldValidation::Ignore => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::registry::resources::{Registry, Schema as TypeSchema};

    #[test]
    fn built_in_nodes_are_found_by_address_as_by_name() {
        let deployment = openapi::builtin_kind_schema("apps", "v1", "Deployment").unwrap();
        let spec = &deployment["properties"]["spec"];
        let found = builtin_node(spec).expect("a built-in node");
        assert_eq!(found.reference, Some("io.k8s.api.apps.v1.DeploymentSpec"));
        assert!(std::ptr::eq(found.schema, resolve_by_name(spec)));
        assert!(std::ptr::eq(resolve(spec), resolve_by_name(spec)));
        // A copy is not a built-in node, and resolves by name to the same definition.
        let copy = spec.clone();
        assert!(builtin_node(&copy).is_none());
        assert!(std::ptr::eq(resolve(&copy), found.schema));
        assert_eq!(reference(&copy), found.reference);
        // Every node of every definition agrees with the lookup by name.
        fn check(node: &'static Value) {
            match node {
                Value::Object(map) => {
                    let found = builtin_node(node).expect("every object node is indexed");
                    assert!(std::ptr::eq(found.schema, resolve_by_name(node)));
                    assert_eq!(found.reference, reference(node));
                    // The facts read once say what reading the resolved node says.
                    let (resolved, facts) = resolved_facts(node);
                    for builtin in [false, true] {
                        assert_eq!(
                            facts.preserves_unknown(builtin),
                            preserves_unknown(resolved, builtin)
                        );
                    }
                    assert_eq!(facts.type_name, resolved["type"].as_str());
                    assert_eq!(facts.items, resolved.get("items"));
                    assert_eq!(facts.has_properties, resolved.get("properties").is_some());
                    map.values().for_each(check);
                }
                Value::Array(items) => items.iter().for_each(check),
                _ => assert!(builtin_node(node).is_none()),
            }
        }
        openapi::builtin_schemas().values().for_each(check);
    }

    fn builtin(group: &str, version: &str, plural: &str) -> Arc<ResourceType> {
        Registry::builtin().get(group, version, plural).unwrap()
    }

    #[test]
    fn a_deployment_keeps_its_fields_and_loses_unknown_ones_at_every_depth() {
        let rt = builtin("apps", "v1", "deployments");
        let mut object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}, "colour": "blue",
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 3, "replica": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP", "nmae": "x"}],
                         "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                        {"name": "b", "image": "busybox", "imagePullPolicy": "Always", "colour": "red"}]}}},
            "extra": true,
        });
        let unknown = Schema::for_type(&rt).unwrap().prune(&mut object);
        assert_eq!(
            unknown,
            [
                "extra",
                "metadata.colour",
                "spec.replica",
                "spec.template.spec.containers[0].ports[0].nmae",
                "spec.template.spec.containers[1].colour",
            ]
        );
        assert_eq!(
            object,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"},
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
                "spec": {"replicas": 3,
                    "selector": {"matchLabels": {"app": "web"}},
                    "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [
                            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                             "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                            {"name": "b", "image": "busybox", "imagePullPolicy": "Always"}]}}},
            })
        );
    }

    #[test]
    fn maps_of_strings_and_free_form_values_keep_every_key() {
        let rt = builtin("", "v1", "configmaps");
        let mut object = json!({"metadata": {"name": "c", "annotations": {"any.key/x": "1"}},
            "data": {"anything": "goes", "at": "all"}, "binaryData": {"b": "AAE="}, "immutable": false});
        let before = object.clone();
        assert!(Schema::for_type(&rt).unwrap().prune(&mut object).is_empty());
        assert_eq!(object, before);
        // A CRD's schema is a RawExtension-like free-form value inside a built-in kind.
        let crd = builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let mut object = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"}, "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}});
        let before = object.clone();
        assert_eq!(
            Schema::for_type(&crd).unwrap().prune(&mut object),
            Vec::<String>::new()
        );
        assert_eq!(object, before);
    }

    #[test]
    fn custom_resources_are_pruned_to_their_structural_schema() {
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(TypeSchema(Arc::new(
            json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "empty": {"type": "object"}}},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}),
        )));
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "bogus": 1},
            "spec": {"size": 3, "colour": "red", "tags": [{"k": "a", "v": "b"}], "labels": {"x": "y"},
                "free": {"deep": {"er": 1}}, "empty": {"gone": 1}},
            "status": {"ready": true, "phase": "x"}, "other": 1});
        let unknown = Schema::for_type(&rt).unwrap().prune(&mut object);
        assert_eq!(
            unknown,
            [
                "metadata.bogus",
                "other",
                "spec.colour",
                "spec.empty.gone",
                "spec.tags[0].v",
                "status.phase"
            ]
        );
        assert_eq!(
            object,
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 3, "tags": [{"k": "a"}], "labels": {"x": "y"}, "free": {"deep": {"er": 1}}, "empty": {}},
            "status": {"ready": true}})
        );
    }

    #[test]
    fn a_root_that_preserves_unknown_fields_keeps_them() {
        let mut rt = ResourceType::new("example.com", "v1", "Blob", "blobs", true);
        rt.schema = Some(TypeSchema(Arc::new(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        )));
        let mut object = json!({"metadata": {"name": "b"}, "anything": {"at": "all"}});
        assert!(Schema::for_type(&rt).unwrap().prune(&mut object).is_empty());
        assert_eq!(object["anything"]["at"], "all");
    }

    fn widget(schema: Value) -> ResourceType {
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(TypeSchema(Arc::new(schema)));
        rt
    }

    fn causes(rt: &ResourceType, object: &Value) -> Vec<(String, String, String)> {
        Structural::for_type(rt)
            .unwrap()
            .validate(object)
            .into_iter()
            .map(|c| (c.field, c.reason, c.message))
            .collect()
    }

    #[test]
    fn structural_validation_names_each_broken_rule() {
        let rt = widget(
            json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "name": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
                "port": {"x-kubernetes-int-or-string": true},
                "tags": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "ports": {"type": "array", "minItems": 1, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                    "items": {"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}}}},
                "note": {"type": "string", "nullable": true},
                "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}}}}}),
        );
        let good = json!({"spec": {"size": 3, "ratio": 0.5, "mode": "fast", "name": "abc", "port": "http",
            "tags": ["a", "b"], "ports": [{"port": 80}, {"port": 443}], "note": null, "labels": {"a": "b"}}});
        assert_eq!(causes(&rt, &good), Vec::<(String, String, String)>::new());
        let bad = json!({"spec": {"size": 0, "ratio": 0, "mode": "medium", "name": "ABCDE", "port": true,
            "tags": ["a", "a", "b"], "ports": [{"port": 80}, {"port": 80}, {}], "note": 3, "labels": {"a": "b", "c": 1}}});
        let expected: Vec<(String, String, String)> = [
            ("spec.labels", "FieldValueTooMany", "Too many: 2: must have at most 1 properties"),
            ("spec.labels.c", "FieldValueTypeInvalid", "Invalid value: 1: spec.labels.c in body must be of type string: \"integer\""),
            ("spec.mode", "FieldValueNotSupported", "Unsupported value: \"medium\": supported values: \"fast\", \"slow\""),
            ("spec.name", "FieldValueTooLong", "Too long: may not be more than 4 bytes"),
            ("spec.name", "FieldValueInvalid", "Invalid value: \"ABCDE\": spec.name in body should match '^[a-z]+$'"),
            ("spec.note", "FieldValueTypeInvalid", "Invalid value: 3: spec.note in body must be of type string: \"integer\""),
            ("spec.port", "FieldValueTypeInvalid", "Invalid value: true: spec.port in body must be of type integer or string: \"boolean\""),
            ("spec.ports[1]", "FieldValueDuplicate", "Duplicate value: [80]"),
            ("spec.ports[2].port", "FieldValueRequired", "Required value"),
            ("spec.ratio", "FieldValueInvalid", "Invalid value: 0: spec.ratio in body should be greater than 0"),
            ("spec.size", "FieldValueInvalid", "Invalid value: 0: spec.size in body should be greater than or equal to 1"),
            ("spec.tags", "FieldValueTooMany", "Too many: 3: must have at most 2 items"),
            ("spec.tags[1]", "FieldValueDuplicate", "Duplicate value: \"a\""),
        ].into_iter().map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned())).collect();
        assert_eq!(causes(&rt, &bad), expected);
        let missing = causes(&rt, &json!({"spec": {"ports": []}}));
        assert_eq!(
            missing.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["spec.size", "spec.ports"]
        );
        assert_eq!(causes(&rt, &json!({}))[0].0, "spec");
    }

    #[test]
    fn defaults_fill_absent_fields_at_every_depth() {
        let rt = widget(
            json!({"type": "object", "properties": {"spec": {"type": "object", "default": {},
            "properties": {
                "size": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "fast"},
                "limits": {"type": "object", "default": {"cpu": "1"}, "properties": {"cpu": {"type": "string"}, "memory": {"type": "string", "default": "1Gi"}}},
                "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}}}}}}}}),
        );
        let structural = Structural::for_type(&rt).unwrap();
        let mut empty = json!({"metadata": {"name": "w"}});
        structural.default(&mut empty);
        assert_eq!(
            empty,
            json!({"metadata": {"name": "w"}, "spec": {"size": 1, "mode": "fast", "limits": {"cpu": "1", "memory": "1Gi"}}})
        );
        let mut given = json!({"spec": {"size": 5, "limits": {"cpu": "2"}, "ports": [{"port": 1}, {"protocol": "UDP"}]}});
        structural.default(&mut given);
        assert_eq!(
            given,
            json!({"spec": {"size": 5, "mode": "fast", "limits": {"cpu": "2", "memory": "1Gi"},
            "ports": [{"port": 1, "protocol": "TCP"}, {"protocol": "UDP"}]}})
        );
        assert!(
            Structural::for_type(&Registry::builtin().get("", "v1", "configmaps").unwrap())
                .is_none()
        );
    }

    #[test]
    fn cel_rules_reject_with_their_message_and_transition_rules_see_the_old_object() {
        let rt = widget(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string"}}}}}),
        );
        let structural = Structural::for_type(&rt).unwrap();
        let good = json!({"spec": {"min": 1, "max": 3, "mode": "fast"}});
        assert!(structural.rules(&good, None).is_empty());
        let bad = json!({"spec": {"min": 5, "max": 3, "mode": "fast"}});
        let causes = structural.rules(&bad, None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(
            causes[0].message.contains("min must not exceed max"),
            "{causes:?}"
        );
        assert_eq!(causes[0].field, "spec");
        // The transition rule runs only with an old object.
        let changed = json!({"spec": {"min": 1, "max": 3, "mode": "slow"}});
        assert!(structural.rules(&changed, None).is_empty());
        let causes = structural.rules(&changed, Some(&good));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(
            causes[0].message.contains("mode is immutable"),
            "{causes:?}"
        );
        // No rules, nothing to evaluate.
        let plain = widget(json!({"type": "object"}));
        assert!(
            Structural::for_type(&plain)
                .unwrap()
                .rules(&bad, None)
                .is_empty()
        );
    }

    #[test]
    fn root_rules_and_nested_rules_both_hold_whether_or_not_the_root_reads_status() {
        let schema = |root_rule: &str| {
            widget(json!({"type": "object",
                "x-kubernetes-validations": [{"rule": root_rule, "message": "root rule"}],
                "properties": {
                    "spec": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
                    "status": {"type": "object",
                        "x-kubernetes-validations": [{"rule": "self.n >= 0", "message": "n is negative"}],
                        "properties": {"n": {"type": "integer"}}}}}))
        };
        let messages = |rt: &ResourceType, object: &Value| -> Vec<String> {
            let mut found: Vec<String> = Structural::for_type(rt)
                .unwrap()
                .rules(object, None)
                .into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect();
            found.sort();
            found
        };
        // A root rule that does not read status: it sees the object without it, and the
        // status rule still runs.
        let spec_only = schema("self.spec.a <= self.spec.b");
        let object = json!({"spec": {"a": 1, "b": 2}, "status": {"n": 0}});
        assert!(messages(&spec_only, &object).is_empty());
        let both = json!({"spec": {"a": 3, "b": 2}, "status": {"n": -1}});
        assert_eq!(
            messages(&spec_only, &both),
            [
                "<root>: Invalid value: \"object\": root rule",
                "status: Invalid value: \"object\": n is negative",
            ]
        );
        // A root rule that reads status sees it.
        let reads_status = schema("!has(self.status) || self.status.n <= self.spec.b");
        let over = json!({"spec": {"a": 1, "b": 2}, "status": {"n": 5}});
        assert_eq!(
            messages(&reads_status, &over),
            ["<root>: Invalid value: \"object\": root rule"]
        );
        assert!(messages(&reads_status, &object).is_empty());
    }

    #[test]
    fn on_an_update_rules_on_unchanged_values_are_not_evaluated_again() {
        let rt = widget(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.spec.a <= self.spec.b", "message": "root rule"}],
            "properties": {
                "spec": {"type": "object",
                    "x-kubernetes-validations": [{"rule": "self.a >= 0", "message": "a is negative"}],
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"n": {"type": "integer"}}}}}));
        let structural = Structural::for_type(&rt).unwrap();
        let fields = |causes: Vec<Cause>| -> Vec<String> {
            let mut fields: Vec<String> = causes.into_iter().map(|c| c.field).collect();
            fields.sort();
            fields
        };
        // Stored before the rules (or under other rules): it breaks both.
        let stored = json!({"metadata": {"name": "w", "resourceVersion": "1"},
            "spec": {"a": -5, "b": -9}, "status": {"n": 1}});
        assert_eq!(fields(structural.rules(&stored, None)), ["<root>", "spec"]);
        // A status write (and new server metadata) leaves the spec as it was: accepted.
        let status_write = json!({"metadata": {"name": "w", "resourceVersion": "2"},
            "spec": {"a": -5, "b": -9}, "status": {"n": 2}});
        assert!(structural.rules(&status_write, Some(&stored)).is_empty());
        // Changing the spec evaluates its rules again, and the root's.
        let spec_write = json!({"metadata": {"name": "w"}, "spec": {"a": -4, "b": -9}});
        assert_eq!(
            fields(structural.rules(&spec_write, Some(&stored))),
            ["<root>", "spec"]
        );
        // A valid change is accepted.
        let fixed = json!({"metadata": {"name": "w"}, "spec": {"a": 1, "b": 2}});
        assert!(structural.rules(&fixed, Some(&stored)).is_empty());
        // A rule outside the top-level properties turns ratcheting of nested rules off.
        assert_eq!(
            ruled_properties(&json!({"type": "object",
                "additionalProperties": {"x-kubernetes-validations": [{"rule": "true"}]}})),
            None
        );
    }

    #[test]
    fn field_validation_modes() {
        assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
        assert_eq!(
            FieldValidation::parse(Some("Strict")).unwrap(),
            FieldValidation::Strict
        );
        assert_eq!(
            FieldValidation::parse(Some("Ignore")).unwrap(),
            FieldValidation::Ignore
        );
        assert_eq!(
            FieldValidation::parse(Some("strict")).unwrap_err().code,
            400
        );
        let unknown = || vec!["spec.a".to_owned(), "b".to_owned()];
        let err = judge(unknown(), FieldValidation::Strict).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            r#"strict decoding error: unknown field "spec.a", unknown field "b""#
        );
        assert_eq!(
            judge(unknown(), FieldValidation::Warn).unwrap(),
            [r#"unknown field "spec.a""#, r#"unknown field "b""#]
        );
        assert!(
            judge(unknown(), FieldValidation::Ignore)
                .unwrap()
                .is_empty()
        );
        assert!(
            judge(Vec::new(), FieldValidation::Strict)
                .unwrap()
                .is_empty()
        );
    }
}
