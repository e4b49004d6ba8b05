//! What the member holds of this hub's objects, as the change watches last saw them: one
//! store per kind, trusted only while the watch that fills it runs and after it has
//! listed. A sync reads the object from here instead of asking the member; an object not
//! found here may still exist (someone else's, without this hub's labels), so it is asked
//! for.
//!
//! Each object is kept as its JSON and decoded when a sync reads it: a few hundred bytes
//! an object instead of the several kilobytes of its decoded maps, for the hundreds of
//! thousands of objects a hub delivers.
//!
//! ```text
//!  changes(kinds) ─► per kind: watch (this hub's labels) ─► Objects (JSON) ─────┐
//!                                     Registration (dropped with the stream) ───┤
//!  sync ─► Live::get(kind, namespace, name) ── listed store has it? ─► object   │
//!                                          └─ otherwise ─► None (GET it) ◄──────┘
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::Value;

type KindKey = (String, String);

/// An object's namespace (none for cluster-scoped ones) and name.
type ObjectKey = (Option<String>, String);

/// The objects of one kind, as their JSON, filled from a watch's events.
#[derive(Default)]
pub(crate) struct Objects {
    /// Whether the watch has listed once: until then what is here may be incomplete.
    listed: bool,
    by_key: HashMap<ObjectKey, Arc<[u8]>>,
    /// The objects of a (re)list in progress, replacing `by_key` once it is done.
    building: Option<HashMap<ObjectKey, Arc<[u8]>>>,
}

fn key_of(object: &DynamicObject) -> ObjectKey {
    (
        object.metadata.namespace.clone(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

fn json_of(object: &DynamicObject) -> Arc<[u8]> {
    serde_json::to_vec(object).unwrap_or_default().into()
}

impl Objects {
    /// Applies one event of the kind's watch.
    pub(crate) fn apply(&mut self, event: &Event<DynamicObject>) {
        match event {
            Event::Init => self.building = Some(HashMap::new()),
            Event::InitApply(object) => {
                if let Some(building) = &mut self.building {
                    building.insert(key_of(object), json_of(object));
                }
            }
            Event::InitDone => {
                if let Some(built) = self.building.take() {
                    self.by_key = built;
                }
                self.listed = true;
            }
            Event::Apply(object) => {
                self.by_key.insert(key_of(object), json_of(object));
            }
            Event::Delete(object) => {
                self.by_key.remove(&key_of(object));
            }
        }
    }

    /// The object's JSON, once the watch has listed.
    fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<[u8]>> {
        if !self.listed {
            return None;
        }
        self.by_key
            .get(&(namespace.map(str::to_owned), name.to_owned()))
            .cloned()
    }
}

/// A kind's objects, shared by its watch (which fills them) and the syncs (which read them).
pub(crate) type Shared = Arc<Mutex<Objects>>;

pub(crate) fn lock(objects: &Shared) -> MutexGuard<'_, Objects> {
    objects.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Entry {
    id: u64,
    objects: Shared,
}

/// The stores of the kinds being watched, shared by the clones of a
/// [`crate::Member`].
#[derive(Clone, Default)]
pub(crate) struct Live {
    stores: Arc<Mutex<HashMap<KindKey, Entry>>>,
    next: Arc<AtomicU64>,
}

/// Keeps a kind's store in use; dropping it (with the watch) forgets the store, unless a
/// newer watch of the kind has replaced it since.
pub(crate) struct Registration {
    live: Live,
    key: KindKey,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut stores = self.live.lock();
        if stores.get(&self.key).is_some_and(|e| e.id == self.id) {
            stores.remove(&self.key);
        }
    }
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, HashMap<KindKey, Entry>> {
        self.stores.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Uses `objects` for `api_version`/`kind` until the registration is dropped.
    pub(crate) fn register(&self, api_version: &str, kind: &str, objects: Shared) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (api_version.to_owned(), kind.to_owned());
        self.lock().insert(key.clone(), Entry { id, objects });
        Registration {
            live: self.clone(),
            key,
            id,
        }
    }

    /// The object as the watch of its kind last saw it, if that watch runs, has listed
    /// and holds it.
    pub(crate) fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let objects = {
            let stores = self.lock();
            stores
                .get(&(api_version.to_owned(), kind.to_owned()))?
                .objects
                .clone()
        };
        // Decoded outside the lock: the watch and the member's other syncs go on meanwhile.
        let json = lock(&objects).get(namespace, name)?;
        serde_json::from_slice(&json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(namespace: &str, name: &str, data: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"k": data}}))
        .unwrap()
    }

    #[test]
    fn objects_are_served_once_listed_as_the_latest_event_left_them() {
        let live = Live::default();
        let objects = Shared::default();
        let registration = live.register("v1", "ConfigMap", objects.clone());
        let get = |name: &str| live.get("v1", "ConfigMap", Some("shop"), name);

        lock(&objects).apply(&Event::Init);
        lock(&objects).apply(&Event::InitApply(object("shop", "a", "1")));
        // Not listed yet: nothing is trusted.
        assert_eq!(get("a"), None);
        lock(&objects).apply(&Event::InitDone);
        assert_eq!(get("a").unwrap()["data"]["k"], "1");
        assert_eq!(live.get("v1", "ConfigMap", Some("other"), "a"), None);
        assert_eq!(live.get("v1", "Secret", Some("shop"), "a"), None);

        lock(&objects).apply(&Event::Apply(object("shop", "a", "2")));
        lock(&objects).apply(&Event::Apply(object("shop", "b", "3")));
        assert_eq!(get("a").unwrap()["data"]["k"], "2");
        lock(&objects).apply(&Event::Delete(object("shop", "b", "3")));
        assert_eq!(get("b"), None);

        // A relist replaces what was there once it is done, and serves the old meanwhile.
        lock(&objects).apply(&Event::Init);
        lock(&objects).apply(&Event::InitApply(object("shop", "c", "4")));
        assert_eq!(get("a").unwrap()["data"]["k"], "2");
        lock(&objects).apply(&Event::InitDone);
        assert_eq!(get("a"), None);
        assert_eq!(get("c").unwrap()["data"]["k"], "4");

        // The watch gone, its objects are not used any more.
        drop(registration);
        assert_eq!(get("c"), None);
    }
}
