//! [`SteeredCloud`]: the fake cloud with what a test stages around its
//! calls: a latency on every call (on the paused clock), a count of calls in
//! flight at once, panics inside chosen calls, failures the host would
//! report (a trap, a timeout, a refused answer) in place of chosen calls, an
//! instance listing taken at once but handed back only when the test says
//! so, and lies added to the detached-interface listing.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    NetworkInterface, Operation, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
use ipam_fake_cloud::FakeCloud;
use tokio::sync::oneshot;

type Hold = (oneshot::Sender<()>, oneshot::Receiver<()>);

pub struct SteeredCloud {
    pub fake: Arc<FakeCloud>,
    latency: Duration,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    panics: Mutex<HashMap<Operation, u32>>,
    /// Returned in place of the next calls of an operation, in order.
    failures: Mutex<HashMap<Operation, Vec<CloudError>>>,
    held_listing: Mutex<Option<Hold>>,
    /// Listed as detached besides what the fake lists, whatever they are.
    detached_lies: Mutex<Vec<NetworkInterface>>,
}

/// One call in flight, counted until dropped (a panicking call included).
struct Flight<'a>(&'a AtomicUsize);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SteeredCloud {
    /// The fake with every call taking `latency`.
    pub fn new(fake: Arc<FakeCloud>, latency: Duration) -> Self {
        Self {
            fake,
            latency,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            panics: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            held_listing: Mutex::new(None),
            detached_lies: Mutex::new(Vec::new()),
        }
    }

    /// Every detached-interface listing from now on also lists `lies`.
    pub fn lie_in_detached_listings(&self, lies: Vec<NetworkInterface>) {
        *self.detached_lies.lock().unwrap() = lies;
    }

    /// The next `times` calls of `operation` panic before reaching the fake.
    pub fn panic_next(&self, operation: Operation, times: u32) {
        self.panics.lock().unwrap().insert(operation, times);
    }

    /// The next call of `operation` fails with `error` without reaching
    /// the fake (after those staged before it).
    pub fn fail_next_with(&self, operation: Operation, error: CloudError) {
        self.failures
            .lock()
            .unwrap()
            .entry(operation)
            .or_default()
            .push(error);
    }

    /// The next instance listing is taken at once and handed back when the
    /// returned sender fires; the receiver hears when it was taken.
    pub fn hold_next_listing(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (taken_tx, taken_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *self.held_listing.lock().unwrap() = Some((taken_tx, release_rx));
        (taken_rx, release_tx)
    }

    /// The most calls that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    async fn call<T>(
        &self,
        operation: Operation,
        call: impl Future<Output = Result<T, CloudError>>,
    ) -> Result<T, CloudError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let _flight = Flight(&self.in_flight);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let panic_now = {
            let mut panics = self.panics.lock().unwrap();
            match panics.get_mut(&operation) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            }
        };
        if panic_now {
            panic!("a staged panic in {}", operation.wit_name());
        }
        let failure = {
            let mut failures = self.failures.lock().unwrap();
            failures
                .get_mut(&operation)
                .filter(|staged| !staged.is_empty())
                .map(|staged| staged.remove(0))
        };
        if let Some(error) = failure {
            return Err(error);
        }
        call.await
    }
}

#[async_trait]
impl CloudApi for SteeredCloud {
    fn info(&self) -> &ProviderInfo {
        self.fake.info()
    }
    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.call(Operation::GetVpcs, self.fake.get_vpcs()).await
    }
    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.call(Operation::GetSubnets, self.fake.get_subnets())
            .await
    }
    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.call(
            Operation::GetSecurityGroups,
            self.fake.get_security_groups(),
        )
        .await
    }
    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        let listing = self
            .call(Operation::GetInstances, self.fake.get_instances(ids))
            .await;
        let held = self.held_listing.lock().unwrap().take();
        if let Some((taken, release)) = held {
            let _ = taken.send(());
            let _ = release.await;
        }
        listing
    }
    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let mut listed = self
            .call(
                Operation::GetDetachedInterfaces,
                self.fake.get_detached_interfaces(tags),
            )
            .await?;
        listed.extend(self.detached_lies.lock().unwrap().iter().cloned());
        Ok(listed)
    }
    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        self.call(
            Operation::GetInstanceLimits,
            self.fake.get_instance_limits(instance_type),
        )
        .await
    }
    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        self.call(
            Operation::CreateInterface,
            self.fake.create_interface(request),
        )
        .await
    }
    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        self.call(
            Operation::DeleteInterface,
            self.fake.delete_interface(interface_id),
        )
        .await
    }
    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        self.call(
            Operation::AssignIps,
            self.fake.assign_ips(interface_id, request),
        )
        .await
    }
    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[std::net::Ipv4Addr],
        prefixes: &[ipam_cloud::Ipv4Net],
    ) -> Result<(), CloudError> {
        self.call(
            Operation::UnassignIps,
            self.fake.unassign_ips(interface_id, addresses, prefixes),
        )
        .await
    }
}
