//! Watches: the initial state, then the watch cache's changes through the client's
//! selectors, as JSON lines (or Table rows, or metadata alone), with bookmarks and a
//! lifetime (`timeoutSeconds`, else 30–60 min drawn at random).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use flotilla_store::{EventKind, ListOptions, Revision};
use serde_json::{Value, json};

use crate::discovery::table;
use crate::http::error::{ApiError, ApiResult};
use crate::http::negotiate::Shape;
use crate::registry::keys;
use crate::registry::object::{self};
use crate::registry::resources::ResourceType;
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::watch::cache::{Change, Next, Subscription};

use crate::api::Api;
use crate::http::request::{Query, parse_resource_version};
use crate::http::response::with_warnings;
use crate::http::route::Target;
use crate::registry::store::{Unreadable, reads_as};

impl Api {
    pub(crate) async fn watch(
        &self,
        target: &Target,
        query: &Query,
        shape: Shape,
    ) -> ApiResult<Response> {
        let rt = target.rt.clone();
        let mut shaped = match shape {
            Shape::Object => None,
            Shape::Table => Some(Shaped::Table(TableWatch {
                rt: rt.clone(),
                include: query.get("includeObject").unwrap_or("Metadata").to_owned(),
                columns_sent: false,
            })),
            Shape::Metadata(api_version) => Some(Shaped::Metadata(api_version)),
        };
        let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))?;
        let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""), &rt)?;
        let prefix = keys::prefix(&rt, &self.cluster, target.namespace.as_deref());
        let send_initial = query.flag("sendInitialEvents");
        let bookmarks = query.flag("allowWatchBookmarks");
        let requested_timeout = query
            .get("timeoutSeconds")
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))
            })
            .transpose()?;
        let timeout = lifetime(requested_timeout, self.min_request_timeout, draw());
        let requested = query
            .get("resourceVersion")
            .map(parse_resource_version)
            .transpose()?;
        let mut initial = Vec::new();
        let mut unreadable = Vec::new();
        let since = match requested {
            Some(rv) if rv > 0 && !send_initial => Revision::new(rv),
            _ => {
                // Current state first, as ADDED, then every change after it.
                let page = self.store.list(&prefix, ListOptions::default()).await?;
                for kv in page.kvs {
                    if let Some(left_out) = Unreadable::check(&kv.key, &kv.value) {
                        unreadable.push(left_out);
                        continue;
                    }
                    let object: Value = match serde_json::from_slice(&kv.value) {
                        Ok(object) => object,
                        Err(e) => {
                            unreadable.push(Unreadable::new(&kv.key, e.to_string()));
                            continue;
                        }
                    };
                    if labels.matches(&object) && fields.matches(&object) {
                        let mut object =
                            object::with_resource_version(object, kv.mod_revision.get());
                        if let Some(api_version) = reads_as(&rt) {
                            crate::registry::events::show_as(&mut object, &api_version);
                        }
                        initial.push(match &mut shaped {
                            Some(shaped) => shaped.line("ADDED", &object),
                            None => event_line("ADDED", &object),
                        });
                    }
                }
                if send_initial {
                    let bookmark = json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": {
                        "resourceVersion": page.revision.get().to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}});
                    initial.push(event_line("BOOKMARK", &bookmark));
                }
                page.revision
            }
        };
        let subscription = match self.watch_cache.watch(&prefix, since).await {
            Ok(subscription) => subscription,
            Err(e @ flotilla_store::Error::Compacted { .. }) => {
                // A 200 with the error in the stream: the client relists.
                let line = error_line(&ApiError::from(e));
                return Ok(watch_response(Body::from_stream(
                    futures_util::stream::iter([Ok::<_, std::io::Error>(line)]),
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let feed = WatchFeed {
            initial: initial.into(),
            subscription,
            reads_as: reads_as(&rt),
            shaped,
            labels,
            fields,
            rt,
            bookmarks: bookmarks.then(|| {
                tokio::time::interval_at(
                    tokio::time::Instant::now() + self.bookmark_interval,
                    self.bookmark_interval,
                )
            }),
            deadline: Box::pin(tokio::time::sleep(timeout)),
            done: false,
        };
        let body = futures_util::stream::unfold(feed, |mut feed| async move {
            feed.next()
                .await
                .map(|line| (Ok::<_, std::io::Error>(line), feed))
        });
        Ok(with_warnings(
            watch_response(Body::from_stream(body)),
            &Unreadable::warnings(&unreadable),
        ))
    }
}

/// kube-apiserver's `--min-request-timeout`: a watch without `timeoutSeconds` lasts
/// between this and twice this.
pub(crate) const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1800);

/// How long a watch lasts: the client's `timeoutSeconds` if it gave one above 0, else
/// `min_request_timeout` × (1 + `draw`), `draw` in [0, 1) at random, as kube-apiserver
/// does: watches started together (a restart, a mass join) do not all end together, and
/// no watch outlives the server's bound when its client sets none.
fn lifetime(timeout_seconds: Option<u64>, min_request_timeout: Duration, draw: f64) -> Duration {
    match timeout_seconds {
        Some(seconds) if seconds > 0 => Duration::from_secs(seconds),
        _ => min_request_timeout.mul_f64(1.0 + draw.clamp(0.0, 1.0)),
    }
}

/// A number in [0, 1) at random.
fn draw() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    // A new `RandomState` has new random keys: hashing nothing with it draws 64 bits, of
    // which 53 make the fraction.
    let bits = RandomState::new().hash_one(()) >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// One client's watch: the initial events, then the store's changes as seen through the
/// selectors, BOOKMARKs on an interval, until the timeout.
pub(crate) struct WatchFeed {
    initial: std::collections::VecDeque<Bytes>,
    subscription: Subscription,
    /// The apiVersion custom resources are shown with (see `reads_as`).
    reads_as: Option<String>,
    /// Set when the client asked for Tables or metadata alone.
    shaped: Option<Shaped>,
    labels: LabelSelector,
    fields: FieldSelector,
    pub(crate) rt: Arc<ResourceType>,
    bookmarks: Option<tokio::time::Interval>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    done: bool,
}

impl WatchFeed {
    pub(crate) async fn next(&mut self) -> Option<Bytes> {
        if let Some(line) = self.initial.pop_front() {
            return Some(line);
        }
        loop {
            if self.done {
                return None;
            }
            let tick = async {
                match &mut self.bookmarks {
                    Some(interval) => {
                        interval.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = &mut self.deadline => return None,
                () = tick => {
                    // Only when nothing is pending for this watcher: a bookmark promises
                    // that every change up to its revision has been sent.
                    if let Some(revision) = self.subscription.progress() {
                        let bookmark = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(),
                            "metadata": {"resourceVersion": revision.get().to_string()}});
                        return Some(event_line("BOOKMARK", &bookmark));
                    }
                }
                item = self.subscription.next() => match item {
                    Some(Next::Change(change)) => {
                        if let Some(shaped) = &mut self.shaped {
                            if let Some((kind, side)) = selected(&change, &self.labels, &self.fields)
                                && let Some(object) = shaped.object(side, &change)
                            {
                                let mut object = object::with_resource_version(object.clone(), change.revision.get());
                                if let Some(api_version) = &self.reads_as {
                                    crate::registry::events::show_as(&mut object, api_version);
                                }
                                return Some(shaped.line(kind, &object));
                            }
                        } else if let Some(line) = watch_line(&change, &self.labels, &self.fields, self.reads_as.as_deref()) {
                            return Some(line);
                        }
                    }
                    Some(Next::Expired(reason)) => {
                        self.done = true;
                        return Some(error_line(&ApiError::expired(format!("too old resource version: {reason}"))));
                    }
                    None => return None,
                },
            }
        }
    }
}

pub(crate) fn event_line(kind: &str, object: &Value) -> Bytes {
    // `{"object":…,"type":…}`, as the map of the two would be written (keys in order).
    let mut line = Vec::with_capacity(256);
    line.extend_from_slice(b"{\"object\":");
    crate::http::json::write(&mut line, object);
    line.extend_from_slice(b",\"type\":");
    crate::http::json::write_str(&mut line, kind);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

pub(crate) fn error_line(error: &ApiError) -> Bytes {
    event_line("ERROR", &error.status())
}

/// Which object of a change a watcher's event shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The object before the change (a delete).
    Before,
    /// The object after it.
    After,
}

impl Side {
    /// That object, decoded.
    pub(crate) fn of(self, change: &Change) -> Option<&Value> {
        match self {
            Side::Before => change.previous(),
            Side::After => change.object(),
        }
    }
}

/// The event type a watcher with these selectors sees for a change, if any, and which
/// object it shows. Selectors that read only metadata (labels, `metadata.name`, …) are
/// matched against the objects' metadata, decoded without the rest.
pub(crate) fn selected(
    change: &Change,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<(&'static str, Side)> {
    let matches = |o: &&Value| labels.matches(o) && fields.matches(o);
    let (before, after) = if fields.reads_metadata_only() {
        (change.previous_metadata(), change.object_metadata())
    } else {
        (change.previous(), change.object())
    };
    let before = before.filter(matches);
    Some(match (change.kind, before, after) {
        (EventKind::Delete, Some(_), _) => ("DELETED", Side::Before),
        (EventKind::Delete, None, _) => return None,
        (EventKind::Put, before, Some(after)) => match (before.is_some(), matches(&after)) {
            (false, true) => ("ADDED", Side::After),
            (true, true) => ("MODIFIED", Side::After),
            (true, false) => ("DELETED", Side::After),
            (false, false) => return None,
        },
        (EventKind::Put, _, None) => return None,
    })
}

/// A watch whose events carry each object in a shape of its own.
pub(crate) enum Shaped {
    /// Table rows.
    Table(TableWatch),
    /// The metadata alone, as a `PartialObjectMetadata` of this `meta.k8s.io` version.
    Metadata(&'static str),
}

impl Shaped {
    /// The object of a change this watch shows: for metadata alone, the metadata decoded
    /// alone (once per change, for every such watcher).
    fn object<'c>(&self, side: Side, change: &'c Change) -> Option<&'c Value> {
        match (self, side) {
            (Shaped::Table(_), side) => side.of(change),
            (Shaped::Metadata(_), Side::Before) => change.previous_metadata(),
            (Shaped::Metadata(_), Side::After) => change.object_metadata(),
        }
    }

    fn line(&mut self, kind: &str, object: &Value) -> Bytes {
        match self {
            Shaped::Table(tables) => tables.line(kind, object),
            Shaped::Metadata(api_version) => event_line(kind, &table::partial(object, api_version)),
        }
    }
}

/// A watch that sends Tables (kubectl get -w): one row per event; only the first event
/// carries the column definitions.
pub(crate) struct TableWatch {
    pub(crate) rt: Arc<ResourceType>,
    include: String,
    columns_sent: bool,
}

impl TableWatch {
    pub(crate) fn line(&mut self, kind: &str, object: &Value) -> Bytes {
        let printer = self
            .rt
            .printer_columns
            .as_ref()
            .map_or(&Value::Null, |c| &*c.0);
        let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let mut table = table::table(
            &self.rt,
            printer,
            std::slice::from_ref(object),
            rv,
            &self.include,
        );
        if self.columns_sent
            && let Some(map) = table.as_object_mut()
        {
            map.remove("columnDefinitions");
        }
        self.columns_sent = true;
        event_line(kind, &table)
    }
}

/// The watch event for a change, as seen through the selectors: an object that stops
/// matching is DELETED for this watcher, one that starts matching is ADDED. A deleted
/// object is sent as it last was, with the deletion's resourceVersion.
pub(crate) fn watch_line(
    change: &Change,
    labels: &LabelSelector,
    fields: &FieldSelector,
    api_version: Option<&str>,
) -> Option<Bytes> {
    let render = |kind: &str, object: &Value| {
        let mut object = object::with_resource_version(object.clone(), change.revision.get());
        if let Some(api_version) = api_version {
            crate::registry::events::show_as(&mut object, api_version);
        }
        event_line(kind, &object)
    };
    let (kind, raw) = match (change.kind, &change.raw_previous) {
        (EventKind::Delete, Some((raw, _))) => ("DELETED", raw),
        (EventKind::Delete, None) => return None,
        (EventKind::Put, previous) => (
            if previous.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
            change.raw_object.as_ref()?,
        ),
    };
    if !(labels.is_empty() && fields.is_empty()) {
        let (selected_kind, side) = selected(change, labels, fields)?;
        // Seen through the selectors as every watcher sees it (the usual case: the object
        // matched before and after): the shared line below. Entering or leaving the
        // selection makes an event of this watcher's own.
        if selected_kind != kind {
            return side.of(change).map(|object| render(selected_kind, object));
        }
    }
    let decoded = || match change.kind {
        EventKind::Delete => change.previous(),
        EventKind::Put => change.object(),
    };
    // Stored through another version of a custom resource: this watcher's own rendering.
    if !object::has_api_version(raw, api_version) {
        return decoded().map(|object| render(kind, object));
    }
    // Every watcher without selectors shares one rendering, made from the stored bytes
    // (the objects are not decoded unless those bytes cannot be spliced). Bytes that cannot
    // be decoded make no event (an empty line, not sent).
    let line = change.line(|change| {
        if let Some(reason) = object::undecodable(raw) {
            Unreadable::new(&change.key, reason);
            return Bytes::new();
        }
        match object::with_resource_version_raw(raw, change.revision.get()) {
            Some(object) => {
                let mut line = Vec::with_capacity(object.len() + 32);
                line.extend_from_slice(format!("{{\"type\":\"{kind}\",\"object\":").as_bytes());
                line.extend_from_slice(&object);
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            }
            None => decoded().map_or_else(Bytes::new, |object| render(kind, object)),
        }
    });
    (!line.is_empty()).then_some(line)
}

pub(crate) fn watch_response(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

#[cfg(test)]
mod tests {
    use flotilla_store::{KeyValue, Revision, WatchEvent};

    use super::*;
    use crate::registry::resources::Registry;

    fn kv(labels: Value, image: &str, revision: u64) -> KeyValue {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web", "namespace": "shop", "labels": labels},
            "data": {"image": image}});
        KeyValue {
            key: Bytes::from_static(b"/core/configmaps/root/shop/web"),
            value: Bytes::from(object.to_string()),
            create_revision: Revision::new(1),
            mod_revision: Revision::new(revision),
        }
    }

    fn event(before: Value, after: Value) -> Change {
        Change::from_event(&WatchEvent {
            kind: EventKind::Put,
            kv: kv(after, "nginx:2", 3),
            prev_kv: Some(kv(before, "nginx:1", 2)),
        })
    }

    fn parsed(line: &Bytes) -> Value {
        serde_json::from_slice(line).unwrap()
    }

    #[test]
    fn a_watch_lasts_its_timeout_seconds_or_the_minimum_request_timeout_times_one_to_two() {
        let min = Duration::from_secs(1800);
        assert_eq!(lifetime(Some(5), min, 0.7), Duration::from_secs(5));
        // None or 0: drawn in [1800 s, 3600 s).
        assert_eq!(lifetime(None, min, 0.0), min);
        assert_eq!(lifetime(Some(0), min, 0.5), Duration::from_secs(2700));
        assert!(lifetime(None, min, 0.999_999) < 2 * min);
        // The draws the server makes spread across the range.
        let drawn: std::collections::BTreeSet<Duration> =
            (0..100).map(|_| lifetime(None, min, draw())).collect();
        assert!(
            drawn.iter().all(|d| (min..2 * min).contains(d)),
            "{drawn:?}"
        );
        assert!(
            drawn.len() > 50,
            "{} distinct lifetimes of 100",
            drawn.len()
        );
    }

    #[test]
    fn a_selected_watcher_shares_the_line_unless_the_change_moves_the_object_across_its_selection()
    {
        let rt = Registry::builtin().get("", "v1", "configmaps").unwrap();
        let (everything, none) = (
            LabelSelector::parse("").unwrap(),
            FieldSelector::parse("", &rt).unwrap(),
        );
        let team = LabelSelector::parse("team=a").unwrap();
        let by_name = FieldSelector::parse("metadata.name=web", &rt).unwrap();

        // Matched before and after: the very bytes every watcher gets.
        let change = event(json!({"team": "a"}), json!({"team": "a"}));
        let shared = watch_line(&change, &everything, &none, None).unwrap();
        let labelled = watch_line(&change, &team, &none, None).unwrap();
        let named = watch_line(&change, &everything, &by_name, None).unwrap();
        assert_eq!(labelled.as_ptr(), shared.as_ptr());
        assert_eq!(named.as_ptr(), shared.as_ptr());
        // Their selectors read the metadata alone: neither object was decoded whole.
        assert!(!change.decoded_whole());
        let line = parsed(&shared);
        assert_eq!(line["type"], "MODIFIED");
        assert_eq!(line["object"]["data"]["image"], "nginx:2");
        assert_eq!(line["object"]["metadata"]["resourceVersion"], "3");

        // Entering the selection is an ADDED of this watcher's own; leaving it a DELETED.
        let entering = event(json!({"team": "b"}), json!({"team": "a"}));
        let added = parsed(&watch_line(&entering, &team, &none, None).unwrap());
        assert_eq!(
            (
                added["type"].as_str(),
                added["object"]["metadata"]["resourceVersion"].as_str()
            ),
            (Some("ADDED"), Some("3"))
        );
        assert_eq!(
            parsed(&watch_line(&entering, &everything, &none, None).unwrap())["type"],
            "MODIFIED"
        );
        let leaving = event(json!({"team": "a"}), json!({"team": "b"}));
        let deleted = parsed(&watch_line(&leaving, &team, &none, None).unwrap());
        assert_eq!(deleted["type"], "DELETED");
        assert_eq!(deleted["object"]["data"]["image"], "nginx:2");
        // Never matched: nothing.
        let elsewhere = event(json!({"team": "b"}), json!({"team": "c"}));
        assert!(watch_line(&elsewhere, &team, &none, None).is_none());
        // A field selector beyond the metadata reads the whole objects.
        let pods = Registry::builtin().get("", "v1", "pods").unwrap();
        let by_phase = FieldSelector::parse("status.phase!=Running", &pods).unwrap();
        let change = event(json!({"team": "a"}), json!({"team": "a"}));
        let line = watch_line(&change, &everything, &by_phase, None).unwrap();
        assert_eq!(parsed(&line)["type"], "MODIFIED");
        assert!(change.decoded_whole());
    }
}
