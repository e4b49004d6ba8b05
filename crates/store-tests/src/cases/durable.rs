//! Restarting the store: a clean reopen, and `kill -9` of a process in the middle of
//! writing. Only for durable backends.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use flotilla_store::{Bytes, KeyValue, ListPage, Revision, Store, WatchEvent};

use crate::Harness;
use crate::support::{b, hex, kv, list_all, next_events, rev, runtime, unhex, watch};

/// The keys [`reopen_preserves_everything`] writes.
const REOPEN_KEYS: [&[u8]; 6] = [
    b"r/a",
    b"r/b",
    b"r/\x00\xff",
    b"r/\xff",
    b"r/gone",
    b"r/new",
];

/// Everything observable about a store's data.
#[derive(Debug, PartialEq)]
struct Snapshot {
    current: Revision,
    compacted: Revision,
    /// At each readable revision: a list of everything and a get of each key.
    reads: Vec<(Revision, ListPage, Vec<Option<KeyValue>>)>,
    /// The retained history, from a watch since the compacted revision.
    events: Vec<WatchEvent>,
}

async fn snapshot(s: &dyn Store) -> Snapshot {
    let current = s.current_revision().await.unwrap();
    let compacted = s.compacted_revision().await.unwrap();
    let mut reads = Vec::new();
    for n in compacted.get()..=current.get() {
        let at = Revision::new(n);
        let mut gets = Vec::new();
        for key in REOPEN_KEYS {
            gets.push(s.get(key, Some(at)).await.unwrap());
        }
        reads.push((at, list_all(s, b"", Some(at)).await, gets));
    }
    let mut stream = watch(s, b"", compacted).await;
    let events = next_events(&mut stream, (current.get() - compacted.get()) as usize).await;
    Snapshot {
        current,
        compacted,
        reads,
        events,
    }
}

/// Writes, then drops every handle and reopens the same location: every key and value
/// with its revisions, every readable past revision, the retained history, the current
/// and the compacted revision are as they were, and new writes continue at current + 1.
pub async fn reopen_preserves_everything<H: Harness>() {
    let h = H::new().await;
    let before = {
        let s = h.open().await;
        let a1 = s.create(b"r/a", b("1")).await.unwrap();
        s.create(b"r/b", b("1")).await.unwrap();
        s.create(b"r/\x00\xff", b(b"\xff\x00")).await.unwrap();
        let a2 = s.update(b"r/a", b("2"), a1).await.unwrap();
        s.create(b"r/gone", b("x")).await.unwrap();
        s.delete(b"r/gone", None).await.unwrap();
        s.create(b"r/\xff", Bytes::new()).await.unwrap();
        s.compact(a2).await.unwrap();
        let a3 = s.update(b"r/a", b("3"), a2).await.unwrap();
        s.delete(b"r/b", None).await.unwrap();
        s.create(b"r/b", b("2")).await.unwrap();
        assert_eq!(
            s.get(b"r/a", None).await.unwrap(),
            Some(kv("r/a", "3", a1, a3))
        );
        snapshot(&*s).await
    };
    assert_eq!((before.current, before.compacted), (rev(10), rev(4)));

    let s = h.open().await;
    assert_eq!(
        snapshot(&*s).await,
        before,
        "the store changed across a reopen"
    );
    let new = s.create(b"r/new", b("n")).await.unwrap();
    assert_eq!(new, before.current.next());
    let a = s.get(b"r/a", None).await.unwrap().expect("r/a");
    let a4 = s.update(b"r/a", b("4"), a.mod_revision).await.unwrap();
    assert_eq!(a4, new.next());
    drop(s);

    let s = h.open().await;
    assert_eq!(s.current_revision().await.unwrap(), a4);
    assert_eq!(s.compacted_revision().await.unwrap(), rev(4));
    assert_eq!(
        s.get(b"r/new", None).await.unwrap(),
        Some(kv("r/new", "n", new, new))
    );
    assert_eq!(
        s.get(b"r/a", None).await.unwrap(),
        Some(kv("r/a", "4", rev(1), a4))
    );
    let events = next_events(&mut watch(&*s, b"", before.current).await, 2).await;
    assert_eq!(events[0].kv, kv("r/new", "n", new, new));
    assert_eq!(events[1].prev_kv, Some(kv("r/a", "3", rev(1), rev(8))));
}

/// The environment variable that makes `kill9_child` run, holding the store's location.
const KILL9_ENV: &str = "FLOTILLA_STORE_TESTS_KILL9";
const KILL9_WRITERS: usize = 8;
const KILL9_ROUNDS: usize = 3;
/// How long the parent waits for a line from the child.
const CHILD_SILENCE: Duration = Duration::from_secs(120);
/// A bound on the child's work in case nobody kills it.
const CHILD_WRITES_PER_TASK: usize = 50_000;

/// The value of a key the child creates.
pub(crate) fn derived(key: &[u8]) -> Bytes {
    [b"value of ".as_slice(), key, b"\x00\xff"].concat().into()
}

fn counter_value(value: &[u8]) -> u64 {
    let bytes: [u8; 8] = value
        .try_into()
        .unwrap_or_else(|_| panic!("a counter value {value:?}"));
    u64::from_be_bytes(bytes)
}

/// One acknowledged write reported by the child.
#[derive(Debug)]
pub(crate) struct Ack {
    pub(crate) key: Bytes,
    pub(crate) revision: Revision,
    pub(crate) value: Bytes,
}

pub(crate) fn parse_ack(text: &str) -> Option<Ack> {
    let mut parts = text.split(' ');
    let ack = Ack {
        key: unhex(parts.next()?)?.into(),
        revision: Revision::new(parts.next()?.parse().ok()?),
        value: unhex(parts.next()?)?.into(),
    };
    parts.next().is_none().then_some(ack)
}

/// Runs the child writer until it has acknowledged `stop_after` writes, kills it with
/// SIGKILL, and returns every write it acknowledged (those still in the pipe included).
fn run_child(exe: &Path, test: &str, location: &str, stop_after: usize) -> Vec<Ack> {
    let mut child = Command::new(exe)
        .args([test, "--exact", "--ignored", "--nocapture"])
        .env(KILL9_ENV, location)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("cannot start the child process");
    let stdout = child.stdout.take().expect("the child's stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = Vec::new();
    let mut killed = false;
    loop {
        match rx.recv_timeout(CHILD_SILENCE) {
            Ok(line) => {
                let Some(text) = line.strip_prefix("ack ") else {
                    continue;
                };
                let ack = parse_ack(text).unwrap_or_else(|| panic!("a malformed line {line:?}"));
                acks.push(ack);
                if !killed && acks.len() >= stop_after {
                    child.kill().expect("cannot kill the child");
                    killed = true;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child printed nothing for {CHILD_SILENCE:?}");
            }
        }
    }
    let status = child.wait().expect("cannot wait for the child");
    reader.join().expect("the reader thread panicked");
    assert!(
        killed,
        "the child exited ({status}) after {} of {stop_after} acknowledged writes",
        acks.len()
    );
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "the child was not killed by SIGKILL: {status}"
        );
    }
    acks
}

/// Runs a child process (the test `child_test`, that is `kill9_child`) that writes from 8
/// tasks at once, kills it with SIGKILL after a random number of acknowledged writes, and
/// reopens the store, three times over: the store opens, every acknowledged create is
/// there with its value and revision, every counter holds at least its last acknowledged
/// value, no acknowledged revision is reused, and new writes are accepted.
pub async fn kill9_acknowledged_writes_survive<H: Harness>(child_test: &str) {
    let h = H::new().await;
    let exe = std::env::current_exe().expect("the path of the test binary");
    let mut created: BTreeMap<Bytes, (Revision, Bytes)> = BTreeMap::new();
    let mut counters: BTreeMap<Bytes, (u64, Revision)> = BTreeMap::new();
    // Every revision acknowledged by a child of this round must be above this one.
    let mut floor = Revision::ZERO;
    for round in 0..KILL9_ROUNDS {
        let stop_after = fastrand::usize(50..3000);
        let (exe, test, location) = (exe.clone(), child_test.to_owned(), h.location());
        let acks =
            tokio::task::spawn_blocking(move || run_child(&exe, &test, &location, stop_after))
                .await
                .expect("the child process could not be run");
        assert!(acks.len() >= stop_after);

        let mut highest = floor;
        let mut revisions = BTreeSet::new();
        for Ack {
            key,
            revision,
            value,
        } in acks
        {
            assert!(
                revision > floor,
                "round {round}: revision {revision} acknowledged again"
            );
            assert!(
                revisions.insert(revision),
                "round {round}: revision {revision} acknowledged twice"
            );
            highest = highest.max(revision);
            if key.starts_with(b"kill9/c/") {
                let entry = counters.entry(key.clone()).or_insert((0, Revision::ZERO));
                let count = counter_value(&value);
                assert!(
                    count > entry.0,
                    "round {round}: counter {key:?} went back to {count}"
                );
                *entry = (count, revision);
            } else {
                assert_eq!(value, derived(&key));
                assert!(
                    created.insert(key, (revision, value)).is_none(),
                    "a key created twice"
                );
            }
        }

        let s = h.open().await;
        let current = s.current_revision().await.unwrap();
        // A compaction the kill interrupted is still in force and readable at its revision.
        let compacted = s.compacted_revision().await.unwrap();
        assert!(
            compacted <= current,
            "round {round}: compacted past the head"
        );
        list_all(&*s, b"kill9/", Some(compacted)).await;
        assert!(
            current >= highest,
            "round {round}: current {current} is below acknowledged {highest}"
        );
        let stored: BTreeMap<Bytes, KeyValue> = list_all(&*s, b"kill9/k/", None)
            .await
            .kvs
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        for kv in stored.values() {
            assert_eq!(kv.value, derived(&kv.key), "round {round}: a damaged value");
            assert_eq!(kv.create_revision, kv.mod_revision);
        }
        for (key, (revision, value)) in &created {
            let kv = stored.get(key).unwrap_or_else(|| {
                panic!("round {round}: the acknowledged create of {key:?} at {revision} was lost")
            });
            assert_eq!(
                (kv.mod_revision, &kv.value),
                (*revision, value),
                "round {round}: {key:?}"
            );
        }
        assert!(counters.len() <= KILL9_WRITERS);
        for (key, (count, revision)) in &counters {
            let kv = s
                .get(key, None)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("counter {key:?} lost"));
            let stored = counter_value(&kv.value);
            assert!(
                stored >= *count,
                "round {round}: counter {key:?} holds {stored}, acknowledged {count}"
            );
            if stored == *count {
                assert_eq!(kv.mod_revision, *revision, "round {round}: counter {key:?}");
            }
        }
        let key = format!("kill9/parent/{round}");
        let after = s.create(key.as_bytes(), b("after")).await.unwrap();
        assert_eq!(
            after,
            current.next(),
            "round {round}: the first write after the crash"
        );
        assert_eq!(
            s.get(key.as_bytes(), None).await.unwrap(),
            Some(kv(&key, "after", after, after))
        );
        floor = after;
    }
}

/// Prints one line to the real standard output, flushed; exits if the parent is gone.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(1);
    }
}

/// One writer of the child: creates unique keys and counts up its counter key, reporting
/// each acknowledged write as `ack <hex key> <revision> <hex value>`.
async fn child_writer(store: Arc<dyn Store>, task: usize) {
    let pid = std::process::id();
    let counter = b(format!("kill9/c/{task}"));
    let current = store
        .get(&counter, None)
        .await
        .expect("cannot read the counter");
    let (mut count, mut expected) = match current {
        Some(kv) => (counter_value(&kv.value) + 1, Some(kv.mod_revision)),
        None => (1, None),
    };
    for i in 0..CHILD_WRITES_PER_TASK {
        let key = b(format!("kill9/k/{pid}/{task}/{i}"));
        let value = derived(&key);
        let revision = store.create(&key, value.clone()).await.expect("create");
        say(format_args!("ack {} {revision} {}", hex(&key), hex(&value)));

        let value = b(count.to_be_bytes());
        let written = match expected {
            None => store.create(&counter, value.clone()).await,
            Some(expected) => store.update(&counter, value.clone(), expected).await,
        };
        let revision = written.expect("cannot count up");
        say(format_args!(
            "ack {} {revision} {}",
            hex(&counter),
            hex(&value)
        ));
        expected = Some(revision);
        count += 1;
    }
}

/// Compacts the child's store to 100 revisions behind its head, every 20 ms.
async fn child_compactor(store: Arc<dyn Store>) {
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let head = store.current_revision().await.expect("current revision");
        if head.get() > 100 {
            store
                .compact(Revision::new(head.get() - 100))
                .await
                .expect("compact");
        }
    }
}

/// The child process of [`kill9_acknowledged_writes_survive`]: when `FLOTILLA_STORE_TESTS_KILL9`
/// holds a location, opens it and writes from 8 tasks until it is killed. Otherwise it
/// does nothing.
pub fn kill9_child<H: Harness>() {
    let Ok(location) = std::env::var(KILL9_ENV) else {
        eprintln!(
            "{KILL9_ENV} is not set: nothing to do (kill9_acknowledged_writes_survive runs this)"
        );
        return;
    };
    runtime().block_on(async move {
        let harness = H::at(&location);
        let store = harness.open().await;
        // A line of its own, whatever the test harness printed before.
        say(format_args!("\nkill9 child {} writing", std::process::id()));
        let writers: Vec<_> = (0..KILL9_WRITERS)
            .map(|task| tokio::spawn(child_writer(Arc::clone(&store), task)))
            .collect();
        // Compaction runs too, so that some kills land in the middle of one.
        tokio::spawn(child_compactor(Arc::clone(&store)));
        for writer in writers {
            writer.await.expect("a writer failed");
        }
    });
}
