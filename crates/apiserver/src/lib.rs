//! Flotilla's Kubernetes-compatible API server: the REST API over a [`flotilla_store::Store`],
//! as a pipeline of stages.
//!
//! ```text
//!  http::server (TLS, edge) ─► auth: authenticate ─► Api::handle: audit ─► impersonate
//!     ─► http::route ─► auth: authorize ─► http::handler (the verb)
//!     ─► registry (generic over the store; per-resource strategies) ─► admission on writes
//!     ─► store;  beside it: patch (merge, JSON, strategic, apply), discovery (discovery,
//!        OpenAPI, tables), watch (cache and serving), gc (collector, compaction, Events'
//!        expiry); client: a typed in-process client
//! ```

pub mod admission;
pub mod api;
pub mod auth;
pub mod client;
pub mod discovery;
pub mod gc;
pub mod http;
pub(crate) mod patch;
pub mod registry;
#[cfg(test)]
mod replicas_tests;
pub mod watch;

pub use api::Api;
pub use http::error::{ApiError, ApiResult, Reason};
pub use registry::resources::{Registry, ResourceType};
