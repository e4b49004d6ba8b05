//! Events are one stored resource seen through two versions, as in Kubernetes: `core/v1`
//! and `events.k8s.io/v1`. Both keep their objects under the core group's key space
//! (`/core/events/…`, see [`crate::registry::keys`]), each as written; a read through the other
//! version converts the object ([`show_as`]), and a field selector of one version finds
//! objects written through the other ([`alias`]). They expire a TTL after their last
//! write ([`expiry`]).
//!
//! ```text
//!   core/v1                         events.k8s.io/v1
//!   involvedObject            ◄──►  regarding
//!   message                   ◄──►  note
//!   reportingComponent        ◄──►  reportingController
//!   source                    ◄──►  deprecatedSource
//!   firstTimestamp            ◄──►  deprecatedFirstTimestamp
//!   lastTimestamp             ◄──►  deprecatedLastTimestamp
//!   count                     ◄──►  deprecatedCount
//!   (the same in both: metadata, eventTime, series, related, reportingInstance,
//!    action, reason, type)
//! ```

use serde_json::Value;

use crate::registry::resources::ResourceType;

/// The group whose Events are kept with the core group's.
pub const GROUP: &str = "events.k8s.io";

/// The fields named differently in the two versions: (core/v1, events.k8s.io/v1).
const RENAMED: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Whether `rt` is Events in either version.
pub fn is_event(rt: &ResourceType) -> bool {
    rt.kind == "Event" && rt.plural == "events" && (rt.group.is_empty() || rt.group == GROUP)
}

/// The group whose key space holds `rt`'s objects: the core group's for Events of
/// `events.k8s.io`, else its own.
pub fn storage_group(rt: &ResourceType) -> &str {
    if rt.group == GROUP && is_event(rt) {
        ""
    } else {
        &rt.group
    }
}

/// `object` shown as `api_version`: an Event written through the other version is
/// converted (fields renamed as the module's table says), every object gets the
/// apiVersion.
pub fn show_as(object: &mut Value, api_version: &str) {
    let from = object["apiVersion"].as_str().unwrap_or_default();
    if object["kind"] == "Event" && from != api_version {
        let to_core = match (from, api_version) {
            ("events.k8s.io/v1", "v1") => Some(true),
            ("v1", "events.k8s.io/v1") => Some(false),
            _ => None,
        };
        if let (Some(to_core), Some(map)) = (to_core, object.as_object_mut()) {
            for (core, events) in RENAMED {
                let (old, new) = if to_core {
                    (events, core)
                } else {
                    (core, events)
                };
                if let Some(value) = map.remove(old) {
                    map.insert(new.to_owned(), value);
                }
            }
        }
    }
    object["apiVersion"] = Value::String(api_version.to_owned());
}

/// The same field in the other version, for a field selector term (`involvedObject.name`
/// ↔ `regarding.name`, `reportingComponent` ↔ `reportingController`, `source` ↔
/// `deprecatedSource.component`).
pub fn alias(field: &str) -> Option<String> {
    if field == "source" {
        return Some("deprecatedSource.component".into());
    }
    let (head, rest) = match field.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (field, None),
    };
    let other = RENAMED.iter().find_map(|&(core, events)| {
        if head == core {
            Some(events)
        } else if head == events {
            Some(core)
        } else {
            None
        }
    })?;
    Some(match rest {
        Some(rest) => format!("{other}.{rest}"),
        None => other.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::resources::Registry;

    fn core_event() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "shop"},
            "involvedObject": {"kind": "Placement", "name": "web", "namespace": "shop"},
            "related": {"kind": "Work", "name": "w"},
            "message": "scheduled", "reason": "Scheduled", "type": "Normal",
            "action": "Scheduling", "reportingComponent": "flotilla.io/fleet",
            "reportingInstance": "hub", "source": {"component": "flotilla-fleet"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "count": 3, "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}
        })
    }

    #[test]
    fn an_event_reads_the_same_through_either_version_and_back() {
        let mut event = core_event();
        show_as(&mut event, "events.k8s.io/v1");
        assert_eq!(
            event,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "web.1", "namespace": "shop"},
                "regarding": {"kind": "Placement", "name": "web", "namespace": "shop"},
                "related": {"kind": "Work", "name": "w"},
                "note": "scheduled", "reason": "Scheduled", "type": "Normal",
                "action": "Scheduling", "reportingController": "flotilla.io/fleet",
                "reportingInstance": "hub", "deprecatedSource": {"component": "flotilla-fleet"},
                "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
                "deprecatedLastTimestamp": "2026-01-01T00:01:00Z",
                "deprecatedCount": 3, "eventTime": "2026-01-01T00:00:00.000000Z",
                "series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}
            })
        );
        show_as(&mut event, "v1");
        assert_eq!(event, core_event());
        // The same version: nothing but the apiVersion.
        show_as(&mut event, "v1");
        assert_eq!(event, core_event());
        // Other kinds are not converted.
        let mut other = json!({"apiVersion": "v1", "kind": "ConfigMap", "message": "x"});
        show_as(&mut other, "events.k8s.io/v1");
        assert_eq!(other["message"], "x");
    }

    #[test]
    fn both_groups_share_one_key_space_and_selectors_find_either_form() {
        let registry = Registry::builtin();
        let core = registry.get("", "v1", "events").unwrap();
        let events = registry.get(GROUP, "v1", "events").unwrap();
        assert!(is_event(&core) && is_event(&events));
        assert_eq!(
            crate::registry::keys::key(&core, "root", "shop", "web.1"),
            crate::registry::keys::key(&events, "root", "shop", "web.1")
        );
        let pods = registry.get("", "v1", "pods").unwrap();
        assert!(!is_event(&pods));
        assert_eq!(alias("involvedObject.name").unwrap(), "regarding.name");
        assert_eq!(alias("regarding.uid").unwrap(), "involvedObject.uid");
        assert_eq!(alias("reportingController").unwrap(), "reportingComponent");
        assert_eq!(alias("source").unwrap(), "deprecatedSource.component");
        assert_eq!(alias("reason"), None);
        assert_eq!(alias("type"), None);
    }
}
