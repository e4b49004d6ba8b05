//! The HTTP edge: serving over TLS, errors as `Status` objects, request metrics, and the
//! encodings a request body or an answer may take.

pub mod error;
pub(crate) mod handler;
pub(crate) mod json;
pub mod metrics;
pub(crate) mod negotiate;
pub(crate) mod protobuf;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod route;
pub mod server;
