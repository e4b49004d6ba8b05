use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;

use crate::{KeyValue, Revision};

/// A boxed underlying error.
type Source = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong in a store operation, independent of the backend.
///
/// Each backend maps its own errors into these kinds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `create` of a key that exists.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key.
        key: Bytes,
    },

    /// `update` or `delete` of a key that does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The key.
        key: Bytes,
    },

    /// A conditional write whose expected revision is not the key's `mod_revision`.
    #[error(
        "key {:?} was modified: expected revision {expected}, current revision {}",
        current.key,
        current.mod_revision
    )]
    Conflict {
        /// The revision the caller expected.
        expected: Revision,
        /// The key as it is now.
        current: Box<KeyValue>,
    },

    /// A read or watch at a revision that compaction has removed.
    #[error(
        "revision {requested} has been compacted; the oldest available revision is {compacted}"
    )]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision still available.
        compacted: Revision,
    },

    /// A read or compaction at a revision the store has not reached.
    #[error("revision {requested} is ahead of the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },

    /// The request itself is malformed (an empty key, a value over the size limit…).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The storage medium is full; the write was not applied.
    #[error("no space left to write: {source}")]
    NoSpace {
        /// The backend's error.
        #[source]
        source: Source,
    },

    /// The store could not be opened.
    #[error("cannot open store {}: {reason}", path.display())]
    Open {
        /// The file or address that failed to open.
        path: PathBuf,
        /// Why.
        reason: OpenFailure,
        /// The backend's error, if any.
        #[source]
        source: Option<Source>,
    },

    /// The store was closed, or its writer stopped.
    #[error("store is closed")]
    Closed,

    /// The store's server cannot be reached now (connection refused or lost, a timeout,
    /// no leader): a retry later may succeed. A write that fails so may or may not have
    /// been applied (its reply was lost), as with etcd; conditional writes make a retry
    /// safe.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed, naming the server.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<Source>,
    },

    /// Any other failure of the backend (I/O, connection, internal); the write, if any,
    /// was not applied.
    #[error("storage backend failure: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<Source>,
    },
}

impl Error {
    /// A [`Error::Backend`] from a message and a source error.
    pub fn backend(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Backend {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

impl Error {
    /// An [`Error::Unavailable`] from a message and a source error.
    pub fn unavailable(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Unavailable {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// Why a store could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenFailure {
    /// The file is not a database or is damaged.
    Corrupt,
    /// Another process holds the store.
    Locked,
    /// The store was written by a newer version of Flotilla.
    NewerSchema {
        /// The schema version found.
        found: i64,
        /// The newest schema version this build understands.
        supported: i64,
    },
    /// The file is a database of another application.
    NotAStore,
    /// The file or its directory could not be read or created.
    Io,
    /// The store's server could not be reached (or did not answer in time): why.
    Unreachable(String),
    /// The server refused the connection (credentials, TLS, no such database): why.
    Refused(String),
    /// The location (an etcd key prefix) holds keys that are not a Flotilla store's.
    Foreign,
    /// The location is malformed (a URL, a prefix, a file it names): why.
    Invalid(String),
}

impl fmt::Display for OpenFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenFailure::Corrupt => f.write_str("the file is corrupt or is not a database"),
            OpenFailure::Locked => f.write_str("the file is locked by another process"),
            OpenFailure::NewerSchema { found, supported } => write!(
                f,
                "the store has schema version {found}, newer than the supported version {supported}; upgrade Flotilla"
            ),
            OpenFailure::NotAStore => f.write_str("the file is a database of another application"),
            OpenFailure::Io => f.write_str("the file cannot be read or created"),
            OpenFailure::Unreachable(why) => write!(f, "the server cannot be reached: {why}"),
            OpenFailure::Refused(why) => write!(f, "the server refused the connection: {why}"),
            OpenFailure::Foreign => f.write_str(
                "the prefix holds keys that are not a Flotilla store's; use another prefix",
            ),
            OpenFailure::Invalid(why) => f.write_str(why),
        }
    }
}
