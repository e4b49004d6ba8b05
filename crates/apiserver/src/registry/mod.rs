//! The registry: the resource types served, where their objects live in the store, the
//! server-managed metadata of an object, and the resources with behaviour of their own.

pub mod crd;
pub mod events;
pub mod keys;
pub mod object;
pub mod resources;
pub mod review;
pub mod scale;
pub mod selector;
pub mod tenancy;
