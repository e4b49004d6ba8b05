//! Label and field selectors, as `kubectl -l` and `--field-selector` send them.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::http::error::{ApiError, ApiResult};
use crate::registry::resources::ResourceType;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(text: &str) -> ApiResult<Self> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            requirements.push(parse_term(term).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {term:?} in label selector {text:?}"
                ))
            })?);
        }
        Ok(LabelSelector(requirements))
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions` with `In`,
    /// `NotIn`, `Exists`, `DoesNotExist`), as aggregation rules and workloads hold it; an
    /// empty one selects everything. Why it is not one, if it is not.
    pub fn from_object(selector: &Value) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if !selector.is_object() && !selector.is_null() {
            return Err("a label selector must be an object".into());
        }
        for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
            let value = value.as_str().unwrap_or("");
            if !valid_key(key) || !valid_value(value) {
                return Err(format!("invalid label {key}={value}"));
            }
            requirements.push(Requirement::Equals(key.clone(), value.to_owned()));
        }
        for expression in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = expression["key"].as_str().unwrap_or("");
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?}"));
            }
            let values: BTreeSet<String> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let key = key.to_owned();
            let operator = expression["operator"].as_str().unwrap_or("");
            requirements.push(match operator {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!(
                        "values: Required value: must be specified when `operator` is '{operator}'"
                    ));
                }
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!(
                        "values: Forbidden: may not be specified when `operator` is '{operator}'"
                    ));
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::NotExists(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether the object's labels satisfy the selector.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches_with(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether labels read by `label` (a key's value, if the key is there) satisfy the
    /// selector.
    pub fn matches_with<'l>(&self, label: impl Fn(&str) -> Option<&'l str>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, set) => label(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => label(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn valid_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253)
}

fn valid_value(value: &str) -> bool {
    value.is_empty() || valid_key(value) && !value.contains('/')
}

fn parse_term(term: &str) -> Option<Requirement> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        return valid_key(key).then(|| Requirement::NotExists(key.to_owned()));
    }
    for (op, make) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = term.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            return (valid_key(key) && valid_value(value))
                .then(|| make(key.to_owned(), value.to_owned()));
        }
    }
    let words: Vec<&str> = term.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim();
        let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
            (true, set)
        } else if let Some(set) = rest.strip_prefix("in") {
            (false, set)
        } else {
            return None;
        };
        let set = set.trim().strip_prefix('(')?.strip_suffix(')')?;
        let values: BTreeSet<String> = set.split(',').map(|v| v.trim().to_owned()).collect();
        if !valid_key(key) || values.iter().any(|v| !valid_value(v)) {
            return None;
        }
        let key = key.to_owned();
        return Some(if negated {
            Requirement::NotIn(key, values)
        } else {
            Requirement::In(key, values)
        });
    }
    valid_key(term).then(|| Requirement::Exists(term.to_owned()))
}

/// The fields a field selector may use on objects of `rt`, besides `metadata.name` and
/// `metadata.namespace`: those Kubernetes supports for the built-in kinds, and a CRD
/// version's `selectableFields`.
pub fn selectable(rt: &ResourceType, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    if rt.schema.is_some() {
        return rt.selectable_fields.iter().any(|f| f == field);
    }
    let fields: &[&str] = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        _ => &[],
    };
    fields.contains(&field)
}

/// A parsed field selector: `field=value` and `field!=value` terms, ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,status.phase!=Running`; a field `rt` does not support is
    /// refused (400).
    pub fn parse(text: &str, rt: &ResourceType) -> ApiResult<Self> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector term {term:?}"
                )));
            };
            let field = field.trim();
            if !selectable(rt, field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every term is of the object's metadata (`metadata.name`,
    /// `metadata.namespace`): then an object's metadata alone tells whether it matches.
    pub fn reads_metadata_only(&self) -> bool {
        self.0
            .iter()
            .all(|(field, _, _)| field.starts_with("metadata."))
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let lookup = |field: &str| field.split('.').try_fold(object, |v, part| v.get(part));
            // An Event written through its other version has the field under its other
            // name (`regarding.name` for `involvedObject.name`).
            let found = lookup(field).or_else(|| {
                crate::registry::events::alias(field)
                    .as_deref()
                    .and_then(lookup)
            });
            let actual = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "x", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn every_label_operator() {
        let o = labelled(json!({"app": "web", "tier": "front"}));
        let yes = |s: &str| assert!(LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        let no = |s: &str| assert!(!LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        yes("app=web");
        yes("app==web");
        yes("app!=db");
        yes("app in (web, db)");
        yes("app notin (db)");
        yes("app");
        yes("!missing");
        yes("app=web,tier in (front,back),!missing");
        yes("");
        no("app=db");
        no("app!=web");
        no("app in (db)");
        no("tier notin (front)");
        no("missing");
        no("!app");
        no("missing in (x)");
        yes("missing notin (x)");
        yes("missing!=x");
    }

    #[test]
    fn selector_objects_select_as_their_strings_do() {
        let object = LabelSelector::from_object(&json!({
            "matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "gone", "operator": "DoesNotExist"}]}))
        .unwrap();
        let text = LabelSelector::parse(
            "rbac.authorization.k8s.io/aggregate-to-view=true,tier notin (db),!gone",
        )
        .unwrap();
        assert_eq!(object, text);
        assert!(LabelSelector::from_object(&json!({})).unwrap().is_empty());
        for bad in [
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}),
            json!({"matchLabels": {"a b": "c"}}),
            json!("a=b"),
        ] {
            assert!(LabelSelector::from_object(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_refused() {
        for bad in ["app in web", "app=(x", "=x", "a b c", "app in (x", "-app=x"] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(e.code, 400, "{bad}");
            assert!(
                e.message.contains("unable to parse"),
                "{bad}: {}",
                e.message
            );
        }
    }

    #[test]
    fn field_selectors_use_the_fields_each_kind_supports() {
        let registry = crate::registry::resources::Registry::builtin();
        let configmaps = registry.get("", "v1", "configmaps").unwrap();
        let pods = registry.get("", "v1", "pods").unwrap();
        let events = registry.get("", "v1", "events").unwrap();
        let o = labelled(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=x", &configmaps)
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=other,metadata.name==x", &configmaps)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=x", &configmaps)
                .unwrap()
                .matches(&o)
        );
        let e = FieldSelector::parse("spec.nodeName=n1", &configmaps).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("spec.nodeName"));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "hostNetwork": true}, "status": {"phase": "Running"}});
        let select = |s: &str| FieldSelector::parse(s, &pods).unwrap().matches(&pod);
        assert!(select("spec.nodeName=n1,status.phase=Running"));
        assert!(select("spec.hostNetwork=true"));
        assert!(select("status.podIP="));
        assert!(!select("status.phase!=Running"));
        let event =
            json!({"involvedObject": {"kind": "Deployment", "name": "web"}, "type": "Normal"});
        assert!(
            FieldSelector::parse(
                "involvedObject.name=web,involvedObject.kind=Deployment",
                &events
            )
            .unwrap()
            .matches(&event)
        );
        let mut widgets = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        widgets.schema = Some(crate::registry::resources::Schema(std::sync::Arc::new(
            json!({"type": "object"}),
        )));
        widgets.selectable_fields = vec!["spec.color".into()];
        assert!(
            FieldSelector::parse("spec.color=red", &widgets)
                .unwrap()
                .matches(&json!({"spec": {"color": "red"}}))
        );
        assert!(FieldSelector::parse("spec.size=1", &widgets).is_err());
    }
}
