use crate::{
    Assigned, CreateInterfaceRequest, Error, Instance, IpRequest, Ipv4, Ipv4Net, Limits,
    NetworkInterface, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};

/// A cloud provider. The host makes one value per component instance (with
/// `Default`), calls [`Provider::configure`] on it, and then the operations.
///
/// The read operations are required. The mutating ones default to an
/// `invalid-argument` error naming the operation: implement those your
/// [`ProviderInfo::capabilities`] declare. The contract of every operation
/// (idempotence, which errors, what an answer may hold) is documented in
/// `wit/0.2.0/provider.wit`.
pub trait Provider: Default + 'static {
    /// Name, version, capabilities, concurrency and rate model. Must not call
    /// out, and must not depend on settings (it may be called before
    /// `configure`). The rate model names the cloud's buckets and the calls
    /// each operation makes; [`crate::rate::check`] checks it.
    fn info() -> ProviderInfo;

    /// Validate and apply the settings (a JSON document the provider defines;
    /// [`crate::settings::parse`] reads it into your type).
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
        _addresses: &[Ipv4],
        _prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        Err(unsupported("unassign-ips"))
    }
}

/// The error an operation the provider does not implement returns.
pub fn unsupported(operation: &str) -> Error {
    Error::InvalidArgument(format!("{operation} is not supported by this provider"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Capabilities, RateModel};

    /// A provider with the required operations only.
    #[derive(Default)]
    struct ReadOnly;

    impl Provider for ReadOnly {
        fn info() -> ProviderInfo {
            ProviderInfo {
                name: "read-only".into(),
                version: "0.1.0".into(),
                capabilities: Capabilities {
                    create_interface: false,
                    release: false,
                    prefixes: false,
                    delete_interface: false,
                },
                max_concurrency: 1,
                rate_model: RateModel {
                    buckets: Vec::new(),
                    costs: Vec::new(),
                },
            }
        }
        fn configure(&mut self, _settings: &str) -> Result<(), Error> {
            Ok(())
        }
        fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
            Ok(Vec::new())
        }
        fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
            Ok(Vec::new())
        }
        fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
            Ok(Vec::new())
        }
        fn get_instances(&mut self, _ids: &[String]) -> Result<Vec<Instance>, Error> {
            Ok(Vec::new())
        }
        fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
            Err(Error::NotFound(instance_type.to_string()))
        }
    }

    /// The text of an invalid-argument error; any other result fails.
    fn refused<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
        match result {
            Err(Error::InvalidArgument(text)) => text,
            other => panic!("expected invalid-argument, got {other:?}"),
        }
    }

    #[test]
    fn unsupported_names_the_operation() {
        assert_eq!(
            refused::<()>(Err(unsupported("assign-ips"))),
            "assign-ips is not supported by this provider"
        );
    }

    #[test]
    fn mutating_operations_left_out_are_unsupported_and_say_which() {
        let mut provider = ReadOnly;
        let request = CreateInterfaceRequest {
            instance_id: "i-1".into(),
            index: 1,
            subnet_id: "subnet-1".into(),
            security_groups: Vec::new(),
            description: String::new(),
            tags: Vec::new(),
            delete_on_termination: true,
            ipv4_count: 1,
            use_prefixes: false,
        };
        assert!(refused(provider.create_interface(request)).starts_with("create-interface "));
        assert!(refused(provider.delete_interface("eni-1")).starts_with("delete-interface "));
        assert!(
            refused(provider.assign_ips("eni-1", IpRequest::Addresses(1)))
                .starts_with("assign-ips ")
        );
        assert!(refused(provider.unassign_ips("eni-1", &[0x0a00_0005], &[]))
            .starts_with("unassign-ips "));
    }

    #[test]
    fn a_provider_that_creates_nothing_has_no_detached_interfaces() {
        let tags = [Tag {
            key: "ipam-operator/cluster".into(),
            value: "test".into(),
        }];
        match ReadOnly.get_detached_interfaces(&tags) {
            Ok(found) => assert!(found.is_empty(), "{found:?}"),
            Err(error) => panic!("expected none, got {error:?}"),
        }
    }
}
