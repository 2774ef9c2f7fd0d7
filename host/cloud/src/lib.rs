//! The engine's view of a cloud: the [`CloudApi`] trait, its plain data types
//! and its typed errors. The wasm provider runtime is one implementation; test
//! doubles and middleware (rate limits, metrics) are others. Nothing here knows
//! about wasmtime.

use std::time::Duration;

use async_trait::async_trait;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vpc {
    pub id: String,
    pub primary_cidr: String,
    pub cidrs: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub cidr: String,
    pub availability_zone: String,
    pub vpc_id: String,
    pub available_addresses: u32,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub vpc_id: String,
    pub tags: Vec<Tag>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkInterface {
    pub id: String,
    pub mac: String,
    /// Device index on its instance; 0 is the primary interface.
    pub index: u32,
    pub subnet_id: String,
    pub vpc_id: String,
    pub primary_ip: String,
    pub addresses: Vec<String>,
    pub prefixes: Vec<String>,
    pub security_groups: Vec<String>,
    pub tags: Vec<Tag>,
    pub instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub availability_zone: String,
    pub vpc_id: String,
    pub interfaces: Vec<NetworkInterface>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_interfaces: u32,
    /// Address slots per interface, the primary included; a /28 takes one.
    pub ipv4_per_interface: u32,
    pub ipv6_per_interface: u32,
    pub prefix_delegation: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities {
    pub create_interface: bool,
    pub release: bool,
    pub prefixes: bool,
    pub delete_interface: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    pub name: String,
    pub version: String,
    pub capabilities: Capabilities,
    pub max_concurrency: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateInterfaceRequest {
    pub instance_id: String,
    pub index: u32,
    pub subnet_id: String,
    pub security_groups: Vec<String>,
    pub description: String,
    pub tags: Vec<Tag>,
    pub delete_on_termination: bool,
    pub ipv4_count: u32,
    pub use_prefixes: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRequest {
    Addresses(u32),
    Prefixes(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assigned {
    pub addresses: Vec<String>,
    pub prefixes: Vec<String>,
}

/// The typed error a provider returned (the WIT `error` variant).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("throttled (retry after {0:?})")]
    Throttled(Duration),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("interface limit: {0}")]
    InterfaceLimit(String),
    #[error("address limit: {0}")]
    AddressLimit(String),
    #[error("subnet full: {0}")]
    SubnetFull(String),
    #[error("insufficient prefixes: {0}")]
    InsufficientPrefixes(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("transient: {0}")]
    Transient(String),
    #[error("{0}")]
    Other(String),
}

/// Why a call on a cloud failed. Only [`CloudError::Provider`] comes from the
/// provider's own logic; the others are the host stopping a misbehaving or
/// unreachable provider. None of them is fatal to the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    #[error("provider {provider}: {error}")]
    Provider {
        provider: String,
        error: ProviderError,
    },
    #[error("provider {provider} trapped in {operation}: {message}")]
    Trap {
        provider: String,
        operation: &'static str,
        message: String,
    },
    #[error("provider {provider} did not finish {operation} within {limit:?}")]
    Timeout {
        provider: String,
        operation: &'static str,
        limit: Duration,
    },
    #[error("provider {provider} exceeded its memory cap of {limit_bytes} bytes in {operation}")]
    MemoryLimit {
        provider: String,
        operation: &'static str,
        limit_bytes: usize,
    },
    #[error("provider {provider}: egress to {destination} denied: {reason}")]
    EgressDenied {
        provider: String,
        destination: String,
        reason: String,
    },
    #[error("provider {provider}: host error in {operation}: {message}")]
    Host {
        provider: String,
        operation: &'static str,
        message: String,
    },
}

/// Every value [`CloudError::response_code`] (or a success, `ok`) can take.
pub const RESPONSE_CODES: &[&str] = &[
    "ok",
    "throttled",
    "not-found",
    "interface-limit",
    "address-limit",
    "subnet-full",
    "insufficient-prefixes",
    "conflict",
    "invalid-argument",
    "unauthorized",
    "transient",
    "other",
    "trap",
    "timeout",
    "memory-limit",
    "egress-denied",
    "host",
];

impl CloudError {
    /// A short label for metrics: the WIT error case, or what the host did.
    pub fn response_code(&self) -> &'static str {
        match self {
            CloudError::Provider { error, .. } => match error {
                ProviderError::Throttled(_) => "throttled",
                ProviderError::NotFound(_) => "not-found",
                ProviderError::InterfaceLimit(_) => "interface-limit",
                ProviderError::AddressLimit(_) => "address-limit",
                ProviderError::SubnetFull(_) => "subnet-full",
                ProviderError::InsufficientPrefixes(_) => "insufficient-prefixes",
                ProviderError::Conflict(_) => "conflict",
                ProviderError::InvalidArgument(_) => "invalid-argument",
                ProviderError::Unauthorized(_) => "unauthorized",
                ProviderError::Transient(_) => "transient",
                ProviderError::Other(_) => "other",
            },
            CloudError::Trap { .. } => "trap",
            CloudError::Timeout { .. } => "timeout",
            CloudError::MemoryLimit { .. } => "memory-limit",
            CloudError::EgressDenied { .. } => "egress-denied",
            CloudError::Host { .. } => "host",
        }
    }

    /// The provider's typed error, when that is what this is.
    pub fn provider_error(&self) -> Option<&ProviderError> {
        match self {
            CloudError::Provider { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A cloud, as the IPAM engine uses it. Every method may be called
/// concurrently; implementations bound their own concurrency. The contract of
/// each operation is the WIT's (`wit/0.1.0/provider.wit`).
#[async_trait]
pub trait CloudApi: Send + Sync {
    fn info(&self) -> &ProviderInfo;
    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError>;
    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError>;
    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError>;
    /// All instances when `ids` is empty; unknown ids are left out.
    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError>;
    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError>;
    async fn get_instance_limits(&self, instance_type: &str) -> Result<Limits, CloudError>;
    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError>;
    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError>;
    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError>;
    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), CloudError>;
}

/// A shared cloud is a cloud: middleware can wrap an `Arc` the engine and
/// others hold too.
#[async_trait]
impl<T: CloudApi + ?Sized> CloudApi for std::sync::Arc<T> {
    fn info(&self) -> &ProviderInfo {
        (**self).info()
    }
    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        (**self).get_vpcs().await
    }
    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        (**self).get_subnets().await
    }
    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        (**self).get_security_groups().await
    }
    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        (**self).get_instances(ids).await
    }
    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        (**self).get_detached_interfaces(tags).await
    }
    async fn get_instance_limits(&self, instance_type: &str) -> Result<Limits, CloudError> {
        (**self).get_instance_limits(instance_type).await
    }
    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        (**self).create_interface(request).await
    }
    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        (**self).delete_interface(interface_id).await
    }
    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        (**self).assign_ips(interface_id, request).await
    }
    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), CloudError> {
        (**self)
            .unassign_ips(interface_id, addresses, prefixes)
            .await
    }
}
