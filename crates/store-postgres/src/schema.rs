//! The tables, the write function, and the schema's version check at open.
//!
//! ```text
//!  flotilla_meta  (one row)  schema_version, head (the sequencer), compacted, compact_done
//!  flotilla_log              revision PK │ key │ create_revision │ prev_revision │ deleted │ value
//!                            index (key, revision DESC): a key's newest version, lists by key
//!  flotilla_write(ops, keys, values, expected) → one row per write, in order
//! ```
//!
//! `flotilla_write` runs a whole batch of writes (of distinct keys) in one call: it locks
//! the meta row (`FOR UPDATE`: the single sequencer), then in one set-based statement
//! checks each write's precondition against its key's newest row and appends a row at
//! `head + 1, + 2, …` for each write that holds, in the batch's order; then moves `head`
//! and `NOTIFY`s the watchers of every process. The lock is held until the transaction
//! commits, so revisions commit in order (see the crate's doc).

use flotilla_store::{Error, OpenFailure, Result};
use tokio_postgres::Client;

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i32 = 1;

/// The channel every write batch notifies, with its new head as the payload.
pub const CHANNEL: &str = "flotilla_store";

/// The advisory lock held while a schema is created or checked (two hubs starting on an
/// empty database at once).
const SCHEMA_LOCK: i64 = 0x666c_6f74_696c_6c61;

/// A write's outcome in `flotilla_write`'s `o_status`.
pub mod status {
    /// Written.
    pub const OK: i16 = 0;
    /// `create` of an existing key.
    pub const EXISTS: i16 = 1;
    /// `update` or `delete` of a missing key.
    pub const NOT_FOUND: i16 = 2;
    /// The key's `mod_revision` is not the expected one.
    pub const CONFLICT: i16 = 3;
}

/// A write's kind in `flotilla_write`'s `ops`.
pub mod op {
    /// Create a missing key.
    pub const CREATE: i16 = 0;
    /// Replace a key's value at an expected revision.
    pub const UPDATE: i16 = 1;
    /// Delete a key, at an expected revision when one is given.
    pub const DELETE: i16 = 2;
}

const CREATE_TABLES: &str = "
CREATE TABLE flotilla_meta (
    id integer PRIMARY KEY CHECK (id = 1),
    schema_version integer NOT NULL,
    head bigint NOT NULL,
    compacted bigint NOT NULL,
    compact_done bigint NOT NULL
);
CREATE TABLE flotilla_log (
    revision bigint PRIMARY KEY,
    key bytea NOT NULL,
    create_revision bigint NOT NULL,
    prev_revision bigint NOT NULL,
    deleted boolean NOT NULL,
    value bytea NOT NULL
);
CREATE INDEX flotilla_log_key ON flotilla_log (key, revision DESC);
";

/// The batch write: the keys of one batch are distinct (the writer sees to it), so the
/// whole batch is decided and appended by one set-based statement. The sequencer's lock is
/// taken by the statement before it: every statement of a volatile PL/pgSQL function
/// takes a new snapshot (READ COMMITTED), so once the lock is granted the batch's reads
/// see every batch committed before. (Taken inside the same statement, the lock would
/// come after that statement's snapshot, and the reads could be stale.)
///
/// Each write's row: its status, its revision, and the key's live version before it
/// (value, create and mod revisions) — which a conflict reports, and from which the writer
/// makes the watch event of a successful update or delete without reading the log back.
/// The function is replaced at every open, so that a store made by an older version
/// answers so too (the answer's shape is the same).
const CREATE_FUNCTION: &str = r#"
CREATE OR REPLACE FUNCTION flotilla_write(ops smallint[], keys bytea[], vals bytea[], expects bigint[])
RETURNS TABLE (o_status smallint, o_revision bigint, o_value bytea, o_create bigint, o_mod bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    h bigint;
    last bigint;
BEGIN
    SELECT m.head INTO h FROM flotilla_meta m WHERE m.id = 1 FOR UPDATE;
    RETURN QUERY
    WITH input AS (
        SELECT t.op, t.key, t.val, t.expect, t.i
        FROM unnest(ops, keys, vals, expects) WITH ORDINALITY AS t(op, key, val, expect, i)
    ), cur AS (
        SELECT input.*, l.revision AS c_rev, l.create_revision AS c_create, l.value AS c_value,
               coalesce(NOT l.deleted, false) AS live
        FROM input LEFT JOIN LATERAL (
            SELECT f.revision, f.create_revision, f.deleted, f.value FROM flotilla_log f
            WHERE f.key = input.key ORDER BY f.key, f.revision DESC LIMIT 1
        ) l ON true
    ), decided AS (
        SELECT cur.*, (CASE
            WHEN cur.op = 0 THEN CASE WHEN cur.live THEN 1 ELSE 0 END
            WHEN NOT cur.live THEN 2
            WHEN cur.expect IS NOT NULL AND cur.expect <> cur.c_rev THEN 3
            ELSE 0 END)::smallint AS status
        FROM cur
    ), numbered AS (
        SELECT decided.*,
               CASE WHEN decided.status = 0 THEN
                   h + count(*) FILTER (WHERE decided.status = 0) OVER (ORDER BY decided.i)
               END AS rev
        FROM decided
    ), inserted AS (
        INSERT INTO flotilla_log (revision, key, create_revision, prev_revision, deleted, value)
        SELECT n.rev, n.key,
               CASE WHEN n.op = 0 THEN n.rev ELSE n.c_create END,
               CASE WHEN n.op = 0 THEN 0 ELSE n.c_rev END,
               n.op = 2,
               CASE WHEN n.op = 2 THEN '\x'::bytea ELSE n.val END
        FROM numbered n WHERE n.status = 0
        RETURNING 1
    )
    SELECT n.status, n.rev,
           CASE WHEN n.live THEN n.c_value END,
           CASE WHEN n.live THEN n.c_create END,
           CASE WHEN n.live THEN n.c_rev END
    FROM numbered n ORDER BY n.i;
    SELECT max(f.revision) INTO last FROM flotilla_log f WHERE f.revision > h;
    IF last IS NOT NULL THEN
        UPDATE flotilla_meta SET head = last WHERE id = 1;
        PERFORM pg_notify('flotilla_store', last::text);
    END IF;
END
$fn$;
"#;

fn open_error(location: &str, reason: OpenFailure) -> Error {
    Error::Open {
        path: location.into(),
        reason,
        source: None,
    }
}

/// Creates the schema in an empty database, or checks the one there: a newer version is
/// refused with both versions named, tables of another application are refused.
pub async fn prepare(client: &mut Client, location: &str) -> Result<()> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| crate::error::map("begin", location, e))?;
    let map = |what: &'static str| move |e| crate::error::map(what, location, e);
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await
        .map_err(map("lock the schema"))?;
    let row = tx
        .query_one(
            "SELECT to_regclass('flotilla_meta') IS NOT NULL, to_regclass('flotilla_log') IS NOT NULL",
            &[],
        )
        .await
        .map_err(map("read the schema"))?;
    let (meta, log): (bool, bool) = (row.get(0), row.get(1));
    match (meta, log) {
        (false, false) => {
            tx.batch_execute(CREATE_TABLES)
                .await
                .map_err(map("create the tables"))?;
            tx.execute(
                "INSERT INTO flotilla_meta (id, schema_version, head, compacted, compact_done)
                 VALUES (1, $1, 0, 0, 0)",
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(map("create the tables"))?;
            tx.batch_execute(CREATE_FUNCTION)
                .await
                .map_err(map("create the write function"))?;
        }
        (true, true) => {
            let version: Option<i32> = tx
                .query_opt("SELECT schema_version FROM flotilla_meta WHERE id = 1", &[])
                .await
                .map_err(map("read the schema version"))?
                .map(|row| row.get(0));
            let Some(version) = version else {
                return Err(open_error(location, OpenFailure::NotAStore));
            };
            if version > SCHEMA_VERSION {
                return Err(open_error(
                    location,
                    OpenFailure::NewerSchema {
                        found: version.into(),
                        supported: SCHEMA_VERSION.into(),
                    },
                ));
            }
            tx.batch_execute(CREATE_FUNCTION)
                .await
                .map_err(map("create the write function"))?;
        }
        _ => return Err(open_error(location, OpenFailure::NotAStore)),
    }
    tx.commit().await.map_err(map("commit the schema"))?;
    Ok(())
}
