//! Watches: every client watch served from one cache over one store watch per resource.

pub mod cache;
pub(crate) mod serve;
