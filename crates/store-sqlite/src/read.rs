//! Reads: a pool of read-only connections and the queries that read the log at a revision.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use flotilla_store::{
    Bytes, Error, EventKind, KeyValue, ListPage, Result, Revision, WatchEvent, prefix_end,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

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
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let conn = match pooled {
            Some(conn) => conn,
            None => schema::open_reader(&self.path)?,
        };
        let result = read(&conn);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.keep
        {
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

/// The row `l` is its key's newest at or below revision `?3`. Written this way (rather than
/// as a grouped `max(revision)` join) SQLite walks the `(key, revision)` index in key order
/// and stops at the LIMIT instead of materialising and sorting the whole range.
const LATEST: &str = "NOT EXISTS (SELECT 1 FROM log n
    WHERE n.key = l.key AND n.revision > l.revision AND n.revision <= ?3)";

/// The key range a prefix covers, as SQL text: `key >= ?1` and, when bounded, `AND key < ?2`.
fn range_sql(prefix: &[u8]) -> (&'static str, Option<Vec<u8>>) {
    match prefix_end(prefix) {
        Some(end) => ("key >= ?1 AND key < ?2", Some(end)),
        None => ("key >= ?1 AND ?2 IS NULL", None),
    }
}

pub(crate) fn get(conn: &Connection, key: &[u8], at: Revision) -> Result<Option<KeyValue>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT revision, create_revision, deleted, value FROM log
             WHERE key = ?1 AND revision <= ?2 ORDER BY revision DESC LIMIT 1",
        )
        .map_err(|e| sql_error("cannot prepare a get", e))?;
    let row = stmt
        .query_row(params![key, sql(at)], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, bool>(2)?,
                r.get::<_, Vec<u8>>(3)?,
            ))
        })
        .optional()
        .map_err(|e| sql_error("cannot read a key", e))?;
    Ok(match row {
        Some((_, _, true, _)) | None => None,
        Some((mod_revision, create_revision, false, value)) => Some(KeyValue {
            key: Bytes::copy_from_slice(key),
            value: value.into(),
            create_revision: revision(create_revision),
            mod_revision: revision(mod_revision),
        }),
    })
}

pub(crate) fn list(
    conn: &Connection,
    prefix: &[u8],
    at: Revision,
    limit: usize,
    after: Option<Bytes>,
) -> Result<ListPage> {
    let (range, end) = range_sql(prefix);
    // Start at the prefix, or strictly after the continue key when that is further on.
    let (lower, start): (&str, &[u8]) = match &after {
        Some(after) if after.as_ref() >= prefix => ("key > ?1", after),
        _ => ("key >= ?1", prefix),
    };
    let range = range
        .replacen("key >= ?1", lower, 1)
        .replace("key", "l.key");
    let query = format!(
        "SELECT l.key, l.value, l.create_revision, l.revision FROM log l
         WHERE {range} AND l.revision <= ?3 AND l.deleted = 0 AND {LATEST}
         ORDER BY l.key LIMIT ?4"
    );
    let fetch = if limit == 0 { -1 } else { limit as i64 + 1 };
    let mut stmt = conn
        .prepare_cached(&query)
        .map_err(|e| sql_error("cannot prepare a list", e))?;
    let mut kvs = stmt
        .query_map(params![start, end, sql(at), fetch], key_value)
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| sql_error("cannot list keys", e))?;
    let next = if limit > 0 && kvs.len() > limit {
        kvs.truncate(limit);
        kvs.last().map(|kv| kv.key.clone())
    } else {
        None
    };
    Ok(ListPage {
        kvs,
        revision: at,
        next,
    })
}

pub(crate) fn count(conn: &Connection, prefix: &[u8], at: Revision) -> Result<u64> {
    let (range, end) = range_sql(prefix);
    let range = range.replace("key", "l.key");
    let query = format!(
        "SELECT count(*) FROM log l
         WHERE {range} AND l.revision <= ?3 AND l.deleted = 0 AND {LATEST}"
    );
    let mut stmt = conn
        .prepare_cached(&query)
        .map_err(|e| sql_error("cannot prepare a count", e))?;
    let n: i64 = stmt
        .query_row(params![prefix, end, sql(at)], |r| r.get(0))
        .map_err(|e| sql_error("cannot count keys", e))?;
    Ok(u64::try_from(n).unwrap_or(0))
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
        "SELECT l.key, l.value, l.create_revision, l.revision, l.deleted,
                p.value, p.create_revision, p.revision, p.deleted
         FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
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
                value: r.get::<_, Vec<u8>>(5)?.into(),
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
