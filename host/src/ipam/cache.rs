//! The engine's picture of the cloud. Filled by a full resync (at start and
//! periodically), refreshed one instance at a time when that instance is in
//! doubt, and kept current by the results of the engine's own mutations, so a
//! mutation never costs a resync of anything (Cilium resyncs every node after
//! each one). Instance-type limits are fetched once, on first use, so a new
//! instance type never needs a restart and a known one never costs a call.
//!
//! Locks are held for map updates only, never across a cloud call.

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::cloud::{
    Assigned, CloudApi, CloudError, Instance, Limits, NetworkInterface, SecurityGroup, Subnet, Vpc,
};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudSnapshot {
    pub vpcs: BTreeMap<String, Vpc>,
    pub subnets: BTreeMap<String, Subnet>,
    pub security_groups: BTreeMap<String, SecurityGroup>,
    pub instances: BTreeMap<String, Instance>,
}

#[derive(Default)]
pub struct InstanceCache {
    snapshot: RwLock<CloudSnapshot>,
    limits: RwLock<BTreeMap<String, Limits>>,
}

fn by_id<T>(items: Vec<T>, id: impl Fn(&T) -> &str) -> BTreeMap<String, T> {
    items
        .into_iter()
        .map(|item| (id(&item).to_string(), item))
        .collect()
}

/// Addresses a set of assigned addresses and prefixes take from a subnet.
fn addresses_taken(addresses: usize, prefixes: usize) -> u32 {
    u32::try_from(addresses + 16 * prefixes).unwrap_or(u32::MAX)
}

impl InstanceCache {
    pub fn new() -> Self {
        Self::default()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CloudSnapshot> {
        // A panic while holding the lock cannot leave a half-applied map
        // update that matters: the next resync replaces everything.
        self.snapshot
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A copy of the whole picture.
    pub fn snapshot(&self) -> CloudSnapshot {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn subnets(&self) -> Vec<Subnet> {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .subnets
            .values()
            .cloned()
            .collect()
    }

    pub fn security_groups(&self) -> Vec<SecurityGroup> {
        let snapshot = self
            .snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        snapshot.security_groups.values().cloned().collect()
    }

    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .instances
            .get(id)
            .cloned()
    }

    /// Replace everything with what the cloud says now.
    pub async fn resync_all(&self, cloud: &dyn CloudApi) -> Result<(), CloudError> {
        let vpcs = cloud.get_vpcs().await?;
        let subnets = cloud.get_subnets().await?;
        let security_groups = cloud.get_security_groups().await?;
        let instances = cloud.get_instances(&[]).await?;
        *self.write() = CloudSnapshot {
            vpcs: by_id(vpcs, |v| &v.id),
            subnets: by_id(subnets, |s| &s.id),
            security_groups: by_id(security_groups, |g| &g.id),
            instances: by_id(instances, |i| &i.id),
        };
        Ok(())
    }

    /// Refresh one instance (and the subnets, whose free counts it changes);
    /// an instance the cloud no longer has is dropped.
    pub async fn resync_instance(
        &self,
        cloud: &dyn CloudApi,
        id: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let found = cloud
            .get_instances(&[id.to_string()])
            .await?
            .into_iter()
            .find(|i| i.id == id);
        let subnets = cloud.get_subnets().await?;
        let mut snapshot = self.write();
        snapshot.subnets = by_id(subnets, |s| &s.id);
        match &found {
            Some(instance) => snapshot.instances.insert(id.to_string(), instance.clone()),
            None => snapshot.instances.remove(id),
        };
        Ok(found)
    }

    /// Limits of an instance type: cached, fetched on first use.
    pub async fn limits(
        &self,
        cloud: &dyn CloudApi,
        instance_type: &str,
    ) -> Result<Limits, CloudError> {
        let cached = self
            .limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(instance_type)
            .copied();
        if let Some(limits) = cached {
            return Ok(limits);
        }
        let limits = cloud.get_instance_limits(instance_type).await?;
        self.limits
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(instance_type.to_string(), limits);
        Ok(limits)
    }

    fn take_from_subnet(snapshot: &mut CloudSnapshot, subnet_id: &str, count: u32) {
        if let Some(subnet) = snapshot.subnets.get_mut(subnet_id) {
            subnet.available_addresses = subnet.available_addresses.saturating_sub(count);
        }
    }

    fn return_to_subnet(snapshot: &mut CloudSnapshot, subnet_id: &str, count: u32) {
        if let Some(subnet) = snapshot.subnets.get_mut(subnet_id) {
            subnet.available_addresses = subnet.available_addresses.saturating_add(count);
        }
    }

    /// Record an interface create-interface returned.
    pub fn created(&self, instance_id: &str, interface: NetworkInterface) {
        let mut snapshot = self.write();
        let taken = 1 + addresses_taken(interface.addresses.len(), interface.prefixes.len());
        Self::take_from_subnet(&mut snapshot, &interface.subnet_id, taken);
        if let Some(instance) = snapshot.instances.get_mut(instance_id) {
            instance.interfaces.retain(|i| i.id != interface.id);
            instance.interfaces.push(interface);
            instance.interfaces.sort_by_key(|i| i.index);
        }
    }

    /// Record what assign-ips added to an interface.
    pub fn assigned(&self, instance_id: &str, interface_id: &str, assigned: &Assigned) {
        let mut snapshot = self.write();
        let Some(subnet_id) = snapshot
            .instances
            .get_mut(instance_id)
            .and_then(|i| i.interfaces.iter_mut().find(|e| e.id == interface_id))
            .map(|eni| {
                eni.addresses.extend(assigned.addresses.iter().cloned());
                eni.prefixes.extend(assigned.prefixes.iter().cloned());
                eni.subnet_id.clone()
            })
        else {
            return;
        };
        let taken = addresses_taken(assigned.addresses.len(), assigned.prefixes.len());
        Self::take_from_subnet(&mut snapshot, &subnet_id, taken);
    }

    /// Record a successful unassign-ips.
    pub fn unassigned(
        &self,
        instance_id: &str,
        interface_id: &str,
        addresses: &[String],
        prefixes: &[String],
    ) {
        let mut snapshot = self.write();
        let Some((subnet_id, freed)) = snapshot
            .instances
            .get_mut(instance_id)
            .and_then(|i| i.interfaces.iter_mut().find(|e| e.id == interface_id))
            .map(|eni| {
                let before = (eni.addresses.len(), eni.prefixes.len());
                eni.addresses.retain(|a| !addresses.contains(a));
                eni.prefixes.retain(|p| !prefixes.contains(p));
                let freed = addresses_taken(
                    before.0 - eni.addresses.len(),
                    before.1 - eni.prefixes.len(),
                );
                (eni.subnet_id.clone(), freed)
            })
        else {
            return;
        };
        Self::return_to_subnet(&mut snapshot, &subnet_id, freed);
    }

    /// Record a successful delete-interface.
    pub fn deleted(&self, instance_id: &str, interface_id: &str) {
        let mut snapshot = self.write();
        let Some(removed) = snapshot
            .instances
            .get_mut(instance_id)
            .and_then(|instance| {
                let at = instance
                    .interfaces
                    .iter()
                    .position(|e| e.id == interface_id)?;
                Some(instance.interfaces.remove(at))
            })
        else {
            return;
        };
        let freed = 1 + addresses_taken(removed.addresses.len(), removed.prefixes.len());
        Self::return_to_subnet(&mut snapshot, &removed.subnet_id, freed);
    }
}
