//! The scheduler's two decisions for a placement: which clusters ([`select`]) and how many
//! replicas each ([`divide`]).

pub mod division;
pub mod selection;

pub use division::{Bounds, DivisionError, ReplicaPolicy, WeightTerm, divide};
pub use selection::{
    ClusterAffinity, Reach, Reason, Selection, SpreadConstraint, select, select_within,
};
