//! Watches: which events, in which order, with which fields.

use flotilla_store::{EventKind, KeyValue, Revision, WatchEvent};

use crate::Harness;
use crate::support::{assert_quiet, b, fresh, kv, next_event, next_events, rev, tombstone, watch};

fn put(kv: KeyValue, prev_kv: Option<KeyValue>) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Put,
        kv,
        prev_kv,
    }
}

fn delete(deleted: KeyValue, at: Revision) -> WatchEvent {
    WatchEvent {
        kind: EventKind::Delete,
        kv: tombstone(&deleted, at),
        prev_kv: Some(deleted),
    }
}

/// A watch from revision N yields exactly the events after N, in order and without gaps,
/// for every N from 0 to the current revision, and then the writes that follow.
pub async fn watch_from_revision_delivers_exactly_later_events<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"w/a", b("1")).await.unwrap();
    let r2 = s.create(b"w/b", b("1")).await.unwrap();
    let r3 = s.update(b"w/a", b("2"), r1).await.unwrap();
    let (r4, _) = s.delete(b"w/b", None).await.unwrap();
    let r5 = s.create(b"w/c", b("1")).await.unwrap();
    let r6 = s.update(b"w/c", b("2"), r5).await.unwrap();
    let r7 = s.create(b"w/b", b("2")).await.unwrap();
    let (r8, _) = s.delete(b"w/a", Some(r3)).await.unwrap();
    assert_eq!(r8, rev(8));
    let expected = [
        put(kv("w/a", "1", r1, r1), None),
        put(kv("w/b", "1", r2, r2), None),
        put(kv("w/a", "2", r1, r3), Some(kv("w/a", "1", r1, r1))),
        delete(kv("w/b", "1", r2, r2), r4),
        put(kv("w/c", "1", r5, r5), None),
        put(kv("w/c", "2", r5, r6), Some(kv("w/c", "1", r5, r5))),
        put(kv("w/b", "2", r7, r7), None),
        delete(kv("w/a", "2", r1, r3), r8),
    ];
    let mut streams = Vec::new();
    for n in 0..=8u64 {
        let mut stream = watch(s, b"w/", rev(n)).await;
        let events = next_events(&mut stream, 8 - n as usize).await;
        assert_eq!(events, expected[n as usize..], "watch since {n}");
        streams.push(stream);
    }
    let r9 = s.create(b"w/z", b("end")).await.unwrap();
    for (n, stream) in streams.iter_mut().enumerate() {
        let event = next_event(stream).await;
        assert_eq!(
            event,
            put(kv("w/z", "end", r9, r9), None),
            "watch since {n}"
        );
    }
}

/// Events carry the right kind, key-value and previous key-value for a create, an update,
/// a conditional and an unconditional delete, and a re-create; live and replayed from the
/// history alike.
pub async fn watch_events_carry_kind_prev_kv_and_revisions<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let mut live = watch(s, b"k", Revision::ZERO).await;
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    let j1 = s.create(b"j", b("x")).await.unwrap();
    let r2 = s.update(b"k", b("v2"), r1).await.unwrap();
    let (r3, _) = s.delete(b"k", Some(r2)).await.unwrap();
    let r4 = s.create(b"k", b("v3")).await.unwrap();
    let (r5, _) = s.delete(b"k", None).await.unwrap();
    let expected = vec![
        put(kv("k", "v1", r1, r1), None),
        put(kv("k", "v2", r1, r2), Some(kv("k", "v1", r1, r1))),
        delete(kv("k", "v2", r1, r2), r3),
        put(kv("k", "v3", r4, r4), None),
        delete(kv("k", "v3", r4, r4), r5),
    ];
    let events = next_events(&mut live, 5).await;
    assert_eq!(events, expected);
    let revisions: Vec<Revision> = events.iter().map(WatchEvent::revision).collect();
    assert_eq!(revisions, [r1, r2, r3, r4, r5]);
    assert_eq!(events[2].kv.value.len(), 0);

    let mut replayed = watch(s, b"k", Revision::ZERO).await;
    assert_eq!(next_events(&mut replayed, 5).await, expected);
    let mut other = watch(s, b"j", Revision::ZERO).await;
    assert_eq!(
        next_event(&mut other).await,
        put(kv("j", "x", j1, j1), None)
    );
    assert_quiet(&mut live).await;
    assert_quiet(&mut replayed).await;
}

/// A watch from the current revision yields nothing until the next write, then every
/// following write.
pub async fn watch_from_current_revision_sees_only_new_writes<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    for i in 0..5 {
        s.create(format!("c/{i}").as_bytes(), b("v")).await.unwrap();
    }
    let current = s.current_revision().await.unwrap();
    assert_eq!(current, rev(5));
    let mut all = watch(s, b"", current).await;
    let mut prefixed = watch(s, b"c/", current).await;
    assert_quiet(&mut all).await;
    let r6 = s.create(b"c/5", b("new")).await.unwrap();
    let r7 = s.update(b"c/0", b("changed"), rev(1)).await.unwrap();
    let expected = vec![
        put(kv("c/5", "new", r6, r6), None),
        put(
            kv("c/0", "changed", rev(1), r7),
            Some(kv("c/0", "v", rev(1), rev(1))),
        ),
    ];
    assert_eq!(next_events(&mut all, 2).await, expected);
    assert_eq!(next_events(&mut prefixed, 2).await, expected);
    assert_quiet(&mut all).await;
}

/// A watch yields the changes of the keys starting with its prefix (the key equal to the
/// prefix included) and nothing else, live and from the history, binary prefixes too.
pub async fn watch_filters_by_prefix<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let mut live = watch(s, b"a/", Revision::ZERO).await;
    let mut binary = watch(s, b"\xff", Revision::ZERO).await;
    let r1 = s.create(b"a/1", b("1")).await.unwrap();
    s.create(b"b/1", b("x")).await.unwrap();
    s.create(b"a", b("x")).await.unwrap();
    let r4 = s.create(b"a/2", b("2")).await.unwrap();
    s.create(b"ab", b("x")).await.unwrap();
    let r6 = s.create(b"a/", b("3")).await.unwrap();
    s.delete(b"b/1", None).await.unwrap();
    s.create(b"a0", b("x")).await.unwrap();
    let r9 = s.update(b"a/1", b("4"), r1).await.unwrap();
    let r10 = s.create(b"a/z", b("5")).await.unwrap();
    let expected = vec![
        put(kv("a/1", "1", r1, r1), None),
        put(kv("a/2", "2", r4, r4), None),
        put(kv("a/", "3", r6, r6), None),
        put(kv("a/1", "4", r1, r9), Some(kv("a/1", "1", r1, r1))),
        put(kv("a/z", "5", r10, r10), None),
    ];
    assert_eq!(next_events(&mut live, 5).await, expected);
    let mut replayed = watch(s, b"a/", Revision::ZERO).await;
    assert_eq!(next_events(&mut replayed, 5).await, expected);

    let f1 = s.create(b"\xff\x01", b("1")).await.unwrap();
    s.create(b"\xfe", b("x")).await.unwrap();
    s.create(b"\xfe\xff", b("x")).await.unwrap();
    let f2 = s.create(b"\xff", b("2")).await.unwrap();
    let f3 = s.create(b"\xff\xff", b("3")).await.unwrap();
    let expected = vec![
        put(kv(b"\xff\x01", "1", f1, f1), None),
        put(kv(b"\xff", "2", f2, f2), None),
        put(kv(b"\xff\xff", "3", f3, f3), None),
    ];
    assert_eq!(next_events(&mut binary, 3).await, expected);
    assert_quiet(&mut binary).await;
    assert_quiet(&mut live).await;
    assert_quiet(&mut replayed).await;
}

/// A watch of everything from revision 0 on an empty store waits for the first write and
/// yields every write from revision 1 on.
pub async fn watch_from_zero_on_fresh_store<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let mut stream = watch(s, b"", Revision::ZERO).await;
    assert_quiet(&mut stream).await;
    let r1 = s.create(b"first", b("1")).await.unwrap();
    assert_eq!(r1, rev(1));
    assert_eq!(
        next_event(&mut stream).await,
        put(kv("first", "1", r1, r1), None)
    );
    let r2 = s.create(b"second", b("2")).await.unwrap();
    assert_eq!(
        next_event(&mut stream).await,
        put(kv("second", "2", r2, r2), None)
    );
    let mut replayed = watch(s, b"", Revision::ZERO).await;
    let expected = vec![
        put(kv("first", "1", r1, r1), None),
        put(kv("second", "2", r2, r2), None),
    ];
    assert_eq!(next_events(&mut replayed, 2).await, expected);
    assert_quiet(&mut stream).await;
}

/// The changes of one prefix in a range of revisions are each change of that prefix in the
/// range, in order, with its previous value, and then the end: also when the prefix is
/// quiet until long after the range, and when the range is empty. A range from before the
/// compacted revision fails at once.
pub async fn changes_of_a_range_end_at_its_last_revision<H: Harness>() {
    use futures_util::StreamExt;

    async fn all(
        s: &dyn flotilla_store::Store,
        prefix: &[u8],
        after: u64,
        up_to: u64,
    ) -> Vec<WatchEvent> {
        let stream = s
            .changes(prefix, rev(after), rev(up_to))
            .await
            .unwrap_or_else(|e| panic!("changes of {prefix:?} in ({after}, {up_to}]: {e}"));
        tokio::time::timeout(crate::support::WAIT, stream.collect::<Vec<_>>())
            .await
            .unwrap_or_else(|_| panic!("changes of {prefix:?} in ({after}, {up_to}] did not end"))
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("changes of {prefix:?} in ({after}, {up_to}]: {e}"))
    }

    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"a/1", b("1")).await.unwrap();
    s.create(b"b/1", b("x")).await.unwrap();
    let r3 = s.update(b"a/1", b("2"), r1).await.unwrap();
    let r4 = s.create(b"a/2", b("1")).await.unwrap();
    s.create(b"ab", b("x")).await.unwrap();
    let (r6, _) = s.delete(b"a/2", None).await.unwrap();
    for n in 0..20 {
        s.create(format!("b/{n}x").as_bytes(), b("x"))
            .await
            .unwrap();
    }
    let head = s.current_revision().await.unwrap().get();
    assert_eq!(head, 26);

    assert_eq!(
        all(s, b"a/", 0, head).await,
        vec![
            put(kv("a/1", "1", r1, r1), None),
            put(kv("a/1", "2", r1, r3), Some(kv("a/1", "1", r1, r1))),
            put(kv("a/2", "1", r4, r4), None),
            delete(kv("a/2", "1", r4, r4), r6),
        ]
    );
    // Bounded on both sides.
    assert_eq!(
        all(s, b"a/", 1, 4).await,
        vec![
            put(kv("a/1", "2", r1, r3), Some(kv("a/1", "1", r1, r1))),
            put(kv("a/2", "1", r4, r4), None),
        ]
    );
    // A prefix with no change in the range, one with none at all, and an empty range.
    assert_eq!(all(s, b"a/", 6, head).await, vec![]);
    assert_eq!(all(s, b"q/", 0, head).await, vec![]);
    assert_eq!(all(s, b"a/", 4, 4).await, vec![]);
    // Every key: each change in the range.
    assert_eq!(all(s, b"", 2, 5).await.len(), 3);

    s.compact(rev(4)).await.unwrap();
    match s.changes(b"a/", rev(2), rev(head)).await {
        Ok(_) => panic!("changes from before the compacted revision started"),
        Err(e) => assert!(
            matches!(e, flotilla_store::Error::Compacted { requested, compacted }
                if requested == rev(2) && compacted == rev(4)),
            "{e:?}"
        ),
    }
    assert_eq!(all(s, b"a/", 4, head).await.len(), 1);
}
