//! Simulated member clusters: many logical clusters of one API server, each with nodes and
//! the About API, whose Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs
//! progress to ready as far as the cluster's capacity allows.
//!
//! ```text
//!  flotilla sim ─► provision(api, members, nodes)      LogicalCluster, Nodes, ClusterProperty
//!               └► Simulator::run ─ runtime: 6 store watches (every cluster at once)
//!                                      │ changes            ▲ statuses (PUT …/status
//!                                      ▼                    │ through Api::serve)
//!                                   Simulation (pure): room per cluster in creation
//!                                   order, statuses due `ready_delay` after a change
//!                                      └─ Workload::target: the status for the pods that fit
//! ```

pub mod about;
pub mod provision;
pub mod resources;
pub mod runtime;
pub mod simulation;
pub mod workload;

pub use provision::{NodeShape, provision};
pub use runtime::{Config, Simulator};
pub use simulation::{Simulation, StatusWrite, WorkloadKey};
pub use workload::{Kind, Workload};

/// What can go wrong while simulating.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed a list or a watch.
    #[error("store: {0}")]
    Store(#[from] flotilla_store::Error),
    /// The API refused a request that sets up a member cluster.
    #[error("cannot set up cluster {cluster}: cannot {action}: {message}")]
    Provision {
        /// The member cluster.
        cluster: String,
        /// What was being done.
        action: String,
        /// The API's reason.
        message: String,
    },
    /// A store watch ended.
    #[error("a store watch ended")]
    WatchEnded,
}
