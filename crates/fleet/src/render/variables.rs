//! `${cluster.…}` variables in the strings of a rule, replaced by the cluster's facts.

use serde_json::Value;

use super::ClusterFacts;

/// Why the variables of a string could not be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum VariableError {
    /// `${…}` names no known variable; the text is the whole `${…}`.
    Unknown(String),
    /// A `${` with no `}` after it; the text is the string from that `${` on.
    Unterminated(String),
    /// The cluster has no label of this key.
    MissingLabel(String),
    /// The cluster has no property of this name.
    MissingProperty(String),
}

/// `text` with every `${…}` replaced. Replaced values are not scanned again, and only
/// `${` starts a variable (`$$` and a lone `$` are kept as they are).
pub(super) fn substitute(text: &str, cluster: &ClusterFacts) -> Result<String, VariableError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let inside = &rest[start + 2..];
        let end = inside
            .find('}')
            .ok_or_else(|| VariableError::Unterminated(rest[start..].to_owned()))?;
        out.push_str(lookup(&inside[..end], cluster)?);
        rest = &inside[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `value` with [`substitute`] applied to every string in it (object keys are kept).
pub(super) fn substitute_value(
    value: &Value,
    cluster: &ClusterFacts,
) -> Result<Value, VariableError> {
    Ok(match value {
        Value::String(text) => Value::String(substitute(text, cluster)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| substitute_value(item, cluster))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, field)| Ok((key.clone(), substitute_value(field, cluster)?)))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

/// The value of the variable `name` (the text between `${` and `}`).
fn lookup<'a>(name: &str, cluster: &ClusterFacts<'a>) -> Result<&'a str, VariableError> {
    if name == "cluster.name" {
        return Ok(cluster.name);
    }
    if let Some(key) = subscript(name, "cluster.labels") {
        return cluster
            .labels
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| VariableError::MissingLabel(key.to_owned()));
    }
    if let Some(key) = subscript(name, "cluster.properties") {
        return cluster
            .properties
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| VariableError::MissingProperty(key.to_owned()));
    }
    Err(VariableError::Unknown(format!("${{{name}}}")))
}

/// The key of `map['key']` or `map["key"]`.
fn subscript<'n>(name: &'n str, map: &str) -> Option<&'n str> {
    let quoted = name
        .strip_prefix(map)?
        .strip_prefix('[')?
        .strip_suffix(']')?;
    ['\'', '"']
        .into_iter()
        .find_map(|quote| quoted.strip_prefix(quote)?.strip_suffix(quote))
}
