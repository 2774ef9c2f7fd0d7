//! The Kubernetes side of the operator: the engine's `NodeStore` over the
//! API server (a watch of CiliumNodes, merge patches of the fields the
//! operator owns, pods pending per node, Events), leader election on a
//! coordination.k8s.io Lease (whether this replica leads shown as metrics),
//! optional CiliumNode CRD registration, the composition that runs the
//! engine only while this replica leads, the watch for another writer of
//! the same CiliumNode fields (the engine pauses while there is one), the
//! CiliumEndpoint GC duty, and the one-off read of the cluster that
//! `ipam-operator plan` plans from.

pub mod crd;
pub mod endpoint_gc;
pub mod leader_metrics;
pub mod lease;
pub mod operator;
pub mod other_writers;
pub mod snapshot;
pub mod store;
