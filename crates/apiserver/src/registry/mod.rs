//! The registry: the resource types served, where their objects live in the store, the
//! server-managed metadata of an object, and the resources with behaviour of their own.

pub(crate) mod apply;
pub mod certificates;
pub(crate) mod crd;
pub(crate) mod delete;
pub(crate) mod events;
pub(crate) mod jobs;
pub mod keys;
pub(crate) mod list;
pub mod object;
pub(crate) mod rbac;
pub mod resources;
pub(crate) mod review;
pub(crate) mod scale;
pub(crate) mod selector;
pub mod services;
pub(crate) mod store;
pub mod strategy;
pub mod tenancy;
mod token;
