//! Concurrent writers and watchers that fall behind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use flotilla_store::{Bytes, Error, EventKind, Revision, Store};

use crate::Harness;
use crate::support::{b, fresh, next_event, watch};

/// One acknowledged write: its revision, key and value.
type Ack = (Revision, Bytes, Bytes);

/// Waits for the writer tasks and checks that each one's revisions strictly increase.
async fn join_writers(tasks: Vec<tokio::task::JoinHandle<Vec<Ack>>>) -> BTreeMap<Revision, Ack> {
    let mut acks = BTreeMap::new();
    for task in tasks {
        let mine = task.await.expect("a writer task panicked");
        assert!(
            mine.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "one task's revisions are not increasing"
        );
        for ack in mine {
            let revision = ack.0;
            assert!(
                acks.insert(revision, ack).is_none(),
                "revision {revision} acknowledged twice"
            );
        }
    }
    acks
}

/// A watcher that reads nothing while far more writes than the event bus holds happen
/// (lagging behind it) still gets every event exactly once, in order, from the history.
pub async fn slow_watcher_receives_every_event_in_order<H: Harness>() {
    const TASKS: usize = 4;
    const PER_TASK: usize = 1250;
    let f = fresh::<H>().await;
    let s = &f.store;
    let mut stream = watch(&**s, b"slow/", Revision::ZERO).await;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = Arc::clone(s);
        tasks.push(tokio::spawn(async move {
            let mut acks = Vec::with_capacity(PER_TASK);
            for i in 0..PER_TASK {
                let key = b(format!("slow/{t}/{i:05}"));
                let value = b(format!("{t}:{i}"));
                let revision = store.create(&key, value.clone()).await.unwrap();
                acks.push((revision, key, value));
            }
            acks
        }));
    }
    let acks = join_writers(tasks).await;
    let total = (TASKS * PER_TASK) as u64;
    assert_eq!(
        acks.keys().copied().collect::<Vec<_>>(),
        (1..=total).map(Revision::new).collect::<Vec<_>>()
    );
    for n in 1..=total {
        let event = next_event(&mut stream).await;
        let (revision, key, value) = &acks[&Revision::new(n)];
        assert_eq!(event.revision(), *revision, "event {n} out of order");
        assert_eq!((&event.kv.key, &event.kv.value), (key, value), "event {n}");
        assert_eq!(
            (event.kind, event.kv.create_revision),
            (EventKind::Put, *revision)
        );
        assert_eq!(event.prev_kv, None);
    }
    let end = s.create(b"slow/end", b("end")).await.unwrap();
    assert_eq!(next_event(&mut stream).await.revision(), end);
}

/// Many tasks creating keys and compare-and-swapping shared keys at once, retrying on
/// conflicts, with a watcher started before: every acknowledged write has its own
/// revision, the revisions fill the range exactly, and the watch yields each write once,
/// with the revision its writer got back.
pub async fn concurrent_writers_get_distinct_gap_free_revisions<H: Harness>() {
    const TASKS: usize = 16;
    const WRITES: usize = 200;
    const SHARED: usize = 4;
    let f = fresh::<H>().await;
    let s = &f.store;
    // The latest acknowledged version of each shared key.
    let mut latest: BTreeMap<Bytes, (Revision, Bytes)> = BTreeMap::new();
    for j in 0..SHARED {
        let key = b(format!("cw/shared/{j}"));
        let revision = s.create(&key, b("initial")).await.unwrap();
        latest.insert(key, (revision, b("initial")));
    }
    let start = s.current_revision().await.unwrap();
    let mut stream = watch(&**s, b"cw/", start).await;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = Arc::clone(s);
        tasks.push(tokio::spawn(async move {
            let mut acks = Vec::with_capacity(WRITES);
            for i in 0..WRITES {
                let value = b(format!("{t}/{i}"));
                if i % 2 == 0 {
                    let key = b(format!("cw/t{t}/{i:03}"));
                    let revision = store.create(&key, value.clone()).await.unwrap();
                    acks.push((revision, key, value));
                } else {
                    let key = b(format!("cw/shared/{}", (t + i) % SHARED));
                    let revision = cas_update(&*store, &key, value.clone()).await;
                    acks.push((revision, key, value));
                }
            }
            acks
        }));
    }
    let acks = join_writers(tasks).await;
    let end = s.current_revision().await.unwrap();
    let total = (TASKS * WRITES) as u64;
    assert_eq!(
        end.get() - start.get(),
        total,
        "writes without an acknowledgement"
    );
    let expected: BTreeSet<Revision> = (start.get() + 1..=end.get()).map(Revision::new).collect();
    assert_eq!(acks.keys().copied().collect::<BTreeSet<_>>(), expected);

    for n in start.get() + 1..=end.get() {
        let event = next_event(&mut stream).await;
        assert_eq!(
            event.revision(),
            Revision::new(n),
            "the watch is out of order or has a gap"
        );
        let (_, key, value) = &acks[&event.revision()];
        assert_eq!((&event.kv.key, &event.kv.value), (key, value), "event {n}");
        assert_eq!(event.kind, EventKind::Put);
        if key.starts_with(b"cw/shared/") {
            let prev = event.prev_kv.as_ref().expect("an update without prev_kv");
            let (prev_revision, prev_value) = &latest[key];
            assert_eq!(
                (&prev.mod_revision, &prev.value),
                (prev_revision, prev_value),
                "prev_kv of {n}"
            );
            assert_eq!(prev.create_revision, event.kv.create_revision);
            latest.insert(key.clone(), (event.revision(), value.clone()));
        } else {
            assert_eq!(event.prev_kv, None);
            assert_eq!(event.kv.create_revision, event.revision());
        }
    }
    for (key, (revision, value)) in latest {
        let kv = s
            .get(&key, None)
            .await
            .unwrap()
            .expect("a shared key vanished");
        assert_eq!((kv.mod_revision, kv.value), (revision, value));
    }
    assert_eq!(s.count(b"cw/t").await.unwrap(), total / 2);
}

/// Updates `key` to `value` by compare-and-swap, retrying with the value a conflict
/// reports until it wins.
pub(crate) async fn cas_update(store: &dyn Store, key: &[u8], value: Bytes) -> Revision {
    let mut expected = store
        .get(key, None)
        .await
        .unwrap()
        .expect("the shared key")
        .mod_revision;
    loop {
        match store.update(key, value.clone(), expected).await {
            Ok(revision) => return revision,
            Err(Error::Conflict {
                expected: e,
                current,
            }) => {
                assert_eq!(e, expected);
                assert_eq!(current.key, key);
                assert!(
                    current.mod_revision > expected,
                    "a conflict with an older value"
                );
                expected = current.mod_revision;
            }
            Err(e) => panic!("update {key:?}: {e}"),
        }
    }
}
