//! Lists by prefix, pagination at one revision, counts, reads ahead of the store.

use flotilla_store::{Bytes, Error, KeyValue, ListOptions, Revision};

use crate::Harness;
use crate::support::{b, bytes_list, err, fresh, keys, kv, list_all, paginate, rev};

/// A list covers exactly the keys starting with the prefix: the key equal to the prefix
/// is in, the keys just below and just above the prefix's range are out; `after` starts
/// strictly after a key, wherever it is.
pub async fn list_respects_prefix_boundaries<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let all: [&[u8]; 10] = [
        b"app", b"app/", b"app/x", b"app/x/y", b"app0", b"apo\xff", b"apq", b"ap", b"b", b"app.",
    ];
    for key in all {
        s.create(key, b(key)).await.unwrap();
    }
    let cases: [(&[u8], &[&[u8]]); 9] = [
        (b"app/", &[b"app/", b"app/x", b"app/x/y"]),
        (
            b"app",
            &[b"app", b"app.", b"app/", b"app/x", b"app/x/y", b"app0"],
        ),
        (b"app/x", &[b"app/x", b"app/x/y"]),
        (
            b"ap",
            &[
                b"ap", b"apo\xff", b"app", b"app.", b"app/", b"app/x", b"app/x/y", b"app0", b"apq",
            ],
        ),
        (b"apo", &[b"apo\xff"]),
        (b"apo\xff", &[b"apo\xff"]),
        (b"c", &[]),
        (b"app/x/y/z", &[]),
        (
            b"a",
            &[
                b"ap", b"apo\xff", b"app", b"app.", b"app/", b"app/x", b"app/x/y", b"app0", b"apq",
            ],
        ),
    ];
    for (prefix, expected) in cases {
        let page = list_all(s, prefix, None).await;
        assert_eq!(keys(&page), bytes_list(expected), "list {prefix:?}");
        assert_eq!(page.next, None, "list {prefix:?}");
        assert_eq!(page.revision, rev(10));
        for kv in &page.kvs {
            assert_eq!(kv.value, kv.key, "value of {:?}", kv.key);
        }
        assert_eq!(
            s.count(prefix).await.unwrap(),
            expected.len() as u64,
            "count {prefix:?}"
        );
    }
    let mut sorted = bytes_list(&all);
    sorted.sort();
    assert_eq!(keys(&list_all(s, b"", None).await), sorted);
    assert_eq!(s.count(b"").await.unwrap(), 10);

    let list_after = |prefix: &'static [u8], after: &'static [u8]| async move {
        let options = ListOptions {
            after: Some(b(after)),
            ..ListOptions::default()
        };
        keys(&s.list(prefix, options).await.unwrap())
    };
    assert_eq!(
        list_after(b"app", b"app/x").await,
        bytes_list(&[b"app/x/y", b"app0"])
    );
    assert_eq!(
        list_after(b"app", b"app/w").await,
        bytes_list(&[b"app/x", b"app/x/y", b"app0"])
    );
    assert_eq!(
        list_after(b"app", b"a").await,
        bytes_list(&[b"app", b"app.", b"app/", b"app/x", b"app/x/y", b"app0"])
    );
    assert_eq!(list_after(b"app", b"app0").await, Vec::<Bytes>::new());
    assert_eq!(list_after(b"app", b"zzz").await, Vec::<Bytes>::new());
    assert_eq!(list_after(b"", b"app0").await, bytes_list(&[b"apq", b"b"]));
}

/// Pages read at one revision form a consistent snapshot, whatever is written between
/// pages (new keys, updates and deletes before, inside and after the listed range);
/// `next` is the page's last key exactly when keys remain.
pub async fn list_pagination_is_a_consistent_snapshot<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    s.create(b"p", b("outside")).await.unwrap();
    for i in 0..10 {
        s.create(format!("p/{i:02}").as_bytes(), b(format!("v{i}")))
            .await
            .unwrap();
    }
    s.create(b"q/0", b("outside")).await.unwrap();
    let snapshot = list_all(s, b"p/", None).await;
    let at = snapshot.revision;
    assert_eq!(at, rev(12));
    assert_eq!(snapshot.kvs.len(), 10);
    assert_eq!(snapshot.next, None);

    let page = |after: Option<&'static str>, limit: usize, revision: Option<Revision>| async move {
        s.list(
            b"p/",
            ListOptions {
                revision,
                limit,
                after: after.map(b),
            },
        )
        .await
        .unwrap()
    };
    let page1 = page(None, 3, None).await;
    assert_eq!(page1.revision, at);
    assert_eq!(page1.kvs, snapshot.kvs[0..3]);
    assert_eq!(page1.next, Some(b("p/02")));

    // Writes between pages, in and around the listed range.
    s.create(b"p/05a", b("new")).await.unwrap();
    let p07 = s.get(b"p/07", None).await.unwrap().unwrap();
    s.update(b"p/07", b("changed"), p07.mod_revision)
        .await
        .unwrap();
    s.delete(b"p/08", None).await.unwrap();
    s.delete(b"p/01", None).await.unwrap();
    s.create(b"p/10", b("new")).await.unwrap();
    let p00 = s.get(b"p/00", None).await.unwrap().unwrap();
    s.update(b"p/00", b("changed"), p00.mod_revision)
        .await
        .unwrap();

    let page2 = page(Some("p/02"), 3, Some(at)).await;
    assert_eq!(page2.revision, at);
    assert_eq!(page2.kvs, snapshot.kvs[3..6]);
    assert_eq!(page2.next, Some(b("p/05")));

    s.delete(b"p/06", None).await.unwrap();
    s.create(b"p/03a", b("new")).await.unwrap();
    s.delete(b"p/09", None).await.unwrap();

    let page3 = page(Some("p/05"), 3, Some(at)).await;
    assert_eq!(page3.kvs, snapshot.kvs[6..9]);
    assert_eq!(page3.next, Some(b("p/08")));
    let page4 = page(Some("p/08"), 3, Some(at)).await;
    assert_eq!(page4.kvs, snapshot.kvs[9..10]);
    assert_eq!(page4.revision, at);
    assert_eq!(page4.next, None);

    // The latest state is different indeed.
    let latest = list_all(s, b"p/", None).await;
    assert_eq!(
        keys(&latest),
        bytes_list(&[
            b"p/00", b"p/02", b"p/03", b"p/03a", b"p/04", b"p/05", b"p/05a", b"p/07", b"p/10"
        ])
    );
    assert_eq!(latest.revision, rev(21));

    // A limit that divides the snapshot: the last full page has no next.
    let pages = paginate(s, b"p/", Some(at), 5).await;
    assert_eq!(pages.len(), 2);
    assert_eq!(pages[0].next, Some(b("p/04")));
    assert_eq!(pages[1].next, None);
    let joined: Vec<KeyValue> = pages.iter().flat_map(|p| p.kvs.clone()).collect();
    assert_eq!(joined, snapshot.kvs);
    for limit in [1, 2, 3, 4, 7, 9, 10, 11, 1000] {
        let pages = paginate(s, b"p/", Some(at), limit).await;
        assert_eq!(pages.len(), 10usize.div_ceil(limit), "limit {limit}");
        let joined: Vec<KeyValue> = pages.iter().flat_map(|p| p.kvs.clone()).collect();
        assert_eq!(joined, snapshot.kvs, "limit {limit}");
    }
    // Paginating at the latest revision pins the first page's revision.
    let pages = paginate(s, b"p/", None, 2).await;
    assert!(pages.iter().all(|p| p.revision == rev(21)));
    let joined: Vec<KeyValue> = pages.iter().flat_map(|p| p.kvs.clone()).collect();
    assert_eq!(joined, latest.kvs);
    // What a controller reads before it watches: every key at the latest revision.
    let (every, at_latest) = s.list_all(b"p/").await.unwrap();
    assert_eq!(every, latest.kvs);
    assert_eq!(at_latest, rev(21));
}

/// A list without limit returns every key of the prefix in one page, and `count` counts
/// the keys of a prefix at the latest revision.
pub async fn list_without_limit_and_count<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let empty = list_all(s, b"", None).await;
    assert_eq!(
        (empty.kvs.len(), empty.revision, empty.next),
        (0, Revision::ZERO, None)
    );
    assert_eq!(s.count(b"").await.unwrap(), 0);
    let mut expected = Vec::new();
    for i in 0..60u32 {
        let key = format!("n/{i:03}");
        let r = s.create(key.as_bytes(), b(i.to_be_bytes())).await.unwrap();
        expected.push(kv(&key, i.to_be_bytes(), r, r));
    }
    for i in 0..40u32 {
        s.create(format!("m/{i:03}").as_bytes(), b("m"))
            .await
            .unwrap();
    }
    // Delete every third n/ key.
    for i in (0..60).step_by(3) {
        s.delete(format!("n/{i:03}").as_bytes(), None)
            .await
            .unwrap();
    }
    let expected: Vec<KeyValue> = expected
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, kv)| kv)
        .collect();
    let page = list_all(s, b"n/", None).await;
    assert_eq!(page.kvs, expected);
    assert_eq!(page.next, None);
    assert_eq!(page.revision, rev(120));
    assert_eq!(s.count(b"n/").await.unwrap(), 40);
    assert_eq!(s.count(b"m/").await.unwrap(), 40);
    assert_eq!(s.count(b"").await.unwrap(), 80);
    assert_eq!(s.count(b"n/05").await.unwrap(), 7);
    assert_eq!(s.count(b"o").await.unwrap(), 0);
    assert_eq!(list_all(s, b"", None).await.kvs.len(), 80);
    // Before the deletes, all sixty n/ keys were there.
    assert_eq!(list_all(s, b"n/", Some(rev(100))).await.kvs.len(), 60);
}

/// `get` and `list` at a revision the store has not reached fail with
/// [`Error::FutureRevision`], carrying the revision asked for and the current one.
pub async fn reads_ahead_of_current_revision_fail<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let at = |n: u64| ListOptions {
        revision: Some(rev(n)),
        ..ListOptions::default()
    };
    let future = |e: &Error, requested: u64, current: u64| {
        matches!(e, Error::FutureRevision { requested: r, current: c }
            if *r == rev(requested) && *c == rev(current))
    };
    let e = err(s.get(b"k", Some(rev(1))).await);
    assert!(future(&e, 1, 0), "{e:?}");
    let e = err(s.list(b"", at(1)).await);
    assert!(future(&e, 1, 0), "{e:?}");
    assert_eq!(s.get(b"k", Some(Revision::ZERO)).await.unwrap(), None);
    let page = s.list(b"", at(0)).await.unwrap();
    assert_eq!(
        (page.kvs.len(), page.revision, page.next),
        (0, Revision::ZERO, None)
    );

    for i in 0..3 {
        s.create(format!("k{i}").as_bytes(), b("v")).await.unwrap();
    }
    let e = err(s.get(b"k0", Some(rev(4))).await);
    assert!(future(&e, 4, 3), "{e:?}");
    let e = err(s.list(b"k", at(100)).await);
    assert!(future(&e, 100, 3), "{e:?}");
    let e = err(s.get(b"k0", Some(rev(u64::MAX))).await);
    assert!(future(&e, u64::MAX, 3), "{e:?}");
    assert_eq!(
        s.get(b"k0", Some(rev(3))).await.unwrap(),
        Some(kv("k0", "v", rev(1), rev(1)))
    );
    assert_eq!(s.list(b"k", at(3)).await.unwrap().kvs.len(), 3);
    assert_eq!(s.list(b"k", at(2)).await.unwrap().kvs.len(), 2);
    assert_eq!(s.current_revision().await.unwrap(), rev(3));
}
