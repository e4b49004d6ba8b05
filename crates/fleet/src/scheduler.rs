//! The scheduler's two decisions for a placement: which clusters ([`select`]) and how many
//! replicas each ([`divide`]).

pub mod division;
pub mod selection;

pub use division::{
    Bounds, DivisionError, Dynamic, ReplicaMode, ReplicaPolicy, WeightTerm, divide,
};
pub use selection::{
    ClusterAffinity, PropertyOperator, PropertyRequirement, Reason, Selection, SpreadConstraint,
    select,
};
