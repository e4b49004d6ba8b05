//! Flotilla's fleet controllers. Everything but [`runtime`] is pure (no I/O, no client,
//! no async) and tested without a server: the scheduler ([`select`], [`divide`]) over a
//! domain model with no Kubernetes types (the API's leaf types, such as taints and
//! tolerations, used as they are), [`model`] converting the API objects onto it,
//! [`render`] (overrides), [`plan`] (one placement's Works) and [`status`] (status back).
//! [`runtime`] runs them as controllers against the hub's API.
//!
//! ```text
//!  Cluster objects ──► ClusterView[] ─┐       Placement.spec.clusters ──► ClusterAffinity
//!                                     ▼                                        │
//!  last decision (names) ──────► select(affinity, clusters, previous) ◄────────┘
//!                                     │
//!                                     ├─► Selection.excluded: (name, Reason) ─► Placement.status
//!                                     ▼
//!                          Selection.chosen ─► their ClusterViews
//!                                     │       Placement.spec.replicas ──► ReplicaPolicy
//!  last division (replicas) ───► divide(total, policy, chosen, previous)
//!                                     │
//!                                     ▼
//!                    name → replicas (exact sum, fewest moved) ─► one Work per cluster
//! ```
//!
//! Both functions are deterministic: the same inputs give the same result whatever their
//! order, and a decision fed back as `previous` is reproduced unchanged.

mod cluster;
pub mod compute;
pub mod model;
pub mod plan;
pub mod render;
pub mod revision;
pub mod rollout;
pub mod runtime;
pub mod scheduler;
mod selector;
pub mod status;
pub mod tenancy;

pub use cluster::{ClusterTerm, ClusterView};
/// The API's leaf types the scheduler reads as they are (one definition each).
pub use flotilla_api::{
    Dynamic, PropertyOperator, PropertyRequirement, ReplicaMode, Taint, TaintEffect, Toleration,
    TolerationOperator,
};
pub use scheduler::{
    Bounds, ClusterAffinity, DivisionError, Reach, Reason, ReplicaPolicy, Selection,
    SpreadConstraint, WeightTerm, divide, select, select_within,
};
pub use selector::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
