//! The HTTP edge: serving over TLS, errors as `Status` objects, request metrics, and the
//! encodings a request body or an answer may take.

pub mod error;
pub mod json;
pub mod metrics;
pub mod protobuf;
pub mod server;
