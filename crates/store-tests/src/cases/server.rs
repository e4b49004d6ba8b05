//! Stores served by a server process (PostgreSQL, etcd): the server killed with SIGKILL
//! and restarted under a writing store, and writers in several processes at once.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flotilla_store::{Bytes, Error, EventKind, Revision, Store, WatchEvent, WatchStream};

use crate::cases::concurrency::cas_update;
use crate::cases::durable::{Ack, derived, parse_ack, say};
use crate::support::{b, hex, kv, list_all, next_event, runtime, watch};
use crate::{Harness, ServerHarness};

/// How long a store may take to answer again once its server is back.
const RECOVERY: Duration = Duration::from_secs(60);

/// Retries `write` while the store is unavailable (its server restarting), up to
/// [`RECOVERY`].
async fn until_available<T, F, Fut>(mut write: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = flotilla_store::Result<T>>,
{
    let deadline = Instant::now() + RECOVERY;
    loop {
        match write().await {
            Ok(value) => return value,
            Err(Error::Unavailable { .. } | Error::Closed) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the store did not recover within {RECOVERY:?}: {e}"),
        }
    }
}

/// Reads a watch until it yields `until`, checking that its revisions are consecutive
/// from `after`; the events in order.
async fn follow(stream: &mut WatchStream, after: Revision, until: Revision) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    let mut last = after;
    while last < until {
        let event = next_event(stream).await;
        assert_eq!(
            event.revision(),
            last.next(),
            "the watch skipped or repeated a revision"
        );
        last = event.revision();
        events.push(event);
    }
    events
}

/// Writes from 8 tasks until the database server is killed with SIGKILL after a random
/// number of acknowledged writes, restarts it, twice: the same store handle answers
/// again by itself; a store opened anew finds every acknowledged write with its revision;
/// the next write takes the next revision; a watch opened before the crashes resumes and
/// yields every change, gap-free, the acknowledged ones with their values.
pub async fn server_kill9_acknowledged_writes_survive<H: ServerHarness>() {
    const WRITERS: usize = 8;
    let h = H::new_server().await;
    let store = h.open().await;
    let start = store.current_revision().await.unwrap();
    let mut stream = watch(&*store, b"srv/", start).await;
    let mut last = start;
    let mut acked: BTreeMap<Revision, (Bytes, Bytes)> = BTreeMap::new();
    for round in 0..2 {
        let stop_after = fastrand::usize(50..400);
        let count = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (store, count) = (Arc::clone(&store), Arc::clone(&count));
                tokio::spawn(async move {
                    let mut acks = Vec::new();
                    for i in 0..100_000 {
                        let key = b(format!("srv/{round}/{t}/{i:06}"));
                        match store.create(&key, derived(&key)).await {
                            Ok(revision) => {
                                acks.push((revision, key));
                                count.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(Error::Unavailable { .. } | Error::Closed) => break,
                            Err(e) => panic!("a write failed otherwise than unavailable: {e}"),
                        }
                    }
                    acks
                })
            })
            .collect();
        let deadline = Instant::now() + RECOVERY;
        while count.load(Ordering::Relaxed) < stop_after {
            assert!(Instant::now() < deadline, "the writers made no progress");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        h.kill_server().await;
        for writer in writers {
            for (revision, key) in writer.await.expect("a writer panicked") {
                let value = derived(&key);
                assert!(
                    acked.insert(revision, (key, value)).is_none(),
                    "revision {revision} acknowledged twice"
                );
            }
        }
        h.restart_server().await;

        // The old handle answers again, without being reopened.
        let key = b(format!("srv/after/{round}"));
        let after = until_available(|| store.create(&key, b("after"))).await;
        acked.insert(after, (key, b("after")));

        // A store opened anew sees every acknowledged write.
        let fresh = h.open().await;
        let current = fresh.current_revision().await.unwrap();
        assert!(current >= after);
        let stored: BTreeMap<Bytes, _> = list_all(&*fresh, b"srv/", None)
            .await
            .kvs
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        for (revision, (key, value)) in &acked {
            let found = stored.get(key).unwrap_or_else(|| {
                panic!("round {round}: the acknowledged write of {key:?} at {revision} was lost")
            });
            assert_eq!(
                (found.mod_revision, &found.value),
                (*revision, value),
                "round {round}: {key:?}"
            );
        }
        let next = b(format!("srv/next/{round}"));
        let revision = fresh.create(&next, b("n")).await.unwrap();
        assert_eq!(revision, current.next(), "the first write after reopening");
        assert_eq!(
            fresh.get(&next, None).await.unwrap(),
            Some(kv(&next, "n", revision, revision))
        );
        acked.insert(revision, (next, b("n")));

        // The watch opened before the crash resumes, and misses nothing.
        for event in follow(&mut stream, last, revision).await {
            assert_eq!(event.kind, EventKind::Put);
            if let Some((key, value)) = acked.get(&event.revision()) {
                assert_eq!((&event.kv.key, &event.kv.value), (key, value));
            } else {
                // Committed, but its reply was lost in the crash.
                assert_eq!(event.kv.value, derived(&event.kv.key));
            }
        }
        last = revision;
    }
}

/// The environment variable that makes `writers_child` run, holding the store's location.
const WRITERS_ENV: &str = "FLOTILLA_STORE_TESTS_WRITERS";
const PROCESSES: usize = 3;
const TASKS_PER_PROCESS: usize = 6;
const WRITES_PER_TASK: usize = 60;
const SHARED: usize = 4;

/// Three child processes (the test `child_test`, that is `writers_child`) and this one
/// write at once, creating keys and compare-and-swapping shared keys: every write is
/// acknowledged once, the revisions fill the range exactly, and a watch of this process
/// started before yields every process's writes in revision order without a gap, each
/// update with the previous value its writer replaced.
pub async fn writers_in_several_processes<H: ServerHarness>(child_test: &str) {
    let h = H::new().await;
    let s = h.open().await;
    let mut latest: BTreeMap<Bytes, (Revision, Bytes)> = BTreeMap::new();
    for j in 0..SHARED {
        let key = b(format!("mp/shared/{j}"));
        let revision = s.create(&key, b("initial")).await.unwrap();
        latest.insert(key, (revision, b("initial")));
    }
    let start = s.current_revision().await.unwrap();
    let mut stream = watch(&*s, b"mp/", start).await;
    let exe = std::env::current_exe().expect("the path of the test binary");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let (exe, test, location) = (exe.clone(), child_test.to_owned(), h.location());
            tokio::task::spawn_blocking(move || {
                let mut child = Command::new(exe)
                    .args([&test, "--exact", "--ignored", "--nocapture"])
                    .env(WRITERS_ENV, location)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("cannot start a writer process");
                let stdout = child.stdout.take().expect("the child's stdout");
                let acks: Vec<Ack> = BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .filter_map(|line| line.strip_prefix("ack ").and_then(parse_ack))
                    .collect();
                let status = child.wait().expect("cannot wait for a writer process");
                assert!(status.success(), "a writer process failed: {status}");
                acks
            })
        })
        .collect();
    // This process writes too.
    let mine = tokio::spawn(process_writes(Arc::clone(&s), usize::MAX));
    let mut acks: BTreeMap<Revision, (Bytes, Bytes)> = BTreeMap::new();
    for child in children {
        let child_acks = child.await.expect("a writer process could not be run");
        assert_eq!(child_acks.len(), TASKS_PER_PROCESS * WRITES_PER_TASK);
        for Ack {
            key,
            revision,
            value,
        } in child_acks
        {
            assert!(
                acks.insert(revision, (key, value)).is_none(),
                "revision {revision} acknowledged twice"
            );
        }
    }
    for (revision, key, value) in mine.await.expect("this process's writers panicked") {
        assert!(
            acks.insert(revision, (key, value)).is_none(),
            "revision {revision} acknowledged twice"
        );
    }
    let end = s.current_revision().await.unwrap();
    let total = ((PROCESSES + 1) * TASKS_PER_PROCESS * WRITES_PER_TASK) as u64;
    assert_eq!(
        end.get() - start.get(),
        total,
        "writes without an acknowledgement"
    );
    assert_eq!(
        acks.keys().copied().collect::<Vec<_>>(),
        (start.get() + 1..=end.get())
            .map(Revision::new)
            .collect::<Vec<_>>()
    );
    for event in follow(&mut stream, start, end).await {
        let (key, value) = &acks[&event.revision()];
        assert_eq!((&event.kv.key, &event.kv.value), (key, value));
        if key.starts_with(b"mp/shared/") {
            let prev = event.prev_kv.as_ref().expect("an update without prev_kv");
            let (prev_revision, prev_value) = &latest[key];
            assert_eq!(
                (&prev.mod_revision, &prev.value),
                (prev_revision, prev_value)
            );
            latest.insert(key.clone(), (event.revision(), value.clone()));
        } else {
            assert_eq!(event.prev_kv, None);
        }
    }
}

/// One process's writers: creates and compare-and-swaps of the shared keys; every write
/// acknowledged, as (revision, key, value).
async fn process_writes(store: Arc<dyn Store>, report: usize) -> Vec<(Revision, Bytes, Bytes)> {
    let pid = std::process::id();
    let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
        .map(|t| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let mut acks = Vec::with_capacity(WRITES_PER_TASK);
                for i in 0..WRITES_PER_TASK {
                    let value = b(format!("{pid}/{t}/{i}"));
                    let (key, revision) = if i % 2 == 0 {
                        let key = b(format!("mp/{pid}/{t}/{i:03}"));
                        let revision = store.create(&key, value.clone()).await.unwrap();
                        (key, revision)
                    } else {
                        let key = b(format!("mp/shared/{}", (t + i) % SHARED));
                        let revision = cas_update(&*store, &key, value.clone()).await;
                        (key, revision)
                    };
                    if report != usize::MAX {
                        say(format_args!("ack {} {revision} {}", hex(&key), hex(&value)));
                    }
                    acks.push((revision, key, value));
                }
                acks
            })
        })
        .collect();
    let mut acks = Vec::new();
    for task in tasks {
        acks.extend(task.await.expect("a writer task panicked"));
    }
    acks
}

/// The child process of [`writers_in_several_processes`]: when
/// `FLOTILLA_STORE_TESTS_WRITERS` holds a location, opens it and writes its share.
/// Otherwise it does nothing.
pub fn writers_child<H: Harness>() {
    let Ok(location) = std::env::var(WRITERS_ENV) else {
        eprintln!(
            "{WRITERS_ENV} is not set: nothing to do (writers_in_several_processes runs this)"
        );
        return;
    };
    runtime().block_on(async move {
        let harness = H::at(&location);
        let store = harness.open().await;
        say(format_args!(
            "\nwriters child {} writing",
            std::process::id()
        ));
        process_writes(store, 0).await;
    });
}
