//! Periodic compaction of the store, as kube-apiserver does it (`--etcd-compaction-interval`).
//!
//! ```text
//!  every interval: compact to the revision seen one interval ago, then note the head
//! ```
//!
//! Keeping one interval of history lets watchers that reconnect within it resume where
//! they were; one that is further behind gets `410 Expired` and relists.

use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{Revision, Store};
use tracing::{Instrument, debug, info_span, warn};

/// Compacts `store` every `interval` to the revision it had one interval earlier, until
/// the task is dropped.
pub async fn run(store: Arc<dyn Store>, interval: Duration) {
    async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen: Option<Revision> = None;
        loop {
            ticks.tick().await;
            if let Some(target) = seen
                && target > Revision::new(0)
            {
                match store.compact(target).await {
                    Ok(()) => debug!(revision = target.get(), "compacted"),
                    Err(e) => warn!(revision = target.get(), error = %e, "compaction failed"),
                }
            }
            match store.current_revision().await {
                Ok(head) => seen = Some(head),
                Err(e) => warn!(error = %e, "cannot read the store's revision"),
            }
        }
    }
    .instrument(info_span!(
        "compaction",
        interval_secs = interval.as_secs_f64()
    ))
    .await
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use flotilla_store_memory::MemoryStore;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn compacts_to_the_revision_seen_one_interval_before() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let task = tokio::spawn(run(store.clone(), Duration::from_secs(60)));
        let first = store
            .create(b"/core/configmaps/root/a/x", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        // The first tick only notes the head.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(store.compacted_revision().await.unwrap(), Revision::new(0));
        let second = store
            .update(
                b"/core/configmaps/root/a/x",
                Bytes::from_static(b"{\"n\":1}"),
                first,
            )
            .await
            .unwrap();
        // One interval later: compacted to what the head was at the first tick.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(store.compacted_revision().await.unwrap(), first);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(store.compacted_revision().await.unwrap(), second);
        task.abort();
    }
}
