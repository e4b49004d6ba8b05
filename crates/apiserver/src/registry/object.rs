//! Objects as the server stores them: JSON with server-managed metadata.
//!
//! The store holds each object's JSON without `metadata.resourceVersion`; it is the key's
//! `mod_revision` and is filled in on every read.

use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use crate::http::error::{ApiError, ApiResult, Cause};
use crate::registry::resources::ResourceType;

/// The longest object the server stores, in bytes, as stored (its JSON with
/// `managedFields` and the rest of the server's metadata): every write (create, update,
/// patch, apply, the status and scale subresources) over it is refused with 413.
///
/// Not etcd's default 1.5 MiB: a placement's status may list 1,000 chosen and 1,000
/// excluded clusters (`MAX_LISTED_CLUSTERS`), their drift and conditions, which is not
/// clearly within 1.5 MiB. An etcd backend must run with `--max-request-bytes` above this
/// (4 MiB leaves room for the key and the transaction).
pub const MAX_OBJECT_BYTES: usize = 3 << 20;

/// The longest request body, in bytes: twice [`MAX_OBJECT_BYTES`], as Kubernetes takes
/// 3 MiB bodies over etcd's 1.5 MiB, so that an object stored at the limit can be read,
/// changed and sent back whatever its client's encoding adds (its resourceVersion,
/// indentation, YAML, Go's `\u003c` for `<`): the limit that refuses it is the stored one.
pub const MAX_REQUEST_BYTES: usize = 2 * MAX_OBJECT_BYTES;

/// The deepest nesting of objects and arrays the server stores (the object itself is level
/// 1), `managedFields` included: a write of anything deeper is refused with 422 Invalid.
///
/// Kubernetes (Go's JSON decoder) allows 10,000 levels; serde_json, which decodes stored
/// objects here and in kube-rs clients, stops at 127. `managedFields` nest 5 levels deeper
/// than the fields they record (`metadata.managedFields[i].fieldsV1`, and a `{}` for each
/// leaf), and a list answer, a watch event or a Table row wraps an object in up to 3 more:
/// 100 leaves room for those and for the server's own later additions, so that nothing
/// stored fails to decode.
pub const MAX_DEPTH: usize = 100;

/// The deepest stored object that is read back: serde_json's 127 levels, less the 3 of the
/// deepest wrapper the server sends an object in (a Table row). Nothing deeper can be
/// stored through the API ([`MAX_DEPTH`]); an object written before that limit, or by
/// something else, is left out of lists and watches with a warning (see [`undecodable`]).
pub const READABLE_DEPTH: usize = 124;

/// The current time as Kubernetes writes timestamps (`2006-01-02T15:04:05Z`), formatted
/// once per second.
pub fn now() -> String {
    static LAST: Mutex<(i64, String)> = Mutex::new((i64::MIN, String::new()));
    let now = jiff::Timestamp::now();
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    if last.0 != now.as_second() {
        *last = (
            now.as_second(),
            now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    }
    last.1.clone()
}

/// A fresh object UID: a random (version 4) UUID. The random bytes come from the system's
/// generator 64 UIDs at a time, rather than a system call for every object created.
pub fn new_uid() -> String {
    const POOL: usize = 16 * 64;
    thread_local! {
        static RANDOM: std::cell::RefCell<(usize, [u8; POOL])> =
            const { std::cell::RefCell::new((POOL, [0; POOL])) };
    }
    let bytes = RANDOM.with_borrow_mut(|(used, pool)| {
        if *used == POOL {
            rustls::crypto::ring::default_provider()
                .secure_random
                .fill(pool)
                .ok()?;
            *used = 0;
        }
        let mut bytes = [0; 16];
        bytes.copy_from_slice(&pool[*used..*used + 16]);
        // Handed out once.
        pool[*used..*used + 16].fill(0);
        *used += 16;
        Some(bytes)
    });
    let uuid = match bytes {
        Some(bytes) => uuid::Builder::from_random_bytes(bytes).into_uuid(),
        None => uuid::Uuid::new_v4(),
    };
    uuid.hyphenated()
        .encode_lower(&mut uuid::Uuid::encode_buffer())
        .to_owned()
}

/// The object's `metadata`, created if missing; an error if it is not an object.
pub fn metadata_mut(object: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let Some(map) = object.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    metadata
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))
}

/// A string field of `metadata`, or "".
pub fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or("")
}

/// Checks `apiVersion` and `kind` against the resource the URL names, filling them in when
/// absent.
pub fn check_type(object: &mut Value, rt: &ResourceType) -> ApiResult<()> {
    let api_version = rt.api_version();
    let Some(map) = object.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    match map.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("apiVersion".into(), json!(api_version));
        }
        Some(given) if given == api_version => {}
        Some(given) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({given}) does not match the expected API version ({api_version})"
            )));
        }
    }
    match map.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            map.insert("kind".into(), json!(rt.kind));
        }
        Some(given) if given == rt.kind => {}
        Some(given) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({given}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    Ok(())
}

/// Which rule a name follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253 characters.
    Subdomain,
    /// RFC 1123 label: lowercase alphanumerics and `-`, at most 63 characters (namespaces).
    Label,
    /// Any path segment: not `.` or `..`, without `/` or `%` (roles and bindings:
    /// `system:basic-user`).
    PathSegment,
}

/// The rule names of `rt` follow.
pub fn name_rule(rt: &ResourceType) -> NameRule {
    rt.strategy().name_rule()
}

/// Why `name` breaks `rule`, as Kubernetes words it; `None` if it is valid.
pub fn check_name(name: &str, rule: NameRule) -> Option<String> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.chars().all(|c| alnum(c) || c == '-')
            && label.starts_with(alnum)
            && label.ends_with(alnum)
    };
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                return Some("must be no more than 253 characters".into());
            }
            if !name.split('.').all(label_ok) {
                return Some(
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')".into(),
                );
            }
        }
        NameRule::PathSegment => {
            if name == "." || name == ".." {
                return Some(format!("may not be '{name}'"));
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    return Some(format!("may not contain '{bad}'"));
                }
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                return Some("must be no more than 63 characters".into());
            }
            if !label_ok(name) {
                return Some(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name')".into(),
                );
            }
        }
    }
    None
}

/// A name for `generateName`: the prefix and five random lowercase alphanumerics.
pub fn generate_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let suffix: String = (0..5)
        .map(|_| ALPHABET[fastrand_index(ALPHABET.len())] as char)
        .collect();
    let prefix: String = prefix.chars().take(58).collect();
    format!("{prefix}{suffix}")
}

fn fastrand_index(n: usize) -> usize {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    usize::from(bytes[0]) % n
}

/// Validates the identity of an object about to be created in `namespace` and fills in
/// the server-managed metadata. Returns the object's name.
pub fn prepare_create(object: &mut Value, rt: &ResourceType, namespace: &str) -> ApiResult<String> {
    check_type(object, rt)?;
    let meta = metadata_mut(object)?;
    let mut name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if name.is_empty() {
        let prefix = meta
            .get("generateName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                "",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
        name = generate_name(&prefix);
        meta.insert("name".into(), json!(name));
    }
    if let Some(problem) = check_name(&name, name_rule(rt)) {
        return Err(ApiError::invalid(
            &rt.group,
            &rt.kind,
            &name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {name:?}: {problem}"),
                field: "metadata.name".into(),
            }],
        ));
    }
    match (rt.namespaced, meta.get("namespace").and_then(Value::as_str)) {
        (true, Some(given)) if !given.is_empty() && given != namespace => {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({given}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        (true, _) => {
            meta.insert("namespace".into(), json!(namespace));
        }
        (false, _) => {
            meta.remove("namespace");
        }
    }
    meta.insert("uid".into(), json!(new_uid()));
    meta.insert("creationTimestamp".into(), json!(now()));
    match keeps_generation(rt) {
        true => meta.insert("generation".into(), json!(1)),
        false => meta.remove("generation"),
    };
    for server_owned in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(server_owned);
    }
    Ok(name)
}

/// Carries the server-owned metadata of `current` over to `object`, a replacement of it,
/// and bumps `generation` when anything but metadata and status changed.
pub fn prepare_update(object: &mut Value, current: &Value, rt: &ResourceType) -> ApiResult<()> {
    check_type(object, rt)?;
    let spec_changed = !same_but(object, current, &["metadata", "status"]);
    let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
    let meta = metadata_mut(object)?;
    for owned in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
    ] {
        match current["metadata"].get(owned) {
            Some(value) => {
                meta.insert(owned.into(), value.clone());
            }
            None => {
                meta.remove(owned);
            }
        }
    }
    meta.remove("resourceVersion");
    if !keeps_generation(rt) {
        meta.remove("generation");
        return Ok(());
    }
    meta.insert(
        "generation".into(),
        json!(if spec_changed {
            generation + 1
        } else {
            generation
        }),
    );
    Ok(())
}

/// Whether objects of `rt` carry `metadata.generation`, as Kubernetes keeps it: custom
/// resources, and the built-in kinds whose strategies count spec changes (workloads, the
/// autoscaling, policy, networking and discovery kinds, CRDs, admission configurations).
/// ConfigMaps, Secrets, Services, Pods (in 1.32), Namespaces, RBAC objects and the like
/// have none.
pub fn keeps_generation(rt: &ResourceType) -> bool {
    if rt.schema.is_some() || rt.behaviour == crate::registry::strategy::Behaviour::CustomResource {
        return true;
    }
    matches!(
        (rt.group.as_str(), rt.plural.as_str()),
        (
            "apps",
            "deployments" | "replicasets" | "statefulsets" | "daemonsets"
        ) | ("batch", "jobs" | "cronjobs")
            | ("autoscaling", "horizontalpodautoscalers")
            | ("policy", "poddisruptionbudgets")
            | ("networking.k8s.io", "ingresses" | "networkpolicies")
            | ("discovery.k8s.io", "endpointslices")
            | ("apiextensions.k8s.io", "customresourcedefinitions")
            | ("admissionregistration.k8s.io", _)
            | ("flowcontrol.apiserver.k8s.io", _)
            | ("", "replicationcontrollers")
    )
}

/// The stored JSON of an object with `metadata.resourceVersion` set, written without
/// decoding it: the field goes first into the top-level `metadata` object. `None` if the
/// bytes have no top-level `metadata` object (then decode and use [`with_resource_version`]).
///
/// The store never holds a resourceVersion (every write path removes it), so the field is
/// not duplicated.
pub fn with_resource_version_raw(json: &[u8], revision: u64) -> Option<Vec<u8>> {
    let at = top_level_object_start(json, b"metadata")?;
    let closes_at_once = json[at + 1..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    let field = format!(
        "\"resourceVersion\":\"{revision}\"{}",
        if closes_at_once { "" } else { "," }
    );
    let mut out = Vec::with_capacity(json.len() + field.len());
    out.extend_from_slice(&json[..=at]);
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(&json[at + 1..]);
    Some(out)
}

/// The index of the `{` that opens the value of `key` in the outermost object.
///
/// Strings are skipped with `memchr` (to their closing quote or next escape), so a large
/// string value costs a vectorised search rather than a step per byte.
fn top_level_object_start(json: &[u8], key: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut last_key: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let start = i + 1;
                let mut at = start;
                let end = loop {
                    let found = at + memchr::memchr2(b'"', b'\\', json.get(at..)?)?;
                    if json[found] == b'"' {
                        break found;
                    }
                    // An escape: the next byte is part of it, whatever it is.
                    at = found + 2;
                };
                if depth == 1 {
                    last_key = Some((start, end));
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b':' if depth == 1 => {
                if let Some((start, end)) = last_key.take()
                    && &json[start..end] == key
                {
                    let value = i
                        + 1
                        + json[i + 1..]
                            .iter()
                            .position(|b| !b.is_ascii_whitespace())?;
                    return (json[value] == b'{').then_some(value);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Whether stored JSON begins with the given apiVersion (serde_json writes keys in order,
/// so `apiVersion` comes first); `true` when no particular version is wanted.
pub fn has_api_version(json: &[u8], api_version: Option<&str>) -> bool {
    match api_version {
        None => true,
        Some(v) => json.starts_with(format!("{{\"apiVersion\":\"{v}\"").as_bytes()),
    }
}

/// Whether stored JSON has a `metadata.deletionTimestamp` (not null): the object is being
/// deleted. Reads only that field (the rest is skipped, not decoded), and nothing at all when
/// the name appears nowhere in an object's JSON; `None` if the bytes are not a JSON object.
pub fn is_being_deleted(json: &[u8]) -> Option<bool> {
    if json.trim_ascii_start().starts_with(b"{")
        && memchr::memmem::find(json, b"\"deletionTimestamp\"").is_none()
    {
        return Some(false);
    }
    use serde::de::IgnoredAny;

    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "deletionTimestamp", default)]
        deletion_timestamp: Option<IgnoredAny>,
    }
    let object: Object = serde_json::from_slice(json).ok()?;
    Some(
        object
            .metadata
            .is_some_and(|m| m.deletion_timestamp.is_some()),
    )
}

/// Whether `a` and `b` are equal but for their top-level fields `skipped`, compared in
/// place (a whole object is not copied to leave fields out).
pub fn same_but(a: &Value, b: &Value, skipped: &[&str]) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => same_map_but(a, b, skipped),
        _ => a == b,
    }
}

fn same_map_but(a: &Map<String, Value>, b: &Map<String, Value>, skipped: &[&str]) -> bool {
    let kept = |(key, _): &(&String, &Value)| !skipped.contains(&key.as_str());
    a.iter().filter(kept).count() == b.iter().filter(kept).count()
        && a.iter()
            .filter(kept)
            .all(|(key, value)| b.get(key) == Some(value))
}

/// Whether `a` and `b` are the same object but for `metadata.resourceVersion`.
pub fn same_but_resource_version(a: &Value, b: &Value) -> bool {
    fn metadata(v: &Value) -> Option<&Map<String, Value>> {
        v.get("metadata").and_then(Value::as_object)
    }
    let same_metadata = match (metadata(a), metadata(b)) {
        (Some(x), Some(y)) => same_map_but(x, y, &["resourceVersion"]),
        _ => a.get("metadata") == b.get("metadata"),
    };
    same_metadata && same_but(a, b, &["metadata"])
}

/// `object` with `metadata.resourceVersion` set to `revision`.
pub fn with_resource_version(mut object: Value, revision: u64) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
    object
}

/// Whether `value` nests objects and arrays more than `limit` levels deep (a scalar is
/// level 0, an object or array one more than its deepest member). Looks no deeper than
/// `limit + 1` levels, so a value of any depth is checked without deep recursion.
pub fn deeper_than(value: &Value, limit: usize) -> bool {
    match value {
        Value::Object(map) => limit == 0 || map.values().any(|m| deeper_than(m, limit - 1)),
        Value::Array(items) => limit == 0 || items.iter().any(|m| deeper_than(m, limit - 1)),
        _ => false,
    }
}

/// Refuses an object about to be stored that nests deeper than [`MAX_DEPTH`], with 422
/// Invalid naming the limit and the top-level field (or `metadata` field) that is too deep.
pub fn check_depth(object: &Value, rt: &ResourceType) -> ApiResult<()> {
    if !deeper_than(object, MAX_DEPTH) {
        return Ok(());
    }
    // The field under the object (or under its metadata) that goes too deep.
    let mut field = String::new();
    if let Some(map) = object.as_object() {
        for (key, value) in map {
            if !deeper_than(value, MAX_DEPTH - 1) {
                continue;
            }
            field = key.clone();
            if key == "metadata"
                && let Some((inner, _)) = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .find(|(_, v)| deeper_than(v, MAX_DEPTH - 2))
            {
                field = format!("metadata.{inner}");
            }
            break;
        }
    }
    let name = match meta_str(object, "name") {
        "" => meta_str(object, "generateName"),
        name => name,
    };
    let managed = if field == "metadata.managedFields" {
        " (managedFields nest 5 levels deeper than the fields they record)"
    } else {
        ""
    };
    Err(ApiError::invalid(
        &rt.group,
        &rt.kind,
        name,
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: nested more than {MAX_DEPTH} levels deep as stored, managedFields included{managed}: the limit is {MAX_DEPTH} levels"
            ),
            field,
        }],
    ))
}

/// Refuses an object whose stored JSON is `bytes` long when that is over
/// [`MAX_OBJECT_BYTES`], with 413 naming both.
pub fn check_size(bytes: usize, rt: &ResourceType, name: &str) -> ApiResult<()> {
    if bytes <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    Err(ApiError::too_large(format!(
        "{} \"{name}\" is too large to store: {bytes} bytes as stored (managedFields included), over the limit of {MAX_OBJECT_BYTES} bytes",
        rt.kind
    ))
    .on(&rt.group, &rt.plural, name))
}

/// Why stored JSON cannot be read back and served, if it cannot: not a JSON object,
/// unbalanced or cut short, or nested deeper than [`READABLE_DEPTH`]. A scan of the
/// structure alone (strings skipped with `memchr`), not a full parse: the server writes
/// what it stores itself, so what goes wrong is depth (objects stored before the limit)
/// and bytes cut short or put there by something else.
pub fn undecodable(json: &[u8]) -> Option<String> {
    let json = json.trim_ascii();
    if !json.starts_with(b"{") {
        return Some("it is not a JSON object".into());
    }
    let cut_short = || Some("it is not whole JSON (cut short or unbalanced)".to_owned());
    // Which open brackets are objects, a bit per level (READABLE_DEPTH < 128).
    let mut objects = 0u128;
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                let mut at = i + 1;
                loop {
                    let Some(found) = json.get(at..).and_then(|r| memchr::memchr2(b'"', b'\\', r))
                    else {
                        return cut_short();
                    };
                    if json[at + found] == b'"' {
                        i = at + found;
                        break;
                    }
                    // An escape: the next byte is part of it, whatever it is.
                    at += found + 2;
                }
            }
            open @ (b'{' | b'[') => {
                if depth == READABLE_DEPTH {
                    return Some(format!(
                        "it is nested more than {READABLE_DEPTH} levels deep"
                    ));
                }
                objects = (objects & !(1 << depth)) | (u128::from(open == b'{') << depth);
                depth += 1;
            }
            close @ (b'}' | b']') => {
                depth = match depth.checked_sub(1) {
                    Some(depth) if (objects >> depth & 1 == 1) == (close == b'}') => depth,
                    _ => return cut_short(),
                };
                if depth == 0 && i + 1 != json.len() {
                    return Some("it has more after the object".into());
                }
            }
            _ => {}
        }
        i += 1;
    }
    if depth != 0 {
        return cut_short();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_is_counted_in_objects_and_arrays_and_looked_at_no_deeper_than_needed() {
        let nested = |levels: usize| {
            let mut value = json!(1);
            for i in 0..levels {
                value = if i % 2 == 0 {
                    json!({"a": value})
                } else {
                    json!([value])
                };
            }
            value
        };
        assert!(!deeper_than(&json!(1), 0));
        assert!(deeper_than(&json!({}), 0));
        assert!(!deeper_than(&json!({}), 1));
        assert!(!deeper_than(&nested(100), 100));
        assert!(deeper_than(&nested(101), 100));
        // Far deeper than a recursion would survive if it went to the bottom.
        let mut deep = nested(0);
        for _ in 0..5000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(deeper_than(&deep, MAX_DEPTH));
        // Dropping it would recurse 5,000 levels on the test's stack.
        std::mem::forget(deep);

        let configmaps = ResourceType::new("", "v1", "ConfigMap", "configmaps", true);
        let mut object = json!({"metadata": {"name": "a"}, "data": nested(MAX_DEPTH - 1)});
        assert!(check_depth(&object, &configmaps).is_ok());
        object["data"] = nested(MAX_DEPTH);
        let error = check_depth(&object, &configmaps).unwrap_err();
        assert_eq!(error.code, 422);
        let cause = &error.details.as_ref().unwrap().causes[0];
        assert_eq!(cause.field, "data");
        assert!(
            cause.message.contains("more than 100 levels"),
            "{}",
            cause.message
        );
        object["data"] = json!({});
        object["metadata"]["managedFields"] = nested(MAX_DEPTH - 1);
        let error = check_depth(&object, &configmaps).unwrap_err();
        assert_eq!(
            error.details.unwrap().causes[0].field,
            "metadata.managedFields"
        );
    }

    #[test]
    fn stored_json_that_cannot_be_served_is_told_apart_from_json_that_can() {
        let text = |n: usize| format!("{}{}", "{\"a\":".repeat(n), "1".to_owned() + &"}".repeat(n));
        assert_eq!(undecodable(br#"{"a":"x\"}]{","b":[1,{"c":"\\"}]}"#), None);
        assert_eq!(undecodable(text(READABLE_DEPTH).as_bytes()), None);
        serde_json::from_str::<Value>(&text(READABLE_DEPTH)).unwrap();
        let deep = undecodable(text(READABLE_DEPTH + 1).as_bytes()).unwrap();
        assert!(deep.contains("nested more than 124"), "{deep}");
        assert!(serde_json::from_str::<Value>(&text(128)).is_err());
        for broken in [
            &b"not json"[..],
            b"",
            b"[1]",
            b"{\"a\":\"x}",
            b"{\"a\":{}",
            b"{\"a\":1}}",
            b"{\"a\":1}{}",
            b"{]",
            b"{\"a\":[1}}",
            b"{\"a\":{1]}",
        ] {
            assert!(
                undecodable(broken).is_some(),
                "{}",
                String::from_utf8_lossy(broken)
            );
        }
    }

    #[test]
    fn objects_compare_in_place_but_for_the_fields_left_out() {
        let current = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7", "generation": 1},
            "data": {"k": "v"}, "status": {"phase": "x"}});
        let written = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "generation": 1}, "data": {"k": "v"}, "status": {"phase": "x"}});
        assert!(same_but_resource_version(&current, &written));
        assert!(same_but_resource_version(&written, &current));
        let relabelled = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "generation": 1, "labels": {"x": "y"}},
            "data": {"k": "v"}, "status": {"phase": "x"}});
        assert!(!same_but_resource_version(&current, &relabelled));
        // The spec-like rest, without metadata and status: a status change is not one.
        let restatused = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b"}, "data": {"k": "v"}, "status": {"phase": "y"}});
        assert!(same_but(&current, &restatused, &["metadata", "status"]));
        assert!(!same_but_resource_version(&current, &restatused));
        // A field more or less on either side is a difference.
        let more = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {},
            "data": {"k": "v"}, "binaryData": {}});
        assert!(!same_but(&current, &more, &["metadata", "status"]));
        assert!(!same_but(&more, &current, &["metadata", "status"]));
        let fewer = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        assert!(!same_but(&current, &fewer, &["metadata", "status"]));
        assert!(same_but(&json!(1), &json!(1), &[]) && !same_but(&json!(1), &json!(2), &[]));
    }

    #[test]
    fn uids_are_distinct_random_uuids() {
        let mut seen = std::collections::HashSet::new();
        // More than one pool's worth, from two threads.
        let other = std::thread::spawn(|| (0..200).map(|_| new_uid()).collect::<Vec<_>>());
        for uid in (0..200).map(|_| new_uid()).chain(other.join().unwrap()) {
            let parsed = uuid::Uuid::parse_str(&uid).unwrap();
            assert_eq!(parsed.get_version_num(), 4, "{uid}");
            assert_eq!(parsed.hyphenated().to_string(), uid);
            assert!(seen.insert(uid));
        }
        assert_eq!(seen.len(), 400);
    }

    #[test]
    fn names_follow_rfc_1123() {
        for good in ["a", "web", "web-1", "a.b.c", "0abc"] {
            assert_eq!(check_name(good, NameRule::Subdomain), None, "{good}");
        }
        for bad in [
            "",
            "Web",
            "web_1",
            "-web",
            "web-",
            "a..b",
            ".a",
            &"a".repeat(254),
        ] {
            assert!(check_name(bad, NameRule::Subdomain).is_some(), "{bad}");
        }
        assert!(check_name("a.b", NameRule::Label).is_some());
        assert_eq!(check_name("system:basic-user", NameRule::PathSegment), None);
        for bad in [".", "..", "a/b", "a%2f"] {
            assert!(check_name(bad, NameRule::PathSegment).is_some(), "{bad}");
        }
        assert!(check_name(&"a".repeat(64), NameRule::Label).is_some());
        assert_eq!(check_name(&"a".repeat(63), NameRule::Label), None);
    }

    #[test]
    fn generated_names_keep_the_prefix_and_are_valid() {
        let name = generate_name("web-");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert_eq!(check_name(&name, NameRule::Subdomain), None);
        assert_eq!(generate_name(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn the_resource_version_goes_into_the_top_level_metadata_without_decoding() {
        let cases = [
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#,
                7,
            ),
            (
                r#"{"a":{"metadata":{"x":1}},"b":"\"metadata\":{","metadata":{}}"#,
                12,
            ),
            (
                r#"{"spec":{"template":{"metadata":{"labels":{}}}}, "metadata" : { "name":"d"}}"#,
                3,
            ),
            (
                r#"{"data":{"k":"a \\\" \"metadata\":{ b"},"metadata":{"name":"e"}}"#,
                99,
            ),
            (
                r#"{"a":"\\","b":["\\\"",{"metadata":{}}],"metadata":{"name":"\"f\""}}"#,
                5,
            ),
            (r#"{"metadata":{"name":"x"},"data":{"y":"z"}}"#, 6),
        ];
        for (text, rv) in cases {
            let raw =
                with_resource_version_raw(text.as_bytes(), rv).unwrap_or_else(|| panic!("{text}"));
            let expected = with_resource_version(serde_json::from_str(text).unwrap(), rv);
            assert_eq!(
                serde_json::from_slice::<Value>(&raw).unwrap(),
                expected,
                "{text}"
            );
        }
        assert_eq!(
            with_resource_version_raw(br#"{"a":{"metadata":{}}}"#, 1),
            None
        );
        assert_eq!(with_resource_version_raw(br#"{"metadata":"x"}"#, 1), None);
        assert_eq!(with_resource_version_raw(b"[]", 1), None);
        assert_eq!(with_resource_version_raw(b"}{", 1), None);
        assert_eq!(with_resource_version_raw(br#"{"a":"\"#, 1), None);
        assert_eq!(with_resource_version_raw(br#"{"a":"x\""#, 1), None);
        assert_eq!(with_resource_version_raw(br#"{"metadata""#, 1), None);
    }

    #[test]
    fn a_deletion_timestamp_is_found_without_decoding_the_rest() {
        let cases: [(&str, Option<bool>); 7] = [
            (r#"{"metadata":{"name":"a"}}"#, Some(false)),
            (
                r#"{"metadata":{"name":"a","deletionTimestamp":null}}"#,
                Some(false),
            ),
            (
                r#"{"spec":{"metadata":{"deletionTimestamp":"x"}},"metadata":{"name":"a"}}"#,
                Some(false),
            ),
            (
                r#"{"metadata":{"deletionTimestamp":"2024-01-01T00:00:00Z","name":"a"}}"#,
                Some(true),
            ),
            (r#"{"kind":"Namespace"}"#, Some(false)),
            (r#"{"metadata":null}"#, Some(false)),
            ("not json", None),
        ];
        for (text, expected) in cases {
            assert_eq!(is_being_deleted(text.as_bytes()), expected, "{text}");
            if let Ok(value) = serde_json::from_str::<Value>(text) {
                assert_eq!(
                    Some(!value["metadata"]["deletionTimestamp"].is_null()),
                    expected,
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn timestamps_are_seconds_in_utc() {
        let now = now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }
}
