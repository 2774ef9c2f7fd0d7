//! The Kubernetes side of the operator: CiliumNode objects, the
//! `NodeStore` over the API server, and leader election on a Lease.

pub mod ciliumnode;
pub mod crd;
pub mod lease;
pub mod operator;
pub mod patch;
pub mod store;
