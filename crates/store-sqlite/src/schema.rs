//! Opening the database file: the lock, the checks, the schema.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use flotilla_store::{Error, OpenFailure, Result, Revision};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::Config;
use crate::index::{KeyIndex, Version};

/// `PRAGMA application_id` of a Flotilla store ("FLTL").
const APPLICATION_ID: i64 = 0x464c_544c;

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The schema: an append-only log of changes (revision = row id) with the values of puts
/// beside it, both written in revision order only, and a few named counters. The order by
/// key is kept in memory ([`crate::index::KeyIndex`]): an on-disk index by key would turn
/// every write into scattered page writes.
const SCHEMA: &str = "
CREATE TABLE log (
    revision        INTEGER PRIMARY KEY,
    key             BLOB    NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER NOT NULL,
    deleted         INTEGER NOT NULL
);
CREATE TABLE data (
    revision INTEGER PRIMARY KEY,
    value    BLOB NOT NULL
);
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (name, value) VALUES ('compact_revision', 0), ('compact_done', 0);
";

/// What the writer needs to know about the file it opened.
#[derive(Debug)]
pub(crate) struct State {
    /// The newest committed revision.
    pub head: Revision,
    /// Reads below this revision are refused.
    pub compacted: Revision,
    /// Superseded rows up to this revision have been deleted.
    pub compaction_done: Revision,
    /// Every key's versions in the log.
    pub index: KeyIndex,
}

/// The lock file beside the database: `<file>.lock`.
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the exclusive lock that keeps a second process off the store.
///
/// The lock is an `flock` on a file of its own: a descriptor opened and closed on the
/// database file itself would drop SQLite's POSIX locks on it.
pub(crate) fn lock(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path(path))
        .map_err(|e| open_error(path, OpenFailure::Io, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::Open {
            path: path.to_path_buf(),
            reason: OpenFailure::Locked,
            source: None,
        }),
        Err(TryLockError::Error(e)) => Err(open_error(path, OpenFailure::Io, e)),
    }
}

/// Opens the write connection, checks the file and creates the schema if it is new.
pub(crate) fn open_writer(config: &Config) -> Result<(Connection, State)> {
    let path = &config.path;
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sql_open_error(path, e))?;
    configure(&conn).map_err(|e| sql_open_error(path, e))?;
    // The page check and the key index read every page once, in order: through a small
    // cache, so that an idle server does not keep a copy of its store in memory (memory
    // the C allocator would not give back once freed). The writer's own cache is set
    // once they are done.
    conn.execute_batch(STARTUP_CACHE)
        .map_err(|e| sql_open_error(path, e))?;
    if let Some(pages) = config.max_page_count {
        conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(|e| sql_open_error(path, e))?;
    }
    let application_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| sql_open_error(path, e))?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| sql_open_error(path, e))?;
    let fail = |reason| Error::Open {
        path: path.to_path_buf(),
        reason,
        source: None,
    };
    if application_id == 0 {
        let objects: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .map_err(|e| sql_open_error(path, e))?;
        if objects > 0 {
            return Err(fail(OpenFailure::NotAStore));
        }
        let tx = conn.transaction().map_err(|e| sql_open_error(path, e))?;
        tx.execute_batch(SCHEMA)
            .and_then(|()| {
                tx.execute_batch(&format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
                ))
            })
            .and_then(|()| tx.commit())
            .map_err(|e| sql_open_error(path, e))?;
    } else if application_id != APPLICATION_ID {
        return Err(fail(OpenFailure::NotAStore));
    } else if version > SCHEMA_VERSION {
        return Err(fail(OpenFailure::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        }));
    } else if version < 1 {
        return Err(fail(OpenFailure::Corrupt));
    } else if config.check_pages {
        check_pages(&conn).map_err(|e| match e {
            PageCheck::Sql(e) => sql_open_error(path, e),
            damage @ PageCheck::Damaged(_) => open_error(path, OpenFailure::Corrupt, damage),
        })?;
    }
    let state = read_state(&conn).map_err(|e| sql_open_error(path, e))?;
    conn.execute_batch(WRITER_CACHE)
        .map_err(|e| sql_open_error(path, e))?;
    Ok((conn, state))
}

/// Why [`check_pages`] failed.
#[derive(Debug)]
enum PageCheck {
    /// `quick_check` itself failed (which a damaged file may also cause).
    Sql(rusqlite::Error),
    /// `quick_check` reported damage: its first findings, on one line.
    Damaged(String),
}

impl std::fmt::Display for PageCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageCheck::Sql(e) => write!(f, "{e}"),
            PageCheck::Damaged(findings) => {
                write!(f, "SQLite's quick_check found damaged pages: {findings}")
            }
        }
    }
}

impl std::error::Error for PageCheck {}

/// The most `quick_check` findings reported (it stops at 100).
const FINDINGS: usize = 3;

/// Runs `PRAGMA quick_check` (every page's structure, without comparing indexes with
/// their tables) and logs how long it took.
fn check_pages(conn: &Connection) -> std::result::Result<(), PageCheck> {
    let started = std::time::Instant::now();
    let mut statement = conn
        .prepare(&format!("PRAGMA quick_check({FINDINGS})"))
        .map_err(PageCheck::Sql)?;
    let findings: Vec<String> = statement
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| match e.sqlite_error_code() {
            // Damage bad enough to stop the check itself.
            Some(ErrorCode::DatabaseCorrupt) => PageCheck::Damaged(match &e {
                rusqlite::Error::SqliteFailure(_, Some(message)) => message.clone(),
                other => other.to_string(),
            }),
            _ => PageCheck::Sql(e),
        })?;
    let seconds = started.elapsed().as_secs_f64();
    if findings.len() == 1 && findings[0] == "ok" {
        tracing::info!(seconds, "store pages checked");
        return Ok(());
    }
    let findings = findings
        .iter()
        .flat_map(|f| f.lines())
        .map(str::trim)
        .filter(|f| !f.is_empty() && !f.starts_with("***"))
        .collect::<Vec<_>>()
        .join("; ");
    Err(PageCheck::Damaged(findings))
}

/// Opens a read-only connection to an initialised store.
pub(crate) fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sql_open_error(path, e))?;
    conn.execute_batch("PRAGMA query_only = 1; PRAGMA busy_timeout = 10000;")
        .and_then(|()| conn.execute_batch(READER_CACHE))
        .map_err(|e| sql_open_error(path, e))?;
    Ok(conn)
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot switch to WAL mode (got {mode})")),
        ));
    }
    conn.execute_batch("PRAGMA synchronous = FULL;")
}

/// The writer's page cache while the store opens: 256 KiB. The page check and the key
/// index read each page once, in order, and gain nothing from keeping it.
const STARTUP_CACHE: &str = "PRAGMA cache_size = -256;";

/// Each read connection's page cache: 512 KiB (SQLite's default is 2 MiB), enough for the
/// tree's inner pages that every lookup walks. The pool keeps up to eight connections,
/// and pages a list read once (a scan of every role and binding at start, a big LIST)
/// would otherwise stay in each connection's cache, in memory the C allocator does not
/// give back; leaves not cached are read from the operating system's file cache.
const READER_CACHE: &str = "PRAGMA cache_size = -512;";

/// The writer's page cache once open: 4 MiB. It appends (the log's and the data's last
/// pages, the trees' inner pages) and reads the value each write replaces, anywhere in
/// the file; those reads come from the operating system's file cache when the page is not
/// here. At 32 MiB the cache grew with the store to 32 MiB of heap (a hub with 1,000 pull
/// clusters: 33 KiB per cluster) without making writes faster (docs/performance.md).
const WRITER_CACHE: &str = "PRAGMA cache_size = -4096;";

fn read_state(conn: &Connection) -> rusqlite::Result<State> {
    let meta = |name: &str| -> rusqlite::Result<i64> {
        conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
            r.get(0)
        })
    };
    let compacted = meta("compact_revision")?;
    let compaction_done = meta("compact_done")?;
    let mut index = KeyIndex::default();
    let mut last = 0;
    let mut rows =
        conn.prepare("SELECT revision, key, create_revision, deleted FROM log ORDER BY revision")?;
    let mut rows = rows.query([])?;
    while let Some(row) = rows.next()? {
        last = row.get(0)?;
        let key: Vec<u8> = row.get(1)?;
        index.push(
            key.into(),
            Version {
                revision: revision(last),
                create_revision: revision(row.get(2)?),
                deleted: row.get(3)?,
            },
        );
    }
    Ok(State {
        head: revision(last.max(compacted)),
        compacted: revision(compacted),
        compaction_done: revision(compaction_done),
        index,
    })
}

/// A revision read from the database (never negative).
pub(crate) fn revision(n: i64) -> Revision {
    Revision::new(u64::try_from(n).unwrap_or(0))
}

/// A revision as SQLite stores it (revisions never reach `i64::MAX`).
pub(crate) fn sql(revision: Revision) -> i64 {
    i64::try_from(revision.get()).unwrap_or(i64::MAX)
}

fn open_error(
    path: &Path,
    reason: OpenFailure,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Open {
        path: path.to_path_buf(),
        reason,
        source: Some(Box::new(e)),
    }
}

fn sql_open_error(path: &Path, e: rusqlite::Error) -> Error {
    let reason = match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => OpenFailure::Corrupt,
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => OpenFailure::Locked,
        _ => OpenFailure::Io,
    };
    open_error(path, reason, e)
}

/// Maps an SQLite failure during normal operation to the store's error kinds.
pub(crate) fn sql_error(what: &str, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => Error::NoSpace {
            source: Box::new(e),
        },
        _ => Error::backend(what, e),
    }
}
