//! Flotilla's fleet scheduling logic, pure: no I/O, no Kubernetes client, no async. The
//! domain model here has no Kubernetes types; the fleet controllers map `Cluster` and
//! `Placement` objects onto it, call these functions, and write the results back as
//! `Work` objects and status.
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
mod quantity;
pub mod scheduler;
mod selector;

pub use cluster::{ClusterTerm, ClusterView, Taint, TaintEffect, Toleration, TolerationOperator};
pub use quantity::Quantity;
pub use scheduler::{
    Bounds, ClusterAffinity, DivisionError, Dynamic, PropertyOperator, PropertyRequirement, Reason,
    ReplicaMode, ReplicaPolicy, Selection, SpreadConstraint, WeightTerm, divide, select,
};
pub use selector::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
