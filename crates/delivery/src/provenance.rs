//! Provenance: the labels and annotations that mark an object on a member as put there
//! by one placement of one hub, and the hash that tells whether its manifest changed.

use serde_json::{Map, Value};

/// The field manager of every write delivery makes on a member.
pub const FIELD_MANAGER: &str = "flotilla";
/// Label on every delivered object: `flotilla`.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label on every delivered object: the hub's name (made a valid label value).
pub const LABEL_HUB: &str = "flotilla.io/hub";
/// Annotation on every delivered object: the placement (`shop/web`, or `web` for a
/// ClusterPlacement).
pub const ANNOTATION_PLACEMENT: &str = "flotilla.io/placement";
/// Annotation on every delivered object: the Work it came from.
pub const ANNOTATION_WORK: &str = "flotilla.io/work";
/// Annotation on every delivered object: [`manifest_hash`] of the manifest last applied.
pub const ANNOTATION_MANIFEST_HASH: &str = "flotilla.io/manifest-hash";
/// Set to `"true"` on a manifest several placements share (the namespace the hub adds
/// for namespaced templates): it is applied as given, never claimed by one placement (no
/// conflict, no provenance), and never deleted when a placement lets it go.
pub const ANNOTATION_SHARED: &str = "flotilla.io/shared";

/// Set to `"true"` on an object that was on the member before its placement took it over
/// (`conflict: Overwrite`), and kept while the placement manages it: under `deletion:
/// DeleteCreated` such an object is given back, not deleted.
pub const ANNOTATION_ADOPTED: &str = "flotilla.io/adopted";

/// Whether `object` (a manifest or a live object) is shared by placements.
pub fn is_shared(object: &serde_json::Value) -> bool {
    object["metadata"]["annotations"][ANNOTATION_SHARED] == "true"
}

/// The apiVersion and kind of a manifest given as its JSON, unless it is shared: the kinds
/// a member's drift watch covers. Only those fields are read (the rest of the object is
/// skipped, not decoded into values): every sync asks it of its Work's manifests.
pub fn owned_kind(manifest: &str) -> Option<(String, String)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(default)]
        api_version: String,
        #[serde(default)]
        kind: String,
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        annotations: std::collections::BTreeMap<String, Value>,
    }
    let head: Head = serde_json::from_str(manifest).ok()?;
    let shared = head.metadata.annotations.get(ANNOTATION_SHARED) == Some(&Value::from("true"));
    (!shared).then_some((head.api_version, head.kind))
}

const MANAGED_BY: &str = "flotilla";

/// Where delivered objects come from: which hub, placement and Work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Provenance {
    /// The hub's name.
    pub hub: String,
    /// The placement: `namespace/name` for a Placement, `name` for a ClusterPlacement.
    pub placement: String,
    /// The Work's name.
    pub work: String,
}

impl Provenance {
    /// The value of [`LABEL_HUB`] for this hub.
    pub fn hub_label(&self) -> String {
        label_value(&self.hub)
    }

    /// The label selector matching every object this hub delivered.
    pub fn selector(&self) -> String {
        format!(
            "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_HUB}={}",
            self.hub_label()
        )
    }

    /// Whether `object` (as the member has it) was put there by this hub and placement.
    pub fn owns(&self, object: &Value) -> bool {
        let metadata = &object["metadata"];
        metadata["labels"][LABEL_HUB].as_str() == Some(self.hub_label().as_str())
            && self.same_placement(object)
    }

    /// Whether `object` carries this placement's annotation.
    pub(crate) fn same_placement(&self, object: &Value) -> bool {
        object["metadata"]["annotations"][ANNOTATION_PLACEMENT].as_str()
            == Some(self.placement.as_str())
    }

    /// Who `object` belongs to, for a conflict message.
    pub(crate) fn owner_of(&self, object: &Value) -> String {
        let metadata = &object["metadata"];
        if let (Some(hub), Some(placement)) = (
            metadata["labels"][LABEL_HUB].as_str(),
            metadata["annotations"][ANNOTATION_PLACEMENT].as_str(),
        ) {
            return format!("it belongs to placement {placement} of hub {hub}");
        }
        let mut managers: Vec<&str> = metadata["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| entry["manager"].as_str())
            .collect();
        managers.dedup();
        if managers.is_empty() {
            "it was not created by this placement".to_owned()
        } else {
            format!(
                "it was not created by this placement (field managers: {})",
                managers.join(", ")
            )
        }
    }

    /// `manifest` with this provenance added to its labels and annotations; `adopted`
    /// marks an object that was on the member before this placement took it over.
    pub(crate) fn stamp(&self, manifest: &mut Value, hash: &str, adopted: bool) {
        let Some(object) = manifest.as_object_mut() else {
            return;
        };
        let metadata = object_at(object, "metadata");
        let labels = object_at(metadata, "labels");
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
        labels.insert(LABEL_HUB.into(), self.hub_label().into());
        let annotations = object_at(metadata, "annotations");
        annotations.insert(ANNOTATION_PLACEMENT.into(), self.placement.clone().into());
        annotations.insert(ANNOTATION_WORK.into(), self.work.clone().into());
        annotations.insert(ANNOTATION_MANIFEST_HASH.into(), hash.into());
        if adopted {
            annotations.insert(ANNOTATION_ADOPTED.into(), "true".into());
        }
    }

    /// A JSON merge patch removing this provenance from an object.
    pub(crate) fn removal_patch() -> Value {
        serde_json::json!({"metadata": {
            "labels": {LABEL_MANAGED_BY: null, LABEL_HUB: null},
            "annotations": {ANNOTATION_PLACEMENT: null, ANNOTATION_WORK: null,
                            ANNOTATION_MANIFEST_HASH: null, ANNOTATION_ADOPTED: null},
        }})
    }
}

/// The object under `key` in `parent`, made one if missing or not an object.
fn object_at<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = parent
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().expect("just made an object")
}

/// Whether `key` is one of the provenance labels or annotations.
pub(crate) fn is_provenance_key(key: &str) -> bool {
    matches!(
        key,
        LABEL_MANAGED_BY
            | LABEL_HUB
            | ANNOTATION_PLACEMENT
            | ANNOTATION_WORK
            | ANNOTATION_MANIFEST_HASH
            | ANNOTATION_ADOPTED
    )
}

/// A stable hash of a manifest as given: 64-bit FNV-1a over its canonical JSON (object
/// keys sorted at every level), as 16 hex digits. Key order and formatting do not
/// change it; any value does.
pub fn manifest_hash(manifest: &Value) -> String {
    let mut hash = Fnv1a::default();
    canonical(manifest, &mut hash);
    format!("{:016x}", hash.0)
}

struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Feeds the canonical JSON of `value` to `hash`: no whitespace, keys sorted.
fn canonical(value: &Value, hash: &mut Fnv1a) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hash.write(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    hash.write(b",");
                }
                hash.write(Value::String(key.clone()).to_string().as_bytes());
                hash.write(b":");
                canonical(&map[key], hash);
            }
            hash.write(b"}");
        }
        Value::Array(items) => {
            hash.write(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hash.write(b",");
                }
                canonical(item, hash);
            }
            hash.write(b"]");
        }
        scalar => hash.write(scalar.to_string().as_bytes()),
    }
}

/// `text` as a valid label value: itself when it is one (at most 63 characters of
/// `[A-Za-z0-9._-]`, alphanumeric at both ends); otherwise its valid characters
/// (others become `-`), cut to 54, and `-` with 8 hex digits of its hash.
pub fn label_value(text: &str) -> String {
    let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let alnum_ends = text.starts_with(|c: char| c.is_ascii_alphanumeric())
        && text.ends_with(|c: char| c.is_ascii_alphanumeric());
    if text.is_empty() || (text.len() <= 63 && alnum_ends && text.chars().all(valid_char)) {
        return text.to_owned();
    }
    let mut hash = Fnv1a::default();
    hash.write(text.as_bytes());
    let cleaned: String = text
        .chars()
        .map(|c| if valid_char(c) { c } else { '-' })
        .take(54)
        .collect();
    let cleaned = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let suffix = format!("{:08x}", hash.0 >> 32);
    if cleaned.is_empty() {
        suffix
    } else {
        format!("{cleaned}-{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_kind_is_owned_unless_its_manifest_is_shared() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": {"a": "b"}}, "spec": {"replicas": 2}});
        assert!(!is_shared(&deployment));
        assert_eq!(
            owned_kind(&deployment.to_string()),
            Some(("apps/v1".into(), "Deployment".into()))
        );
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "annotations": {ANNOTATION_SHARED: "true"}}});
        assert!(is_shared(&namespace));
        assert_eq!(owned_kind(&namespace.to_string()), None);
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(
            owned_kind(&bare.to_string()),
            Some(("v1".into(), "ConfigMap".into()))
        );
    }

    #[test]
    fn the_hash_ignores_key_order_and_sees_every_value() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "data": {"k": "v"}});
        let b: Value = serde_json::from_str(
            r#"{"data":{"k":"v"},"metadata":{"labels":{"y":"2","x":"1"},"name":"a"},
                "kind":"ConfigMap","apiVersion":"v1"}"#,
        )
        .unwrap();
        assert_eq!(manifest_hash(&a), manifest_hash(&b));
        assert_eq!(manifest_hash(&a).len(), 16);
        // Pinned: the hash must not change between releases, or every object re-applies.
        assert_eq!(manifest_hash(&json!({})), "08f44b07b5901a25");
        let mut c = a.clone();
        c["data"]["k"] = json!("w");
        assert_ne!(manifest_hash(&a), manifest_hash(&c));
        // Structure counts, not just the characters.
        assert_ne!(
            manifest_hash(&json!({"a": ["b", "c"]})),
            manifest_hash(&json!({"a": ["b,c"]}))
        );
        assert_ne!(manifest_hash(&json!([1])), manifest_hash(&json!(["1"])));
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("hub-1"), "hub-1");
        assert_eq!(label_value("a.b_c"), "a.b_c");
        let long = "h".repeat(80);
        let value = label_value(&long);
        assert!(value.len() <= 63, "{value}");
        assert!(value.starts_with(&"h".repeat(54)));
        assert_ne!(value, label_value(&"h".repeat(81)));
        assert_eq!(value, label_value(&long));
        let odd = label_value("https://hub.example.com:6443/");
        assert!(odd.starts_with("https---hub.example.com-6443-"), "{odd}");
        assert!(odd.chars().last().unwrap().is_ascii_alphanumeric());
        assert_eq!(label_value("//").len(), 8);
    }

    #[test]
    fn stamping_and_ownership() {
        let provenance = Provenance {
            hub: "hub".into(),
            placement: "shop/web".into(),
            work: "web-eu".into(),
        };
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"app": "web"}}});
        assert!(!provenance.owns(&object));
        provenance.stamp(&mut object, "0123", false);
        assert_eq!(object["metadata"]["labels"]["app"], "web");
        assert!(object["metadata"]["annotations"][ANNOTATION_ADOPTED].is_null());
        assert_eq!(object["metadata"]["labels"][LABEL_MANAGED_BY], "flotilla");
        assert_eq!(
            object["metadata"]["annotations"][ANNOTATION_MANIFEST_HASH],
            "0123"
        );
        assert!(provenance.owns(&object));
        let other = Provenance {
            placement: "shop/other".into(),
            ..provenance.clone()
        };
        assert!(!other.owns(&object));
        assert_eq!(
            other.owner_of(&object),
            "it belongs to placement shop/web of hub hub"
        );
        let mut bare = json!({"kind": "ConfigMap"});
        provenance.stamp(&mut bare, "h", true);
        assert!(provenance.owns(&bare));
        assert_eq!(bare["metadata"]["annotations"][ANNOTATION_ADOPTED], "true");
        // Removing the provenance removes the mark too.
        let removal = Provenance::removal_patch();
        let removed = removal["metadata"]["annotations"].as_object().unwrap();
        assert_eq!(removed.get(ANNOTATION_ADOPTED), Some(&Value::Null));
        assert!(is_provenance_key(ANNOTATION_ADOPTED));
        assert_eq!(
            provenance.selector(),
            "app.kubernetes.io/managed-by=flotilla,flotilla.io/hub=hub"
        );
    }
}
