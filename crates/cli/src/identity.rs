//! One identity for every replica of a hub on a shared store (PostgreSQL, etcd).
//!
//! ```text
//!  store key ~flotilla/hub-identity (outside the objects' keys: no API reaches it)
//!     present ─► SharedIdentity::from_json ─────────────────────────────┐
//!     absent  ─► candidate: DIR's own (a hub moved onto the store) or a  │
//!                new one ─► store.create (create-if-absent)              │
//!                   won ─► the candidate ───────────────────────────────┤
//!                   AlreadyExists (another replica won) ─► read theirs ─┤
//!                                                                        ▼
//!  SharedIdentity::install(DIR): missing files written; a file holding another hub's
//!  CA, token or key ─► refused, naming the file and the store
//!  then flotilla_pki::load_or_create_with(DIR): this replica's serving certificate for
//!  its own addresses, issued by the shared CA
//! ```
//!
//! A SQLite store is one process's: its identity stays in the data directory alone.

use std::path::Path;

use anyhow::Context;
use flotilla_apiserver::registry::keys;
use flotilla_pki::SharedIdentity;
use flotilla_store::Store;
use tracing::info;

/// Makes `data_dir` hold the identity kept in `store` (described by `store_name` in
/// messages), creating it in the store first if no replica has yet.
pub async fn share_through_store(
    store: &dyn Store,
    store_name: &str,
    data_dir: &Path,
) -> anyhow::Result<()> {
    let source = format!(
        "the store {store_name} (key {})",
        String::from_utf8_lossy(keys::HUB_IDENTITY)
    );
    let shared = match stored(store, &source).await? {
        Some(shared) => {
            info!(store = %store_name, "hub identity read from the store");
            shared
        }
        None => {
            let (candidate, origin) = match SharedIdentity::read(data_dir)
                .context("cannot read the data directory's identity")?
            {
                Some(own) => (own, "the data directory's"),
                None => (
                    SharedIdentity::generate().context("cannot create the hub's identity")?,
                    "new",
                ),
            };
            match store
                .create(keys::HUB_IDENTITY, candidate.to_json().into())
                .await
            {
                Ok(_) => {
                    info!(store = %store_name, origin, "hub identity written to the store");
                    candidate
                }
                Err(flotilla_store::Error::AlreadyExists { .. }) => {
                    info!(store = %store_name, "another replica wrote the hub identity first");
                    stored(store, &source)
                        .await?
                        .context("the hub identity was written and is gone again")?
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("cannot write the hub identity to {source}"));
                }
            }
        }
    };
    shared.install(data_dir, &source)?;
    Ok(())
}

/// The identity kept in the store, if any.
async fn stored(store: &dyn Store, source: &str) -> anyhow::Result<Option<SharedIdentity>> {
    let Some(kv) = store
        .get(keys::HUB_IDENTITY, None)
        .await
        .with_context(|| format!("cannot read the hub identity from {source}"))?
    else {
        return Ok(None);
    };
    let shared = SharedIdentity::from_json(&kv.value)
        .with_context(|| format!("the hub identity in {source} is unusable"))?;
    Ok(Some(shared))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn store() -> Arc<dyn Store> {
        Arc::new(flotilla_store_memory::MemoryStore::new())
    }

    #[tokio::test]
    async fn replicas_starting_at_once_end_with_one_identity() {
        let store = store();
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let starts = dirs.iter().map(|dir| {
            let store = store.clone();
            let path = dir.path().to_owned();
            tokio::spawn(async move { share_through_store(&*store, "memory", &path).await })
        });
        for start in starts.collect::<Vec<_>>() {
            start.await.unwrap().unwrap();
        }
        let identities: Vec<_> = dirs
            .iter()
            .map(|dir| flotilla_pki::load_or_create(dir.path(), &[]).unwrap())
            .collect();
        for identity in &identities[1..] {
            assert_eq!(identity.ca_cert_pem, identities[0].ca_cert_pem);
            assert_eq!(identity.admin_token, identities[0].admin_token);
            assert_eq!(
                identity.service_account_key_pem,
                identities[0].service_account_key_pem
            );
        }
        let kv = store.get(keys::HUB_IDENTITY, None).await.unwrap().unwrap();
        let kept = SharedIdentity::from_json(&kv.value).unwrap();
        assert_eq!(kept.ca_cert_pem, identities[0].ca_cert_pem);
    }

    #[tokio::test]
    async fn a_hub_moved_onto_a_store_keeps_its_identity_and_another_hubs_dir_is_refused() {
        let store = store();
        let own = tempfile::tempdir().unwrap();
        let before = flotilla_pki::load_or_create(own.path(), &[]).unwrap();
        share_through_store(&*store, "memory", own.path())
            .await
            .unwrap();
        let kv = store.get(keys::HUB_IDENTITY, None).await.unwrap().unwrap();
        let kept = SharedIdentity::from_json(&kv.value).unwrap();
        assert_eq!(kept.ca_cert_pem, before.ca_cert_pem);
        assert_eq!(kept.admin_token, before.admin_token);

        let other = tempfile::tempdir().unwrap();
        flotilla_pki::load_or_create(other.path(), &[]).unwrap();
        let error = share_through_store(&*store, "memory", other.path())
            .await
            .unwrap_err();
        let text = format!("{error:#}");
        assert!(
            text.contains("ca.crt") && text.contains("hub-identity"),
            "{text}"
        );
    }
}
