use crate::{
    Assigned, CreateInterfaceRequest, Error, Instance, IpRequest, Limits, NetworkInterface,
    ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

/// A cloud provider. The host makes one value per component instance (with
/// `Default`), calls [`Provider::configure`] on it, and then the operations.
///
/// The read operations are required. The mutating ones default to an
/// `invalid-argument` error naming the operation: implement those your
/// [`ProviderInfo::capabilities`] declare. The contract of every operation
/// (idempotence, which errors) is documented in `wit/0.1.0/provider.wit`.
pub trait Provider: Default + 'static {
    /// Name, version, capabilities and concurrency. Must not call out.
    fn info() -> ProviderInfo;

    /// Validate and apply the settings (a JSON document the provider defines).
    fn configure(&mut self, settings: &str) -> Result<(), Error>;

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error>;
    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error>;
    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error>;
    /// All selected instances when `ids` is empty, else those named.
    fn get_instances(&mut self, ids: &[String]) -> Result<Vec<Instance>, Error>;
    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error>;

    fn get_detached_interfaces(&mut self, _tags: &[Tag]) -> Result<Vec<NetworkInterface>, Error> {
        Ok(Vec::new())
    }
    fn create_interface(
        &mut self,
        _request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        Err(unsupported("create-interface"))
    }
    fn delete_interface(&mut self, _interface_id: &str) -> Result<(), Error> {
        Err(unsupported("delete-interface"))
    }
    fn assign_ips(&mut self, _interface_id: &str, _request: IpRequest) -> Result<Assigned, Error> {
        Err(unsupported("assign-ips"))
    }
    fn unassign_ips(
        &mut self,
        _interface_id: &str,
        _addresses: &[String],
        _prefixes: &[String],
    ) -> Result<(), Error> {
        Err(unsupported("unassign-ips"))
    }
}

/// The error an operation the provider does not implement returns.
pub fn unsupported(operation: &str) -> Error {
    Error::InvalidArgument(format!("{operation} is not supported by this provider"))
}
