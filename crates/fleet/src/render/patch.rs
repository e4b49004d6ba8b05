//! One RFC 6902 operation of a rule, applied with `json_patch`, and a readable reason
//! when it fails.

use flotilla_api::JsonPatchOp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

/// Applies one operation to `doc` (left unchanged on failure); the error says why it failed.
pub(super) fn apply(
    doc: &mut Value,
    op: JsonPatchOp,
    path: &str,
    value: Option<Value>,
) -> Result<(), String> {
    let pointer = PointerBuf::parse(path).map_err(|_| {
        "not a JSON pointer: it must start with '/', and '~' must be followed by 0 or 1".to_owned()
    })?;
    let value = || value.ok_or_else(|| "add and replace take a value".to_owned());
    let operation = match op {
        JsonPatchOp::Add => PatchOperation::Add(AddOperation {
            path: pointer,
            value: value()?,
        }),
        JsonPatchOp::Remove => PatchOperation::Remove(RemoveOperation { path: pointer }),
        JsonPatchOp::Replace => PatchOperation::Replace(ReplaceOperation {
            path: pointer,
            value: value()?,
        }),
    };
    json_patch::patch(doc, &[operation]).map_err(|_| diagnose(doc, op, path))
}

/// Why `op` cannot apply at `path` in `doc`: the first step of the path that fails.
fn diagnose(doc: &Value, op: JsonPatchOp, path: &str) -> String {
    let tokens: Vec<&str> = path.split('/').skip(1).collect();
    let Some(last) = tokens.len().checked_sub(1) else {
        return "the whole object cannot be removed".to_owned();
    };
    let mut here = doc;
    let mut walked = String::new();
    for (i, &token) in tokens.iter().enumerate() {
        let place = if walked.is_empty() {
            "the object".to_owned()
        } else {
            format!("{walked:?}")
        };
        let adds_here = i == last && op == JsonPatchOp::Add;
        let key = token.replace("~1", "/").replace("~0", "~");
        here = match here {
            Value::Object(fields) => match fields.get(&key) {
                Some(field) => field,
                None if adds_here => break,
                None => return format!("{place} has no field {key:?}"),
            },
            Value::Array(_) if key == "-" && adds_here => break,
            Value::Array(_) if key == "-" => return format!("\"-\" names no item of {place}"),
            Value::Array(items) => {
                let Some(index) = array_index(&key) else {
                    return format!("{key:?} is not an index of {place}, a list");
                };
                match items.get(index) {
                    Some(item) => item,
                    None if adds_here && index == items.len() => break,
                    None => {
                        return format!(
                            "index {index} is out of range: {place} has {} items",
                            items.len()
                        );
                    }
                }
            }
            scalar => {
                return format!("{place} is {}, not an object or a list", describe(scalar));
            }
        };
        walked.push('/');
        walked.push_str(token);
    }
    "the path is invalid here".to_owned()
}

/// A list index as RFC 6901 writes one: digits, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    let canonical = token == "0" || !token.starts_with('0');
    if digits && canonical {
        token.parse().ok()
    } else {
        None
    }
}

fn describe(scalar: &Value) -> &'static str {
    match scalar {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) | Value::Object(_) => "a container",
    }
}
