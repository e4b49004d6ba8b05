//! Tenant namespaces: which clusters a namespace's Placements may reach, and what they
//! may deliver there. Pure: the runtime hands in the bindings and sets it caches.
//!
//! ```text
//!  ClusterSetBindings of the namespace ─┐        (none, Open)  ─► Reach::Everywhere
//!  ClusterSets that exist ──────────────┼─ reach (none, Bound) ─► Reach::Unbound
//!  Tenancy (flotilla hub --tenancy) ────┘        (some)        ─► Reach::Sets(bound ∩ existing)
//!  ClusterPlacement ─────────────────────────────────────────────► Reach::Everywhere
//! ```
//!
//! What a Placement delivers stays in its namespace: it selects only objects of its
//! namespace (`plan::selector_matches`; a selector of a cluster-scoped kind selects
//! nothing and its status says so), an Override's patches of the namespace are refused at
//! admission (a CEL rule of the CRD), and the renderer refuses any rule, a ClusterOverride's
//! included, that changes a template's apiVersion, kind, name or namespace
//! (`render::RenderError::IdentityChanged`): that cluster's Work is not written.
//!
//! A binding or set being deleted counts as gone. Under open tenancy, deleting a
//! namespace's last binding widens its reach to every cluster again: removing a binding
//! needs `bind` on its set, as creating one does.

use std::collections::BTreeSet;

use crate::Reach;
use flotilla_api::{ClusterSet, ClusterSetBinding};

/// How namespaces without a ClusterSetBinding are treated (`flotilla hub --tenancy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tenancy {
    /// They reach every cluster: a single-team hub needs no binding.
    #[default]
    Open,
    /// They reach none: every namespace needs a binding to place anything.
    Bound,
}

impl std::str::FromStr for Tenancy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "open" => Ok(Tenancy::Open),
            "bound" => Ok(Tenancy::Bound),
            other => Err(format!("unknown tenancy {other:?}: expected open or bound")),
        }
    }
}

impl std::fmt::Display for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tenancy::Open => "open",
            Tenancy::Bound => "bound",
        })
    }
}

/// The reach of a placement in `namespace` (`None`: a ClusterPlacement, which reaches
/// every cluster) given every ClusterSetBinding and ClusterSet (those of other namespaces
/// are skipped).
pub fn reach<'a>(
    tenancy: Tenancy,
    namespace: Option<&str>,
    bindings: impl IntoIterator<Item = &'a ClusterSetBinding>,
    sets: impl IntoIterator<Item = &'a ClusterSet>,
) -> Reach {
    let Some(namespace) = namespace else {
        return Reach::Everywhere;
    };
    let bound: BTreeSet<&str> = bindings
        .into_iter()
        .filter(|b| {
            b.metadata.namespace.as_deref() == Some(namespace)
                && b.metadata.deletion_timestamp.is_none()
        })
        .map(|b| b.spec.cluster_set.as_str())
        .collect();
    if bound.is_empty() {
        return match tenancy {
            Tenancy::Open => Reach::Everywhere,
            Tenancy::Bound => Reach::Unbound {
                namespace: namespace.to_owned(),
            },
        };
    }
    let sets = sets
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter_map(|s| s.metadata.name.as_deref())
        .filter(|name| bound.contains(name))
        .map(str::to_owned)
        .collect();
    Reach::Sets {
        namespace: namespace.to_owned(),
        sets,
    }
}

/// Whether a ClusterSet `set` exists for a binding (neither missing nor being deleted).
pub fn set_exists<'a>(set: &str, sets: impl IntoIterator<Item = &'a ClusterSet>) -> bool {
    sets.into_iter()
        .any(|s| s.metadata.name.as_deref() == Some(set) && s.metadata.deletion_timestamp.is_none())
}

#[cfg(test)]
mod tests {
    use flotilla_api::{ClusterSetBindingSpec, ClusterSetSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn binding(namespace: &str, set: &str) -> ClusterSetBinding {
        let mut b = ClusterSetBinding::new(
            set,
            ClusterSetBindingSpec {
                cluster_set: set.into(),
            },
        );
        b.metadata.namespace = Some(namespace.into());
        b
    }

    fn set(name: &str) -> ClusterSet {
        ClusterSet::new(name, ClusterSetSpec::default())
    }

    fn deleting<T: kube::Resource>(mut object: T) -> T {
        object.meta_mut().deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        object
    }

    fn sets_of(reach: &Reach) -> Vec<&str> {
        match reach {
            Reach::Sets { sets, .. } => sets.iter().map(String::as_str).collect(),
            other => panic!("not bound to sets: {other:?}"),
        }
    }

    #[test]
    fn a_namespace_reaches_the_existing_sets_bound_to_it() {
        let sets = [set("eu"), set("us"), set("default"), deleting(set("ap"))];
        let bindings = [
            binding("shop", "eu"),
            binding("shop", "ap"),
            binding("shop", "mars"),
            binding("bank", "us"),
            deleting(binding("shop", "default")),
        ];
        for tenancy in [Tenancy::Open, Tenancy::Bound] {
            // Bound sets that exist: eu (ap is being deleted, mars is missing, the
            // binding of default is going, us is bank's).
            let shop = reach(tenancy, Some("shop"), &bindings, &sets);
            assert_eq!(sets_of(&shop), ["eu"]);
            assert_eq!(
                sets_of(&reach(tenancy, Some("bank"), &bindings, &sets)),
                ["us"]
            );
            // A ClusterPlacement is not limited by bindings.
            assert_eq!(reach(tenancy, None, &bindings, &sets), Reach::Everywhere);
        }
        // Bindings to missing sets only: bound to nothing, whatever the tenancy.
        let missing = [binding("shop", "mars")];
        assert!(sets_of(&reach(Tenancy::Open, Some("shop"), &missing, &sets)).is_empty());
        // No binding: every cluster when open, none when bound.
        assert_eq!(
            reach(Tenancy::Open, Some("web"), &bindings, &sets),
            Reach::Everywhere
        );
        assert_eq!(
            reach(Tenancy::Bound, Some("web"), &bindings, &sets),
            Reach::Unbound {
                namespace: "web".into()
            }
        );
        assert!(set_exists("eu", &sets));
        assert!(!set_exists("ap", &sets) && !set_exists("mars", &sets));
    }

    #[test]
    fn tenancy_reads_as_the_flag_writes_it() {
        assert_eq!("open".parse::<Tenancy>(), Ok(Tenancy::Open));
        assert_eq!("bound".parse::<Tenancy>(), Ok(Tenancy::Bound));
        assert_eq!(Tenancy::default(), Tenancy::Open);
        assert_eq!(Tenancy::Bound.to_string(), "bound");
        let e = "closed".parse::<Tenancy>().unwrap_err();
        assert_eq!(e, "unknown tenancy \"closed\": expected open or bound");
    }
}
