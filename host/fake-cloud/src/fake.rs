//! [`FakeCloud`]: the wasm mock provider's own state machine
//! ([`mock_provider::Cloud`], compiled natively) behind a mutex, as a
//! [`CloudApi`]. Each call is counted, meets its injected fault (the mock's
//! faults, armed at run time), is checked against the declared capabilities,
//! and then runs on the mock's cloud; answers and errors are converted to the
//! `ipam-cloud` model. The lock is taken and dropped inside each call and
//! never held across an await (the calls never wait), so the fake may be
//! shared by any number of tasks.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use ipam_cloud::{
    Assigned, Capabilities, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits,
    IpRequest, NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet,
    Tag, Vpc,
};
use ipam_provider_sdk as sdk;
use mock_provider::Cloud;

use crate::calls::CallCounter;
use crate::convert::{self, IntoModel};

/// The provider name the fake reports, and its errors carry.
pub const PROVIDER_NAME: &str = "fake";

/// The mock's attach step inside create-interface, as its faults name it.
const ATTACH: &str = "attach-interface";

/// An in-process cloud running the wasm mock provider's state machine; see
/// the crate documentation.
#[derive(Debug)]
pub struct FakeCloud {
    info: ProviderInfo,
    cloud: Mutex<Cloud>,
    calls: CallCounter,
}

impl FakeCloud {
    pub(crate) fn new(cloud: Cloud, capabilities: Capabilities, max_concurrency: u32) -> Self {
        Self {
            info: ProviderInfo {
                name: PROVIDER_NAME.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                capabilities,
                max_concurrency,
                rate_model: Some(convert::rate_model(mock_provider::rate_model())),
            },
            cloud: Mutex::new(cloud),
            calls: CallCounter::default(),
        }
    }

    /// The same cloud declaring other capabilities (before it is shared:
    /// `info` hands out a reference).
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.info.capabilities = capabilities;
        self
    }

    /// Calls made of `operation` so far, failed ones included.
    pub fn calls(&self, operation: Operation) -> u64 {
        self.calls.calls(operation)
    }

    /// Calls made of every operation that changes the cloud.
    pub fn mutating_calls(&self) -> u64 {
        self.calls.mutating()
    }

    /// The next `times` calls of `operation` fail and change nothing: a mock
    /// fault on the operation. The error has `error`'s case (and its
    /// retry-after, to the millisecond) and the mock's message, `injected
    /// fault on <operation>`. Armed faults of one operation fire in the
    /// order armed.
    pub fn fail_next(&self, operation: Operation, times: u32, error: ProviderError) {
        self.arm(convert::fault(operation.wit_name(), times, &error, false));
    }

    /// The next `times` create-interface calls that pass their checks create
    /// their interface, leave it detached (with the request's tags and
    /// index) and fail: a leak for GC to find. This is the mock's
    /// `attach-interface` fault with `leak`; the error has `error`'s case and
    /// the mock's message, `injected fault on attach-interface`.
    pub fn leak_next_creates(&self, times: u32, error: ProviderError) {
        self.arm(convert::fault(ATTACH, times, &error, true));
    }

    fn arm(&self, fault: mock_provider::FaultSpec) {
        if fault.times == 0 {
            return;
        }
        // The operation is a WIT name or attach-interface, and the error a
        // WIT case: the mock knows them all.
        if let Err(error) = self.lock().faults.arm(fault) {
            panic!("the mock refused a fault: {error}");
        }
    }

    /// An instance as get-instances would answer, without counting a call.
    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.lock().instances(&[id.to_string()]).into_model().pop()
    }

    /// Every detached interface, without counting a call.
    pub fn detached(&self) -> Vec<NetworkInterface> {
        self.lock().detached_interfaces(&[]).into_model()
    }

    /// A subnet as get-subnets would answer, without counting a call.
    pub fn subnet(&self, id: &str) -> Option<Subnet> {
        self.lock()
            .subnets()
            .into_iter()
            .find(|s| s.id == id)
            .map(IntoModel::into_model)
    }

    fn lock(&self) -> MutexGuard<'_, Cloud> {
        // Every mock operation checks before it changes anything, so a
        // panic elsewhere cannot leave the cloud half-changed.
        self.cloud.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count the call, fire its fault or refuse it for a missing
    /// capability, else run it on the mock's cloud.
    fn call<T: IntoModel>(
        &self,
        operation: Operation,
        allowed: Result<(), ProviderError>,
        run: impl FnOnce(&mut Cloud) -> Result<T, sdk::Error>,
    ) -> Result<T::Model, CloudError> {
        self.calls.record(operation);
        let mut cloud = self.lock();
        let result = match cloud.faults.check(operation.wit_name()) {
            Some(fault) => Err(fault.error.into_model()),
            None => allowed.and_then(|()| {
                run(&mut cloud)
                    .map(IntoModel::into_model)
                    .map_err(IntoModel::into_model)
            }),
        };
        result.map_err(|error| CloudError::Provider {
            provider: PROVIDER_NAME.into(),
            error,
        })
    }

    /// A missing capability: invalid-argument, as the WIT says.
    fn require(&self, has: bool, what: &str) -> Result<(), ProviderError> {
        if has {
            Ok(())
        } else {
            Err(ProviderError::InvalidArgument(format!(
                "the provider cannot {what}"
            )))
        }
    }
}

#[async_trait]
impl CloudApi for FakeCloud {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.call(Operation::GetVpcs, Ok(()), |c| Ok(c.vpcs()))
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.call(Operation::GetSubnets, Ok(()), |c| Ok(c.subnets()))
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.call(Operation::GetSecurityGroups, Ok(()), |c| {
            Ok(c.security_groups())
        })
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.call(Operation::GetInstances, Ok(()), |c| Ok(c.instances(ids)))
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let tags = convert::tags(tags);
        self.call(Operation::GetDetachedInterfaces, Ok(()), |c| {
            Ok(c.detached_interfaces(&tags))
        })
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.call(Operation::GetInstanceLimits, Ok(()), |c| {
            c.instance_limits(instance_type)
        })
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        let caps = self.info.capabilities;
        let allowed = self
            .require(caps.create_interface, "create interfaces")
            .and_then(|()| self.require(caps.prefixes || !request.use_prefixes, "assign prefixes"));
        self.call(Operation::CreateInterface, allowed, |c| {
            c.create_interface(convert::create_request(request))
        })
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        let allowed = self.require(self.info.capabilities.delete_interface, "delete interfaces");
        self.call(Operation::DeleteInterface, allowed, |c| {
            c.delete_interface(interface_id)
        })
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        let prefixes = matches!(request, IpRequest::Prefixes(_));
        let allowed = self.require(
            self.info.capabilities.prefixes || !prefixes,
            "assign prefixes",
        );
        self.call(Operation::AssignIps, allowed, |c| {
            c.assign_ips(interface_id, convert::ip_request(request))
        })
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[std::net::Ipv4Addr],
        prefixes: &[ipam_cloud::Ipv4Net],
    ) -> Result<(), CloudError> {
        let allowed = self.require(self.info.capabilities.release, "release addresses");
        let addresses: Vec<u32> = addresses.iter().map(|a| u32::from(*a)).collect();
        let prefixes: Vec<ipam_provider_sdk::Ipv4Net> = prefixes
            .iter()
            .map(|p| ipam_provider_sdk::Ipv4Net {
                address: u32::from(p.network()),
                length: p.prefix_len(),
            })
            .collect();
        self.call(Operation::UnassignIps, allowed, |c| {
            c.unassign_ips(interface_id, &addresses, &prefixes)
        })
    }
}
