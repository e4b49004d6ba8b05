//! `metadata.managedFields` and server-side apply.
//!
//! ```text
//!  create / update / patch ─► record_update(): the fields the write added or changed move
//!                             to its manager (operation Update); removed fields leave
//!                             every manager
//!  apply (application/apply-patch+yaml)
//!     config ─► merge into the live object (schema-aware: list-type maps by key, sets by
//!               value, atomic values replaced)
//!            ─► prune: fields this manager applied before and no manager owns now go
//!            ─► conflicts: fields another manager owns whose value the apply changes
//!               → 409 FieldManagerConflict, unless force (then they change hands)
//!            ─► the manager's Apply entry is exactly the configuration's fields
//! ```
//!
//! Every path this module handles excludes the fields the server owns (`metadata.name`,
//! `uid`, `resourceVersion`, …) and, for kinds with a status subresource, `status` on the
//! main resource and everything but `status` on the subresource.

use serde_json::{Map, Value, json};

use crate::discovery::openapi;
use crate::http::error::{ApiError, ApiResult, Cause};
use crate::patch::fields::{self, FieldSet, Fields, Filter, ListType, Path, Shape};
use crate::registry::object;
use crate::registry::resources::ResourceType;

/// Metadata fields the server sets: never owned, never pruned.
const SERVER_META: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "selfLink",
    "generation",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
];

/// How a manager wrote its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The manager's name.
    pub manager: String,
    /// How it wrote.
    pub operation: Operation,
    /// The apiVersion it wrote with.
    pub api_version: String,
    /// When its fields last changed.
    pub time: String,
    /// The subresource it wrote through (`""` for the object itself).
    pub subresource: String,
    /// The fields it owns.
    pub fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: Operation, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    fn to_value(&self) -> Value {
        entry_value(
            &self.manager,
            self.operation,
            &self.api_version,
            &self.time,
            &self.subresource,
            fields::encode(&self.fields),
        )
    }
}

/// One entry of `metadata.managedFields` as JSON, its field set already FieldsV1
/// (`fields_v1`).
fn entry_value(
    manager: &str,
    operation: Operation,
    api_version: &str,
    time: &str,
    subresource: &str,
    fields_v1: Value,
) -> Value {
    let text = |s: &str| Value::String(s.to_owned());
    let mut entry = Map::new();
    entry.insert("manager".into(), text(manager));
    entry.insert("operation".into(), text(operation.as_str()));
    entry.insert("apiVersion".into(), text(api_version));
    entry.insert("time".into(), text(time));
    entry.insert("fieldsType".into(), text("FieldsV1"));
    entry.insert("fieldsV1".into(), fields_v1);
    if !subresource.is_empty() {
        entry.insert("subresource".into(), text(subresource));
    }
    Value::Object(entry)
}

/// The managed fields an object carries.
pub fn entries(object: &Value) -> ApiResult<Vec<Entry>> {
    let Some(list) = object["metadata"]
        .get("managedFields")
        .filter(|v| !v.is_null())
    else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| ApiError::bad_request("metadata.managedFields must be a list"))?;
    let mut entries = Vec::with_capacity(list.len());
    for item in list {
        let text = |key: &str| item[key].as_str().unwrap_or("").to_owned();
        let operation = match item["operation"].as_str() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => {
                return Err(ApiError::bad_request(format!(
                    "metadata.managedFields: operation must be Apply or Update, not {other:?}"
                )));
            }
        };
        if item["fieldsType"].as_str().is_some_and(|t| t != "FieldsV1") {
            return Err(ApiError::bad_request(
                "metadata.managedFields: fieldsType must be FieldsV1",
            ));
        }
        entries.push(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: text("time"),
            subresource: text("subresource"),
            fields: fields::decode(item.get("fieldsV1").unwrap_or(&json!({})))?,
        });
    }
    Ok(entries)
}

/// Writes `entries` into the object's metadata (removes the field when there are none).
fn store(object: &mut Value, entries: &[Entry]) -> ApiResult<()> {
    let meta = object::metadata_mut(object)?;
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_value).collect()),
        );
    }
    Ok(())
}

/// A write: who makes it and through which part of the object.
#[derive(Clone, Copy, Debug)]
pub struct Writer<'a> {
    /// The manager's name.
    pub manager: &'a str,
    /// `"status"` for the status subresource, `""` for the object.
    pub subresource: &'a str,
}

/// The schema shape of `rt`'s objects.
fn shape(rt: &ResourceType) -> Shape<'_> {
    if let Some(schema) = &rt.schema {
        return Shape::root(&schema.0, false);
    }
    match openapi::builtin_kind_schema(&rt.group, &rt.version, &rt.kind) {
        Some(schema) => Shape::root(schema, true),
        None => Shape::unknown(),
    }
}

/// Whether `path` is outside what a write through `subresource` of `rt` may own.
fn excluded(path: &[String], rt: &ResourceType, subresource: &str) -> bool {
    ownable(path, rt, subresource) != Filter::Keep
}

/// Whether a write through `subresource` of `rt` may own `path`; every path under an
/// excluded one is excluded too, but for `metadata` itself.
fn ownable(path: &[String], rt: &ResourceType, subresource: &str) -> Filter {
    let first = path.first().map(String::as_str).unwrap_or("");
    if matches!(first, "f:apiVersion" | "f:kind") {
        return Filter::Prune;
    }
    if first == "f:metadata" {
        let server_owned = |second: &String| {
            SERVER_META
                .iter()
                .any(|m| second.strip_prefix("f:") == Some(*m))
        };
        return match path.get(1) {
            // Metadata itself is nobody's; its labels, annotations, … are.
            None => Filter::Drop,
            Some(second) if server_owned(second) => Filter::Prune,
            Some(_) => Filter::Keep,
        };
    }
    let excluded = match subresource {
        "status" => first != "f:status",
        _ => rt.has_status() && first == "f:status",
    };
    match excluded {
        true => Filter::Prune,
        false => Filter::Keep,
    }
}

/// The fields of `object` a write through `writer.subresource` may own.
fn owned_fields<'v>(object: &'v Value, rt: &ResourceType, subresource: &str) -> Fields<'v> {
    fields::fields_where(object, shape(rt), &|p| ownable(p, rt, subresource))
}

/// What a write changes: the paths it adds or modifies, and the paths it removes.
struct Change {
    changed: FieldSet,
    removed: FieldSet,
}

fn compare(live: &Fields<'_>, new: &Fields<'_>) -> Change {
    let mut changed: FieldSet = new.members.difference(&live.members).cloned().collect();
    for (path, value) in &new.leaves {
        match live.leaves.get(path) {
            Some(old) if old != value => {
                changed.insert(path.clone());
            }
            // A leaf now where there was a node with children (or the reverse).
            None if live.members.contains(path) => {
                changed.insert(path.clone());
            }
            _ => {}
        }
    }
    for path in live.leaves.keys() {
        if new.members.contains(path) && !new.leaves.contains_key(path) {
            changed.insert(path.clone());
        }
    }
    let removed = live.members.difference(&new.members).cloned().collect();
    Change { changed, removed }
}

/// Records a write that is not an apply: `new` replaces `current` (`None` on create). The
/// fields it adds or changes become `writer`'s (operation Update), taken from any other
/// manager; the fields it removes leave every manager. `new`'s managedFields, if the
/// client changed them, are the starting point; else `current`'s.
pub fn record_update(
    current: Option<&Value>,
    new: &mut Value,
    rt: &ResourceType,
    writer: Writer<'_>,
) -> ApiResult<()> {
    // A create: every field the object has is the writer's (the managedFields a client sends
    // with it are not kept). Only the paths are needed, not the values behind them.
    let Some(current) = current else {
        // Written as FieldsV1 straight from the walk: the set of paths is never built.
        let encoded =
            fields::encode_members_where(new, shape(rt), &|p| ownable(p, rt, writer.subresource));
        let meta = object::metadata_mut(new)?;
        match encoded.as_object().is_some_and(|set| !set.is_empty()) {
            true => {
                let entry = entry_value(
                    writer.manager,
                    Operation::Update,
                    &rt.api_version(),
                    &object::now(),
                    writer.subresource,
                    encoded,
                );
                meta.insert("managedFields".into(), Value::Array(vec![entry]));
            }
            false => {
                meta.remove("managedFields");
            }
        }
        return Ok(());
    };
    let given = new["metadata"].get("managedFields");
    let mut entries = match given {
        Some(given) if Some(given) != current["metadata"].get("managedFields") => entries(new)?,
        _ => entries(current)?,
    };
    let live = owned_fields(current, rt, writer.subresource);
    let next = owned_fields(new, rt, writer.subresource);
    let change = compare(&live, &next);
    let now = object::now();
    let mut mine = false;
    for entry in &mut entries {
        let before = entry.fields.len();
        if entry.is(writer.manager, Operation::Update, writer.subresource) {
            mine = true;
            entry.fields.extend(change.changed.iter().cloned());
        } else {
            entry.fields.retain(|p| !change.changed.contains(p));
        }
        entry.fields.retain(|p| !change.removed.contains(p));
        if entry.is(writer.manager, Operation::Update, writer.subresource)
            && (entry.fields.len() != before || !change.changed.is_empty())
        {
            entry.time = now.clone();
            entry.api_version = rt.api_version();
        }
    }
    if !mine && !change.changed.is_empty() {
        entries.push(Entry {
            manager: writer.manager.to_owned(),
            operation: Operation::Update,
            api_version: rt.api_version(),
            time: now,
            subresource: writer.subresource.to_owned(),
            fields: change.changed,
        });
    }
    entries.retain(|e| !e.fields.is_empty());
    store(new, &entries)
}

/// Applies `config` (an apply patch, already checked against the schema) for `writer` to
/// `current` (`None`: the object does not exist yet). Returns the object to write, with its
/// managed fields; conflicts with other managers fail with 409 unless `force`.
pub fn apply(
    current: Option<&Value>,
    config: &Value,
    rt: &ResourceType,
    writer: Writer<'_>,
    force: bool,
) -> ApiResult<Value> {
    let shape = shape(rt);
    let mut entries = match current {
        Some(current) => entries(current)?,
        None => Vec::new(),
    };
    let applied = owned_fields(config, rt, writer.subresource).members;
    let is_mine = |e: &Entry| e.is(writer.manager, Operation::Apply, writer.subresource);
    let last = entries
        .iter()
        .find(|e| is_mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();

    let mut merged = match current {
        Some(current) => merge(current, config, shape, true),
        None => config.clone(),
    };
    // Prune what this manager applied before, stopped applying, and nobody owns.
    let mut kept = applied.clone();
    for entry in entries.iter().filter(|e| !is_mine(e)) {
        kept.extend(entry.fields.iter().cloned());
    }
    let kept = fields::closure(&kept);
    let removable: Vec<Path> = fields::closure(&last)
        .into_iter()
        .filter(|p| !kept.contains(p) && !excluded(p, rt, writer.subresource))
        .collect();
    // Shallowest first: a removed parent takes its children with it.
    let mut removable = removable;
    removable.sort_by_key(Vec::len);
    for path in &removable {
        fields::remove(&mut merged, path);
    }

    let empty = Value::Null;
    let live = owned_fields(current.unwrap_or(&empty), rt, writer.subresource);
    let next = owned_fields(&merged, rt, writer.subresource);
    let change = compare(&live, &next);
    let mut conflicts: Vec<(String, String, Path)> = Vec::new();
    for entry in entries.iter_mut().filter(|e| !is_mine(e)) {
        let taken: Vec<Path> = entry
            .fields
            .iter()
            .filter(|p| change.changed.contains(*p))
            .cloned()
            .collect();
        if force {
            entry.fields.retain(|p| !taken.contains(p));
        } else {
            conflicts.extend(
                taken
                    .into_iter()
                    .map(|p| (entry.manager.clone(), entry.api_version.clone(), p)),
            );
        }
    }
    if !conflicts.is_empty() {
        return Err(conflict_error(rt, &conflicts));
    }
    for entry in &mut entries {
        entry.fields.retain(|p| !change.removed.contains(p));
    }
    let now = object::now();
    match entries.iter_mut().find(|e| is_mine(e)) {
        Some(entry) => {
            if entry.fields != applied {
                entry.fields = applied;
                entry.time = now;
            }
            entry.api_version = rt.api_version();
        }
        None => entries.push(Entry {
            manager: writer.manager.to_owned(),
            operation: Operation::Apply,
            api_version: rt.api_version(),
            time: now,
            subresource: writer.subresource.to_owned(),
            fields: applied,
        }),
    }
    entries.retain(|e| !e.fields.is_empty());
    store(&mut merged, &entries)?;
    Ok(merged)
}

/// The 409 of an apply that would change fields other managers own.
fn conflict_error(rt: &ResourceType, conflicts: &[(String, String, Path)]) -> ApiError {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|(manager, api_version, path)| Cause {
            reason: "FieldManagerConflict".into(),
            message: if api_version.is_empty() {
                format!("conflict with {manager:?}")
            } else {
                format!("conflict with {manager:?} using {api_version}")
            },
            field: fields::display(path),
        })
        .collect();
    let listed: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.message, c.field))
        .collect();
    let message = match causes.len() {
        1 => format!("Apply failed with 1 conflict: {}", listed[0]),
        n => format!("Apply failed with {n} conflicts: {}", listed.join("\n")),
    };
    let mut error = ApiError::new(409, crate::http::error::Reason::Conflict, message)
        .on(&rt.group, &rt.plural, "");
    if let Some(details) = error.details.as_mut() {
        details.causes = causes;
    }
    error
}

/// Merges an apply configuration into the live object: the configuration's values win;
/// granular maps and structs merge key by key; list-type maps merge item by item (matched by
/// key, new items appended in the configuration's order); sets take the union; atomic values
/// are replaced.
fn merge(live: &Value, config: &Value, shape: Shape<'_>, root: bool) -> Value {
    match (live, config) {
        (Value::Object(live_map), Value::Object(config_map)) if !shape.atomic_map() => {
            let mut out: Map<String, Value> = live_map.clone();
            for (key, value) in config_map {
                let merged = match live_map.get(key) {
                    Some(old) => merge(old, value, shape.field(key, root), false),
                    None => value.clone(),
                };
                out.insert(key.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(live_items), Value::Array(config_items)) => match shape.list_type() {
            ListType::Atomic => config.clone(),
            ListType::Set => {
                let mut out = live_items.clone();
                for item in config_items {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            list @ ListType::Map(_) => {
                let items = shape.items();
                let mut out = live_items.clone();
                for (index, item) in config_items.iter().enumerate() {
                    let element = fields::item_element(item, index, &list);
                    let found = element
                        .starts_with("k:")
                        .then(|| out.iter().position(|old| fields::item_is(old, &element)))
                        .flatten();
                    match found {
                        Some(at) => out[at] = merge(&out[at], item, items, false),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => config.clone(),
    }
}

#[cfg(test)]
mod tests;
