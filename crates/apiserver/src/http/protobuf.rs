//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), read as the
//! JSON a JSON client would have sent.
//!
//! ```text
//!  "k8s\0" + runtime.Unknown{typeMeta{apiVersion, kind}, raw} ─► kinds["v1 ConfigMap"]
//!     ─► decode(raw) field by field with generated/builtin-protobuf.json (gen/protobuf.py)
//!     ─► serde_json::Value ─► the JSON write path
//! ```
//!
//! kubectl's typed commands (`create namespace`, `create configmap`, `create deployment`…)
//! send protobuf and do not fall back to JSON. Go writes every non-pointer field, empty or
//! not, where its JSON encoding would omit empty ones; so empty strings, zeros, `false`
//! and empty objects are left out here, as `omitempty` would.

use std::sync::OnceLock;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::http::error::{ApiError, ApiResult};

const MAGIC: &[u8] = b"k8s\0";

const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";

/// The generated table: kinds to definitions, definitions to fields.
struct Table {
    kinds: Map<String, Value>,
    messages: Map<String, Value>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut value: Value =
            serde_json::from_str(include_str!("../generated/builtin-protobuf.json"))
                .expect("the generated protobuf table is JSON");
        let take =
            |v: &mut Value, k: &str| v[k].as_object_mut().map(std::mem::take).unwrap_or_default();
        Table {
            kinds: take(&mut value, "kinds"),
            messages: take(&mut value, "messages"),
        }
    })
}

fn bad(what: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the protobuf body cannot be read: {what}"))
}

/// Reads a protobuf request body into JSON.
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("it does not start with the Kubernetes magic number"))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    let mut reader = Reader {
        bytes: envelope,
        at: 0,
    };
    while let Some((tag, value)) = reader.field()? {
        match (tag, value) {
            (1, Wire::Bytes(type_meta)) => {
                let mut meta = Reader {
                    bytes: type_meta,
                    at: 0,
                };
                while let Some((tag, value)) = meta.field()? {
                    match (tag, value) {
                        (1, Wire::Bytes(b)) => api_version = utf8(b)?.to_owned(),
                        (2, Wire::Bytes(b)) => kind = utf8(b)?.to_owned(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    // DeleteOptions (the body of a typed client's DELETE) is not a kind the server serves.
    let definition = match kind.as_str() {
        "DeleteOptions" => Some(DELETE_OPTIONS),
        _ => table()
            .kinds
            .get(&format!("{api_version} {kind}"))
            .and_then(Value::as_str),
    };
    let definition = definition.ok_or_else(|| {
        ApiError::unsupported_media_type(format!(
            "protobuf bodies of {api_version} {kind} are not supported: send application/json"
        ))
    })?;
    let mut object = message(definition, raw, 0)?;
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(object)
}

/// One field's value as the wire gives it.
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> ApiResult<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = *self
                .bytes
                .get(self.at)
                .ok_or_else(|| bad("a number runs past the end"))?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift.min(63);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(bad("a number is longer than ten bytes"))
    }

    fn take(&mut self, n: usize) -> ApiResult<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| bad("a field runs past the end"))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// The next field: its number and value; `None` at the end.
    fn field(&mut self) -> ApiResult<Option<(u64, Wire<'a>)>> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(bad)?)),
            2 => {
                let n = usize::try_from(self.varint()?).map_err(bad)?;
                Wire::Bytes(self.take(n)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(bad)?)),
            other => return Err(bad(format!("wire type {other} is not supported"))),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn utf8(bytes: &[u8]) -> ApiResult<&str> {
    std::str::from_utf8(bytes).map_err(|_| bad("a string is not UTF-8"))
}

/// Go's formatting of a duration given in nanoseconds (`1h2m3s`, `1.5s`, `0s`).
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let total = nanos.unsigned_abs();
    let (hours, rest) = (total / 3_600_000_000_000, total % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = rest as f64 / 1e9;
    let seconds = format!("{seconds}").trim_end_matches(".0").to_owned();
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// Decodes the types whose JSON form is not an object of their fields.
fn special(definition: &str, bytes: &[u8]) -> ApiResult<Option<Value>> {
    let short = definition.rsplit('.').next().unwrap_or("");
    let package = &definition[..definition.len() - short.len()];
    let mut reader = Reader { bytes, at: 0 };
    let mut fields: Vec<(u64, Wire<'_>)> = Vec::new();
    while let Some(field) = reader.field()? {
        fields.push(field);
    }
    let varint = |tag| {
        fields.iter().find_map(|(t, w)| match w {
            Wire::Varint(v) if *t == tag => Some(*v),
            _ => None,
        })
    };
    let bytes_of = |tag| {
        fields.iter().find_map(|(t, w)| match w {
            Wire::Bytes(b) if *t == tag => Some(*b),
            _ => None,
        })
    };
    let value = match (package, short) {
        ("io.k8s.apimachinery.pkg.apis.meta.v1.", "Time" | "MicroTime") => {
            let seconds = varint(1).unwrap_or(0) as i64;
            let nanos = varint(2).unwrap_or(0) as i64 as i32;
            if seconds == 0 && nanos == 0 {
                Value::Null
            } else {
                let at = jiff::Timestamp::new(seconds, nanos).map_err(bad)?;
                let format = if short == "Time" {
                    "%Y-%m-%dT%H:%M:%SZ"
                } else {
                    "%Y-%m-%dT%H:%M:%S%.6fZ"
                };
                json!(at.strftime(format).to_string())
            }
        }
        ("io.k8s.apimachinery.pkg.apis.meta.v1.", "Duration") => {
            json!(go_duration(varint(1).unwrap_or(0) as i64))
        }
        ("io.k8s.apimachinery.pkg.util.intstr.", "IntOrString") => match varint(1).unwrap_or(0) {
            0 => json!(varint(2).unwrap_or(0) as i64 as i32),
            _ => json!(utf8(bytes_of(3).unwrap_or_default())?),
        },
        ("io.k8s.apimachinery.pkg.api.resource.", "Quantity") => {
            json!(utf8(bytes_of(1).unwrap_or_default())?)
        }
        ("io.k8s.apimachinery.pkg.runtime.", "RawExtension")
        | ("io.k8s.apimachinery.pkg.apis.meta.v1.", "FieldsV1") => match bytes_of(1) {
            Some(raw) if !raw.is_empty() => {
                serde_json::from_slice(raw).map_err(|e| bad(format!("embedded JSON: {e}")))?
            }
            _ => Value::Null,
        },
        _ => return Ok(None),
    };
    Ok(Some(value))
}

/// Whether JSON would leave the value out (`omitempty`).
fn empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
    }
}

fn scalar(kind: &str, wire: Wire<'_>) -> ApiResult<Value> {
    Ok(match (kind, wire) {
        ("string", Wire::Bytes(b)) => json!(utf8(b)?),
        ("bytes", Wire::Bytes(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        ("bool", Wire::Varint(v)) => json!(v != 0),
        ("int32", Wire::Varint(v)) => json!(v as i64 as i32),
        ("int64", Wire::Varint(v)) => json!(v as i64),
        ("double", Wire::Fixed64(v)) => json!(f64::from_bits(v)),
        ("float", Wire::Fixed32(v)) => json!(f32::from_bits(v)),
        (kind, _) => return Err(bad(format!("a {kind} field has the wrong wire type"))),
    })
}

/// A message of `definition` as JSON.
fn message(definition: &str, bytes: &[u8], depth: usize) -> ApiResult<Value> {
    if depth > 64 {
        return Err(bad("messages are nested too deeply"));
    }
    if let Some(value) = special(definition, bytes)? {
        return Ok(value);
    }
    let fields = table().messages.get(definition).and_then(Value::as_object);
    let mut object = Map::new();
    let mut reader = Reader { bytes, at: 0 };
    while let Some((tag, wire)) = reader.field()? {
        let Some(spec) = fields
            .and_then(|f| f.get(&tag.to_string()))
            .and_then(Value::as_array)
        else {
            continue; // a field this server does not know
        };
        let (name, kind, repeated, reference) = (
            spec[0].as_str().unwrap_or(""),
            spec[1].as_str().unwrap_or(""),
            spec[2] == 1,
            spec[3].as_str().unwrap_or(""),
        );
        let value = match (kind, wire) {
            ("message", Wire::Bytes(b)) => message(reference, b, depth + 1)?,
            ("inline", Wire::Bytes(b)) => {
                if let Value::Object(inner) = message(reference, b, depth + 1)? {
                    object.extend(inner);
                }
                continue;
            }
            ("map", Wire::Bytes(b)) => {
                let (key, value) = map_entry(reference, b, depth)?;
                let map = object.entry(name).or_insert_with(|| json!({}));
                if let Some(map) = map.as_object_mut() {
                    map.insert(key, value);
                }
                continue;
            }
            // A packed repeated number.
            ("int32" | "int64", Wire::Bytes(b)) if repeated => {
                let mut packed = Reader { bytes: b, at: 0 };
                let list = object.entry(name).or_insert_with(|| json!([]));
                while packed.at < b.len() {
                    let v = packed.varint()?;
                    if let Some(list) = list.as_array_mut() {
                        list.push(scalar(kind, Wire::Varint(v))?);
                    }
                }
                continue;
            }
            (kind, wire) => scalar(kind, wire)?,
        };
        if repeated {
            if let Some(list) = object
                .entry(name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
            {
                list.push(value);
            }
        } else if !empty(&value) {
            object.insert(name.to_owned(), value);
        }
    }
    Ok(Value::Object(object))
}

fn map_entry(value_type: &str, bytes: &[u8], depth: usize) -> ApiResult<(String, Value)> {
    let mut reader = Reader { bytes, at: 0 };
    let mut key = String::new();
    let mut value = Value::Null;
    while let Some((tag, wire)) = reader.field()? {
        match (tag, wire) {
            (1, Wire::Bytes(b)) => key = utf8(b)?.to_owned(),
            (2, wire) => {
                value = match (value_type.strip_prefix("scalar:"), wire) {
                    (Some(kind), wire) => scalar(kind, wire)?,
                    (None, Wire::Bytes(b)) => message(value_type, b, depth + 1)?,
                    (None, _) => return Err(bad("a map value has the wrong wire type")),
                }
            }
            _ => {}
        }
    }
    if value.is_null() {
        value = match value_type {
            "scalar:string" | "scalar:bytes" => json!(""),
            _ => value,
        };
    }
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny protobuf writer for building test bodies by hand.
    #[derive(Default)]
    struct Writer(Vec<u8>);

    impl Writer {
        fn varint(&mut self, mut v: u64) -> &mut Self {
            loop {
                let byte = (v & 0x7f) as u8;
                v >>= 7;
                if v == 0 {
                    self.0.push(byte);
                    return self;
                }
                self.0.push(byte | 0x80);
            }
        }
        fn int(&mut self, tag: u64, v: i64) -> &mut Self {
            self.varint(tag << 3).varint(v as u64)
        }
        fn bytes(&mut self, tag: u64, b: &[u8]) -> &mut Self {
            self.varint(tag << 3 | 2).varint(b.len() as u64);
            self.0.extend_from_slice(b);
            self
        }
        fn string(&mut self, tag: u64, s: &str) -> &mut Self {
            self.bytes(tag, s.as_bytes())
        }
        fn message(&mut self, tag: u64, m: &Writer) -> &mut Self {
            self.bytes(tag, &m.0)
        }
    }

    fn envelope(api_version: &str, kind: &str, raw: &Writer) -> Vec<u8> {
        let mut type_meta = Writer::default();
        type_meta.string(1, api_version).string(2, kind);
        let mut unknown = Writer::default();
        unknown
            .message(1, &type_meta)
            .message(2, raw)
            .string(3, "")
            .string(4, "");
        [MAGIC, &unknown.0].concat()
    }

    fn entry(key: &str, value: &str) -> Writer {
        let mut w = Writer::default();
        w.string(1, key).string(2, value);
        w
    }

    #[test]
    fn a_configmap_as_kubectl_sends_it() {
        // ObjectMeta as Go writes it: every string field, empty or not, and a zero time.
        let mut meta = Writer::default();
        meta.string(1, "settings")
            .string(2, "")
            .string(3, "shop")
            .string(4, "")
            .string(5, "")
            .string(6, "")
            .int(7, 0)
            .message(8, &Writer::default())
            .message(11, &entry("app", "web"));
        let mut cm = Writer::default();
        cm.message(1, &meta)
            .message(2, &entry("a", "b"))
            .message(2, &entry("empty", ""))
            .message(3, &entry("bin", "\u{1}\u{2}"));
        let object = decode(&envelope("v1", "ConfigMap", &cm)).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "shop", "labels": {"app": "web"}},
            "data": {"a": "b", "empty": ""}, "binaryData": {"bin": "AQI="}})
        );
    }

    #[test]
    fn a_deployment_with_quantities_int_or_strings_and_times() {
        let mut meta = Writer::default();
        let mut time = Writer::default();
        time.int(1, 1_700_000_000);
        meta.string(1, "web").message(8, &time);
        let mut limits = Writer::default();
        let mut quantity = Writer::default();
        quantity.string(1, "500m");
        limits.string(1, "cpu").message(2, &quantity);
        let mut resources = Writer::default();
        resources.message(1, &limits);
        let mut port = Writer::default();
        port.string(1, "http").int(3, 8080).string(4, "TCP");
        let mut container = Writer::default();
        container
            .string(1, "web")
            .string(2, "nginx:1.27")
            .message(6, &port)
            .message(8, &resources);
        let mut pod_spec = Writer::default();
        pod_spec.message(2, &container);
        let mut template_meta = Writer::default();
        template_meta.message(11, &entry("app", "web"));
        let mut template = Writer::default();
        template.message(1, &template_meta).message(2, &pod_spec);
        let mut selector = Writer::default();
        selector.message(1, &entry("app", "web"));
        let mut surge = Writer::default();
        surge.int(1, 1).string(3, "25%");
        let mut unavailable = Writer::default();
        unavailable.int(1, 0).int(2, 1);
        let mut rolling = Writer::default();
        rolling.message(1, &unavailable).message(2, &surge);
        let mut strategy = Writer::default();
        strategy.string(1, "RollingUpdate").message(2, &rolling);
        let mut spec = Writer::default();
        spec.int(1, 3)
            .message(2, &selector)
            .message(3, &template)
            .message(4, &strategy);
        let mut deployment = Writer::default();
        deployment.message(1, &meta).message(2, &spec);
        let object = decode(&envelope("apps/v1", "Deployment", &deployment)).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": "2023-11-14T22:13:20Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{
                    "name": "web", "image": "nginx:1.27",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "500m"}}}]}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}}}})
        );
    }

    #[test]
    fn bad_bodies_are_refused_with_a_reason() {
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        let unknown_kind = decode(&envelope("v1", "Gizmo", &Writer::default())).unwrap_err();
        assert_eq!(unknown_kind.code, 415);
        assert!(
            unknown_kind.message.contains("v1 Gizmo"),
            "{}",
            unknown_kind.message
        );
        let mut truncated = envelope("v1", "ConfigMap", &{
            let mut w = Writer::default();
            w.string(1, "x");
            w
        });
        truncated.truncate(truncated.len() - 3);
        assert_eq!(decode(&truncated).unwrap_err().code, 400);
    }

    #[test]
    fn delete_options_from_a_typed_client() {
        let mut preconditions = Writer::default();
        preconditions.string(1, "u-1");
        let mut options = Writer::default();
        options
            .int(1, 0)
            .message(2, &preconditions)
            .string(4, "Foreground")
            .string(5, "All");
        let object = decode(&envelope("meta.k8s.io/v1", "DeleteOptions", &options)).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
            "preconditions": {"uid": "u-1"}, "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(1_500_000_000), "1.5s");
        assert_eq!(go_duration(90_000_000_000), "1m30s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    }
}
