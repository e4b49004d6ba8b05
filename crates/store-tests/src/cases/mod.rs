//! The conformance cases, each a function generic over the backend's [`Harness`](crate::Harness).
//!
//! Every case makes its own fresh store location with [`Harness::new`](crate::Harness::new),
//! so the cases are independent and may run in parallel. [`conformance!`](crate::conformance)
//! emits a test for each; they are public so that a backend can also call one directly.

mod basic;
mod compaction;
mod concurrency;
mod durable;
mod list;
mod model;
mod server;
mod watch;

pub use basic::*;
pub use compaction::*;
pub use concurrency::*;
pub use durable::*;
pub use list::*;
pub use model::*;
pub use server::*;
pub use watch::*;
