//! Random operation sequences checked against a model: a map per revision.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_store::{Bytes, Error, EventKind, KeyValue, ListPage, Result, Revision, WatchEvent};
use futures_util::StreamExt;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::Harness;
use crate::support::{b, fresh, list_all, next_events_within, runtime, try_paginate, watch};

/// A small key space: keys that are prefixes of others, and keys that are not UTF-8.
const KEYS: [&[u8]; 6] = [b"a", b"a/1", b"a/2", b"b", b"\xff\x00", b"\xff\xfe\x01"];
const PREFIXES: [&[u8]; 7] = [b"", b"a", b"a/", b"a/1", b"b", b"\xff", b"\xff\xfe"];

/// How many random sequences a run checks.
const CASES: u32 = 48;
/// How long the events due to a watch may take to come; short, because a failing case is
/// run again many times while it is shrunk.
const WAIT: Duration = Duration::from_secs(5);
/// How long shrinking a failing case may take.
const MAX_SHRINK_TIME_MS: u32 = 60_000;

/// The expected revision of a conditional write: the key's `mod_revision`, or a wrong one.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Right,
    Wrong(u64),
}

/// One operation; numbers choosing a revision are reduced modulo `current + 2` when run,
/// so that they cover compacted, readable and future revisions.
#[derive(Clone, Debug)]
enum Op {
    Create {
        key: usize,
        value: Vec<u8>,
    },
    Update {
        key: usize,
        value: Vec<u8>,
        expected: Expect,
    },
    Delete {
        key: usize,
        expected: Option<Expect>,
    },
    Get {
        key: usize,
    },
    GetAt {
        key: usize,
        at: u64,
    },
    List {
        prefix: usize,
        limit: usize,
        at: Option<u64>,
    },
    Count {
        prefix: usize,
    },
    Compact {
        at: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let prefix = 0..PREFIXES.len();
    let value = vec(any::<u8>(), 0..4);
    let expect = prop_oneof![3 => Just(Expect::Right), 1 => any::<u64>().prop_map(Expect::Wrong)];
    prop_oneof![
        4 => (key.clone(), value.clone()).prop_map(|(key, value)| Op::Create { key, value }),
        4 => (key.clone(), value, expect.clone())
            .prop_map(|(key, value, expected)| Op::Update { key, value, expected }),
        3 => (key.clone(), proptest::option::of(expect))
            .prop_map(|(key, expected)| Op::Delete { key, expected }),
        1 => key.clone().prop_map(|key| Op::Get { key }),
        2 => (key, any::<u64>()).prop_map(|(key, at)| Op::GetAt { key, at }),
        2 => (prefix.clone(), 0..4usize, proptest::option::of(any::<u64>()))
            .prop_map(|(prefix, limit, at)| Op::List { prefix, limit, at }),
        1 => prefix.prop_map(|prefix| Op::Count { prefix }),
        1 => any::<u64>().prop_map(|at| Op::Compact { at }),
    ]
}

/// A store error, comparable.
#[derive(Debug, PartialEq)]
enum Fail {
    AlreadyExists(Bytes),
    NotFound(Bytes),
    Conflict(Revision, KeyValue),
    Compacted(Revision, Revision),
    FutureRevision(Revision, Revision),
    InvalidArgument,
    Other(String),
}

fn fail(e: Error) -> Fail {
    match e {
        Error::AlreadyExists { key } => Fail::AlreadyExists(key),
        Error::NotFound { key } => Fail::NotFound(key),
        Error::Conflict { expected, current } => Fail::Conflict(expected, *current),
        Error::Compacted {
            requested,
            compacted,
        } => Fail::Compacted(requested, compacted),
        Error::FutureRevision { requested, current } => Fail::FutureRevision(requested, current),
        Error::InvalidArgument(_) => Fail::InvalidArgument,
        other => Fail::Other(other.to_string()),
    }
}

type State = BTreeMap<Bytes, KeyValue>;

/// The store as the trait describes it: the whole state at every revision.
struct Model {
    /// `states[r]` is the state at revision `r`.
    states: Vec<State>,
    /// `events[i]` is the change of revision `i + 1`.
    events: Vec<WatchEvent>,
    compacted: Revision,
}

impl Model {
    fn new() -> Self {
        Model {
            states: vec![State::new()],
            events: Vec::new(),
            compacted: Revision::ZERO,
        }
    }

    fn current(&self) -> Revision {
        Revision::new(self.events.len() as u64)
    }

    fn latest(&self) -> &State {
        self.states.last().expect("the model has a state")
    }

    /// A revision chosen by `n`, from 0 to one past the current revision.
    fn pick(&self, n: u64) -> Revision {
        Revision::new(n % (self.current().get() + 2))
    }

    fn expected(&self, key: &[u8], expect: Expect) -> Revision {
        let actual = self.latest().get(key).map(|kv| kv.mod_revision);
        match expect {
            Expect::Right => actual.unwrap_or(self.current()),
            Expect::Wrong(n) => {
                let wrong = self.pick(n);
                if Some(wrong) == actual {
                    wrong.next()
                } else {
                    wrong
                }
            }
        }
    }

    fn read(&self, revision: Option<Revision>) -> Result<(Revision, &State), Fail> {
        let current = self.current();
        let at = revision.unwrap_or(current);
        if at < self.compacted {
            return Err(Fail::Compacted(at, self.compacted));
        }
        if at > current {
            return Err(Fail::FutureRevision(at, current));
        }
        Ok((at, &self.states[at.get() as usize]))
    }

    fn write(&mut self, key: &[u8], value: Option<Bytes>) -> WatchEvent {
        let revision = self.current().next();
        let mut state = self.latest().clone();
        let prev_kv = state.get(key).cloned();
        let kv = KeyValue {
            key: b(key),
            value: value.clone().unwrap_or_default(),
            create_revision: prev_kv
                .as_ref()
                .map_or(revision, |prev| prev.create_revision),
            mod_revision: revision,
        };
        let kind = match value {
            Some(_) => {
                state.insert(kv.key.clone(), kv.clone());
                EventKind::Put
            }
            None => {
                state.remove(key);
                EventKind::Delete
            }
        };
        let event = WatchEvent { kind, kv, prev_kv };
        self.states.push(state);
        self.events.push(event.clone());
        event
    }

    fn precondition(&self, key: &[u8], expected: Option<Revision>) -> Result<(), Fail> {
        match (self.latest().get(key), expected) {
            (None, _) => Err(Fail::NotFound(b(key))),
            (Some(kv), Some(expected)) if kv.mod_revision != expected => {
                Err(Fail::Conflict(expected, kv.clone()))
            }
            _ => Ok(()),
        }
    }

    fn create(&mut self, key: &[u8], value: Bytes) -> Result<Revision, Fail> {
        if self.latest().contains_key(key) {
            return Err(Fail::AlreadyExists(b(key)));
        }
        Ok(self.write(key, Some(value)).revision())
    }

    fn update(&mut self, key: &[u8], value: Bytes, expected: Revision) -> Result<Revision, Fail> {
        self.precondition(key, Some(expected))?;
        Ok(self.write(key, Some(value)).revision())
    }

    fn delete(
        &mut self,
        key: &[u8],
        expected: Option<Revision>,
    ) -> Result<(Revision, KeyValue), Fail> {
        self.precondition(key, expected)?;
        let event = self.write(key, None);
        Ok((
            event.revision(),
            event.prev_kv.expect("a deleted key existed"),
        ))
    }

    fn get(&self, key: &[u8], revision: Option<Revision>) -> Result<Option<KeyValue>, Fail> {
        let (_, state) = self.read(revision)?;
        Ok(state.get(key).cloned())
    }

    /// Every page of a list with `limit`, as the store must return them.
    fn pages(
        &self,
        prefix: &[u8],
        revision: Option<Revision>,
        limit: usize,
    ) -> Result<Vec<ListPage>, Fail> {
        let (at, state) = self.read(revision)?;
        let kvs: Vec<KeyValue> = state
            .values()
            .filter(|kv| kv.key.starts_with(prefix))
            .cloned()
            .collect();
        if limit == 0 || kvs.len() <= limit {
            return Ok(vec![ListPage {
                kvs,
                revision: at,
                next: None,
            }]);
        }
        let chunks: Vec<&[KeyValue]> = kvs.chunks(limit).collect();
        let last = chunks.len() - 1;
        Ok(chunks
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| ListPage {
                kvs: chunk.to_vec(),
                revision: at,
                next: (i < last).then(|| chunk[chunk.len() - 1].key.clone()),
            })
            .collect())
    }

    fn count(&self, prefix: &[u8]) -> u64 {
        self.latest()
            .keys()
            .filter(|key| key.starts_with(prefix))
            .count() as u64
    }

    fn compact(&mut self, revision: Revision) -> Result<(), Fail> {
        if revision > self.current() {
            return Err(Fail::FutureRevision(revision, self.current()));
        }
        self.compacted = self.compacted.max(revision);
        Ok(())
    }
}

/// Runs one sequence against the store and the model, comparing every result, then checks
/// the watch opened before the first operation and the final state.
async fn run_sequence<H: Harness>(ops: Vec<Op>) {
    let f = fresh::<H>().await;
    let s = &*f.store;
    let mut model = Model::new();
    // Drain the watch while the operations run, so that it never lags.
    let mut stream = watch(s, b"", Revision::ZERO).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let drain = AbortOnDrop(tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if tx.send(item).is_err() || failed {
                break;
            }
        }
    }));

    for (step, op) in ops.iter().enumerate() {
        let context = format!("step {step}: {op:?}");
        match op {
            Op::Create { key, value } => {
                let (key, value) = (KEYS[*key], b(value));
                let got = s.create(key, value.clone()).await.map_err(fail);
                assert_eq!(got, model.create(key, value), "{context}");
            }
            Op::Update {
                key,
                value,
                expected,
            } => {
                let (key, value) = (KEYS[*key], b(value));
                let expected = model.expected(key, *expected);
                let got = s.update(key, value.clone(), expected).await.map_err(fail);
                assert_eq!(got, model.update(key, value, expected), "{context}");
            }
            Op::Delete { key, expected } => {
                let key = KEYS[*key];
                let expected = expected.map(|expected| model.expected(key, expected));
                let got = s.delete(key, expected).await.map_err(fail);
                assert_eq!(got, model.delete(key, expected), "{context}");
            }
            Op::Get { key } => {
                let got = s.get(KEYS[*key], None).await.map_err(fail);
                assert_eq!(got, model.get(KEYS[*key], None), "{context}");
            }
            Op::GetAt { key, at } => {
                let at = Some(model.pick(*at));
                let got = s.get(KEYS[*key], at).await.map_err(fail);
                assert_eq!(got, model.get(KEYS[*key], at), "{context} at {at:?}");
            }
            Op::List { prefix, limit, at } => {
                let prefix = PREFIXES[*prefix];
                let at = at.map(|at| model.pick(at));
                let got = try_paginate(s, prefix, at, *limit).await.map_err(fail);
                assert_eq!(got, model.pages(prefix, at, *limit), "{context} at {at:?}");
            }
            Op::Count { prefix } => {
                let got = s.count(PREFIXES[*prefix]).await.map_err(fail);
                assert_eq!(got, Ok(model.count(PREFIXES[*prefix])), "{context}");
            }
            Op::Compact { at } => {
                let at = model.pick(*at);
                let got = s.compact(at).await.map_err(fail);
                assert_eq!(got, model.compact(at), "{context} at {at}");
            }
        }
    }

    // The watch yielded exactly the model's changes, and replaying them gives the state.
    let mut seen = Vec::new();
    while seen.len() < model.events.len() {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(Ok(event))) => seen.push(event),
            other => panic!("the watch stopped after {} events: {other:?}", seen.len()),
        }
    }
    let mut drain = drain;
    drain.0.abort();
    let _ = (&mut drain.0).await;
    assert_eq!(seen, model.events, "the watch from the start");
    let mut replayed = State::new();
    for event in &seen {
        match event.kind {
            EventKind::Put => replayed.insert(event.kv.key.clone(), event.kv.clone()),
            EventKind::Delete => replayed.remove(&event.kv.key),
        };
    }
    assert_eq!(&replayed, model.latest(), "the watch replayed");
    let everything = list_all(s, b"", None).await;
    assert_eq!(
        everything.kvs,
        model.latest().values().cloned().collect::<Vec<_>>()
    );
    assert_eq!(everything.revision, model.current());
    assert_eq!(s.current_revision().await.unwrap(), model.current());
    assert_eq!(s.compacted_revision().await.unwrap(), model.compacted);

    // What compaction kept can still be watched; what it dropped cannot.
    let compacted = model.compacted;
    let mut from_compacted = watch(s, b"", compacted).await;
    let kept = &model.events[compacted.get() as usize..];
    assert_eq!(
        next_events_within(&mut from_compacted, kept.len(), WAIT).await,
        kept
    );
    if compacted > Revision::ZERO {
        let before = Revision::new(compacted.get() - 1);
        match s.watch(b"", before).await.map_err(fail) {
            Err(e) => assert_eq!(e, Fail::Compacted(before, compacted)),
            Ok(_) => panic!("a watch from {before} started after compacting {compacted}"),
        }
    }
}

/// Aborts a task when dropped, so that its watch is dropped before the store.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Random sequences of up to 60 creates, updates and deletes (with right and wrong
/// expected revisions), reads at the latest and past revisions, paginated lists, counts
/// and compactions over six keys give the same results, errors included, as a model that
/// keeps the whole state at every revision; a watch from the start replays to the final
/// state.
pub fn model_based_random_operations<H: Harness>() {
    let rt = runtime();
    let config = Config {
        cases: CASES,
        failure_persistence: None,
        max_shrink_time: MAX_SHRINK_TIME_MS,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&vec(op(), 1..=60), |ops| {
        rt.block_on(run_sequence::<H>(ops));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
