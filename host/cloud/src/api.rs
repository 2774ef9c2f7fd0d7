//! The [`CloudApi`] trait the engine calls, and its blanket impl for `Arc`.

use std::net::Ipv4Addr;

use async_trait::async_trait;
use ipnet::Ipv4Net;

use crate::error::CloudError;
use crate::model::{
    Assigned, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest, NetworkInterface,
    ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

/// A cloud, as the IPAM engine uses it. Every method may be called
/// concurrently; implementations bound their own concurrency. The contract of
/// each operation is the WIT's (`wit/0.2.0/provider.wit`).
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
    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError>;
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
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
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
    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
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
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), CloudError> {
        (**self)
            .unassign_ips(interface_id, addresses, prefixes)
            .await
    }
}
