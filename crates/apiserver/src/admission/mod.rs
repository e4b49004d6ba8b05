//! Admission: what a write must pass before it is stored.

pub mod schema;
