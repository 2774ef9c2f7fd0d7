//! The IPAM engine: it executes the pure core's decisions (`ipam-pool`)
//! against a [`CloudApi`](ipam_cloud::CloudApi) and a [`NodeStore`]. The
//! instance cache (its picture of the cloud), per-node maintenance
//! (allocation, the release handshake, publishing), the loop that schedules
//! nodes, leaked-interface GC, [`LimitedCloud`] (the cloud's rate model and
//! retries), the in-memory node store, the Prometheus metrics, the cloud
//! trouble people are told of ([`Trouble`]: Events on the node, and
//! [`CloudProblems`] for `/readyz`), and [`plan`]: the same maintenance over
//! a dry-run cloud, for `ipam-operator plan`. No wasmtime, kube or HTTP
//! here: providers and the API server are behind the two traits.

pub mod allocate;
pub mod clock;
pub mod engine;
mod error;
mod figures;
pub mod gc;
pub mod instance_cache;
pub mod limited_cloud;
pub mod maintain;
mod maintenance_settings;
pub mod metrics;
pub mod node_store;
mod parts;
pub mod plan;
pub mod problems;
mod publish;
pub mod release;
pub mod trouble;

pub use allocate::Step;
pub use engine::{Engine, EngineError, EngineState, LoopSettings, RunningEngine};
pub use error::MaintainError;
pub use gc::{GcRound, LeakCollector};
pub use instance_cache::{CloudSnapshot, InstanceCache};
pub use ipam_pool::IpamMode;
pub use limited_cloud::LimitedCloud;
pub use maintain::{Maintainer, NodePass};
pub use maintenance_settings::MaintenanceSettings;
pub use metrics::Metrics;
pub use node_store::{Announcement, MemoryNodeStore, NodeEvent, NodeStore, StoreError};
pub use parts::Parts;
pub use plan::{plan_cluster, ClusterPlan, NodePlan, PlanSettings};
pub use problems::CloudProblems;
pub use release::ReleaseRound;
pub use trouble::Trouble;
