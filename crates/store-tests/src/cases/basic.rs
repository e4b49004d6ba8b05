//! Single-key reads and writes: revisions, preconditions, errors, binary data, the past.

use flotilla_store::{Bytes, Error, Revision};

use crate::Harness;
use crate::support::{b, bytes_list, err, fresh, keys, kv, list_all, paginate, rev};

/// Create, get, update, delete: every successful write takes exactly the next revision and
/// reads see each write with its create and mod revisions.
pub async fn put_get_update_delete_roundtrip<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    assert_eq!(s.current_revision().await.unwrap(), Revision::ZERO);
    assert_eq!(s.compacted_revision().await.unwrap(), Revision::ZERO);
    assert_eq!(s.get(b"k", None).await.unwrap(), None);

    let r1 = s.create(b"k", b("v1")).await.unwrap();
    assert_eq!(r1, rev(1));
    assert_eq!(s.current_revision().await.unwrap(), rev(1));
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v1", r1, r1))
    );

    let r2 = s.update(b"k", b("v2"), r1).await.unwrap();
    assert_eq!(r2, rev(2));
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v2", r1, r2))
    );

    let r3 = s.create(b"other", b("o")).await.unwrap();
    assert_eq!(r3, rev(3));

    let r4 = s.update(b"k", b("v3"), r2).await.unwrap();
    assert_eq!(r4, rev(4));
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v3", r1, r4))
    );

    let (r5, deleted) = s.delete(b"k", Some(r4)).await.unwrap();
    assert_eq!(r5, rev(5));
    assert_eq!(deleted, kv("k", "v3", r1, r4));
    assert_eq!(s.get(b"k", None).await.unwrap(), None);
    assert_eq!(
        s.get(b"other", None).await.unwrap(),
        Some(kv("other", "o", r3, r3))
    );
    assert_eq!(s.current_revision().await.unwrap(), rev(5));
    assert_eq!(s.count(b"").await.unwrap(), 1);
}

/// Writes that fail (an existing key, a stale or missing precondition, an empty key) take
/// no revision and change nothing; the next successful write takes current + 1.
pub async fn failed_writes_consume_no_revision<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"a", b("1")).await.unwrap();
    assert_eq!(r1, rev(1));

    assert!(matches!(
        err(s.create(b"a", b("2")).await),
        Error::AlreadyExists { .. }
    ));
    assert!(matches!(
        err(s.update(b"a", b("2"), rev(7)).await),
        Error::Conflict { .. }
    ));
    assert!(matches!(
        err(s.update(b"zz", b("2"), r1).await),
        Error::NotFound { .. }
    ));
    assert!(matches!(
        err(s.delete(b"a", Some(rev(7))).await),
        Error::Conflict { .. }
    ));
    assert!(matches!(
        err(s.delete(b"zz", None).await),
        Error::NotFound { .. }
    ));
    assert!(matches!(
        err(s.delete(b"zz", Some(r1)).await),
        Error::NotFound { .. }
    ));
    assert!(matches!(
        err(s.create(b"", b("2")).await),
        Error::InvalidArgument(_)
    ));
    assert_eq!(s.current_revision().await.unwrap(), r1);
    assert_eq!(s.get(b"a", None).await.unwrap(), Some(kv("a", "1", r1, r1)));
    assert_eq!(s.get(b"zz", None).await.unwrap(), None);

    assert_eq!(s.create(b"b", b("1")).await.unwrap(), rev(2));
    assert!(matches!(
        err(s.update(b"b", b("2"), r1).await),
        Error::Conflict { .. }
    ));
    assert_eq!(s.update(b"a", b("2"), r1).await.unwrap(), rev(3));
    assert_eq!(s.current_revision().await.unwrap(), rev(3));
}

/// Every keyed operation rejects the empty key with [`Error::InvalidArgument`].
pub async fn empty_key_is_rejected<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("v")).await.unwrap();
    assert!(matches!(
        err(s.get(b"", None).await),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        err(s.create(b"", b("v")).await),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        err(s.update(b"", b("v"), r1).await),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        err(s.delete(b"", None).await),
        Error::InvalidArgument(_)
    ));
    assert!(matches!(
        err(s.delete(b"", Some(r1)).await),
        Error::InvalidArgument(_)
    ));
    assert_eq!(s.current_revision().await.unwrap(), r1);
    // The empty prefix is not a key: it lists and counts everything.
    assert_eq!(keys(&list_all(s, b"", None).await), bytes_list(&[b"k"]));
    assert_eq!(s.count(b"").await.unwrap(), 1);
}

/// Keys and values are bytes: NUL, 0xff and invalid UTF-8 round-trip, sort bytewise, and
/// prefixes made of 0xff (whose range has no upper bound) list exactly their keys.
pub async fn binary_keys_and_values_roundtrip<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let all: [&[u8]; 10] = [
        b"\x00",
        b"\x00\xff",
        b"\xff",
        b"\xff\x00",
        b"\xff\xff",
        b"\xff\xff\xff",
        b"\xfe\xff",
        b"a\x00b",
        b"a\xffb",
        b"\xc3\x28",
    ];
    let value_of = |key: &[u8]| -> Bytes { [key, b"\x00\xff\x80", key].concat().into() };
    for key in all {
        let r = s.create(key, value_of(key)).await.unwrap();
        assert_eq!(
            s.get(key, None).await.unwrap(),
            Some(kv(key, value_of(key), r, r))
        );
    }
    let every_byte: Bytes = (0..=255u8).collect::<Vec<u8>>().into();
    let r = s.create(b"\x01empty", Bytes::new()).await.unwrap();
    assert_eq!(
        s.get(b"\x01empty", None).await.unwrap(),
        Some(kv("\x01empty", "", r, r))
    );
    let r2 = s.update(b"\x01empty", every_byte.clone(), r).await.unwrap();
    assert_eq!(
        s.get(b"\x01empty", None).await.unwrap(),
        Some(kv("\x01empty", &every_byte, r, r2))
    );

    let mut sorted: Vec<Bytes> = bytes_list(&all);
    sorted.push(b("\x01empty"));
    sorted.sort();
    let page = list_all(s, b"", None).await;
    assert_eq!(keys(&page), sorted);
    assert_eq!(page.next, None);

    let ff = bytes_list(&[b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\xff"]);
    assert_eq!(keys(&list_all(s, b"\xff", None).await), ff);
    assert_eq!(s.count(b"\xff").await.unwrap(), 4);
    assert_eq!(
        keys(&list_all(s, b"\xff\xff", None).await),
        bytes_list(&[b"\xff\xff", b"\xff\xff\xff"])
    );
    assert_eq!(
        keys(&list_all(s, b"\xff\xff\xff\xff", None).await),
        Vec::<Bytes>::new()
    );
    assert_eq!(
        keys(&list_all(s, b"\x00", None).await),
        bytes_list(&[b"\x00", b"\x00\xff"])
    );
    assert_eq!(
        keys(&list_all(s, b"a\xff", None).await),
        bytes_list(&[b"a\xffb"])
    );
    assert_eq!(
        keys(&list_all(s, b"\xfe", None).await),
        bytes_list(&[b"\xfe\xff"])
    );
    for page in paginate(s, b"\xff", None, 1).await {
        assert_eq!(page.kvs.len(), 1);
    }
    let paged: Vec<Bytes> = paginate(s, b"\xff", None, 1)
        .await
        .iter()
        .flat_map(|page| page.kvs.iter().map(|kv| kv.key.clone()))
        .collect();
    assert_eq!(paged, ff);

    let (_, deleted) = s.delete(b"\xff\xff", None).await.unwrap();
    assert_eq!(deleted.value, value_of(b"\xff\xff"));
    assert_eq!(s.get(b"\xff\xff", None).await.unwrap(), None);
    assert_eq!(s.count(b"\xff").await.unwrap(), 3);
}

/// `create` of an existing key fails with [`Error::AlreadyExists`] naming the key, and
/// leaves the key as it was.
pub async fn create_on_existing_key_fails<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    let e = err(s.create(b"k", b("v2")).await);
    assert!(
        matches!(&e, Error::AlreadyExists { key } if key == "k"),
        "{e:?}"
    );
    let r2 = s.update(b"k", b("v3"), r1).await.unwrap();
    let e = err(s.create(b"k", b("v4")).await);
    assert!(
        matches!(&e, Error::AlreadyExists { key } if key == "k"),
        "{e:?}"
    );
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v3", r1, r2))
    );
    assert_eq!(s.current_revision().await.unwrap(), r2);
}

/// `update` with a stale expected revision fails with [`Error::Conflict`] carrying the
/// expected revision and the key as it is now.
pub async fn update_conflict_carries_current_value<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    let r2 = s.update(b"k", b("v2"), r1).await.unwrap();
    s.create(b"other", b("o")).await.unwrap();

    let e = err(s.update(b"k", b("v3"), r1).await);
    assert!(
        matches!(&e, Error::Conflict { expected, current }
            if *expected == r1 && **current == kv("k", "v2", r1, r2)),
        "{e:?}"
    );
    // An expected revision ahead of the key's is just as wrong.
    let ahead = rev(r2.get() + 10);
    let e = err(s.update(b"k", b("v3"), ahead).await);
    assert!(
        matches!(&e, Error::Conflict { expected, current }
            if *expected == ahead && **current == kv("k", "v2", r1, r2)),
        "{e:?}"
    );
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v2", r1, r2))
    );
    let r4 = s.update(b"k", b("v3"), r2).await.unwrap();
    assert_eq!(r4, rev(4));
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v3", r1, r4))
    );
}

/// `update` of a key that never existed, or was deleted, fails with [`Error::NotFound`].
pub async fn update_of_missing_key_is_not_found<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let e = err(s.update(b"nope", b("v"), Revision::ZERO).await);
    assert!(
        matches!(&e, Error::NotFound { key } if key == "nope"),
        "{e:?}"
    );
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    s.delete(b"k", Some(r1)).await.unwrap();
    let e = err(s.update(b"k", b("v2"), r1).await);
    assert!(matches!(&e, Error::NotFound { key } if key == "k"), "{e:?}");
    assert_eq!(s.get(b"k", None).await.unwrap(), None);
    assert_eq!(s.current_revision().await.unwrap(), rev(2));
}

/// `delete` with a stale expected revision fails with [`Error::Conflict`] carrying the key
/// as it is now, and deletes nothing.
pub async fn delete_conflict_carries_current_value<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    let r2 = s.update(b"k", b("v2"), r1).await.unwrap();
    let e = err(s.delete(b"k", Some(r1)).await);
    assert!(
        matches!(&e, Error::Conflict { expected, current }
            if *expected == r1 && **current == kv("k", "v2", r1, r2)),
        "{e:?}"
    );
    assert_eq!(
        s.get(b"k", None).await.unwrap(),
        Some(kv("k", "v2", r1, r2))
    );
    assert_eq!(s.current_revision().await.unwrap(), r2);
    let (r3, deleted) = s.delete(b"k", Some(r2)).await.unwrap();
    assert_eq!(r3, rev(3));
    assert_eq!(deleted, kv("k", "v2", r1, r2));
}

/// `delete` of a key that never existed, or is already deleted, fails with
/// [`Error::NotFound`], with or without an expected revision.
pub async fn delete_of_missing_key_is_not_found<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let e = err(s.delete(b"nope", None).await);
    assert!(
        matches!(&e, Error::NotFound { key } if key == "nope"),
        "{e:?}"
    );
    let e = err(s.delete(b"nope", Some(Revision::ZERO)).await);
    assert!(
        matches!(&e, Error::NotFound { key } if key == "nope"),
        "{e:?}"
    );
    let r1 = s.create(b"k", b("v")).await.unwrap();
    s.delete(b"k", None).await.unwrap();
    let e = err(s.delete(b"k", None).await);
    assert!(matches!(&e, Error::NotFound { key } if key == "k"), "{e:?}");
    let e = err(s.delete(b"k", Some(r1)).await);
    assert!(matches!(&e, Error::NotFound { key } if key == "k"), "{e:?}");
    assert_eq!(s.current_revision().await.unwrap(), rev(2));
}

/// `delete` without an expected revision deletes whatever the key holds and returns it.
pub async fn unconditional_delete<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("v1")).await.unwrap();
    let r2 = s.update(b"k", b("v2"), r1).await.unwrap();
    let r3 = s.update(b"k", b("v3"), r2).await.unwrap();
    let (r4, deleted) = s.delete(b"k", None).await.unwrap();
    assert_eq!(r4, rev(4));
    assert_eq!(deleted, kv("k", "v3", r1, r3));
    assert_eq!(s.get(b"k", None).await.unwrap(), None);
    assert_eq!(s.count(b"k").await.unwrap(), 0);
}

/// A key created again after a delete starts over: its create revision is the new one.
pub async fn recreate_after_delete_gets_new_create_revision<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"k", b("a")).await.unwrap();
    let r2 = s.update(b"k", b("b"), r1).await.unwrap();
    let (r3, _) = s.delete(b"k", Some(r2)).await.unwrap();
    let r4 = s.create(b"k", b("c")).await.unwrap();
    assert_eq!((r3, r4), (rev(3), rev(4)));
    assert_eq!(s.get(b"k", None).await.unwrap(), Some(kv("k", "c", r4, r4)));
    let r5 = s.update(b"k", b("d"), r4).await.unwrap();
    assert_eq!(s.get(b"k", None).await.unwrap(), Some(kv("k", "d", r4, r5)));
    // The first life is still readable in the past.
    assert_eq!(
        s.get(b"k", Some(r2)).await.unwrap(),
        Some(kv("k", "b", r1, r2))
    );
    let (_, deleted) = s.delete(b"k", None).await.unwrap();
    assert_eq!(deleted, kv("k", "d", r4, r5));
}

/// `get` at a past revision sees the key as it was then: absent before its creation and
/// after its deletion, each value with its revisions.
pub async fn get_at_past_revisions<H: Harness>() {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let r1 = s.create(b"x", b("x1")).await.unwrap();
    let r2 = s.create(b"k", b("v1")).await.unwrap();
    let r3 = s.update(b"x", b("x2"), r1).await.unwrap();
    let r4 = s.update(b"k", b("v2"), r2).await.unwrap();
    let (r5, _) = s.delete(b"k", Some(r4)).await.unwrap();
    let r6 = s.create(b"k", b("v3")).await.unwrap();
    assert_eq!(r6, rev(6));
    let k_at = [
        None,
        None,
        Some(kv("k", "v1", r2, r2)),
        Some(kv("k", "v1", r2, r2)),
        Some(kv("k", "v2", r2, r4)),
        None,
        Some(kv("k", "v3", r6, r6)),
    ];
    for (n, expected) in k_at.iter().enumerate() {
        let at = rev(n as u64);
        assert_eq!(&s.get(b"k", Some(at)).await.unwrap(), expected, "k at {at}");
    }
    let x_at = [
        None,
        Some(kv("x", "x1", r1, r1)),
        Some(kv("x", "x1", r1, r1)),
        Some(kv("x", "x2", r1, r3)),
    ];
    for n in 0..=6 {
        let expected = x_at[n.min(3)].clone();
        let at = rev(n as u64);
        assert_eq!(s.get(b"x", Some(at)).await.unwrap(), expected, "x at {at}");
    }
    assert_eq!(s.get(b"k", None).await.unwrap(), k_at[6]);
    assert_eq!(s.get(b"k", Some(r5)).await.unwrap(), None);
    assert_eq!(s.get(b"never", Some(r3)).await.unwrap(), None);
}
