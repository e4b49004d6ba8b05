//! PostgreSQL's errors as the store's kinds.
//!
//! A connection that cannot be made or is lost, and a server shutting down or starting
//! up, are [`Error::Unavailable`] (the API answers 503 and the client retries); a full
//! disk is [`Error::NoSpace`]; anything else the server reports is [`Error::Backend`].

use flotilla_store::Error;
use tokio_postgres::error::SqlState;

/// Maps an error of `what` (an operation, for the message) on the server `server`.
pub fn map(what: &str, server: &str, e: tokio_postgres::Error) -> Error {
    let message = format!("{what} on {server}");
    match e.code() {
        Some(code) if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY => {
            Error::NoSpace {
                source: Box::new(e),
            }
        }
        Some(code) if transient(code) => Error::unavailable(message, e),
        Some(_) => Error::backend(message, e),
        // No code: the connection itself (refused, closed, TLS, a timeout).
        None => Error::unavailable(message, e),
    }
}

/// Whether a server error says "not now" rather than "never".
fn transient(code: &SqlState) -> bool {
    let class = &code.code()[..2];
    // 08: connection exception; 57P01–57P05: shutdown, crash, cannot connect now; 53300:
    // too many connections; 40001/40P01: serialization failure, deadlock.
    class == "08"
        || code.code().starts_with("57P")
        || *code == SqlState::TOO_MANY_CONNECTIONS
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
}

/// A row that does not have the shape the store's statements give.
pub fn decode(what: &str, e: tokio_postgres::Error) -> Error {
    Error::backend(format!("unexpected row from {what}"), e)
}
