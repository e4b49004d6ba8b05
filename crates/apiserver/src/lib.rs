//! Flotilla's Kubernetes-compatible API server: the REST API over a [`flotilla_store::Store`].
//!
//! ```text
//!  HTTPS (rustls) ─► bearer token ─► Api::serve ─► route: discovery | version | objects
//!                                                   objects: get/list/watch/create/
//!                                                   update/patch/delete over the store
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
pub mod watch;

pub use api::Api;
pub use http::error::{ApiError, ApiResult, Reason};
pub use registry::resources::{Registry, ResourceType};
