//! Compaction: what stays readable, what fails, and the bounds of `compact` itself.

use flotilla_store::{Error, EventKind, KeyValue, ListOptions, ListPage, Revision, Store};

use crate::Harness;
use crate::support::{
    assert_quiet, b, err, fresh, keys, kv, list_all, next_event, next_events, paginate, rev,
    tombstone, watch,
};

/// Eight writes over keys `a`, `b`, `c`: updates, a delete, a re-create.
async fn write_history(s: &dyn Store) {
    let r1 = s.create(b"a", b("1")).await.unwrap();
    s.create(b"b", b("1")).await.unwrap();
    let r3 = s.update(b"a", b("2"), r1).await.unwrap();
    s.delete(b"b", None).await.unwrap();
    let r5 = s.create(b"c", b("1")).await.unwrap();
    s.update(b"a", b("3"), r3).await.unwrap();
    s.create(b"b", b("2")).await.unwrap();
    let r8 = s.update(b"c", b("2"), r5).await.unwrap();
    assert_eq!(r8, rev(8));
}

const KEYS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];

/// Everything a read at `at` can see: each key, a list, and the same list page by page.
#[derive(Debug, PartialEq)]
struct View {
    gets: Vec<Option<KeyValue>>,
    list: ListPage,
    pages: Vec<ListPage>,
}

async fn view(s: &dyn Store, at: Revision) -> View {
    let mut gets = Vec::new();
    for key in KEYS {
        gets.push(s.get(key, Some(at)).await.unwrap());
    }
    View {
        gets,
        list: list_all(s, b"", Some(at)).await,
        pages: paginate(s, b"", Some(at), 1).await,
    }
}

fn is_compacted(e: &Error, requested: u64, compacted: u64) -> bool {
    matches!(e, Error::Compacted { requested: r, compacted: c }
        if *r == rev(requested) && *c == rev(compacted))
}

async fn watch_err(s: &dyn Store, prefix: &[u8], since: u64) -> Error {
    match s.watch(prefix, rev(since)).await {
        Ok(_) => panic!("watch {prefix:?} since {since} started"),
        Err(e) => e,
    }
}

/// After `compact(C)`, reads below C fail with [`Error::Compacted`] and reads at C and
/// later give the same answers as before: the values superseded after C are kept.
pub async fn compaction_keeps_reads_at_and_after_the_compacted_revision<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    write_history(s).await;
    let mut before = Vec::new();
    for n in 0..=8 {
        before.push(view(s, rev(n)).await);
    }
    let latest = list_all(s, b"", None).await;
    s.compact(rev(5)).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), rev(5));
    assert_eq!(s.current_revision().await.unwrap(), rev(8));

    for n in 0..5 {
        for key in KEYS {
            let e = err(s.get(key, Some(rev(n))).await);
            assert!(is_compacted(&e, n, 5), "get {key:?} at {n}: {e:?}");
        }
        let options = ListOptions {
            revision: Some(rev(n)),
            ..ListOptions::default()
        };
        let e = err(s.list(b"", options).await);
        assert!(is_compacted(&e, n, 5), "list at {n}: {e:?}");
    }
    for n in 5..=8 {
        assert_eq!(view(s, rev(n)).await, before[n as usize], "reads at {n}");
    }
    assert_eq!(list_all(s, b"", None).await, latest);
    assert_eq!(s.count(b"").await.unwrap(), 3);
    // The value of `a` written at 3 and superseded at 6 is still the one seen at 5.
    assert_eq!(
        s.get(b"a", Some(rev(5))).await.unwrap(),
        Some(kv("a", "2", rev(1), rev(3)))
    );
}

/// After `compact(C)`, a watch from before C fails at once with [`Error::Compacted`]; a
/// watch from C or later yields the same events as before, previous values included.
pub async fn compaction_fails_watches_from_before_it<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    write_history(s).await;
    let recorded = next_events(&mut watch(s, b"", Revision::ZERO).await, 8).await;
    s.compact(rev(5)).await.unwrap();

    let e = watch_err(s, b"", 4).await;
    assert!(is_compacted(&e, 4, 5), "{e:?}");
    let e = watch_err(s, b"", 0).await;
    assert!(is_compacted(&e, 0, 5), "{e:?}");
    let e = watch_err(s, b"a", 3).await;
    assert!(is_compacted(&e, 3, 5), "{e:?}");

    let mut from_c = watch(s, b"", rev(5)).await;
    let events = next_events(&mut from_c, 3).await;
    assert_eq!(events, recorded[5..8]);
    assert_eq!(events[0].kv, kv("a", "3", rev(1), rev(6)));
    assert_eq!(events[0].prev_kv, Some(kv("a", "2", rev(1), rev(3))));
    assert_eq!(events[1].prev_kv, None);
    assert_eq!(events[2].prev_kv, Some(kv("c", "1", rev(5), rev(5))));
    let mut only_a = watch(s, b"a", rev(5)).await;
    assert_eq!(next_event(&mut only_a).await, recorded[5]);

    let r9 = s.create(b"d", b("1")).await.unwrap();
    assert_eq!(next_event(&mut from_c).await.kv, kv("d", "1", r9, r9));
    let mut from_head = watch(s, b"", rev(8)).await;
    assert_eq!(next_event(&mut from_head).await.kv, kv("d", "1", r9, r9));
    assert_quiet(&mut only_a).await;
}

/// `compact` ahead of the current revision fails with [`Error::FutureRevision`]; at or
/// below the compacted revision it does nothing; it never changes the current revision.
pub async fn compact_bounds_and_repeats<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let future = |e: &Error, requested: u64, current: u64| {
        matches!(e, Error::FutureRevision { requested: r, current: c }
            if *r == rev(requested) && *c == rev(current))
    };
    s.compact(Revision::ZERO).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), Revision::ZERO);
    let e = err(s.compact(rev(1)).await);
    assert!(future(&e, 1, 0), "{e:?}");

    for i in 0..6 {
        s.create(format!("k{i}").as_bytes(), b("v")).await.unwrap();
    }
    let e = err(s.compact(rev(7)).await);
    assert!(future(&e, 7, 6), "{e:?}");
    assert_eq!(s.compacted_revision().await.unwrap(), Revision::ZERO);

    s.compact(rev(3)).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), rev(3));
    s.compact(rev(2)).await.unwrap();
    s.compact(rev(3)).await.unwrap();
    s.compact(Revision::ZERO).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), rev(3));
    assert_eq!(s.current_revision().await.unwrap(), rev(6));
    assert_eq!(
        s.get(b"k0", Some(rev(3))).await.unwrap(),
        Some(kv("k0", "v", rev(1), rev(1)))
    );
    assert_eq!(s.get(b"k3", Some(rev(3))).await.unwrap(), None);
    let e = err(s.get(b"k0", Some(rev(2))).await);
    assert!(is_compacted(&e, 2, 3), "{e:?}");

    s.compact(rev(6)).await.unwrap();
    assert_eq!(s.compacted_revision().await.unwrap(), rev(6));
    assert_eq!(s.current_revision().await.unwrap(), rev(6));
    assert_eq!(list_all(s, b"", Some(rev(6))).await.kvs.len(), 6);
    let e = err(s.get(b"k5", Some(rev(5))).await);
    assert!(is_compacted(&e, 5, 6), "{e:?}");
    s.compact(rev(6)).await.unwrap();
    let e = err(s.compact(rev(7)).await);
    assert!(future(&e, 7, 6), "{e:?}");

    let mut stream = watch(s, b"", rev(6)).await;
    assert_quiet(&mut stream).await;
    let r7 = s.create(b"k6", b("v")).await.unwrap();
    assert_eq!(r7, rev(7));
    assert_eq!(next_event(&mut stream).await.kv, kv("k6", "v", r7, r7));
    assert_eq!(s.compacted_revision().await.unwrap(), rev(6));
    assert_eq!(s.current_revision().await.unwrap(), rev(7));
}

/// A key deleted at or before the compacted revision is gone for good (it can be created
/// again, from scratch); a key deleted after it is still readable before its delete.
pub async fn compaction_forgets_deleted_keys<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let d1 = s.create(b"d", b("1")).await.unwrap();
    let e2 = s.create(b"e", b("1")).await.unwrap();
    s.delete(b"d", None).await.unwrap();
    let f4 = s.create(b"f", b("1")).await.unwrap();
    let (f5, _) = s.delete(b"f", None).await.unwrap();
    let g6 = s.create(b"g", b("1")).await.unwrap();
    s.compact(rev(3)).await.unwrap();

    assert_eq!(s.get(b"d", Some(rev(3))).await.unwrap(), None);
    assert_eq!(s.get(b"d", None).await.unwrap(), None);
    assert_eq!(keys(&list_all(s, b"", Some(rev(3))).await), [b("e")]);
    assert_eq!(
        keys(&list_all(s, b"", Some(rev(4))).await),
        [b("e"), b("f")]
    );
    assert_eq!(keys(&list_all(s, b"", Some(rev(5))).await), [b("e")]);
    assert_eq!(
        s.get(b"f", Some(rev(4))).await.unwrap(),
        Some(kv("f", "1", f4, f4))
    );
    assert_eq!(s.count(b"").await.unwrap(), 2);

    let d7 = s.create(b"d", b("2")).await.unwrap();
    assert_eq!(s.get(b"d", None).await.unwrap(), Some(kv("d", "2", d7, d7)));
    let events = next_events(&mut watch(s, b"", rev(3)).await, 4).await;
    assert_eq!(events[0].kv, kv("f", "1", f4, f4));
    assert_eq!(events[1].kind, EventKind::Delete);
    assert_eq!(events[1].kv, tombstone(&kv("f", "1", f4, f4), f5));
    assert_eq!(events[1].prev_kv, Some(kv("f", "1", f4, f4)));
    assert_eq!(events[2].kv, kv("g", "1", g6, g6));
    assert_eq!(
        (events[3].kind, events[3].prev_kv.clone()),
        (EventKind::Put, None)
    );
    assert_eq!(events[3].kv, kv("d", "2", d7, d7));

    s.compact(d7).await.unwrap();
    assert_eq!(s.get(b"f", Some(d7)).await.unwrap(), None);
    assert_eq!(
        keys(&list_all(s, b"", None).await),
        [b("d"), b("e"), b("g")]
    );
    assert_eq!(s.get(b"e", None).await.unwrap(), Some(kv("e", "1", e2, e2)));
    assert_ne!(d1, d7);
    assert_eq!(s.count(b"").await.unwrap(), 3);
}
