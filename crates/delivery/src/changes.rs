//! Changes on the member to what a hub delivered: one label-selected watch per
//! kind, each restarting with backoff after errors and filling the kind's store of live
//! objects ([`crate::live`]), merged into one stream of [`Change`]s.

use std::time::Duration;

use futures_util::future::ready;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tracing::{Instrument, debug, info_span, warn};

use crate::kinds::Kind;
use crate::live;
use crate::provenance::ANNOTATION_WORK;
use crate::{Member, Provenance};

/// Something a change watch saw on the member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// An object this hub delivered was added, changed or deleted; `work` is the Work its
    /// annotation names, if it names one.
    Object {
        /// The delivering Work's name.
        work: Option<String>,
    },
    /// A watch listed its kind (at its start, or again after a failure, which may hide
    /// changes made meanwhile).
    Listed,
}

/// The longest wait between two looks for a kind the member does not serve yet.
const MAX_KIND_WAIT: Duration = Duration::from_secs(60);

/// How long a change watch waits on the member before it asks again (kube's default is
/// 290 s), drawn at random between 240 and 299 s for each watch. Watches started together
/// (a mass join, a placement reaching every member) then come apart instead of all asking
/// again at the same moment every few minutes.
fn watch_timeout() -> u32 {
    use std::hash::BuildHasher;
    // A new `RandomState` has new random keys: hashing nothing with it draws a number.
    let drawn = std::collections::hash_map::RandomState::new().hash_one(());
    240 + u32::try_from(drawn % 60).unwrap_or_default()
}

impl Member {
    pub(crate) fn watch_changes(
        &self,
        kinds: &[(String, String)],
        provenance: &Provenance,
    ) -> impl Stream<Item = Change> + Send + use<> {
        let selector = provenance.selector();
        let streams: Vec<BoxStream<'static, Change>> = kinds
            .iter()
            .map(|(api_version, kind)| {
                let (member, client) = (self.clone(), self.client.clone());
                let (api_version, kind) = (api_version.clone(), kind.clone());
                let selector = selector.clone();
                let waiting = (member.clone(), api_version.clone(), kind.clone());
                stream::once(async move { waiting.0.wait_for(&waiting.1, &waiting.2).await })
                    .flat_map(move |found| {
                        let api: Api<DynamicObject> =
                            Api::all_with(client.clone(), &found.resource);
                        let config = watcher::Config::default()
                            .labels(&selector)
                            .timeout(watch_timeout());
                        let objects = live::Shared::default();
                        // The store serves syncs for as long as this stream lives.
                        let registration =
                            member.live.register(&api_version, &kind, objects.clone());
                        watcher::watcher(api, config)
                            .default_backoff()
                            // Who manages which field is not needed to sync: the bulk of
                            // an object, not kept.
                            .modify(|o| o.managed_fields_mut().clear())
                            .filter_map(move |event| {
                                let _ = &registration;
                                if let Ok(event) = &event {
                                    live::lock(&objects).apply(event);
                                }
                                ready(change(event, &found))
                            })
                    })
                    .boxed()
            })
            .collect();
        stream::select_all(streams)
    }

    /// The kind once the member serves it, looking again with backoff until it does.
    async fn wait_for(&self, api_version: &str, kind: &str) -> Kind {
        let mut delay = Duration::from_secs(1);
        async {
            loop {
                match self.kinds.resolve(&self.client, api_version, kind).await {
                    Ok(Some(found)) => return found,
                    Ok(None) => debug!(?delay, "kind not served yet"),
                    Err(e) => warn!(error = %e, ?delay, "cannot discover the kind"),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_KIND_WAIT);
            }
        }
        .instrument(info_span!("changes", api_version, kind))
        .await
    }
}

/// The change a watch event reports: an object added, modified or deleted (the watch
/// selects this hub's objects), or a (re)list done.
fn change(event: Result<Event<DynamicObject>, watcher::Error>, kind: &Kind) -> Option<Change> {
    match event {
        Ok(Event::Apply(o) | Event::Delete(o)) => Some(Change::Object {
            work: o.annotations().get(ANNOTATION_WORK).cloned(),
        }),
        Ok(Event::InitDone) => Some(Change::Listed),
        Ok(Event::Init | Event::InitApply(_)) => None,
        Err(e) => {
            warn!(kind = %kind.resource.kind, error = %e, "watch failed; retrying with backoff");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_time_out_at_spread_moments_within_five_minutes() {
        let drawn: std::collections::BTreeSet<u32> = (0..200).map(|_| watch_timeout()).collect();
        assert!(drawn.iter().all(|t| (240..300).contains(t)), "{drawn:?}");
        // 200 draws over 60 values: far more than a handful of distinct ones.
        assert!(drawn.len() > 20, "{drawn:?}");
    }
}
