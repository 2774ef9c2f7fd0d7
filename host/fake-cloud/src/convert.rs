//! Between the mock's types (the SDK's, generated from `wit/0.1.0`) and the
//! host's `ipam-cloud` model, field for field, as the provider runtime
//! converts a component's answers (`host/provider-runtime/src/wit/v0_1_0.rs`).
//! Both sides are foreign to this crate, so the conversions are a local
//! trait and functions rather than `From` impls.

use std::time::Duration;

use ipam_cloud as model;
use ipam_provider_sdk as sdk;
use mock_provider::FaultSpec;

fn ip(address: &sdk::Ipv4) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(*address)
}

/// The mock's own networks: it only ever makes well-formed ones.
fn net(network: &sdk::Ipv4Net) -> model::Ipv4Net {
    model::Ipv4Net::new(ip(&network.address), network.length)
        .expect("the mock makes networks of at most 32 bits")
}

/// The rate model the mock declares, as the model has it.
pub(crate) fn rate_model(model: sdk::RateModel) -> model::rate::RateModel {
    use model::rate::{ApiCall, DeclaredBucket, OperationCost};
    model::rate::RateModel {
        buckets: model
            .buckets
            .into_iter()
            .map(|b| DeclaredBucket {
                name: b.name,
                burst: b.burst,
                per_second: b.per_second,
            })
            .collect(),
        costs: model
            .costs
            .into_iter()
            .map(|c| OperationCost {
                operation: operation(c.operation),
                calls: c
                    .calls
                    .into_iter()
                    .map(|call| ApiCall {
                        name: call.name,
                        bucket: call.bucket,
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn operation(operation: sdk::Operation) -> model::Operation {
    model::Operation::from_wit_name(ipam_provider_sdk::rate::operation_name(operation))
        .expect("the SDK and the host name the same operations")
}

/// An SDK value as the model has it.
pub(crate) trait IntoModel {
    type Model;
    fn into_model(self) -> Self::Model;
}

impl IntoModel for () {
    type Model = ();
    fn into_model(self) {}
}

impl<T: IntoModel> IntoModel for Vec<T> {
    type Model = Vec<T::Model>;
    fn into_model(self) -> Self::Model {
        self.into_iter().map(IntoModel::into_model).collect()
    }
}

impl IntoModel for sdk::Tag {
    type Model = model::Tag;
    fn into_model(self) -> model::Tag {
        model::Tag {
            key: self.key,
            value: self.value,
        }
    }
}

impl IntoModel for sdk::Vpc {
    type Model = model::Vpc;
    fn into_model(self) -> model::Vpc {
        model::Vpc {
            id: self.id,
            primary_cidr: net(&self.primary_cidr),
            cidrs: self.cidrs.iter().map(net).collect(),
        }
    }
}

impl IntoModel for sdk::Subnet {
    type Model = model::Subnet;
    fn into_model(self) -> model::Subnet {
        model::Subnet {
            id: self.id,
            cidr: net(&self.cidr),
            availability_zone: self.availability_zone,
            vpc_id: self.vpc_id,
            available_addresses: self.available_addresses,
            tags: self.tags.into_model(),
        }
    }
}

impl IntoModel for sdk::SecurityGroup {
    type Model = model::SecurityGroup;
    fn into_model(self) -> model::SecurityGroup {
        model::SecurityGroup {
            id: self.id,
            vpc_id: self.vpc_id,
            tags: self.tags.into_model(),
        }
    }
}

impl IntoModel for sdk::NetworkInterface {
    type Model = model::NetworkInterface;
    fn into_model(self) -> model::NetworkInterface {
        model::NetworkInterface {
            id: self.id,
            mac: self.mac,
            index: self.index,
            subnet_id: self.subnet_id,
            vpc_id: self.vpc_id,
            primary_ip: ip(&self.primary_ip),
            addresses: self.addresses.iter().map(ip).collect(),
            prefixes: self.prefixes.iter().map(net).collect(),
            security_groups: self.security_groups,
            tags: self.tags.into_model(),
            instance_id: self.instance_id,
        }
    }
}

impl IntoModel for sdk::Instance {
    type Model = model::Instance;
    fn into_model(self) -> model::Instance {
        model::Instance {
            id: self.id,
            instance_type: self.instance_type,
            availability_zone: self.availability_zone,
            vpc_id: self.vpc_id,
            interfaces: self.interfaces.into_model(),
        }
    }
}

/// The WIT's `limits` is the model's `InstanceLimits`.
impl IntoModel for sdk::Limits {
    type Model = model::InstanceLimits;
    fn into_model(self) -> model::InstanceLimits {
        model::InstanceLimits {
            max_interfaces: self.max_interfaces,
            ipv4_per_interface: self.ipv4_per_interface,
            ipv6_per_interface: self.ipv6_per_interface,
            prefix_delegation: self.prefix_delegation,
        }
    }
}

impl IntoModel for sdk::Assigned {
    type Model = model::Assigned;
    fn into_model(self) -> model::Assigned {
        model::Assigned {
            addresses: self.addresses.iter().map(ip).collect(),
            prefixes: self.prefixes.iter().map(net).collect(),
        }
    }
}

impl IntoModel for sdk::Error {
    type Model = model::ProviderError;
    fn into_model(self) -> model::ProviderError {
        use model::ProviderError as P;
        use sdk::Error as E;
        match self {
            E::Throttled(ms) => P::Throttled(Duration::from_millis(ms)),
            E::NotFound(m) => P::NotFound(m),
            E::InterfaceLimit(m) => P::InterfaceLimit(m),
            E::AddressLimit(m) => P::AddressLimit(m),
            E::SubnetFull(m) => P::SubnetFull(m),
            E::InsufficientPrefixes(m) => P::InsufficientPrefixes(m),
            E::Conflict(m) => P::Conflict(m),
            E::InvalidArgument(m) => P::InvalidArgument(m),
            E::Unauthorized(m) => P::Unauthorized(m),
            E::Transient(m) => P::Transient(m),
            E::Other(m) => P::Other(m),
        }
    }
}

pub(crate) fn tags(tags: &[model::Tag]) -> Vec<sdk::Tag> {
    tags.iter()
        .map(|tag| sdk::Tag {
            key: tag.key.clone(),
            value: tag.value.clone(),
        })
        .collect()
}

pub(crate) fn create_request(r: &model::CreateInterfaceRequest) -> sdk::CreateInterfaceRequest {
    sdk::CreateInterfaceRequest {
        instance_id: r.instance_id.clone(),
        index: r.index,
        subnet_id: r.subnet_id.clone(),
        security_groups: r.security_groups.clone(),
        description: r.description.clone(),
        tags: tags(&r.tags),
        delete_on_termination: r.delete_on_termination,
        ipv4_count: r.ipv4_count,
        use_prefixes: r.use_prefixes,
    }
}

pub(crate) fn ip_request(r: model::IpRequest) -> sdk::IpRequest {
    match r {
        model::IpRequest::Addresses(n) => sdk::IpRequest::Addresses(n),
        model::IpRequest::Prefixes(n) => sdk::IpRequest::Prefixes(n),
    }
}

/// The model's limits as the mock's settings declare an instance type.
pub(crate) fn instance_type(l: model::InstanceLimits) -> mock_provider::InstanceTypeSpec {
    mock_provider::InstanceTypeSpec {
        max_interfaces: l.max_interfaces,
        ipv4_per_interface: l.ipv4_per_interface,
        ipv6_per_interface: l.ipv6_per_interface,
        prefix_delegation: l.prefix_delegation,
    }
}

/// A mock fault making `operation` (a WIT name, or `attach-interface`) fail
/// the next `times` calls with `error`'s case and retry-after (to the
/// millisecond); the message is the mock's own.
pub(crate) fn fault(
    operation: &str,
    times: u32,
    error: &model::ProviderError,
    leak: bool,
) -> FaultSpec {
    let retry_after_ms = match error {
        model::ProviderError::Throttled(after) => {
            u64::try_from(after.as_millis()).unwrap_or(u64::MAX)
        }
        _ => 0,
    };
    FaultSpec {
        operation: operation.into(),
        // The WIT name of the error's case, as metrics and the mock's
        // fault settings name it.
        error: model::CloudError::Provider {
            provider: String::new(),
            error: error.clone(),
        }
        .response_code()
        .into(),
        times,
        after: 0,
        retry_after_ms,
        leak,
    }
}
