//! The engine's picture of the cloud. Filled by a full resync (at start and
//! periodically), refreshed one instance at a time when that instance is in
//! doubt, and kept current by the results of the engine's own mutations, so a
//! mutation never costs a resync of anything (Cilium resyncs every node after
//! each one). Instance-type limits are fetched once, on first use, so a new
//! instance type never needs a restart and a known one never costs a call.
//!
//! Locks are held for map updates only, never across a cloud call; the one
//! wait across a call is for another task already fetching limits of an
//! instance type not seen before (so that type costs one call, not one per
//! node), and nodes of known types never take it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use ipam_cloud::{
    Assigned, CloudApi, CloudError, Instance, InstanceLimits, Ipv4Net, NetworkInterface,
    SecurityGroup, Subnet, Vpc,
};
use ipam_pool::select::{pool_addresses, prefix_addresses};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudSnapshot {
    pub vpcs: BTreeMap<String, Vpc>,
    pub subnets: BTreeMap<String, Subnet>,
    pub security_groups: BTreeMap<String, SecurityGroup>,
    pub instances: BTreeMap<String, Instance>,
}

/// What the engine changed while a full resync was listing.
#[derive(Default)]
struct ResyncChanges {
    instances: BTreeSet<String>,
    subnets: BTreeSet<String>,
}

#[derive(Default)]
pub struct InstanceCache {
    snapshot: RwLock<CloudSnapshot>,
    limits: RwLock<BTreeMap<String, InstanceLimits>>,
    /// While a full resync is listing: the instances the engine changed
    /// meanwhile. Their cached state is newer than the listing, so the
    /// listing must not overwrite it.
    changed_during_resync: Mutex<Option<ResyncChanges>>,
    /// How long a released address stays out of every pool.
    reuse_cooldown: Duration,
    /// Addresses released (unassigned or deleted with their interface), when.
    released: Mutex<BTreeMap<String, Instant>>,
    /// Held while fetching an unknown instance type's limits, so that nodes
    /// of a new type arriving together cost one call, not one each.
    limits_fetch: tokio::sync::Mutex<()>,
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

    /// A cache whose released addresses stay out of every node's pool for
    /// `cooldown`: a node's stale routes or conntrack entries for an address
    /// must not meet a new pod that got it (the cloud may hand a released
    /// address straight back).
    pub fn with_reuse_cooldown(cooldown: Duration) -> Self {
        Self {
            reuse_cooldown: cooldown,
            ..Self::default()
        }
    }

    /// Addresses in their reuse cooldown now.
    pub fn withheld(&self) -> BTreeSet<String> {
        if self.reuse_cooldown.is_zero() {
            return BTreeSet::new();
        }
        let now = Instant::now();
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        released.retain(|_, at| now.duration_since(*at) < self.reuse_cooldown);
        released.keys().cloned().collect()
    }

    fn remember_released(&self, addresses: impl IntoIterator<Item = String>) {
        if self.reuse_cooldown.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        released.extend(addresses.into_iter().map(|a| (a, now)));
    }

    /// Note a change the engine made to an instance, for a resync in flight.
    fn changed(&self, instance_id: &str) {
        if let Some(changed) = self
            .changed_during_resync
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            changed.instances.insert(instance_id.to_string());
        }
    }

    /// Note a change to a subnet's free count, for a resync in flight.
    fn changed_subnet(&self, subnet_id: &str) {
        if let Some(changed) = self
            .changed_during_resync
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            changed.subnets.insert(subnet_id.to_string());
        }
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

    /// A subnet's CIDR as last listed; empty when the subnet is unknown.
    pub fn subnet_cidr(&self, id: &str) -> String {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .subnets
            .get(id)
            .map(|s| s.cidr.to_string())
            .unwrap_or_default()
    }

    pub fn vpc(&self, id: &str) -> Option<Vpc> {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .vpcs
            .get(id)
            .cloned()
    }

    /// The ids of every interface the cache holds attached to an instance.
    pub fn attached_interfaces(&self) -> std::collections::BTreeSet<String> {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .instances
            .values()
            .flat_map(|instance| instance.interfaces.iter().map(|i| i.id.clone()))
            .collect()
    }

    pub fn instance(&self, id: &str) -> Option<Instance> {
        self.snapshot
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .instances
            .get(id)
            .cloned()
    }

    /// Replace everything with what the cloud says now, except instances the
    /// engine changed while the listing was under way (their cached state
    /// already holds the change; the listing may predate it).
    pub async fn resync_all(&self, cloud: &dyn CloudApi) -> Result<(), CloudError> {
        *self
            .changed_during_resync
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(ResyncChanges::default());
        let listing = async {
            let vpcs = cloud.get_vpcs().await?;
            let subnets = cloud.get_subnets().await?;
            let security_groups = cloud.get_security_groups().await?;
            let instances = cloud.get_instances(&[]).await?;
            Ok::<_, CloudError>((vpcs, subnets, security_groups, instances))
        }
        .await;
        let changed = self
            .changed_during_resync
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        let (vpcs, subnets, security_groups, instances) = listing?;
        let mut snapshot = self.write();
        let mut instances = by_id(instances, |i| &i.id);
        for id in &changed.instances {
            match snapshot.instances.get(id) {
                Some(newer) => instances.insert(id.clone(), newer.clone()),
                None => instances.remove(id),
            };
        }
        let mut subnets = by_id(subnets, |s| &s.id);
        for id in &changed.subnets {
            if let (Some(newer), Some(listed)) = (snapshot.subnets.get(id), subnets.get_mut(id)) {
                listed.available_addresses = newer.available_addresses;
            }
        }
        *snapshot = CloudSnapshot {
            vpcs: by_id(vpcs, |v| &v.id),
            subnets,
            security_groups: by_id(security_groups, |g| &g.id),
            instances,
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
        self.changed(id);
        let mut snapshot = self.write();
        snapshot.subnets = by_id(subnets, |s| &s.id);
        match &found {
            Some(instance) => snapshot.instances.insert(id.to_string(), instance.clone()),
            None => snapshot.instances.remove(id),
        };
        Ok(found)
    }

    /// Limits of an instance type if already fetched (no call).
    pub fn known_limits(&self, instance_type: &str) -> Option<InstanceLimits> {
        self.limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(instance_type)
            .copied()
    }

    /// Limits of an instance type: cached, fetched on first use.
    pub async fn limits(
        &self,
        cloud: &dyn CloudApi,
        instance_type: &str,
    ) -> Result<InstanceLimits, CloudError> {
        if let Some(limits) = self.known_limits(instance_type) {
            return Ok(limits);
        }
        let _fetching = self.limits_fetch.lock().await;
        let fetched_meanwhile = self
            .limits
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(instance_type)
            .copied();
        if let Some(limits) = fetched_meanwhile {
            return Ok(limits);
        }
        let limits = cloud.get_instance_limits(instance_type).await?;
        self.limits
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(instance_type.to_string(), limits);
        Ok(limits)
    }

    fn take_from_subnet(&self, snapshot: &mut CloudSnapshot, subnet_id: &str, count: u32) {
        self.changed_subnet(subnet_id);
        if let Some(subnet) = snapshot.subnets.get_mut(subnet_id) {
            subnet.available_addresses = subnet.available_addresses.saturating_sub(count);
        }
    }

    fn return_to_subnet(&self, snapshot: &mut CloudSnapshot, subnet_id: &str, count: u32) {
        self.changed_subnet(subnet_id);
        if let Some(subnet) = snapshot.subnets.get_mut(subnet_id) {
            subnet.available_addresses = subnet.available_addresses.saturating_add(count);
        }
    }

    /// Record an interface create-interface returned.
    pub fn created(&self, instance_id: &str, interface: NetworkInterface) {
        self.changed(instance_id);
        let mut snapshot = self.write();
        let taken = 1 + addresses_taken(interface.addresses.len(), interface.prefixes.len());
        self.take_from_subnet(&mut snapshot, &interface.subnet_id, taken);
        if let Some(instance) = snapshot.instances.get_mut(instance_id) {
            instance.interfaces.retain(|i| i.id != interface.id);
            instance.interfaces.push(interface);
            instance.interfaces.sort_by_key(|i| i.index);
        }
    }

    /// Record what assign-ips added to an interface. Only what is new counts:
    /// a provider that answers with addresses the interface already had (moto
    /// lists them all, the primary included) must not duplicate them.
    /// Returns how many addresses and prefixes were new (the answer's own
    /// counts when the interface is not cached).
    pub fn assigned(
        &self,
        instance_id: &str,
        interface_id: &str,
        assigned: &Assigned,
    ) -> (usize, usize) {
        self.changed(instance_id);
        let mut snapshot = self.write();
        let Some((subnet_id, new_addresses, new_prefixes)) = snapshot
            .instances
            .get_mut(instance_id)
            .and_then(|i| i.interfaces.iter_mut().find(|e| e.id == interface_id))
            .map(|eni| {
                let before = (eni.addresses.len(), eni.prefixes.len());
                for address in &assigned.addresses {
                    if *address != eni.primary_ip && !eni.addresses.contains(address) {
                        eni.addresses.push(*address);
                    }
                }
                for prefix in &assigned.prefixes {
                    if !eni.prefixes.contains(prefix) {
                        eni.prefixes.push(*prefix);
                    }
                }
                (
                    eni.subnet_id.clone(),
                    eni.addresses.len() - before.0,
                    eni.prefixes.len() - before.1,
                )
            })
        else {
            return (assigned.addresses.len(), assigned.prefixes.len());
        };
        let taken = addresses_taken(new_addresses, new_prefixes);
        self.take_from_subnet(&mut snapshot, &subnet_id, taken);
        (new_addresses, new_prefixes)
    }

    /// Record a successful unassign-ips.
    pub fn unassigned(
        &self,
        instance_id: &str,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) {
        self.changed(instance_id);
        self.remember_released(
            addresses
                .iter()
                .map(ToString::to_string)
                .chain(prefixes.iter().flat_map(prefix_addresses)),
        );
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
        self.return_to_subnet(&mut snapshot, &subnet_id, freed);
    }

    /// Record a successful delete-interface.
    pub fn deleted(&self, instance_id: &str, interface_id: &str) {
        self.changed(instance_id);
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
        self.return_to_subnet(&mut snapshot, &removed.subnet_id, freed);
        drop(snapshot);
        self.remember_released(pool_addresses(&removed, true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn released_addresses_are_withheld_for_the_cooldown() {
        let cache = InstanceCache::with_reuse_cooldown(Duration::from_secs(30));
        cache.unassigned(
            "i-1",
            "eni-1",
            &["10.0.0.9".parse().unwrap()],
            &["10.0.1.16/28".parse().unwrap()],
        );
        let withheld = cache.withheld();
        assert!(withheld.contains("10.0.0.9"));
        assert_eq!(
            withheld.len(),
            17,
            "the address and the sixteen of the prefix"
        );
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(cache.withheld().len(), 17);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(cache.withheld().is_empty(), "free to use again");
        let no_cooldown = InstanceCache::new();
        no_cooldown.unassigned("i-1", "eni-1", &["10.0.0.9".parse().unwrap()], &[]);
        assert!(no_cooldown.withheld().is_empty());
    }
}
