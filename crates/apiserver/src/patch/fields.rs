//! Field sets: which fields of an object a manager owns, as server-side apply tracks them.
//!
//! ```text
//!  object ─► fields(object, schema) ─► Fields { members: paths, leaves: path → value }
//!                 │  structs: f:<field>          maps: f:<key> (each key a member)
//!                 │  list-type map: k:{"name":"web"}   set: v:"value"   atomic: one leaf
//!                 ▼
//!  FieldSet (a set of paths) ◄──► FieldsV1 JSON ({"f:spec":{"f:replicas":{}},…}, "." = the
//!                                 node itself is a member while it also has children)
//! ```
//!
//! A path is a list of FieldsV1 path elements (`f:spec`, `k:{"name":"web"}`, `v:"a"`,
//! `i:3`). The shape of each value (struct, granular or atomic map, list type and keys) comes
//! from the kind's schema: the generated built-in schemas (where a list without
//! `x-kubernetes-list-type` follows its patch strategy) or a CRD's structural schema (where
//! lists are atomic unless typed). Values the schema does not describe are granular maps and
//! atomic lists.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::map::Entry;
use serde_json::{Map, Value};

use crate::admission::schema::resolve;
use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult};
use crate::http::json;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// A path to a field: FieldsV1 path elements, outermost first.
pub type Path = Vec<String>;

/// A set of field paths.
pub type FieldSet = BTreeSet<Path>;

/// How a list's items are told apart.
#[derive(Debug, PartialEq, Eq)]
pub enum ListType {
    /// The list is one value, replaced whole.
    Atomic,
    /// A set of scalars, each item its own member.
    Set,
    /// Items keyed by these fields.
    Map(Vec<String>),
}

/// The schema of one value of an object: its node, and whether it comes from the built-in
/// (generated) schemas, whose conventions differ from a CRD's.
#[derive(Clone, Copy, Debug)]
pub struct Shape<'a> {
    node: &'a Value,
    builtin: bool,
}

static NULL: Value = Value::Null;

impl<'a> Shape<'a> {
    /// The root of an object of a kind with schema `root` (`builtin` for generated ones).
    pub fn root(root: &'a Value, builtin: bool) -> Self {
        Shape {
            node: root,
            builtin,
        }
    }

    /// A value nothing describes: granular maps, atomic lists.
    pub fn unknown() -> Self {
        Shape {
            node: &NULL,
            builtin: false,
        }
    }

    fn resolved(&self) -> &'a Value {
        resolve(self.node)
    }

    /// The schema of field `key` of this object (`metadata` of a root is ObjectMeta).
    pub fn field(&self, key: &str, root: bool) -> Shape<'a> {
        self.field_of(self.resolved(), key, root)
    }

    /// [`Shape::field`] with this shape's node already resolved (`node`).
    fn field_of(&self, node: &'a Value, key: &str, root: bool) -> Shape<'a> {
        if root && key == "metadata" {
            return Shape {
                node: openapi::builtin_schema(OBJECT_META).unwrap_or(&NULL),
                builtin: true,
            };
        }
        let child = node["properties"]
            .get(key)
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            .unwrap_or(&NULL);
        Shape {
            node: child,
            builtin: self.builtin,
        }
    }

    /// The fields of the object whose resolved schema is `node` (this shape's), read once
    /// for a walk over its keys: [`Members::field`] answers [`Shape::field_of`] and
    /// [`is_named_in`] for a key with one search.
    fn members_of(&self, node: &'a Value) -> Members<'a> {
        Members {
            properties: node.get("properties"),
            additional: node.get("additionalProperties").filter(|a| a.is_object()),
            builtin: self.builtin,
        }
    }

    #[cfg(test)]
    /// Whether `key` is a declared field of this struct (not a key of a map).
    pub fn is_named(&self, key: &str, root: bool) -> bool {
        is_named_in(self.resolved(), key, root)
    }

    /// The schema of this list's items.
    pub fn items(&self) -> Shape<'a> {
        Shape {
            node: self.resolved().get("items").unwrap_or(&NULL),
            builtin: self.builtin,
        }
    }

    /// Whether this object is replaced whole (`x-kubernetes-map-type: atomic`).
    pub fn atomic_map(&self) -> bool {
        self.atomic_map_of(self.resolved())
    }

    /// [`Shape::atomic_map`] with this shape's node already resolved (`node`).
    fn atomic_map_of(&self, node: &Value) -> bool {
        self.node["x-kubernetes-map-type"] == "atomic" || node["x-kubernetes-map-type"] == "atomic"
    }

    /// How this list merges.
    pub fn list_type(&self) -> ListType {
        let annotation = |name: &str| {
            self.node
                .get(name)
                .or_else(|| self.resolved().get(name))
                .filter(|v| !v.is_null())
        };
        match annotation("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys = annotation("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                ListType::Map(keys)
            }
            Some("set") => ListType::Set,
            Some(_) => ListType::Atomic,
            // The built-in schemas without a list type follow the patch strategy, as the
            // Kubernetes API server derives it.
            None if self.builtin => {
                let strategy = annotation("x-kubernetes-patch-strategy")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !strategy.split(',').any(|s| s == "merge") {
                    return ListType::Atomic;
                }
                match annotation("x-kubernetes-patch-merge-key").and_then(Value::as_str) {
                    Some(key) => ListType::Map(vec![key.to_owned()]),
                    None => ListType::Set,
                }
            }
            None => ListType::Atomic,
        }
    }
}

/// What a walk over an object's keys reads of its schema node, read once per object.
struct Members<'a> {
    /// `properties`, whatever its value.
    properties: Option<&'a Value>,
    /// `additionalProperties` when it is a schema (an object).
    additional: Option<&'a Value>,
    builtin: bool,
}

impl<'a> Members<'a> {
    /// The shape of field `key` (what [`Shape::field_of`] answers) and whether it is a
    /// declared field (what [`is_named_in`] answers), with one search of the properties.
    fn field(&self, key: &str, root: bool) -> (Shape<'a>, bool) {
        if root && key == "metadata" {
            let node = openapi::builtin_schema(OBJECT_META).unwrap_or(&NULL);
            return (
                Shape {
                    node,
                    builtin: true,
                },
                true,
            );
        }
        let declared = self.properties.and_then(|p| p.get(key));
        let named = declared.is_some() || (root && matches!(key, "apiVersion" | "kind"));
        let shape = Shape {
            node: declared.or(self.additional).unwrap_or(&NULL),
            builtin: self.builtin,
        };
        (shape, named)
    }
}

#[cfg(test)]
/// Whether `key` is a declared field of the struct whose resolved schema is `node`.
fn is_named_in(node: &Value, key: &str, root: bool) -> bool {
    (root && matches!(key, "metadata" | "apiVersion" | "kind"))
        || node["properties"].get(key).is_some()
}

/// `f:<name>`.
pub fn field(name: &str) -> String {
    let mut element = String::with_capacity(name.len() + 2);
    element.push_str("f:");
    element.push_str(name);
    element
}

/// The path element of item `index` of a list: `k:{…}` with the item's key fields for a
/// list-type map (`i:<index>` if it has none of them), `v:<json>` for a set.
pub fn item_element(item: &Value, index: usize, list: &ListType) -> String {
    match list {
        ListType::Map(keys) => {
            // The key fields the item has, in the order a JSON object's keys sort (as a
            // `Map` of them would be written), each once: written straight into the
            // element, no map of copied keys and values made first.
            let mut present: Vec<(&str, &Value)> = keys
                .iter()
                .filter_map(|k| item.get(k).map(|v| (k.as_str(), v)))
                .collect();
            if present.is_empty() {
                return format!("i:{index}");
            }
            present.sort_unstable_by(|a, b| a.0.cmp(b.0));
            present.dedup_by(|a, b| a.0 == b.0);
            let mut out = Vec::with_capacity(32);
            out.extend_from_slice(b"k:{");
            for (i, (key, value)) in present.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json::write_str(&mut out, key);
                out.push(b':');
                json::write(&mut out, value);
            }
            out.push(b'}');
            // The JSON writer writes UTF-8 (its input is strings).
            String::from_utf8(out)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        }
        ListType::Set => format!("v:{item}"),
        ListType::Atomic => format!("i:{index}"),
    }
}

#[cfg(test)]
/// [`item_element`] as it was written before: a `Map` of the key fields, copied, then
/// shown (the reference the proptest compares it with).
fn item_element_by_map(item: &Value, index: usize, list: &ListType) -> String {
    match list {
        ListType::Map(keys) => {
            let key: Map<String, Value> = keys
                .iter()
                .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
                .collect();
            if key.is_empty() {
                format!("i:{index}")
            } else {
                format!("k:{}", Value::Object(key))
            }
        }
        ListType::Set => format!("v:{item}"),
        ListType::Atomic => format!("i:{index}"),
    }
}

/// An object's fields: every member path, and the value of each path that is a leaf (a
/// scalar, an atomic value, or an empty or null one).
#[derive(Debug, Default)]
pub struct Fields<'v> {
    /// Every member path.
    pub members: FieldSet,
    /// The leaves among them, with their values.
    pub leaves: BTreeMap<Path, &'v Value>,
}

/// Which paths a walk collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// This path.
    Keep,
    /// Not this path (paths under it are asked about in turn).
    Drop,
    /// Neither this path nor any path under it: the walk does not go there.
    Prune,
}

#[cfg(test)]
/// The fields of `object` (a whole object) under `shape`.
pub fn fields<'v>(object: &'v Value, shape: Shape<'_>) -> Fields<'v> {
    fields_where(object, shape, &|_| Filter::Keep)
}

/// The fields of `object` under `shape` whose paths `keep` keeps.
pub fn fields_where<'v>(
    object: &'v Value,
    shape: Shape<'_>,
    keep: &dyn Fn(&[String]) -> Filter,
) -> Fields<'v> {
    let mut walk = Walk {
        out: Fields::default(),
        leaves: true,
        keep,
    };
    walk.value(object, shape, true, &mut Vec::new());
    walk.out
}

#[cfg(test)]
/// The member paths of `object` under `shape` that `keep` keeps: [`fields_where`] without
/// the leaves.
pub fn members_where(
    object: &Value,
    shape: Shape<'_>,
    keep: &dyn Fn(&[String]) -> Filter,
) -> FieldSet {
    let mut walk = Walk {
        out: Fields::default(),
        leaves: false,
        keep,
    };
    walk.value(object, shape, true, &mut Vec::new());
    walk.out.members
}

/// The FieldsV1 JSON of the member paths of `object` under `shape` that `keep` keeps: what
/// [`encode`] makes of [`members_where`]'s set, built in the same walk without the set (a
/// create's managed fields: no path is copied or compared, each element string is made
/// once and becomes the key of its node).
pub fn encode_members_where(
    object: &Value,
    shape: Shape<'_>,
    keep: &dyn Fn(&[String]) -> Filter,
) -> Value {
    let mut walk = Encode {
        keep,
        path: Vec::new(),
    };
    let mut root = Map::new();
    walk.value(object, shape, true, &mut root);
    Value::Object(root)
}

/// A walk writing the FieldsV1 nodes of an object's member paths that `keep` keeps.
struct Encode<'k> {
    keep: &'k dyn Fn(&[String]) -> Filter,
    /// The path walked to, for `keep`.
    path: Path,
}

impl Encode<'_> {
    /// Walks `value`, adding the nodes of the members under it to `node` (the FieldsV1 node
    /// of its path); returns whether it was a leaf, as [`Walk::value`] does.
    fn value(
        &mut self,
        value: &Value,
        shape: Shape<'_>,
        root: bool,
        node: &mut Map<String, Value>,
    ) -> bool {
        match value {
            Value::Object(map) if !map.is_empty() => {
                let schema = shape.resolved();
                if shape.atomic_map_of(schema) {
                    return true;
                }
                let members = shape.members_of(schema);
                for (key, child) in map {
                    self.path.push(field(key));
                    let filter = (self.keep)(&self.path);
                    let mut below = Map::new();
                    let mut member = false;
                    if filter != Filter::Prune {
                        // A scalar (or empty object) is a leaf whatever its schema says: its
                        // schema is not looked up.
                        let walked = match child {
                            Value::Object(fields) => !fields.is_empty(),
                            other => other.is_array(),
                        };
                        let leaf = match walked {
                            true => {
                                let (child_shape, named) = members.field(key, root);
                                let leaf = self.value(child, child_shape, false, &mut below);
                                leaf || !named
                            }
                            false => true,
                        };
                        member = filter == Filter::Keep && leaf;
                    }
                    let element = self.path.pop().expect("pushed above");
                    attach(node, element, member, below);
                }
                false
            }
            Value::Array(items) => {
                let list = shape.list_type();
                if list == ListType::Atomic || items.is_empty() {
                    return true;
                }
                let item_shape = shape.items();
                for (index, item) in items.iter().enumerate() {
                    self.path.push(item_element(item, index, &list));
                    let filter = (self.keep)(&self.path);
                    let mut below = Map::new();
                    let mut member = false;
                    if filter != Filter::Prune {
                        self.value(item, item_shape, false, &mut below);
                        member = filter == Filter::Keep;
                    }
                    let element = self.path.pop().expect("pushed above");
                    attach(node, element, member, below);
                }
                false
            }
            _ => true,
        }
    }
}

/// Adds to `node` its child `element`, with the nodes `below` it, as [`encode`] writes it:
/// a member without children `{}`, a member with children marked `"."`, a node that is no
/// member only if it has members below. The same element twice (list items with the same
/// key) is one node: the two merge.
fn attach(
    node: &mut Map<String, Value>,
    element: String,
    member: bool,
    mut below: Map<String, Value>,
) {
    if !member && below.is_empty() {
        return;
    }
    if member && !below.is_empty() {
        below.insert(".".into(), Value::Object(Map::new()));
    }
    // One search of the node: most elements are new.
    match node.entry(element) {
        Entry::Occupied(mut found) => match found.get_mut() {
            Value::Object(existing) => merge_nodes(existing, below),
            other => *other = Value::Object(below),
        },
        Entry::Vacant(slot) => {
            slot.insert(Value::Object(below));
        }
    }
}

/// Merges FieldsV1 node `other` into `node`: a member if either is, the children of both.
fn merge_nodes(node: &mut Map<String, Value>, mut other: Map<String, Value>) {
    let is_member = |n: &Map<String, Value>| n.is_empty() || n.contains_key(".");
    let member = is_member(node) || is_member(&other);
    node.remove(".");
    other.remove(".");
    for (element, child) in other {
        match (node.get_mut(&element), child) {
            (Some(Value::Object(existing)), Value::Object(child)) => merge_nodes(existing, child),
            (_, child) => {
                node.insert(element, child);
            }
        }
    }
    if member && !node.is_empty() {
        node.insert(".".into(), Value::Object(Map::new()));
    }
}

/// A walk collecting an object's fields (and their leaves' values, if `leaves`) whose paths
/// `keep` keeps.
struct Walk<'v, 'k> {
    out: Fields<'v>,
    leaves: bool,
    keep: &'k dyn Fn(&[String]) -> Filter,
}

impl<'v> Walk<'v, '_> {
    fn insert(&mut self, path: &Path, value: &'v Value, leaf: bool) {
        if leaf && self.leaves {
            self.out.leaves.insert(path.clone(), value);
        }
        self.out.members.insert(path.clone());
    }

    /// Walks `value` (whose own path its parent records); returns whether it was a leaf.
    fn value(&mut self, value: &'v Value, shape: Shape<'_>, root: bool, path: &mut Path) -> bool {
        match value {
            Value::Object(map) if !map.is_empty() => {
                // The schema node is resolved once for every key of the object.
                let node = shape.resolved();
                if shape.atomic_map_of(node) {
                    return true;
                }
                let members = shape.members_of(node);
                for (key, child) in map {
                    path.push(field(key));
                    let filter = (self.keep)(path);
                    if filter != Filter::Prune {
                        let (child_shape, named) = members.field(key, root);
                        let leaf = self.value(child, child_shape, false, path);
                        if filter == Filter::Keep && (leaf || !named) {
                            self.insert(path, child, leaf);
                        }
                    }
                    path.pop();
                }
                false
            }
            Value::Array(items) => {
                let list = shape.list_type();
                // An empty list is owned as a whole, like an empty map: applying `[]` keeps it.
                if list == ListType::Atomic || items.is_empty() {
                    return true;
                }
                let item_shape = shape.items();
                for (index, item) in items.iter().enumerate() {
                    path.push(item_element(item, index, &list));
                    let filter = (self.keep)(path);
                    if filter != Filter::Prune {
                        let leaf = self.value(item, item_shape, false, path);
                        if filter == Filter::Keep {
                            self.insert(path, item, leaf);
                        }
                    }
                    path.pop();
                }
                false
            }
            // Scalars, and empty or atomic objects.
            _ => true,
        }
    }
}

/// Every path of `set` and every prefix of one (the nodes of its tree).
pub fn closure(set: &FieldSet) -> FieldSet {
    let mut out = FieldSet::new();
    for path in set {
        for end in 1..=path.len() {
            if !out.contains(&path[..end]) {
                out.insert(path[..end].to_vec());
            }
        }
    }
    out
}

/// A field set as FieldsV1 JSON.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for element in path {
            node = node
                .entry(element.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("FieldsV1 nodes are objects");
        }
        // A member that also has children carries "." (added below when children come).
        node.insert(".".into(), Value::Object(Map::new()));
    }
    // A member without children is written `{}`, not `{".":{}}`.
    fn tidy(node: &mut Map<String, Value>) {
        for child in node.values_mut() {
            if let Some(map) = child.as_object_mut() {
                if map.len() == 1 && map.contains_key(".") {
                    map.clear();
                } else {
                    tidy(map);
                }
            }
        }
    }
    tidy(&mut root);
    Value::Object(root)
}

/// A field set from FieldsV1 JSON.
pub fn decode(value: &Value) -> ApiResult<FieldSet> {
    let mut set = FieldSet::new();
    let mut path = Vec::new();
    decode_node(value, &mut path, &mut set)?;
    Ok(set)
}

fn decode_node(value: &Value, path: &mut Path, set: &mut FieldSet) -> ApiResult<()> {
    let map = value.as_object().ok_or_else(|| {
        ApiError::bad_request("metadata.managedFields: fieldsV1 is not an object")
    })?;
    if (map.is_empty() || map.contains_key(".")) && !path.is_empty() {
        set.insert(path.clone());
    }
    for (element, child) in map {
        if element == "." {
            continue;
        }
        if !["f:", "k:", "v:", "i:"]
            .iter()
            .any(|p| element.starts_with(p))
        {
            return Err(ApiError::bad_request(format!(
                "metadata.managedFields: fieldsV1 has an unknown path element {element:?}"
            )));
        }
        path.push(element.clone());
        decode_node(child, path, set)?;
        path.pop();
    }
    Ok(())
}

/// A path as the Kubernetes API server shows it: `.spec.containers[name="web"].image`.
pub fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        let (kind, rest) = element.split_at(2.min(element.len()));
        match kind {
            "f:" => {
                out.push('.');
                out.push_str(rest);
            }
            "k:" => {
                let fields = serde_json::from_str::<Map<String, Value>>(rest).unwrap_or_default();
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            "v:" => out.push_str(&format!("[={rest}]")),
            "i:" => out.push_str(&format!("[{rest}]")),
            _ => out.push_str(element),
        }
    }
    out
}

#[cfg(test)]
/// The value at `path` in `value`, if there is one.
pub fn get<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut node = value;
    for element in path {
        node = child(node, element)?;
    }
    Some(node)
}

#[cfg(test)]
fn child<'v>(node: &'v Value, element: &str) -> Option<&'v Value> {
    let (kind, rest) = element.split_at(2.min(element.len()));
    match (kind, node) {
        ("f:", Value::Object(map)) => map.get(rest),
        (_, Value::Array(items)) => items
            .iter()
            .position(|item| item_is(item, element))
            .map(|i| &items[i]),
        _ => None,
    }
}

/// Whether `item` (at any index) is the list item `element` names.
pub fn item_is(item: &Value, element: &str) -> bool {
    let (kind, rest) = element.split_at(2.min(element.len()));
    match kind {
        "k:" => serde_json::from_str::<Map<String, Value>>(rest)
            .is_ok_and(|key| key.iter().all(|(k, v)| item.get(k) == Some(v))),
        "v:" => serde_json::from_str::<Value>(rest).is_ok_and(|v| &v == item),
        _ => false,
    }
}

/// Removes the value at `path` from `value` (nothing if it is not there).
pub fn remove(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = value;
    for element in parents {
        let next = match node {
            Value::Object(map) => element.strip_prefix("f:").and_then(|k| map.get_mut(k)),
            Value::Array(items) => match element.strip_prefix("i:") {
                Some(index) => index.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                None => items.iter_mut().find(|item| item_is(item, element)),
            },
            _ => None,
        };
        match next {
            Some(next) => node = next,
            None => return,
        }
    }
    match node {
        Value::Object(map) => {
            if let Some(key) = last.strip_prefix("f:") {
                map.remove(key);
            }
        }
        Value::Array(items) => match last.strip_prefix("i:") {
            Some(index) => {
                if let Some(i) = index.parse::<usize>().ok().filter(|i| *i < items.len()) {
                    items.remove(i);
                }
            }
            None => items.retain(|item| !item_is(item, last)),
        },
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The walk as first written (every path collected, then filtered): what the pruning
    /// walk must agree with.
    fn reference<'v>(object: &'v Value, shape: Shape<'_>) -> Fields<'v> {
        fn insert<'v>(out: &mut Fields<'v>, path: &Path, value: &'v Value, leaf: bool) {
            if path.is_empty() {
                return;
            }
            out.members.insert(path.clone());
            if leaf {
                out.leaves.insert(path.clone(), value);
            }
        }
        fn walk<'v>(
            value: &'v Value,
            shape: Shape<'_>,
            root: bool,
            path: &mut Path,
            out: &mut Fields<'v>,
        ) -> bool {
            match value {
                Value::Object(map) if !shape.atomic_map() && !map.is_empty() => {
                    for (key, child) in map {
                        path.push(field(key));
                        let leaf = walk(child, shape.field(key, root), false, path, out);
                        if leaf || !shape.is_named(key, root) {
                            insert(out, path, child, leaf);
                        }
                        path.pop();
                    }
                    false
                }
                Value::Array(items) => {
                    let list = shape.list_type();
                    if list == ListType::Atomic || items.is_empty() {
                        insert(out, path, value, true);
                        return true;
                    }
                    let item_shape = shape.items();
                    for (index, item) in items.iter().enumerate() {
                        path.push(item_element(item, index, &list));
                        let leaf = walk(item, item_shape, false, path, out);
                        insert(out, path, item, leaf);
                        path.pop();
                    }
                    false
                }
                _ => {
                    insert(out, path, value, true);
                    true
                }
            }
        }
        let mut out = Fields::default();
        walk(object, shape, true, &mut Vec::new(), &mut out);
        out
    }

    fn any_object() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec![
            "spec",
            "metadata",
            "labels",
            "annotations",
            "name",
            "uid",
            "template",
            "containers",
            "image",
            "ports",
            "containerPort",
            "protocol",
            "replicas",
            "status",
            "conditions",
            "type",
            "env",
            "value",
            "selector",
            "matchLabels",
            "finalizers",
            "apiVersion",
            "kind",
            "x",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0..4i64).prop_map(|n| json!(n)),
            prop::sample::select(vec!["a", "web", "TCP"]).prop_map(|s| json!(s)),
        ];
        let value = leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..5).prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        });
        value.prop_map(|v| match v {
            Value::Object(_) => v,
            other => json!({"spec": other}),
        })
    }

    proptest! {
        #[test]
        fn the_pruning_walk_finds_what_the_full_walk_finds(object in any_object()) {
            let schemas = [
                deployment_shape(),
                Shape::root(openapi::builtin_kind_schema("", "v1", "ConfigMap").unwrap(), true),
                Shape::unknown(),
            ];
            // Drops `metadata` alone, prunes `spec.template` and `status` whole.
            let keep = |p: &[String]| match p {
                [m] if m == "f:metadata" => Filter::Drop,
                [s, ..] if s == "f:status" => Filter::Prune,
                [s, t, ..] if s == "f:spec" && t == "f:template" => Filter::Prune,
                _ => Filter::Keep,
            };
            for shape in schemas {
                let full = reference(&object, shape);
                let walked = fields(&object, shape);
                prop_assert_eq!(&walked.members, &full.members);
                prop_assert_eq!(&walked.leaves, &full.leaves);
                let kept = |p: &Path| keep(p) == Filter::Keep && !(p.len() > 1 && keep(&p[..1]) == Filter::Prune)
                    && !(p.len() > 2 && keep(&p[..2]) == Filter::Prune);
                let filtered = fields_where(&object, shape, &keep);
                let expected: FieldSet = full.members.iter().filter(|p| kept(p)).cloned().collect();
                prop_assert_eq!(&filtered.members, &expected);
                let leaves: BTreeMap<Path, &Value> =
                    full.leaves.iter().filter(|(p, _)| kept(p)).map(|(p, v)| (p.clone(), *v)).collect();
                prop_assert_eq!(&filtered.leaves, &leaves);
                prop_assert_eq!(members_where(&object, shape, &keep), expected.clone());
                // FieldsV1 written by the walk is what the set encodes to.
                prop_assert_eq!(encode_members_where(&object, shape, &keep), encode(&expected));
                prop_assert_eq!(
                    encode_members_where(&object, shape, &|_| Filter::Keep),
                    encode(&full.members)
                );
            }
        }
    }

    /// An item of a list: an object with some of the candidate key fields (strings with
    /// characters JSON escapes, numbers of every kind, booleans, null, nested values).
    fn any_item() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec!["name", "port", "protocol", "a\"b", "é", "z"]);
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[a-z\"\\\n\t\u{1}\u{7f}é☃]{0,6}".prop_map(Value::String),
        ];
        let value = scalar.prop_recursive(2, 8, 3, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-c\"]{1,2}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop_oneof![
            prop::collection::btree_map(key, value.clone(), 0..5).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
            )),
            value,
        ]
    }

    proptest! {
        #[test]
        fn item_elements_are_written_as_a_map_of_their_keys_shows_them(
            item in any_item(),
            index in 0..100usize,
            keys in prop::collection::vec(
                prop::sample::select(vec!["name", "port", "protocol", "a\"b", "é", "z", "none"]),
                0..4,
            ),
        ) {
            let keys: Vec<String> = keys.into_iter().map(str::to_owned).collect();
            for list in [ListType::Map(keys), ListType::Set, ListType::Atomic] {
                prop_assert_eq!(
                    item_element(&item, index, &list),
                    item_element_by_map(&item, index, &list)
                );
            }
        }
    }

    fn deployment_shape() -> Shape<'static> {
        let name = openapi::builtin_definition("apps", "v1", "Deployment").unwrap();
        Shape::root(&openapi::builtin_schemas()[name], true)
    }

    fn paths(set: &FieldSet) -> Vec<String> {
        set.iter().map(|p| display(p)).collect()
    }

    #[test]
    fn a_deployment_s_fields_follow_its_schema() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx", "args": ["-v"],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]}
                ]}}
            }
        });
        let found = fields(&object, deployment_shape());
        assert_eq!(
            paths(&found.members),
            [
                ".apiVersion",
                ".kind",
                ".metadata.labels.app",
                ".metadata.name",
                ".spec.replicas",
                // LabelSelector is an atomic map: one leaf.
                ".spec.selector",
                // Containers are a list-type map keyed by name; args an atomic list.
                ".spec.template.spec.containers[name=\"web\"]",
                ".spec.template.spec.containers[name=\"web\"].args",
                ".spec.template.spec.containers[name=\"web\"].image",
                ".spec.template.spec.containers[name=\"web\"].name",
                ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"].containerPort",
                ".spec.template.spec.containers[name=\"web\"].ports[containerPort=80,protocol=\"TCP\"].protocol",
            ]
        );
        assert!(
            found
                .leaves
                .contains_key(&vec!["f:spec".to_owned(), "f:selector".to_owned()])
        );
        assert!(!found.leaves.contains_key(&vec!["f:spec".to_owned()]));
    }

    #[test]
    fn fieldsv1_written_in_the_walk_merges_items_with_the_same_key() {
        // Two containers named "a" are one path element: their fields are one node.
        let object = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "a", "ports": [{"containerPort": 80}]},
            {"image": "unnamed"}
        ]}}}});
        let keep = |_: &[String]| Filter::Keep;
        let shape = deployment_shape();
        let written = encode_members_where(&object, shape, &keep);
        assert_eq!(written, encode(&members_where(&object, shape, &keep)));
        let containers = &written["f:spec"]["f:template"]["f:spec"]["f:containers"];
        assert_eq!(
            containers["k:{\"name\":\"a\"}"],
            json!({".": {}, "f:name": {}, "f:image": {},
                "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}}})
        );
        assert_eq!(containers["i:2"], json!({".": {}, "f:image": {}}));
    }

    #[test]
    fn fieldsv1_round_trips_and_marks_members_with_children() {
        let set: FieldSet = [
            vec!["f:metadata", "f:labels", "f:app"],
            vec!["f:spec", "f:containers", "k:{\"name\":\"a\"}"],
            vec!["f:spec", "f:containers", "k:{\"name\":\"a\"}", "f:image"],
        ]
        .into_iter()
        .map(|p| p.into_iter().map(str::to_owned).collect())
        .collect();
        let encoded = encode(&set);
        assert_eq!(
            encoded,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}}}}
            })
        );
        assert_eq!(decode(&encoded).unwrap(), set);
        assert!(decode(&json!({"x:bad": {}})).is_err());
        assert!(decode(&json!([])).is_err());
    }

    #[test]
    fn paths_find_and_remove_keyed_and_set_items() {
        let mut object = json!({"spec": {
            "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
            "finalizers": ["one", "two"]
        }});
        let image_b: Path = vec![
            "f:spec".into(),
            "f:containers".into(),
            "k:{\"name\":\"b\"}".into(),
            "f:image".into(),
        ];
        assert_eq!(get(&object, &image_b), Some(&json!("y")));
        remove(&mut object, &image_b[..3]);
        remove(
            &mut object,
            &[
                "f:spec".to_owned(),
                "f:finalizers".to_owned(),
                "v:\"one\"".to_owned(),
            ],
        );
        assert_eq!(
            object,
            json!({"spec": {"containers": [{"name": "a", "image": "x"}], "finalizers": ["two"]}})
        );
    }

    #[test]
    fn closure_holds_every_prefix() {
        let set: FieldSet = [vec!["f:a".to_owned(), "f:b".to_owned(), "f:c".to_owned()]].into();
        assert_eq!(closure(&set).len(), 3);
    }
}
