//! Reads: each one statement, so each sees one snapshot, the meta row included (a read
//! checks its revision against the head and the compacted revision it read with).
//!
//! A key's version at revision `R` is its newest row at or below `R` (index `(key,
//! revision DESC)`); a list takes that per key (`DISTINCT ON`), drops tombstones, and
//! stops one row past the limit to know whether a next page exists.

use flotilla_store::{Bytes, Error, EventKind, KeyValue, ListPage, Result, Revision, WatchEvent};
use tokio_postgres::Row;

use crate::conn::Conn;

/// A revision as PostgreSQL's `bigint` (revisions past it cannot exist).
pub fn to_sql(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}

/// A `bigint` revision read back.
pub fn from_sql(n: i64) -> Revision {
    Revision::new(u64::try_from(n).unwrap_or(0))
}

/// The store's head and compacted revision, as one read saw them.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Every revision up to this one is committed.
    pub head: Revision,
    /// Reads below this one are refused.
    pub compacted: Revision,
}

impl Bounds {
    fn of(row: &Row) -> Result<Bounds> {
        Ok(Bounds {
            head: from_sql(get(row, 0)?),
            compacted: from_sql(get(row, 1)?),
        })
    }

    /// Refuses a read at `revision` that is compacted or ahead of the head.
    pub fn check(&self, revision: Revision) -> Result<()> {
        if revision < self.compacted {
            return Err(Error::Compacted {
                requested: revision,
                compacted: self.compacted,
            });
        }
        if revision > self.head {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.head,
            });
        }
        Ok(())
    }
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, index: usize) -> Result<T> {
    row.try_get(index)
        .map_err(|e| crate::error::decode("the store", e))
}

fn bytes(row: &Row, index: usize) -> Result<Bytes> {
    Ok(Bytes::copy_from_slice(get::<&[u8]>(row, index)?))
}

/// The bounds of a whole store, from the meta row.
const BOUNDS: &str = "SELECT head, compacted FROM flotilla_meta WHERE id = 1";

/// The head and compacted revision now.
pub async fn bounds(conn: &mut Conn) -> Result<Bounds> {
    let rows = conn.query("read the head", BOUNDS, &[]).await?;
    Bounds::of(rows.first().ok_or(Error::Closed)?)
}

const GET: &str = "
SELECT m.head, m.compacted, l.revision, l.create_revision, l.deleted, l.value
FROM flotilla_meta m
LEFT JOIN LATERAL (
    SELECT revision, create_revision, deleted, value FROM flotilla_log
    WHERE key = $1 AND revision <= coalesce($2, m.head)
    ORDER BY revision DESC LIMIT 1
) l ON true
WHERE m.id = 1";

/// `key` at `revision` (the head if `None`).
pub async fn get_at(
    conn: &mut Conn,
    key: &[u8],
    revision: Option<Revision>,
) -> Result<Option<KeyValue>> {
    let at = revision.map(to_sql);
    let rows = conn.query("get", GET, &[&key, &at]).await?;
    let row = rows.first().ok_or(Error::Closed)?;
    let bounds = Bounds::of(row)?;
    if let Some(revision) = revision {
        bounds.check(revision)?;
    }
    let Some(mod_revision) = get::<Option<i64>>(row, 2)? else {
        return Ok(None);
    };
    if get::<bool>(row, 4)? {
        return Ok(None);
    }
    Ok(Some(KeyValue {
        key: Bytes::copy_from_slice(key),
        value: bytes(row, 5)?,
        create_revision: from_sql(get(row, 3)?),
        mod_revision: from_sql(mod_revision),
    }))
}

const LIST: &str = "
SELECT m.head, m.compacted, v.key, v.revision, v.create_revision, v.value
FROM flotilla_meta m
LEFT JOIN LATERAL (
    SELECT * FROM (
        SELECT DISTINCT ON (key) key, revision, create_revision, deleted, value
        FROM flotilla_log
        WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2) AND ($3::bytea IS NULL OR key > $3)
          AND revision <= coalesce($4, m.head)
        ORDER BY key, revision DESC
    ) latest
    WHERE NOT deleted
    ORDER BY key
    LIMIT $5
) v ON true
WHERE m.id = 1";

/// One page of the keys from `start` (inclusive) to `end` (exclusive, unbounded if
/// `None`) after `after`, at `revision` (the head if `None`); `limit` 0 is no limit.
pub async fn list(
    conn: &mut Conn,
    start: &[u8],
    end: Option<&[u8]>,
    after: Option<&[u8]>,
    revision: Option<Revision>,
    limit: usize,
) -> Result<ListPage> {
    let at = revision.map(to_sql);
    let fetch = (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX - 1) + 1);
    let rows = conn
        .query("list", LIST, &[&start, &end, &after, &at, &fetch])
        .await?;
    let first = rows.first().ok_or(Error::Closed)?;
    let bounds = Bounds::of(first)?;
    let read_at = revision.unwrap_or(bounds.head);
    bounds.check(read_at)?;
    let mut kvs = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(mod_revision) = get::<Option<i64>>(row, 3)? else {
            continue;
        };
        kvs.push(KeyValue {
            key: bytes(row, 2)?,
            value: bytes(row, 5)?,
            create_revision: from_sql(get(row, 4)?),
            mod_revision: from_sql(mod_revision),
        });
    }
    let next = if limit > 0 && kvs.len() > limit {
        kvs.truncate(limit);
        kvs.last().map(|kv| kv.key.clone())
    } else {
        None
    };
    Ok(ListPage {
        kvs,
        revision: read_at,
        next,
    })
}

const COUNT: &str = "
SELECT count(*) FROM (
    SELECT DISTINCT ON (key) deleted FROM flotilla_log
    WHERE key >= $1 AND ($2::bytea IS NULL OR key < $2)
    ORDER BY key, revision DESC
) latest
WHERE NOT deleted";

/// How many keys from `start` to `end` exist at the head.
pub async fn count(conn: &mut Conn, start: &[u8], end: Option<&[u8]>) -> Result<u64> {
    let rows = conn.query("count", COUNT, &[&start, &end]).await?;
    let n: i64 = get(rows.first().ok_or(Error::Closed)?, 0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

const EVENTS: &str = "
SELECT m.head, m.compacted, l.revision, l.key, l.create_revision, l.prev_revision, l.deleted,
       l.value, p.create_revision, p.value
FROM flotilla_meta m
LEFT JOIN LATERAL (
    SELECT * FROM flotilla_log
    WHERE revision > $1 AND revision <= $2
      AND key >= $3 AND ($4::bytea IS NULL OR key < $4)
    ORDER BY revision LIMIT $5
) l ON true
LEFT JOIN flotilla_log p ON p.revision = l.prev_revision AND l.prev_revision <> 0
WHERE m.id = 1
ORDER BY l.revision";

/// Whether [`events`] refuses a start below the compacted revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// A watcher's catch-up: [`Error::Compacted`] if `after` is below it.
    Refuse,
    /// The tail: whatever rows are still there (compaction deletes in steps, after it is
    /// recorded); a row already deleted leaves a hole the tail's readers notice.
    Ignore,
}

/// The changes to keys from `start` to `end` in `(after, up_to]`, at most `limit`, with
/// their previous values.
pub async fn events(
    conn: &mut Conn,
    start: &[u8],
    end: Option<&[u8]>,
    after: Revision,
    up_to: Revision,
    limit: usize,
    compaction: Compaction,
) -> Result<Vec<WatchEvent>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .query(
            "read the history",
            EVENTS,
            &[&to_sql(after), &to_sql(up_to), &start, &end, &limit],
        )
        .await?;
    let bounds = Bounds::of(rows.first().ok_or(Error::Closed)?)?;
    if compaction == Compaction::Refuse && after < bounds.compacted {
        return Err(Error::Compacted {
            requested: after,
            compacted: bounds.compacted,
        });
    }
    let mut events = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(revision) = get::<Option<i64>>(row, 2)? else {
            continue;
        };
        let revision = from_sql(revision);
        let key = bytes(row, 3)?;
        let create_revision = from_sql(get(row, 4)?);
        let prev_revision: i64 = get(row, 5)?;
        let deleted: bool = get(row, 6)?;
        let prev_kv = match get::<Option<i64>>(row, 8)? {
            Some(prev_create) if prev_revision != 0 => Some(KeyValue {
                key: key.clone(),
                value: bytes(row, 9)?,
                create_revision: from_sql(prev_create),
                mod_revision: from_sql(prev_revision),
            }),
            // The tail reading past a compaction's deletes: the rows it replaced are gone,
            // and so are their watchers' chances to see them (a hole before, then 410).
            _ if prev_revision != 0 && compaction == Compaction::Ignore => None,
            _ if prev_revision != 0 => {
                return Err(Error::Backend {
                    message: format!(
                        "the history lost the row {prev_revision} that revision {revision} replaced"
                    ),
                    source: None,
                });
            }
            _ => None,
        };
        let (kind, value) = if deleted {
            (EventKind::Delete, Bytes::new())
        } else {
            (EventKind::Put, bytes(row, 7)?)
        };
        events.push(WatchEvent {
            kind,
            kv: KeyValue {
                key,
                value,
                create_revision,
                mod_revision: revision,
            },
            prev_kv,
        });
    }
    Ok(events)
}
