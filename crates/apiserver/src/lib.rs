//! Flotilla's Kubernetes-compatible API server.

pub mod discovery;
pub mod resources;
