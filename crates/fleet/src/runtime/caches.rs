//! What the controllers share: the fleet's objects as their watches last saw them. Each
//! cache has one writer, the reflector [`run`](super::run) starts for its kind; every
//! controller reads them. The Works also have an index (by placement, by cluster
//! namespace), kept by the same watch, in [`Works`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use flotilla_api::{
    Cluster, ClusterOverride, ClusterPlacement, ClusterSet, ClusterSetBinding, ComputeNamespace,
    Override, Placement, PlacementRevision, Work,
};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::plan::PlacementKey;

/// Every object of the kinds the controllers read, from one watch each.
pub(super) struct Caches {
    pub clusters: Store<Cluster>,
    pub overrides: Store<Override>,
    pub cluster_overrides: Store<ClusterOverride>,
    pub works: Works,
    pub placements: Store<Placement>,
    pub cluster_placements: Store<ClusterPlacement>,
    /// Every namespace's ClusterSetBindings: what each namespace reaches.
    pub bindings: Store<ClusterSetBinding>,
    /// The ClusterSets that exist (a binding to a missing one binds nothing).
    pub cluster_sets: Store<ClusterSet>,
    /// Every placement's revisions.
    pub revisions: Store<PlacementRevision>,
    /// Every ComputeNamespace (a cluster's change pokes them all).
    pub compute_namespaces: Store<ComputeNamespace>,
}

/// Every Work, and which are whose: by placement and by cluster namespace, so that a
/// placement or a cluster finds its Works without going through all of them. Written by
/// the Works' watch alone ([`Works::apply`]).
pub(super) struct Works {
    store: Store<Work>,
    index: Mutex<WorkIndex>,
}

impl Works {
    pub fn new(store: Store<Work>) -> Self {
        Works {
            store,
            index: Mutex::default(),
        }
    }

    /// The cache itself.
    pub fn store(&self) -> &Store<Work> {
        &self.store
    }

    /// The Work `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Work>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// Brings the index up to an event of the Works' watch (the cache has it already).
    pub fn apply(&self, event: &watcher::Event<Work>) {
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
    }

    /// The Works of placement `key`.
    pub fn of(&self, key: &PlacementKey) -> Vec<Arc<Work>> {
        let ids: Vec<(String, String)> = {
            let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            index
                .by_placement
                .get(key)
                .map(|ids| ids.iter().cloned().collect())
                .unwrap_or_default()
        };
        ids.iter()
            .filter_map(|(ns, name)| self.get(ns, name))
            .filter(|w| {
                w.spec.placement.namespace == key.namespace && w.spec.placement.name == key.name
            })
            .collect()
    }

    /// The Works in `namespace` (a cluster's).
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<Work>> {
        let names: Vec<String> = {
            let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            index
                .by_namespace
                .get(namespace)
                .map(|names| names.iter().cloned().collect())
                .unwrap_or_default()
        };
        names
            .iter()
            .filter_map(|name| self.get(namespace, name))
            .collect()
    }
}

/// Works by placement and by cluster namespace, kept by the Works' watch, so that a
/// placement or a cluster finds its Works without going through all of them.
#[derive(Default)]
struct WorkIndex {
    by_placement: HashMap<PlacementKey, BTreeSet<(String, String)>>,
    by_namespace: HashMap<String, BTreeSet<String>>,
    placement_of: HashMap<(String, String), PlacementKey>,
    /// The index being rebuilt from a (re)list, replacing this one when it is done.
    building: Option<Box<WorkIndex>>,
}

impl WorkIndex {
    fn apply(&mut self, event: &watcher::Event<Work>) {
        match event {
            watcher::Event::Init => self.building = Some(Box::default()),
            watcher::Event::InitApply(w) => {
                if let Some(building) = &mut self.building {
                    building.insert(w);
                }
            }
            watcher::Event::InitDone => {
                if let Some(built) = self.building.take() {
                    *self = *built;
                }
            }
            watcher::Event::Apply(w) => self.insert(w),
            watcher::Event::Delete(w) => self.remove(&Self::id(w)),
        }
    }

    fn id(w: &Work) -> (String, String) {
        (
            w.metadata.namespace.clone().unwrap_or_default(),
            w.metadata.name.clone().unwrap_or_default(),
        )
    }

    fn insert(&mut self, w: &Work) {
        let id = Self::id(w);
        let key = PlacementKey {
            namespace: w.spec.placement.namespace.clone(),
            name: w.spec.placement.name.clone(),
        };
        if self.placement_of.get(&id) == Some(&key) {
            return;
        }
        self.remove(&id);
        self.by_placement
            .entry(key.clone())
            .or_default()
            .insert(id.clone());
        self.by_namespace
            .entry(id.0.clone())
            .or_default()
            .insert(id.1.clone());
        self.placement_of.insert(id, key);
    }

    fn remove(&mut self, id: &(String, String)) {
        let Some(key) = self.placement_of.remove(id) else {
            return;
        };
        if let Some(ids) = self.by_placement.get_mut(&key) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_placement.remove(&key);
            }
        }
        if let Some(names) = self.by_namespace.get_mut(&id.0) {
            names.remove(&id.1);
            if names.is_empty() {
                self.by_namespace.remove(&id.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{PlacementReference, WorkSpec};
    use kube::runtime::reflector;

    use super::*;

    fn work(namespace: &str, name: &str, placement: &str) -> Work {
        let mut work = Work::new(
            name,
            WorkSpec {
                placement: PlacementReference {
                    namespace: Some("shop".into()),
                    name: placement.into(),
                },
                ..WorkSpec::default()
            },
        );
        work.metadata.namespace = Some(namespace.into());
        work
    }

    fn names(works: &[Arc<Work>]) -> Vec<String> {
        let mut names: Vec<String> = works
            .iter()
            .map(|w| {
                format!(
                    "{}/{}",
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                    w.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        names
    }

    #[test]
    fn works_are_found_by_placement_and_namespace_and_a_relist_replaces_the_index() {
        let (store, mut writer) = reflector::store::<Work>();
        let works = Works::new(store);
        // As the Works' reflector does: the cache first, then the index.
        let mut feed = |event: watcher::Event<Work>| {
            writer.apply_watcher_event(&event);
            works.apply(&event);
        };
        let web = PlacementKey {
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let db = PlacementKey {
            namespace: Some("shop".into()),
            name: "db".into(),
        };
        feed(watcher::Event::Apply(work(
            "flotilla-cluster-a",
            "shop.web",
            "web",
        )));
        feed(watcher::Event::Apply(work(
            "flotilla-cluster-b",
            "shop.web",
            "web",
        )));
        feed(watcher::Event::Apply(work(
            "flotilla-cluster-a",
            "shop.db",
            "db",
        )));
        assert_eq!(
            names(&works.of(&web)),
            ["flotilla-cluster-a/shop.web", "flotilla-cluster-b/shop.web"]
        );
        assert_eq!(
            names(&works.in_namespace("flotilla-cluster-a")),
            ["flotilla-cluster-a/shop.db", "flotilla-cluster-a/shop.web"]
        );
        assert!(works.get("flotilla-cluster-b", "shop.web").is_some());
        // A Work moved to another placement is that one's.
        feed(watcher::Event::Apply(work(
            "flotilla-cluster-b",
            "shop.web",
            "db",
        )));
        assert_eq!(names(&works.of(&web)), ["flotilla-cluster-a/shop.web"]);
        assert_eq!(names(&works.of(&db)).len(), 2);
        feed(watcher::Event::Delete(work(
            "flotilla-cluster-a",
            "shop.db",
            "db",
        )));
        assert_eq!(
            names(&works.in_namespace("flotilla-cluster-a")),
            ["flotilla-cluster-a/shop.web"]
        );
        // A relist: what it lists replaces the index once it is done, not before.
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(work(
            "flotilla-cluster-c",
            "shop.web",
            "web",
        )));
        assert_eq!(names(&works.of(&web)), ["flotilla-cluster-a/shop.web"]);
        feed(watcher::Event::InitDone);
        assert_eq!(names(&works.of(&web)), ["flotilla-cluster-c/shop.web"]);
        assert!(works.in_namespace("flotilla-cluster-a").is_empty());
        assert!(works.of(&db).is_empty());
    }

    #[test]
    fn a_panic_under_the_index_lock_leaves_the_index_usable() {
        let (store, mut writer) = reflector::store::<Work>();
        let works = Arc::new(Works::new(store));
        let event = watcher::Event::Apply(work("flotilla-cluster-a", "shop.web", "web"));
        writer.apply_watcher_event(&event);
        works.apply(&event);
        let held = works.clone();
        let panicked = std::thread::spawn(move || {
            let _held = held.index.lock();
            panic!("a bug while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(works.index.is_poisoned());
        // Recovered (ARCHITECTURE.md, "Poisoned locks"), not a panic of every later user.
        assert_eq!(works.in_namespace("flotilla-cluster-a").len(), 1);
        works.apply(&watcher::Event::Delete(work(
            "flotilla-cluster-a",
            "shop.web",
            "web",
        )));
        let web = PlacementKey {
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        assert!(works.of(&web).is_empty());
    }
}
