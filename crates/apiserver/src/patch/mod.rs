//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the API applies them.

pub mod fields;
pub mod managed;
pub mod strategic;

use serde_json::{Map, Value};

use crate::http::error::{ApiError, ApiResult};
use crate::registry::object::{MAX_DEPTH, deeper_than};

/// Applies a JSON merge patch: objects merge key by key, `null` removes, anything else
/// replaces.
pub fn merge(target: &Value, patch: &Value) -> Value {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            let mut out: Map<String, Value> = target.clone();
            for (key, value) in patch {
                if value.is_null() {
                    out.remove(key);
                } else {
                    let merged = merge(out.get(key).unwrap_or(&Value::Null), value);
                    out.insert(key.clone(), merged);
                }
            }
            Value::Object(out)
        }
        (_, Value::Object(_)) => merge(&Value::Object(Map::new()), patch),
        (_, patch) => patch.clone(),
    }
}

/// Applies a JSON patch: a list of `add`, `remove`, `replace`, `move`, `copy` and `test`
/// operations, all or nothing. As in Kubernetes, `test` of a missing path against `null`
/// succeeds.
pub fn json_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|message| {
            ApiError::new(
                422,
                crate::http::error::Reason::Invalid,
                format!("the JSON patch operation {i} ({op}) cannot apply: {message}"),
            )
        })?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let name = op["op"].as_str().ok_or("it has no \"op\"")?;
    let path = parse_pointer(op["path"].as_str().ok_or("it has no \"path\"")?)?;
    // A value placed at `path` must not nest the object past the limit: operations one
    // below another could otherwise nest it thousands of levels deep, past what any
    // recursive walk of it survives.
    let placed = |value: Value| {
        if path.len() > MAX_DEPTH || deeper_than(&value, MAX_DEPTH - path.len()) {
            return Err(format!(
                "it would nest the object more than {MAX_DEPTH} levels deep"
            ));
        }
        Ok(value)
    };
    let given = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| "it has no \"value\"".to_owned())
    };
    let value = || given().and_then(placed);
    match name {
        "add" => add(doc, &path, value()?),
        "remove" => remove(doc, &path).map(drop),
        "replace" => {
            let slot =
                get_mut(doc, &path).ok_or_else(|| format!("{} does not exist", show(&path)))?;
            *slot = value()?;
            Ok(())
        }
        "move" | "copy" => {
            let from = parse_pointer(op["from"].as_str().ok_or("it has no \"from\"")?)?;
            let moved = if name == "move" {
                if path.starts_with(&from) && path.len() > from.len() {
                    return Err("cannot move a value into itself".into());
                }
                remove(doc, &from)?
            } else {
                get(doc, &from)
                    .cloned()
                    .ok_or_else(|| format!("{} does not exist", show(&from)))?
            };
            add(doc, &path, placed(moved)?)
        }
        "test" => {
            let expected = given()?;
            match get(doc, &path) {
                Some(actual) if *actual == expected => Ok(()),
                None if expected.is_null() => Ok(()),
                Some(actual) => Err(format!("{} is {actual}, not {expected}", show(&path))),
                None => Err(format!("{} does not exist", show(&path))),
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

fn parse_pointer(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let rest = text
        .strip_prefix('/')
        .ok_or_else(|| format!("the path {text:?} does not start with /"))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn show(path: &[String]) -> String {
    format!("/{}", path.join("/"))
}

fn index(array: &[Value], token: &str, for_add: bool) -> Result<usize, String> {
    if for_add && token == "-" {
        return Ok(array.len());
    }
    let i: usize = token
        .parse()
        .map_err(|_| format!("{token:?} is not an array index"))?;
    let bound = if for_add {
        array.len()
    } else {
        array.len().saturating_sub(1)
    };
    if i > bound || (!for_add && array.is_empty()) {
        return Err(format!("index {i} is out of bounds"));
    }
    Ok(i)
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |node, token| match node {
        Value::Object(map) => map.get(token),
        Value::Array(array) => token.parse::<usize>().ok().and_then(|i| array.get(i)),
        _ => None,
    })
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |node, token| match node {
        Value::Object(map) => map.get_mut(token),
        Value::Array(array) => token
            .parse::<usize>()
            .ok()
            .and_then(move |i| array.get_mut(i)),
        _ => None,
    })
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(array)) => {
            let i = index(array, last, true)?;
            array.insert(i, value);
            Ok(())
        }
        Some(_) => Err(format!("{} is not an object or array", show(parent))),
        None => Err(format!("{} does not exist", show(parent))),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let (last, parent) = path
        .split_last()
        .ok_or("cannot remove the whole document")?;
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => map
            .remove(last)
            .ok_or_else(|| format!("{} does not exist", show(path))),
        Some(Value::Array(array)) => {
            let i = index(array, last, false)?;
            Ok(array.remove(i))
        }
        _ => Err(format!("{} does not exist", show(path))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        // RFC 7386, appendix A, a selection.
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(merge(&target, &patch), expected, "{target} + {patch}");
        }
    }

    #[test]
    fn json_patch_operations() {
        let doc = json!({"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]});
        let patch = json!([
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "one"},
            {"op": "remove", "path": "/list/0"},
            {"op": "add", "path": "/list/-", "value": 4},
            {"op": "copy", "from": "/list/0", "path": "/first"},
            {"op": "move", "from": "/first", "path": "/moved"},
            {"op": "test", "path": "/moved", "value": 2},
            {"op": "add", "path": "/a~1b", "value": true},
        ]);
        let out = json_patch(&doc, &patch).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a": "one", "b": "2"}}, "list": [2, 3, 4], "moved": 2, "a/b": true})
        );
    }

    #[test]
    fn test_of_a_missing_path_against_null_succeeds() {
        // kube-rs's finalizer helper sends exactly this.
        let doc = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
        ]);
        assert_eq!(
            json_patch(&doc, &patch).unwrap()["metadata"]["finalizers"],
            json!(["f"])
        );
    }

    #[test]
    fn failing_patches_change_nothing_and_say_why() {
        let doc = json!({"a": 1});
        for (patch, words) in [
            (
                json!([{"op": "replace", "path": "/b", "value": 1}]),
                "/b does not exist",
            ),
            (
                json!([{"op": "test", "path": "/a", "value": 2}]),
                "/a is 1, not 2",
            ),
            (
                json!([{"op": "add", "path": "/x/y", "value": 1}]),
                "/x does not exist",
            ),
            (json!([{"op": "frobnicate", "path": "/a"}]), "unknown op"),
            (
                json!([{"op": "add", "path": "a", "value": 1}]),
                "does not start with /",
            ),
            (json!({"op": "add"}), "must be an array"),
        ] {
            let e = json_patch(&doc, &patch).unwrap_err();
            assert!(e.message.contains(words), "{patch}: {}", e.message);
        }
    }
}
