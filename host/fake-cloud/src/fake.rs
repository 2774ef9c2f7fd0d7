//! [`FakeCloud`]: the world behind a mutex, as a [`CloudApi`]. Each call is
//! counted, meets its injected fault (if any), is checked against the
//! declared capabilities, and then runs on the world. The lock is taken and
//! dropped inside each call and never held across an await (the calls never
//! wait), so the fake may be shared by any number of tasks.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use ipam_cloud::{
    Assigned, Capabilities, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits,
    IpRequest, NetworkInterface, Operation, ProviderError, ProviderInfo, SecurityGroup, Subnet,
    Tag, Vpc,
};

use crate::calls::CallCounter;
use crate::faults::Faults;
use crate::world::{invalid, Attach, World};

/// The provider name the fake reports, and its errors carry.
pub const PROVIDER_NAME: &str = "fake";

#[derive(Debug, Default)]
struct State {
    world: World,
    faults: Faults,
}

/// An in-process cloud with the wasm mock provider's rules; see the crate
/// documentation.
#[derive(Debug)]
pub struct FakeCloud {
    info: ProviderInfo,
    state: Mutex<State>,
    calls: CallCounter,
}

impl FakeCloud {
    pub(crate) fn new(world: World, capabilities: Capabilities, max_concurrency: u32) -> Self {
        Self {
            info: ProviderInfo {
                name: PROVIDER_NAME.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                capabilities,
                max_concurrency,
            },
            state: Mutex::new(State {
                world,
                faults: Faults::default(),
            }),
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

    /// The next `times` calls of `operation` fail with `error` and change
    /// nothing. Armed faults of one operation fire in the order armed.
    pub fn fail_next(&self, operation: Operation, times: u32, error: ProviderError) {
        self.lock().faults.fail(operation, times, error);
    }

    /// The next `times` create-interface calls that pass their checks create
    /// their interface, leave it detached (with the request's tags and
    /// index) and fail with `error`: a leak for GC to find.
    pub fn leak_next_creates(&self, times: u32, error: ProviderError) {
        self.lock().faults.leak(times, error);
    }

    /// An instance as get-instances would answer, without counting a call.
    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.lock().world.instances(&[id.to_string()]).pop()
    }

    /// Every detached interface, without counting a call.
    pub fn detached(&self) -> Vec<NetworkInterface> {
        self.lock().world.detached_interfaces(&[])
    }

    /// A subnet as get-subnets would answer, without counting a call.
    pub fn subnet(&self, id: &str) -> Option<Subnet> {
        self.lock().world.subnets().into_iter().find(|s| s.id == id)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every world operation checks before it changes anything, so a
        // panic elsewhere cannot leave the world half-changed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Count the call, fire its fault or refuse it for a missing
    /// capability, else run it on the world.
    fn call<T>(
        &self,
        operation: Operation,
        allowed: Result<(), ProviderError>,
        run: impl FnOnce(&mut State) -> Result<T, ProviderError>,
    ) -> Result<T, CloudError> {
        self.calls.record(operation);
        let mut state = self.lock();
        let result = match state.faults.failure(operation) {
            Some(error) => Err(error),
            None => allowed.and_then(|()| run(&mut state)),
        };
        result.map_err(|error| CloudError::Provider {
            provider: PROVIDER_NAME.into(),
            error,
        })
    }

    fn require(&self, has: bool, what: &str) -> Result<(), ProviderError> {
        if has {
            Ok(())
        } else {
            Err(invalid(format!("the provider cannot {what}")))
        }
    }
}

#[async_trait]
impl CloudApi for FakeCloud {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.call(Operation::GetVpcs, Ok(()), |s| Ok(s.world.vpcs.clone()))
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.call(Operation::GetSubnets, Ok(()), |s| Ok(s.world.subnets()))
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.call(Operation::GetSecurityGroups, Ok(()), |s| {
            Ok(s.world.security_groups.values().cloned().collect())
        })
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.call(Operation::GetInstances, Ok(()), |s| {
            Ok(s.world.instances(ids))
        })
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.call(Operation::GetDetachedInterfaces, Ok(()), |s| {
            Ok(s.world.detached_interfaces(tags))
        })
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.call(Operation::GetInstanceLimits, Ok(()), |s| {
            s.world.instance_limits(instance_type)
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
        self.call(Operation::CreateInterface, allowed, |s| {
            let State { world, faults } = s;
            world.create_interface(request, || match faults.leak_now() {
                Some(error) => Attach::Leak(error),
                None => Attach::Yes,
            })
        })
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        let allowed = self.require(self.info.capabilities.delete_interface, "delete interfaces");
        self.call(Operation::DeleteInterface, allowed, |s| {
            s.world.delete_interface(interface_id)
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
        self.call(Operation::AssignIps, allowed, |s| {
            s.world.assign_ips(interface_id, request)
        })
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) -> Result<(), CloudError> {
        let allowed = self.require(self.info.capabilities.release, "release addresses");
        self.call(Operation::UnassignIps, allowed, |s| {
            s.world.unassign_ips(interface_id, addresses, prefixes)
        })
    }
}
