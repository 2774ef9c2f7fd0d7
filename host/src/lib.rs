//! Host of the cloud-IPAM operator: the provider runtime (wasmtime), the
//! [`cloud::CloudApi`] trait the IPAM engine uses, and the conformance suite
//! every provider is checked against.

pub mod clock;
pub mod cloud;
pub mod conformance;
pub mod ipam;
pub mod k8s;
pub mod limits;
pub mod metrics;
pub mod provider;
pub mod serve;
pub mod simulate;
