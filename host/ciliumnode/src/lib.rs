//! The cilium.io/v2 CiliumNode as the operator and the agent share it: the
//! IPAM fields with the CRD's own names ([`node`]), the release handshake's
//! states ([`ReleaseState`]), the operator's changes to a node
//! ([`NodeUpdate`]) and those changes as JSON merge patches ([`patch`]).
//! [`crd_schema`] is the CRD's structural schema for those fields, to check
//! that what is written survives the API server's pruning.
//! With the `kube` feature, the glue to a `DynamicObject` of the API server
//! (client-free: kube-core only); with `testing`, CiliumNodes exactly as
//! Cilium's Go agent and operator write them ([`go_agent`]).

pub mod crd_schema;
#[cfg(any(test, feature = "testing"))]
pub mod go_agent;
#[cfg(feature = "kube")]
pub mod kube;
pub mod node;
pub mod patch;
mod release_state;
mod update;

pub use node::{
    AllocationIp, AzureAddress, AzureInterface, AzureSpec, AzureStatus, CiliumNode, EniInterface,
    EniSpec, EniStatus, EniSubnet, EniVpc, IpamSpec, IpamStatus, NodeSpec, NodeStatus,
    OperatorStatus, DEFAULT_PRE_ALLOCATE,
};
pub use release_state::ReleaseState;
pub use update::NodeUpdate;
