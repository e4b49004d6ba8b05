//! What the member holds of this hub's objects, as the change watches last saw them: one
//! reflector store per kind, trusted only while the watch that fills it runs and after it
//! has listed. A sync reads the object from here instead of asking the member; an object
//! not found here may still exist (someone else's, without this hub's labels), so it is
//! asked for.
//!
//! ```text
//!  changes(kinds) ─► per kind: watch (this hub's labels) ─► reflector ─► Store ─┐
//!                                     Registration (dropped with the stream) ───┤
//!  sync ─► Live::get(kind, namespace, name) ── listed store has it? ─► object   │
//!                                          └─ otherwise ─► None (GET it) ◄──────┘
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store};

type KindKey = (String, String);

struct Entry {
    id: u64,
    resource: ApiResource,
    store: Store<DynamicObject>,
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
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KindKey, Entry>> {
        self.stores.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Uses `store` for `api_version`/`kind` until the registration is dropped.
    pub(crate) fn register(
        &self,
        api_version: &str,
        kind: &str,
        resource: ApiResource,
        store: Store<DynamicObject>,
    ) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let key = (api_version.to_owned(), kind.to_owned());
        self.lock().insert(
            key.clone(),
            Entry {
                id,
                resource,
                store,
            },
        );
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
    ) -> Option<Arc<DynamicObject>> {
        let (store, mut reference) = {
            let stores = self.lock();
            let entry = stores.get(&(api_version.to_owned(), kind.to_owned()))?;
            (
                entry.store.clone(),
                ObjectRef::new_with(name, entry.resource.clone()),
            )
        };
        // Not listed yet: what it holds may be incomplete.
        store.wait_until_ready().now_or_never()?.ok()?;
        reference.namespace = namespace.map(str::to_owned);
        store.get(&reference)
    }
}
