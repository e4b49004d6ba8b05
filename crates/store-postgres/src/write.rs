//! The process's one writer: a task that drains the queue of writes and commits each batch
//! with one call of `flotilla_write` (one statement, one transaction, one fsync).
//!
//! ```text
//!  create/update/delete ──► queue ──► writer task: take what is queued (≤ max_batch,
//!                                     ≤ max_batch_bytes, up to a key seen twice: it
//!                                     starts the next batch) ──► SELECT flotilla_write(…)
//!                                     ──► publish the batch's changes to this
//!                                     process's watches if they follow what is
//!                                     published (else poke the tail) ──► reply to each
//!                                     caller
//! ```
//!
//! While one batch commits, the next one gathers in the queue: group commit without a
//! timer. Several processes each have their own writer; their batches take turns on the
//! meta row's lock.

use std::collections::HashSet;
use std::time::Duration;

use flotilla_store::{Bytes, Error, EventKind, KeyValue, Result, Revision, WatchEvent};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::conn::{Conn, connect};
use crate::read::{from_sql, to_sql};
use crate::schema::{op, status};
use crate::tail::Tail;
use crate::url::Target;

/// One write, as queued.
#[derive(Debug)]
pub enum Op {
    /// Create a missing key.
    Create {
        /// The key.
        key: Bytes,
        /// Its value.
        value: Bytes,
    },
    /// Replace a value at the expected revision.
    Update {
        /// The key.
        key: Bytes,
        /// The new value.
        value: Bytes,
        /// The key's `mod_revision` the caller saw.
        expected: Revision,
    },
    /// Delete a key, at the expected revision if given.
    Delete {
        /// The key.
        key: Bytes,
        /// The key's `mod_revision` the caller saw, if any.
        expected: Option<Revision>,
    },
}

impl Op {
    fn key(&self) -> &Bytes {
        match self {
            Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
        }
    }

    fn size(&self) -> usize {
        match self {
            Op::Create { key, value } | Op::Update { key, value, .. } => key.len() + value.len(),
            Op::Delete { key, .. } => key.len(),
        }
    }
}

/// What a successful write did.
#[derive(Debug)]
pub enum Done {
    /// A create or update, at this revision.
    Written(Revision),
    /// A delete at this revision, of this key-value.
    Deleted(Revision, KeyValue),
}

/// A queued write and where its answer goes.
pub struct Request {
    /// The write.
    pub op: Op,
    /// The answer.
    pub reply: oneshot::Sender<Result<Done>>,
}

/// How the writer batches.
pub struct Limits {
    /// The most writes in one batch.
    pub max_batch: usize,
    /// The most bytes of keys and values in one batch (at least one write).
    pub max_batch_bytes: usize,
    /// How long a connection may take to be made.
    pub connect_timeout: Duration,
}

/// How many times the writer yields for more writes before committing a batch smaller
/// than the last one (a yield costs microseconds; a commit, a round trip and an fsync).
const LINGER_TURNS: usize = 3;

const WRITE: &str = "SELECT o_status, o_revision, o_value, o_create, o_mod
                     FROM flotilla_write($1, $2, $3, $4)";

/// Runs the writer until every sender is gone.
pub async fn run(
    target: Target,
    limits: Limits,
    mut queue: mpsc::UnboundedReceiver<Request>,
    tail: std::sync::Arc<Tail>,
) {
    let mut conn: Option<Conn> = None;
    let mut carried: Option<Request> = None;
    let mut last_batch = 0;
    loop {
        let first = match carried.take() {
            Some(request) => request,
            None => match queue.recv().await {
                Some(request) => request,
                None => return,
            },
        };
        let mut bytes = first.op.size();
        // A batch's keys are distinct: the statement decides every write against the
        // state before the batch.
        let mut keys = HashSet::from([first.op.key().clone()]);
        let mut batch = vec![first];
        // The writers the last batch answered are queueing their next writes as this
        // task runs: give them a turn or two to join, while fewer are here than then.
        let mut turns = 0;
        while batch.len() < limits.max_batch && carried.is_none() {
            match queue.try_recv() {
                Ok(request)
                    if bytes + request.op.size() > limits.max_batch_bytes
                        || !keys.insert(request.op.key().clone()) =>
                {
                    carried = Some(request);
                }
                Ok(request) => {
                    bytes += request.op.size();
                    batch.push(request);
                }
                Err(_) if turns < LINGER_TURNS && batch.len() < last_batch => {
                    turns += 1;
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
        last_batch = batch.len();
        let result = match conn.as_mut().filter(|c| !c.is_closed()) {
            Some(c) => commit(c, &batch).await,
            None => match connect(&target, limits.connect_timeout, None).await {
                Ok(client) => commit(conn.insert(Conn::new(client, &target.server)), &batch).await,
                Err(e) => Err(e),
            },
        };
        match result {
            Ok((outcomes, events)) => {
                // This process's watches get the batch at once when it directly follows
                // what is published; otherwise the tail reads it after what comes first.
                let published = events.is_some_and(|events| tail.publish_own(events));
                if !published {
                    tail.committed.notify_one();
                }
                for (request, outcome) in batch.into_iter().zip(outcomes) {
                    let _ = request.reply.send(outcome);
                }
            }
            Err(e) => {
                if matches!(e, Error::Unavailable { .. }) {
                    conn = None;
                }
                warn!(error = %e, writes = batch.len(), "a write batch failed");
                for request in batch {
                    let _ = request.reply.send(Err(copy_error(&e)));
                }
            }
        }
    }
}

/// The same failure for every write of a batch.
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Unavailable { message, source } => Error::Unavailable {
            message: match source {
                Some(source) => format!("{message}: {source}"),
                None => message.clone(),
            },
            source: None,
        },
        Error::NoSpace { .. } => Error::NoSpace {
            source: e.to_string().into(),
        },
        other => Error::Backend {
            message: other.to_string(),
            source: None,
        },
    }
}

/// What one batch's commit answered: the outcome of each write in order, and the changes
/// it made as watch events (`None` if the write function did not return every previous
/// value, as one created by an older version does not).
type Committed = (Vec<Result<Done>>, Option<Vec<WatchEvent>>);

/// Commits one batch.
async fn commit(conn: &mut Conn, batch: &[Request]) -> Result<Committed> {
    let mut ops = Vec::with_capacity(batch.len());
    let mut keys: Vec<&[u8]> = Vec::with_capacity(batch.len());
    let mut values: Vec<&[u8]> = Vec::with_capacity(batch.len());
    let mut expects: Vec<Option<i64>> = Vec::with_capacity(batch.len());
    for request in batch {
        let (kind, value, expected) = match &request.op {
            Op::Create { value, .. } => (op::CREATE, &value[..], None),
            Op::Update {
                value, expected, ..
            } => (op::UPDATE, &value[..], Some(to_sql(*expected))),
            Op::Delete { expected, .. } => (op::DELETE, &[][..], expected.map(to_sql)),
        };
        ops.push(kind);
        keys.push(request.op.key());
        values.push(value);
        expects.push(expected);
    }
    let rows = conn
        .query("write", WRITE, &[&ops, &keys, &values, &expects])
        .await?;
    if rows.len() != batch.len() {
        return Err(Error::Backend {
            message: format!(
                "flotilla_write answered {} rows for {} writes",
                rows.len(),
                batch.len()
            ),
            source: None,
        });
    }
    debug!(writes = batch.len(), "write batch committed");
    let decode = |e| crate::error::decode("flotilla_write", e);
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut events = Some(Vec::with_capacity(batch.len()));
    for (request, row) in batch.iter().zip(&rows) {
        let key = request.op.key().clone();
        let code: i16 = row.try_get(0).map_err(decode)?;
        let revision: Option<i64> = row.try_get(1).map_err(decode)?;
        let value: Option<&[u8]> = row.try_get(2).map_err(decode)?;
        let create: Option<i64> = row.try_get(3).map_err(decode)?;
        let modified: Option<i64> = row.try_get(4).map_err(decode)?;
        let current = || KeyValue {
            key: key.clone(),
            value: Bytes::copy_from_slice(value.unwrap_or_default()),
            create_revision: from_sql(create.unwrap_or_default()),
            mod_revision: from_sql(modified.unwrap_or_default()),
        };
        if let (status::OK, Some(revision)) = (code, revision) {
            let change = change(&request.op, from_sql(revision), value, create, modified);
            events = events.zip(change).map(|(mut events, change)| {
                events.push(change);
                events
            });
        }
        let outcome = match (code, revision) {
            (status::OK, Some(revision)) => Ok(match request.op {
                Op::Delete { .. } => Done::Deleted(from_sql(revision), current()),
                _ => Done::Written(from_sql(revision)),
            }),
            (status::EXISTS, _) => Err(Error::AlreadyExists { key }),
            (status::NOT_FOUND, _) => Err(Error::NotFound { key }),
            (status::CONFLICT, _) => Err(Error::Conflict {
                expected: match request.op {
                    Op::Update { expected, .. } => expected,
                    Op::Delete { expected, .. } => expected.unwrap_or_default(),
                    Op::Create { .. } => Revision::ZERO,
                },
                current: Box::new(current()),
            }),
            (code, _) => Err(Error::Backend {
                message: format!("flotilla_write answered status {code}"),
                source: None,
            }),
        };
        outcomes.push(outcome);
    }
    Ok((outcomes, events))
}

/// The watch event of a write `flotilla_write` made at `revision`, as the tail would read
/// it back from the log; `previous` is the value it replaced (with its `create` and
/// `modified` revisions). `None` for an update or delete whose previous value is missing.
fn change(
    op: &Op,
    revision: Revision,
    previous: Option<&[u8]>,
    create: Option<i64>,
    modified: Option<i64>,
) -> Option<WatchEvent> {
    let key = op.key().clone();
    let prev_kv = || {
        Some(KeyValue {
            key: key.clone(),
            value: Bytes::copy_from_slice(previous?),
            create_revision: from_sql(create?),
            mod_revision: from_sql(modified?),
        })
    };
    Some(match op {
        Op::Create { value, .. } => WatchEvent {
            kind: EventKind::Put,
            kv: KeyValue {
                key,
                value: value.clone(),
                create_revision: revision,
                mod_revision: revision,
            },
            prev_kv: None,
        },
        Op::Update { value, .. } => {
            let prev_kv = prev_kv()?;
            WatchEvent {
                kind: EventKind::Put,
                kv: KeyValue {
                    key,
                    value: value.clone(),
                    create_revision: prev_kv.create_revision,
                    mod_revision: revision,
                },
                prev_kv: Some(prev_kv),
            }
        }
        Op::Delete { .. } => {
            let prev_kv = prev_kv()?;
            WatchEvent {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key,
                    value: Bytes::new(),
                    create_revision: prev_kv.create_revision,
                    mod_revision: revision,
                },
                prev_kv: Some(prev_kv),
            }
        }
    })
}
