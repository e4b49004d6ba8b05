//! A placement's revisions, computed without a server: the snapshot of what a placement
//! delivers now, its hash, what changed since the last revision, and which old revisions
//! go.
//!
//! ```text
//!  templates (cleaned) ─┐
//!  overrides selecting ─┼─► snapshot() ─► Snapshot { templates, overrides, replicas, apply,
//!  any of them          │                           hash (sha-256 of canonical JSON, 10 hex) }
//!  spec.replicas, apply ┘        │
//!                                ├─ hash ≠ last revision's ─► PlacementRevision n + 1
//!  a revision's spec ──► inputs() ─► plan::plan as for live inputs (same objects rendered)
//! ```
//!
//! What a placement delivers depends on its templates, the overrides that apply to them,
//! its division of replicas and its apply policy — not on which clusters it chooses: a
//! cluster joining gets a revision's objects rendered for it, and makes no new revision.

use std::collections::BTreeSet;

use flotilla_api::{Manifest, PlacementRevisionSpec, PlacementSpec, RevisionOverride};
use serde_json::Value;

use crate::plan::{self, OverrideRef, PlacementKey};

/// What a placement delivers now, as a revision would hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The templates, cleaned ([`crate::render::clean`]), in their identity's order.
    pub templates: Vec<Value>,
    /// The overrides selecting any of them, ClusterOverrides then Overrides, by name.
    pub overrides: Vec<RevisionOverride>,
    /// The placement's spec parts that change what it delivers.
    pub replicas: Option<flotilla_api::ReplicaPolicy>,
    /// Its apply policy.
    pub apply: Option<flotilla_api::ApplyPolicy>,
    /// The hash of all of it: 10 hex digits of its SHA-256.
    pub hash: String,
}

/// The snapshot of what a placement delivers: `templates` as selected, the `overrides`
/// that select any of them, and the parts of `spec` that shape the objects.
pub fn snapshot(
    templates: &[Value],
    overrides: &[OverrideRef<'_>],
    spec: &PlacementSpec,
) -> Snapshot {
    let mut templates: Vec<Value> = templates.iter().map(crate::render::clean).collect();
    templates.sort_by_key(plan::manifest_id);
    let mut overrides: Vec<RevisionOverride> = overrides
        .iter()
        .filter(|o| {
            templates.iter().any(|t| {
                o.spec
                    .resource_selectors
                    .iter()
                    .any(|s| plan::selector_matches(s, o.namespace, t))
            })
        })
        .map(|o| RevisionOverride {
            namespace: o.namespace.map(str::to_owned),
            name: o.name.to_owned(),
            spec: o.spec.clone(),
        })
        .collect();
    overrides.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut snapshot = Snapshot {
        templates,
        overrides,
        replicas: spec.replicas.clone(),
        apply: spec.apply.clone(),
        hash: String::new(),
    };
    snapshot.hash = hash(&snapshot);
    snapshot
}

fn hash(snapshot: &Snapshot) -> String {
    let content = serde_json::json!({
        "templates": snapshot.templates,
        "overrides": snapshot.overrides,
        "replicas": snapshot.replicas,
        "apply": snapshot.apply,
    });
    let mut text = String::new();
    canonical(&content, &mut text);
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    digest.as_ref()[..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `value` as JSON with every object's keys sorted: the same value, the same text.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl Snapshot {
    /// The spec of revision `number` of `placement` holding this snapshot; `previous` (the
    /// last revision) tells the change cause.
    pub fn revision(
        &self,
        placement: &PlacementKey,
        number: i64,
        previous: Option<&PlacementRevisionSpec>,
    ) -> PlacementRevisionSpec {
        PlacementRevisionSpec {
            placement: placement.reference(),
            revision: number,
            hash: self.hash.clone(),
            change_cause: Some(self.change_cause(previous)),
            templates: self.templates.iter().map(Manifest::from).collect(),
            overrides: self.overrides.clone(),
            replicas: self.replicas.clone(),
            apply: self.apply.clone(),
        }
    }

    /// What changed since `previous`, in words (`Deployment shop/web changed; Override
    /// shop/eu added`).
    pub fn change_cause(&self, previous: Option<&PlacementRevisionSpec>) -> String {
        let Some(previous) = previous else {
            return "first revision".to_owned();
        };
        let mut causes = Vec::new();
        let before: Vec<Value> = previous.templates.iter().map(Manifest::value).collect();
        let name = |id: &plan::ManifestId| {
            if id.2.is_empty() {
                format!("{} {}", id.1, id.3)
            } else {
                format!("{} {}/{}", id.1, id.2, id.3)
            }
        };
        let ids = |ts: &[Value]| -> BTreeSet<plan::ManifestId> {
            ts.iter().map(plan::manifest_id).collect()
        };
        let (old, new) = (ids(&before), ids(&self.templates));
        for id in new.difference(&old) {
            causes.push(format!("{} added", name(id)));
        }
        for id in old.difference(&new) {
            causes.push(format!("{} removed", name(id)));
        }
        for template in &self.templates {
            let id = plan::manifest_id(template);
            if let Some(was) = before.iter().find(|t| plan::manifest_id(t) == id)
                && was != template
            {
                causes.push(format!("{} changed", name(&id)));
            }
        }
        let override_name = |o: &RevisionOverride| match &o.namespace {
            Some(ns) => format!("Override {ns}/{}", o.name),
            None => format!("ClusterOverride {}", o.name),
        };
        for o in &self.overrides {
            match previous
                .overrides
                .iter()
                .find(|p| p.namespace == o.namespace && p.name == o.name)
            {
                None => causes.push(format!("{} added", override_name(o))),
                Some(p) if p.spec != o.spec => causes.push(format!("{} changed", override_name(o))),
                Some(_) => {}
            }
        }
        for p in &previous.overrides {
            if !self
                .overrides
                .iter()
                .any(|o| p.namespace == o.namespace && p.name == o.name)
            {
                causes.push(format!("{} removed", override_name(p)));
            }
        }
        if previous.replicas != self.replicas {
            causes.push("replicas changed".to_owned());
        }
        if previous.apply != self.apply {
            causes.push("apply policy changed".to_owned());
        }
        if causes.is_empty() {
            "content changed".to_owned()
        } else {
            causes.join("; ")
        }
    }
}

/// A revision's inputs to [`plan::plan`]: its templates, and its overrides as references.
pub fn inputs(revision: &PlacementRevisionSpec) -> (Vec<Value>, Vec<OverrideRef<'_>>) {
    (
        revision.templates.iter().map(Manifest::value).collect(),
        revision
            .overrides
            .iter()
            .map(|o| OverrideRef {
                namespace: o.namespace.as_deref(),
                name: &o.name,
                spec: &o.spec,
            })
            .collect(),
    )
}

impl Snapshot {
    /// The snapshot a revision holds (to roll it out again).
    pub fn of(revision: &PlacementRevisionSpec) -> Snapshot {
        Snapshot {
            templates: revision.templates.iter().map(Manifest::value).collect(),
            overrides: revision.overrides.clone(),
            replicas: revision.replicas.clone(),
            apply: revision.apply.clone(),
            hash: revision.hash.clone(),
        }
    }
}

/// An undo asked for (`<revision>:<hash>`, see [`flotilla_api::revision::UNDO_ANNOTATION`]):
/// the revision to go back to, if the live content still has the hash it was asked at.
pub fn undo_to(annotation: Option<&str>, live_hash: &str) -> Option<i64> {
    let (number, hash) = annotation?.split_once(':')?;
    (hash == live_hash).then(|| number.parse().ok()).flatten()
}

/// The name of revision `number` of `placement`: `<name>-<n>` in a Placement's namespace,
/// `clusterplacement.<name>-<n>` for a ClusterPlacement (in the system namespace).
pub fn name(placement: &PlacementKey, number: i64) -> String {
    match placement.namespace {
        Some(_) => format!("{}-{number}", placement.name),
        None => format!("clusterplacement.{}-{number}", placement.name),
    }
}

/// The revisions to delete: of `numbers` (every revision kept), the oldest beyond `limit`
/// among those not `in_use`.
pub fn pruned(numbers: &[i64], in_use: &BTreeSet<i64>, limit: usize) -> Vec<i64> {
    let mut old: Vec<i64> = numbers
        .iter()
        .copied()
        .filter(|n| !in_use.contains(n))
        .collect();
    old.sort_unstable();
    let extra = old.len().saturating_sub(limit);
    old.truncate(extra);
    old
}

#[cfg(test)]
mod tests {
    use flotilla_api::{OverrideRule, OverrideSpec, ResourceSelector};
    use serde_json::json;

    use super::*;

    fn web(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "7", "uid": "u"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
            "status": {"readyReplicas": 2}})
    }

    fn key() -> PlacementKey {
        PlacementKey {
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    #[test]
    fn the_hash_follows_what_is_delivered_and_nothing_else() {
        let spec = PlacementSpec::default();
        let a = snapshot(&[web("web:1")], &[], &spec);
        assert_eq!(a.hash.len(), 10);
        // Status, version and the order of keys do not count.
        let mut b = web("web:1");
        b["status"]["readyReplicas"] = 1.into();
        b["metadata"]["resourceVersion"] = "8".into();
        assert_eq!(snapshot(&[b], &[], &spec).hash, a.hash);
        let mut reordered = serde_json::Map::new();
        for (k, v) in web("web:1").as_object().unwrap().iter().rev() {
            reordered.insert(k.clone(), v.clone());
        }
        assert_eq!(
            snapshot(&[Value::Object(reordered)], &[], &spec).hash,
            a.hash
        );
        // The image does; so do an override that selects it and the division.
        let c = snapshot(&[web("web:2")], &[], &spec);
        assert_ne!(c.hash, a.hash);
        let rules = OverrideSpec {
            resource_selectors: vec![ResourceSelector {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                ..ResourceSelector::default()
            }],
            rules: vec![OverrideRule::default()],
            ..OverrideSpec::default()
        };
        let selecting = OverrideRef {
            namespace: Some("shop"),
            name: "eu",
            spec: &rules,
        };
        let elsewhere = OverrideRef {
            namespace: Some("other"),
            name: "eu",
            spec: &rules,
        };
        let d = snapshot(&[web("web:1")], &[selecting, elsewhere], &spec);
        assert_ne!(d.hash, a.hash);
        assert_eq!(d.overrides.len(), 1);
        assert_eq!(snapshot(&[web("web:1")], &[elsewhere], &spec).hash, a.hash);
        let divided = PlacementSpec {
            replicas: Some(flotilla_api::ReplicaPolicy {
                mode: flotilla_api::ReplicaMode::Divided,
                ..Default::default()
            }),
            ..PlacementSpec::default()
        };
        assert_ne!(snapshot(&[web("web:1")], &[], &divided).hash, a.hash);
        // The revision says what changed, and gives its inputs back.
        let first = a.revision(&key(), 1, None);
        assert_eq!(first.change_cause.as_deref(), Some("first revision"));
        let second = d.revision(&key(), 2, Some(&first));
        assert_eq!(
            second.change_cause.as_deref(),
            Some("Override shop/eu added")
        );
        let third = c.revision(&key(), 3, Some(&first));
        assert_eq!(
            third.change_cause.as_deref(),
            Some("Deployment shop/web changed")
        );
        let (templates, overrides) = inputs(&second);
        assert_eq!(templates, [crate::render::clean(&web("web:1"))]);
        assert_eq!(overrides.len(), 1);
    }

    #[test]
    fn old_revisions_beyond_the_limit_go_oldest_first_and_none_in_use() {
        let numbers = [1, 2, 3, 4, 5, 6];
        let in_use = BTreeSet::from([6, 2]);
        assert_eq!(pruned(&numbers, &in_use, 2), [1, 3]);
        assert_eq!(pruned(&numbers, &in_use, 10), Vec::<i64>::new());
        assert_eq!(pruned(&numbers, &in_use, 0), [1, 3, 4, 5]);
        assert_eq!(name(&key(), 3), "web-3");
        let cluster = PlacementKey {
            namespace: None,
            name: "web".into(),
        };
        assert_eq!(name(&cluster, 3), "clusterplacement.web-3");
    }
}
