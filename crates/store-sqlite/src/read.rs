//! Reads: a pool of read-only connections and the queries that read the log at a revision.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use flotilla_store::{
    Bytes, Error, EventKind, KeyValue, ListPage, Result, Revision, WatchEvent, prefix_end,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::index::{Found, KeyIndex};

use crate::schema::{self, revision, sql, sql_error};

/// Idle read connections, opened on demand. Cloning shares the pool.
#[derive(Clone)]
pub(crate) struct Readers {
    path: Arc<PathBuf>,
    idle: Arc<Mutex<Vec<Connection>>>,
    keep: usize,
}

impl Readers {
    pub(crate) fn new(path: PathBuf, keep: usize) -> Self {
        Readers {
            path: Arc::new(path),
            idle: Arc::default(),
            keep: keep.max(1),
        }
    }

    /// Runs `read` on a pooled connection in the calling thread.
    pub(crate) fn with<T>(&self, read: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => schema::open_reader(&self.path)?,
        };
        let result = read(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.keep {
            idle.push(conn);
        }
        result
    }

    /// Runs `read` on a pooled connection on tokio's blocking threads.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let readers = self.clone();
        tokio::task::spawn_blocking(move || readers.with(read))
            .await
            .map_err(|e| Error::backend("a read task failed", e))?
    }
}

/// The value written at `revision` (empty for a tombstone, which has no `data` row), or
/// `None` if compaction removed it.
pub(crate) fn value(conn: &Connection, revision: Revision) -> Result<Option<Bytes>> {
    conn.prepare_cached("SELECT value FROM data WHERE revision = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([sql(revision)], |r| r.get::<_, Vec<u8>>(0))
                .optional()
        })
        .map(|value| value.map(Bytes::from))
        .map_err(|e| sql_error("cannot read a value", e))
}

/// A row the index points at that is gone: only compaction removes rows, so the read's
/// revision was compacted while it ran (the caller rechecks that first).
fn missing(revision: Revision) -> Error {
    Error::Backend {
        message: format!("the row of revision {revision} is missing from the log"),
        source: None,
    }
}

pub(crate) fn get(
    conn: &Connection,
    index: &RwLock<KeyIndex>,
    key: &[u8],
    at: Revision,
) -> Result<Option<KeyValue>> {
    let Some(version) = read_index(index).live_at(key, at) else {
        return Ok(None);
    };
    let value = value(conn, version.revision)?.ok_or_else(|| missing(version.revision))?;
    Ok(Some(KeyValue {
        key: Bytes::copy_from_slice(key),
        value,
        create_revision: version.create_revision,
        mod_revision: version.revision,
    }))
}

pub(crate) fn list(
    conn: &Connection,
    index: &RwLock<KeyIndex>,
    prefix: &[u8],
    at: Revision,
    limit: usize,
    after: Option<Bytes>,
) -> Result<ListPage> {
    let (found, more) = read_index(index).range(prefix, after.as_deref(), at, limit);
    // One read transaction: one snapshot, one lock, for all the values.
    let tx = conn
        .unchecked_transaction()
        .map_err(|e| sql_error("cannot begin a read", e))?;
    let mut kvs = Vec::with_capacity(found.len());
    for Found { key, version } in found {
        let value = value(&tx, version.revision)?.ok_or_else(|| missing(version.revision))?;
        kvs.push(KeyValue {
            key,
            value,
            create_revision: version.create_revision,
            mod_revision: version.revision,
        });
    }
    drop(tx);
    let next = more.then(|| kvs.last().map(|kv| kv.key.clone())).flatten();
    Ok(ListPage {
        kvs,
        revision: at,
        next,
    })
}

/// The index for reading; a writer that panicked while holding it left it as it was
/// before that change (changes are single pushes and removals), so it is still usable.
pub(crate) fn read_index(index: &RwLock<KeyIndex>) -> std::sync::RwLockReadGuard<'_, KeyIndex> {
    index.read().unwrap_or_else(PoisonError::into_inner)
}

/// The key range a prefix covers, as SQL text: `key >= ?1` and, when bounded, `AND key < ?2`.
fn range_sql(prefix: &[u8]) -> (&'static str, Option<Vec<u8>>) {
    match prefix_end(prefix) {
        Some(end) => ("key >= ?1 AND key < ?2", Some(end)),
        None => ("key >= ?1 AND ?2 IS NULL", None),
    }
}

/// The changes under `prefix` in `(after, up_to]`, each with the row it superseded.
pub(crate) fn events(
    conn: &Connection,
    prefix: &[u8],
    after: Revision,
    up_to: Revision,
    limit: usize,
) -> Result<Vec<WatchEvent>> {
    let (range, end) = range_sql(prefix);
    let range = range.replace("key", "l.key");
    let query = format!(
        "SELECT l.key, coalesce(d.value, x''), l.create_revision, l.revision, l.deleted,
                pd.value, p.create_revision, p.revision, p.deleted
         FROM log l
         LEFT JOIN data d ON d.revision = l.revision
         LEFT JOIN log p ON p.revision = l.prev_revision
         LEFT JOIN data pd ON pd.revision = p.revision
         WHERE l.revision > ?3 AND l.revision <= ?4 AND {range}
         ORDER BY l.revision LIMIT ?5"
    );
    let mut stmt = conn
        .prepare_cached(&query)
        .map_err(|e| sql_error("cannot prepare a history read", e))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    stmt.query_map(params![prefix, end, sql(after), sql(up_to), limit], |r| {
        let kv = key_value(r)?;
        let deleted: bool = r.get(4)?;
        let prev_deleted: Option<bool> = r.get(8)?;
        let prev_kv = match prev_deleted {
            Some(false) => Some(KeyValue {
                key: kv.key.clone(),
                value: r.get::<_, Option<Vec<u8>>>(5)?.unwrap_or_default().into(),
                create_revision: revision(r.get(6)?),
                mod_revision: revision(r.get(7)?),
            }),
            _ => None,
        };
        Ok(WatchEvent {
            kind: if deleted {
                EventKind::Delete
            } else {
                EventKind::Put
            },
            kv,
            prev_kv,
        })
    })
    .and_then(|rows| rows.collect())
    .map_err(|e| sql_error("cannot read the history", e))
}

/// A `KeyValue` from the columns key, value, create_revision, revision.
fn key_value(r: &Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue {
        key: r.get::<_, Vec<u8>>(0)?.into(),
        value: r.get::<_, Vec<u8>>(1)?.into(),
        create_revision: revision(r.get(2)?),
        mod_revision: revision(r.get(3)?),
    })
}
