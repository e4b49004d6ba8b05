//! Changes on the member to what a hub delivered: one label-selected watch per
//! kind, each restarting with backoff after errors, merged into one stream of ticks.

use std::time::Duration;

use futures_util::future::ready;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tracing::{Instrument, debug, info_span, warn};

use crate::kinds::Kind;
use crate::{Member, Provenance};

/// The longest wait between two looks for a kind the member does not serve yet.
const MAX_KIND_WAIT: Duration = Duration::from_secs(60);

impl Member {
    pub(crate) fn watch_changes(
        &self,
        kinds: &[(String, String)],
        provenance: &Provenance,
    ) -> impl Stream<Item = ()> + Send + use<> {
        let selector = provenance.selector();
        let streams: Vec<BoxStream<'static, ()>> = kinds
            .iter()
            .map(|(api_version, kind)| {
                let (member, client) = (self.clone(), self.client.clone());
                let (api_version, kind) = (api_version.clone(), kind.clone());
                let selector = selector.clone();
                stream::once(async move { member.wait_for(&api_version, &kind).await })
                    .flat_map(move |found| {
                        let api: Api<DynamicObject> =
                            Api::all_with(client.clone(), &found.resource);
                        let config = watcher::Config::default().labels(&selector);
                        watcher::watcher(api, config)
                            .default_backoff()
                            .filter_map(move |event| ready(tick(event, &found)))
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

/// Whether a watch event is a change to report: an object added, modified or deleted
/// (the watch selects this hub's objects), or a (re)list done, which may hide changes
/// made meanwhile.
fn tick(event: Result<Event<DynamicObject>, watcher::Error>, kind: &Kind) -> Option<()> {
    match event {
        Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => Some(()),
        Ok(Event::Init | Event::InitApply(_)) => None,
        Err(e) => {
            warn!(kind = %kind.resource.kind, error = %e, "watch failed; retrying with backoff");
            None
        }
    }
}
