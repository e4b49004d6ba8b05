//! `/openapi/v2`: the Swagger 2.0 document of every served kind, in the protobuf form
//! kubectl 1.27 and 1.28 download (gnostic's `openapi_v2.Document`).
//!
//! ```text
//!  every served group/version ─► openapi::group_version_document ─► components.schemas
//!        (built-in and CRD)                                              │ union, by name
//!                                                                        ▼
//!              Document { swagger: "2.0", info, paths: {}, definitions: NamedSchema* }
//! ```
//!
//! kubectl parses the definitions with kube-openapi's `proto` package: it finds a kind's
//! schema by `x-kubernetes-group-version-kind`, reads `x-kubernetes-patch-strategy` and
//! `x-kubernetes-patch-merge-key` for strategic merge patches, and renders descriptions in
//! `kubectl explain`. That parser rejects the whole document on one schema it cannot read,
//! so the conversion keeps to what it accepts: a `$ref` carries only a description and
//! vendor extensions, an array always has one item schema, a type is one of the six JSON
//! types, and every `$ref` names a definition of the document.
//!
//! The message and field numbers are those of gnostic's `openapiv2/OpenAPIv2.proto`; the
//! encoding is written by hand with [`Message`].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::discovery;
use crate::discovery::openapi;
use crate::registry::resources::Registry;

/// The media type of the protobuf document, as the response's `Content-Type`.
///
/// Clients ask for `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, but an `@`
/// may not appear in a media type Go's `mime.ParseMediaType` accepts (client-go turns the
/// response into "mime: unexpected content after media subtype"), so Kubernetes answers
/// with this spelling, a `.` in place of the `@`, and so do we.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Field numbers of gnostic's `openapi_v2` messages, by message.
mod field {
    /// `Document`.
    pub mod document {
        pub const SWAGGER: u32 = 1;
        pub const INFO: u32 = 2;
        pub const PATHS: u32 = 8;
        pub const DEFINITIONS: u32 = 9;
    }
    /// `Info`.
    pub mod info {
        pub const TITLE: u32 = 1;
        pub const VERSION: u32 = 2;
    }
    /// `Definitions`, `Properties` (`repeated NamedSchema additional_properties = 1`).
    pub const ADDITIONAL_PROPERTIES: u32 = 1;
    /// `NamedSchema`, `NamedAny`.
    pub mod named {
        pub const NAME: u32 = 1;
        pub const VALUE: u32 = 2;
    }
    /// `Any`.
    pub const ANY_YAML: u32 = 2;
    /// `Schema`.
    pub mod schema {
        pub const REF: u32 = 1;
        pub const FORMAT: u32 = 2;
        pub const TITLE: u32 = 3;
        pub const DESCRIPTION: u32 = 4;
        pub const DEFAULT: u32 = 5;
        pub const REQUIRED: u32 = 19;
        pub const ENUM: u32 = 20;
        pub const ADDITIONAL_PROPERTIES: u32 = 21;
        pub const TYPE: u32 = 22;
        pub const ITEMS: u32 = 23;
        pub const PROPERTIES: u32 = 25;
        pub const READ_ONLY: u32 = 27;
        pub const VENDOR_EXTENSION: u32 = 31;
    }
    /// `AdditionalPropertiesItem` (a oneof).
    pub mod additional {
        pub const SCHEMA: u32 = 1;
        pub const BOOLEAN: u32 = 2;
    }
    /// `TypeItem` (`repeated string value = 1`), `ItemsItem` (`repeated Schema schema = 1`).
    pub const REPEATED_VALUE: u32 = 1;
}

/// The protobuf-encoded OpenAPI v2 document of `registry`'s kinds; `None` while it cannot be
/// served.
pub fn document(registry: &Registry) -> Option<Vec<u8>> {
    let definitions = definitions(registry);
    if definitions.is_empty() {
        return None;
    }
    let mut info = Message::default();
    info.string(field::info::TITLE, "Kubernetes");
    info.string(field::info::VERSION, info_version());
    let mut named_schemas = Message::default();
    for (name, schema) in &definitions {
        let mut named = Message::default();
        named.string(field::named::NAME, name);
        named.message(field::named::VALUE, convert(schema, &definitions));
        named_schemas.message(field::ADDITIONAL_PROPERTIES, named);
    }
    let mut doc = Message::default();
    doc.string(field::document::SWAGGER, "2.0");
    doc.message(field::document::INFO, info);
    doc.message(field::document::PATHS, Message::default());
    doc.message(field::document::DEFINITIONS, named_schemas);
    Some(doc.into_bytes())
}

/// The served Kubernetes version without our suffix (`v1.32.0`).
fn info_version() -> &'static str {
    discovery::GIT_VERSION
        .split_once('-')
        .map_or(discovery::GIT_VERSION, |(version, _)| version)
}

/// The component schemas of every served group/version's v3 document, by name (the first
/// document carrying a name wins; they all build it the same way).
fn definitions(registry: &Registry) -> BTreeMap<String, Value> {
    let mut definitions = BTreeMap::new();
    for group in registry.groups() {
        for version in &group.versions {
            let Some(mut doc) = openapi::group_version_document(registry, &group.name, version)
            else {
                continue;
            };
            if let Value::Object(schemas) = doc["components"]["schemas"].take() {
                for (name, schema) in schemas {
                    definitions.entry(name).or_insert(schema);
                }
            }
        }
    }
    definitions
}

/// The v2 `Schema` message of the v3 schema `v`; `$ref`s point into `#/definitions/`, and
/// only at names of `definitions`.
fn convert(v: &Value, definitions: &BTreeMap<String, Value>) -> Message {
    use field::schema as f;
    let mut m = Message::default();
    let Some(schema) = v.as_object() else {
        // A boolean schema (`true`): anything goes.
        return m;
    };
    let description = schema.get("description").and_then(Value::as_str);
    if let Some(target) = reference(schema) {
        // kube-openapi refuses a `$ref` with a type or properties beside it.
        if definitions.contains_key(target) {
            m.string(f::REF, &format!("#/definitions/{target}"));
        }
        m.optional_string(f::DESCRIPTION, description);
        vendor_extensions(&mut m, schema);
        return m;
    }
    m.optional_string(f::FORMAT, schema.get("format").and_then(Value::as_str));
    m.optional_string(f::TITLE, schema.get("title").and_then(Value::as_str));
    m.optional_string(f::DESCRIPTION, description);
    if let Some(default) = schema.get("default") {
        m.message(f::DEFAULT, any(default));
    }
    for name in strings(schema.get("required")) {
        m.string(f::REQUIRED, name);
    }
    for value in schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(f::ENUM, any(value));
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(allowed)) => {
            let mut item = Message::default();
            item.bool(field::additional::BOOLEAN, *allowed);
            m.message(f::ADDITIONAL_PROPERTIES, item);
        }
        Some(sub @ Value::Object(_)) => {
            let mut item = Message::default();
            item.message(field::additional::SCHEMA, convert(sub, definitions));
            m.message(f::ADDITIONAL_PROPERTIES, item);
        }
        _ => {}
    }
    let items: Vec<&Value> = match schema.get("items") {
        Some(Value::Array(tuple)) => tuple.iter().take(1).collect(),
        Some(item @ (Value::Object(_) | Value::Bool(true))) => vec![item],
        _ => Vec::new(),
    };
    if let Some(kind) = json_type(schema.get("type")) {
        // kube-openapi needs exactly one item schema for an array; without one, leave the
        // type out and the value is arbitrary.
        if kind != "array" || !items.is_empty() {
            let mut type_item = Message::default();
            type_item.string(field::REPEATED_VALUE, kind);
            m.message(f::TYPE, type_item);
        }
    }
    if !items.is_empty() {
        let mut items_item = Message::default();
        for item in items {
            items_item.message(field::REPEATED_VALUE, convert(item, definitions));
        }
        m.message(f::ITEMS, items_item);
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        // Written even when empty: a present `properties` makes an object a kind, not a map.
        let mut named_schemas = Message::default();
        for (name, sub) in properties {
            let mut named = Message::default();
            named.string(field::named::NAME, name);
            named.message(field::named::VALUE, convert(sub, definitions));
            named_schemas.message(field::ADDITIONAL_PROPERTIES, named);
        }
        m.message(f::PROPERTIES, named_schemas);
    }
    if schema.get("readOnly") == Some(&Value::Bool(true)) {
        m.bool(f::READ_ONLY, true);
    }
    vendor_extensions(&mut m, schema);
    m
}

/// The definition a schema stands for: its own `$ref`, or the one of a v3 `allOf: [{$ref}]`
/// (the form v3 uses to describe a referenced field).
fn reference(schema: &Map<String, Value>) -> Option<&str> {
    let direct = schema.get("$ref");
    let wrapped = match schema.get("allOf").and_then(Value::as_array) {
        Some(all) if all.len() == 1 => all[0].get("$ref"),
        _ => None,
    };
    direct
        .or(wrapped)?
        .as_str()?
        .strip_prefix("#/components/schemas/")
}

/// The one JSON type of a schema's `type` (`"null"` and unknown names dropped), if any.
fn json_type(kind: Option<&Value>) -> Option<&str> {
    const KNOWN: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];
    let known = |t: &&str| KNOWN.contains(t);
    match kind? {
        Value::String(t) => Some(t.as_str()).filter(known),
        Value::Array(types) => types.iter().filter_map(Value::as_str).find(known),
        _ => None,
    }
}

/// The strings of a JSON array (none for anything else).
fn strings(v: Option<&Value>) -> impl Iterator<Item = &str> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Every `x-` key of `schema` as a `NamedAny` vendor extension.
fn vendor_extensions(m: &mut Message, schema: &Map<String, Value>) {
    for (name, value) in schema.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Message::default();
        named.string(field::named::NAME, name);
        named.message(field::named::VALUE, any(value));
        m.message(field::schema::VENDOR_EXTENSION, named);
    }
}

/// An `Any` holding `value` as YAML text (JSON is YAML, which is what clients parse).
fn any(value: &Value) -> Message {
    let mut m = Message::default();
    m.string(field::ANY_YAML, &value.to_string());
    m
}

/// A protobuf message being encoded: its fields, appended as they are written.
///
/// Only the two wire types the document needs: varint (0, for `bool`) and length-delimited
/// (2, for `string` and embedded messages). A field's key is `(number << 3) | wire type`,
/// itself a varint; a length-delimited field's key is followed by its byte length (varint)
/// and its bytes. Proto3 leaves out scalar fields that hold their default, so
/// [`Message::optional_string`] writes nothing for a missing or empty string, while a
/// present but empty embedded message is written (as a key and a zero length): that is how
/// a decoder tells an empty `properties` from none.
#[derive(Default)]
struct Message {
    bytes: Vec<u8>,
}

impl Message {
    const VARINT: u8 = 0;
    const LENGTH_DELIMITED: u8 = 2;

    /// Appends `value` in base-128, least significant group first, high bit = "more".
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            // Truncation intended: the low seven bits, with the continuation bit set.
            self.bytes.push((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.bytes.push(value as u8);
    }

    fn key(&mut self, number: u32, wire_type: u8) {
        self.varint((u64::from(number) << 3) | u64::from(wire_type));
    }

    fn length_delimited(&mut self, number: u32, bytes: &[u8]) {
        self.key(number, Self::LENGTH_DELIMITED);
        self.varint(bytes.len() as u64);
        self.bytes.extend_from_slice(bytes);
    }

    /// A `string` field (or one element of a `repeated string`), written even when empty.
    fn string(&mut self, number: u32, value: &str) {
        self.length_delimited(number, value.as_bytes());
    }

    /// A singular `string` field, left out when absent or empty (its proto3 default).
    fn optional_string(&mut self, number: u32, value: Option<&str>) {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.string(number, value);
        }
    }

    /// A `bool` field, written even when false (as a oneof member must be).
    fn bool(&mut self, number: u32, value: bool) {
        self.key(number, Self::VARINT);
        self.varint(u64::from(value));
    }

    /// An embedded message field (or one element of a repeated one).
    fn message(&mut self, number: u32, message: Message) {
        self.length_delimited(number, &message.bytes);
    }

    fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::registry::resources::{ResourceType, Schema};

    /// One decoded field: its number and either a varint or the bytes of a length-delimited
    /// value.
    #[derive(Debug, Clone, Copy)]
    enum Field<'a> {
        Varint(u32, u64),
        Bytes(u32, &'a [u8]),
    }

    fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = bytes[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
            assert!(shift < 64, "varint too long");
        }
    }

    /// Every field of one message, in order; panics on anything malformed (a wire type the
    /// writer never uses, a length past the end).
    fn fields(bytes: &[u8]) -> Vec<Field<'_>> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < bytes.len() {
            let key = read_varint(bytes, &mut at);
            let number = u32::try_from(key >> 3).unwrap();
            match key & 7 {
                0 => out.push(Field::Varint(number, read_varint(bytes, &mut at))),
                2 => {
                    let len = usize::try_from(read_varint(bytes, &mut at)).unwrap();
                    out.push(Field::Bytes(number, &bytes[at..at + len]));
                    at += len;
                }
                other => panic!("unexpected wire type {other}"),
            }
        }
        assert_eq!(at, bytes.len());
        out
    }

    /// The length-delimited values of field `number`.
    fn all(bytes: &[u8], number: u32) -> Vec<&[u8]> {
        fields(bytes)
            .into_iter()
            .filter_map(|f| match f {
                Field::Bytes(n, b) if n == number => Some(b),
                _ => None,
            })
            .collect()
    }

    fn one(bytes: &[u8], number: u32) -> &[u8] {
        let found = all(bytes, number);
        assert_eq!(found.len(), 1, "field {number}");
        found[0]
    }

    fn text(bytes: &[u8], number: u32) -> &str {
        std::str::from_utf8(one(bytes, number)).unwrap()
    }

    /// The `(name, value)` pairs of a message of `Named*` entries in field 1.
    fn named(bytes: &[u8]) -> BTreeMap<&str, &[u8]> {
        all(bytes, 1)
            .into_iter()
            .map(|entry| (text(entry, 1), one(entry, 2)))
            .collect()
    }

    /// A schema's vendor extensions, their YAML parsed as JSON.
    fn extensions(schema: &[u8]) -> BTreeMap<&str, Value> {
        all(schema, 31)
            .into_iter()
            .map(|entry| {
                let yaml = text(one(entry, 2), 2);
                (text(entry, 1), serde_json::from_str(yaml).unwrap())
            })
            .collect()
    }

    fn type_of(schema: &[u8]) -> Vec<&str> {
        all(schema, 22)
            .into_iter()
            .flat_map(|t| all(t, 1))
            .map(|v| std::str::from_utf8(v).unwrap())
            .collect()
    }

    #[test]
    fn varints_use_seven_bits_per_byte() {
        let mut m = Message::default();
        m.varint(1);
        m.varint(300);
        m.varint(u64::MAX);
        let mut expected = vec![0x01, 0xac, 0x02];
        expected.extend([0xff; 9]);
        expected.push(0x01);
        assert_eq!(m.into_bytes(), expected);
        let mut m = Message::default();
        m.string(31, "x");
        m.bool(2, false);
        // Field 31 wire type 2: key 250 = 0xfa 0x01.
        assert_eq!(m.into_bytes(), [0xfa, 0x01, 0x01, b'x', 0x10, 0x00]);
    }

    #[test]
    fn the_document_has_every_builtin_definition_with_its_extensions() {
        let registry = Registry::builtin();
        let bytes = document(&registry).unwrap();
        assert_eq!(text(&bytes, 1), "2.0");
        let info = one(&bytes, 2);
        assert_eq!(text(info, 1), "Kubernetes");
        assert_eq!(text(info, 2), "v1.32.0");
        assert!(one(&bytes, 8).is_empty(), "paths is an empty message");
        let definitions = named(one(&bytes, 9));
        assert!(definitions.len() > 100, "{}", definitions.len());

        let deployment = definitions["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(type_of(deployment), ["object"]);
        assert_eq!(
            extensions(deployment)["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
        );
        assert!(text(deployment, 4).contains("Deployment"));
        let properties = named(one(deployment, 25));
        // A v3 `allOf: [{$ref}]` becomes a bare `$ref` with its description.
        let spec = properties["spec"];
        assert_eq!(
            text(spec, 1),
            "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"
        );
        assert!(all(spec, 22).is_empty() && all(spec, 24).is_empty());

        let pod_spec = named(one(definitions["io.k8s.api.core.v1.PodSpec"], 25));
        let containers = pod_spec["containers"];
        assert_eq!(type_of(containers), ["array"]);
        let item = all(one(containers, 23), 1);
        assert_eq!(item.len(), 1);
        assert_eq!(
            text(item[0], 1),
            "#/definitions/io.k8s.api.core.v1.Container"
        );
        let ext = extensions(containers);
        assert_eq!(ext["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(ext["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(ext["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(ext["x-kubernetes-list-type"], "map");

        // A map: additionalProperties holds the schema of its values.
        let config_map = named(one(definitions["io.k8s.api.core.v1.ConfigMap"], 25));
        let data = config_map["data"];
        assert_eq!(type_of(data), ["object"]);
        assert!(all(data, 25).is_empty());
        let values = one(one(data, 21), 1);
        assert_eq!(type_of(values), ["string"]);

        // Every reference resolves to a definition of the document.
        fn refs<'a>(schema: &'a [u8], out: &mut Vec<&'a str>) {
            for f in fields(schema) {
                match f {
                    Field::Bytes(1, r) => out.push(std::str::from_utf8(r).unwrap()),
                    Field::Bytes(21, a) => all(a, 1).into_iter().for_each(|s| refs(s, out)),
                    Field::Bytes(23, i) => all(i, 1).into_iter().for_each(|s| refs(s, out)),
                    Field::Bytes(25, p) => named(p).into_values().for_each(|s| refs(s, out)),
                    _ => {}
                }
            }
        }
        let mut found = Vec::new();
        definitions.values().for_each(|s| refs(s, &mut found));
        assert!(found.len() > 100);
        for r in found {
            let name = r.strip_prefix("#/definitions/").unwrap();
            assert!(definitions.contains_key(name), "{r}");
        }
    }

    #[test]
    fn custom_resources_are_defined_and_arrays_without_items_are_arbitrary() {
        let registry = Registry::builtin();
        let mut rt = ResourceType::new("example.com", "v1", "Widget", "widgets", true);
        rt.schema = Some(Schema(Arc::new(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "size": {"type": "integer", "description": "How big."},
                    "tags": {"type": "array"},
                    "labels": {"type": "object", "additionalProperties": true},
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "anything": {"x-kubernetes-preserve-unknown-fields": true},
                }},
            },
        }))));
        registry.add(rt).unwrap();
        let bytes = document(&registry).unwrap();
        let definitions = named(one(&bytes, 9));
        let widget = definitions["com.example.v1.Widget"];
        assert_eq!(
            extensions(widget)["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        let properties = named(one(widget, 25));
        assert_eq!(
            text(properties["metadata"], 1),
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let spec = named(one(properties["spec"], 25));
        assert_eq!(type_of(spec["size"]), ["integer"]);
        assert_eq!(text(spec["size"], 4), "How big.");
        assert!(type_of(spec["tags"]).is_empty(), "no array without items");
        let labels = fields(one(spec["labels"], 21));
        assert!(matches!(labels[..], [Field::Varint(2, 1)]), "{labels:?}");
        let colors: Vec<&str> = all(spec["color"], 20)
            .into_iter()
            .map(|a| text(a, 2))
            .collect();
        assert_eq!(colors, ["\"red\"", "\"blue\""]);
        assert_eq!(
            extensions(spec["anything"])["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(definitions.contains_key("com.example.v1.WidgetList"));
    }
}
