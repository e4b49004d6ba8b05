//! Small helpers shared by the cases.

use std::sync::Arc;
use std::time::Duration;

use flotilla_store::{
    Bytes, Error, KeyValue, ListOptions, ListPage, Revision, Store, WatchEvent, WatchStream,
};
use futures_util::StreamExt;

use crate::Harness;

/// How long a case waits for an event that must come.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// How long a case waits to be reasonably sure that an event does not come.
pub(crate) const QUIET: Duration = Duration::from_millis(200);

/// A store opened on a fresh location. The store is dropped before the location.
pub(crate) struct Fixture<H> {
    pub(crate) store: Arc<dyn Store>,
    _harness: H,
}

/// A fresh, empty store.
pub(crate) async fn fresh<H: Harness>() -> Fixture<H> {
    let harness = H::new().await;
    let store = harness.open().await;
    Fixture {
        store,
        _harness: harness,
    }
}

/// The runtime of the cases that are plain `#[test]`s.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("cannot build a tokio runtime")
}

pub(crate) fn b(bytes: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(bytes.as_ref())
}

pub(crate) fn rev(n: u64) -> Revision {
    Revision::new(n)
}

/// A key-value with its create and mod revisions.
pub(crate) fn kv(
    key: impl AsRef<[u8]>,
    value: impl AsRef<[u8]>,
    create: Revision,
    modified: Revision,
) -> KeyValue {
    KeyValue {
        key: b(key),
        value: b(value),
        create_revision: create,
        mod_revision: modified,
    }
}

/// The `kv` of a delete event: an empty value and the delete's revision.
pub(crate) fn tombstone(deleted: &KeyValue, at: Revision) -> KeyValue {
    KeyValue {
        key: deleted.key.clone(),
        value: Bytes::new(),
        create_revision: deleted.create_revision,
        mod_revision: at,
    }
}

/// One page without limit, at `revision` (latest if `None`).
pub(crate) async fn list_all(
    store: &dyn Store,
    prefix: &[u8],
    revision: Option<Revision>,
) -> ListPage {
    store
        .list(
            prefix,
            ListOptions {
                revision,
                ..ListOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("list {prefix:?} at {revision:?}: {e}"))
}

/// The keys of `page`.
pub(crate) fn keys(page: &ListPage) -> Vec<Bytes> {
    page.kvs.iter().map(|kv| kv.key.clone()).collect()
}

pub(crate) fn bytes_list(items: &[&[u8]]) -> Vec<Bytes> {
    items.iter().map(b).collect()
}

/// The next event of a watch, which must come.
pub(crate) async fn next_event(stream: &mut WatchStream) -> WatchEvent {
    match tokio::time::timeout(WAIT, stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("the watch failed: {e}"),
        Ok(None) => panic!("the watch ended"),
        Err(_) => panic!("no watch event within {WAIT:?}"),
    }
}

/// The next `n` events of a watch, which must come.
pub(crate) async fn next_events(stream: &mut WatchStream, n: usize) -> Vec<WatchEvent> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next_event(stream).await);
    }
    events
}

/// The next `n` events of a watch, which must all come within `wait`.
pub(crate) async fn next_events_within(
    stream: &mut WatchStream,
    n: usize,
    wait: Duration,
) -> Vec<WatchEvent> {
    match tokio::time::timeout(wait, next_events(stream, n)).await {
        Ok(events) => events,
        Err(_) => panic!("{n} watch events did not come within {wait:?}"),
    }
}

/// Asserts that the watch yields nothing for a while.
pub(crate) async fn assert_quiet(stream: &mut WatchStream) {
    if let Ok(item) = tokio::time::timeout(QUIET, stream.next()).await {
        panic!("the watch yielded {item:?} where nothing was due");
    }
}

/// A watch, which must start.
pub(crate) async fn watch(store: &dyn Store, prefix: &[u8], since: Revision) -> WatchStream {
    store
        .watch(prefix, since)
        .await
        .unwrap_or_else(|e| panic!("watch {prefix:?} since {since}: {e}"))
}

/// The error of a result that must have failed.
pub(crate) fn err<T: std::fmt::Debug>(result: flotilla_store::Result<T>) -> Error {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => e,
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Every page of a list with `limit`, following `next` at the first page's revision.
pub(crate) async fn paginate(
    store: &dyn Store,
    prefix: &[u8],
    revision: Option<Revision>,
    limit: usize,
) -> Vec<ListPage> {
    try_paginate(store, prefix, revision, limit)
        .await
        .unwrap_or_else(|e| panic!("list {prefix:?} at {revision:?} by {limit}: {e}"))
}

/// Every page of a list with `limit`, following `next` at the first page's revision; the
/// store's error, if a page fails. Pages that break the list contract panic.
pub(crate) async fn try_paginate(
    store: &dyn Store,
    prefix: &[u8],
    revision: Option<Revision>,
    limit: usize,
) -> Result<Vec<ListPage>, Error> {
    let mut pages: Vec<ListPage> = Vec::new();
    let mut options = ListOptions {
        revision,
        limit,
        after: None,
    };
    loop {
        let page = store.list(prefix, options.clone()).await?;
        if let Some(first) = pages.first() {
            assert_eq!(
                page.revision, first.revision,
                "a page of one list moved revision"
            );
        }
        assert!(
            limit == 0 || page.kvs.len() <= limit,
            "a page over the limit: {page:?}"
        );
        let next = page.next.clone();
        if let Some(next) = &next {
            let last = page.kvs.last().map(|kv| &kv.key);
            assert_eq!(last, Some(next), "next is not the page's last key");
            assert!(
                options.after.as_ref().is_none_or(|after| next > after),
                "next does not advance: the list would not end"
            );
        }
        options = ListOptions {
            revision: Some(page.revision),
            limit,
            after: next.clone(),
        };
        pages.push(page);
        if next.is_none() {
            return Ok(pages);
        }
    }
}
