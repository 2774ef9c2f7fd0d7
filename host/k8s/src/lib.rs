//! The Kubernetes side of the operator: the engine's `NodeStore` over the
//! API server (a watch of CiliumNodes, merge patches of the fields the
//! operator owns, pods pending per node, Events), leader election on a
//! coordination.k8s.io Lease, optional CiliumNode CRD registration, the
//! composition that runs the engine only while this replica leads, the
//! watch for another writer of the same CiliumNode fields (the engine
//! pauses while there is one), and the CiliumEndpoint GC duty.

pub mod crd;
pub mod endpoint_gc;
pub mod lease;
pub mod operator;
pub mod other_writers;
pub mod store;
