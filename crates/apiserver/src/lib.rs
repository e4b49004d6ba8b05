//! Flotilla's Kubernetes-compatible API server: the REST API over a [`flotilla_store::Store`].
//!
//! ```text
//!  HTTPS (rustls) ─► bearer token ─► Api::serve ─► route: discovery | version | objects
//!                                                   objects: get/list/watch/create/
//!                                                   update/patch/delete over the store
//! ```

pub mod api;
pub mod compaction;
pub mod crd;
pub mod discovery;
pub mod events;
pub mod fields;
pub mod gc;
pub mod json;
pub mod keys;
pub mod managed;
pub mod metrics;
pub mod object;
pub mod openapi;
pub mod openapi_v2;
pub mod patch;
pub mod protobuf;
pub mod resources;
pub mod review;
pub mod scale;
pub mod schema;
pub mod selector;
pub mod server;
pub mod status;
pub mod strategic;
pub mod table;
pub mod tenancy;
pub mod watchcache;

pub use api::Api;
pub use status::{ApiError, ApiResult};
