//! The engine's view of a cloud: the [`CloudApi`] trait, its plain data types,
//! its typed errors, the [`Operation`]s of the WIT contract, the cloud's rate
//! model, the credentials a provider is handed, and the conformance suite every
//! implementation is checked against. The wasm provider runtime is one
//! implementation; test doubles and middleware (rate limits, metrics) are
//! others. Nothing here knows about wasmtime, tokio or HTTP.

pub mod answer;
mod api;
pub mod conformance;
pub mod credentials;
mod error;
mod model;
mod operation;
pub mod rate;

pub use api::CloudApi;
pub use error::{CloudError, ProviderError, RESPONSE_CODES};
pub use ipnet::Ipv4Net;
pub use model::{
    Assigned, Capabilities, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    NetworkInterface, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
pub use operation::Operation;
