//! Checks of the read operations and of the answers' invariants.

use std::collections::{BTreeMap, BTreeSet};

use super::Recorder;
use crate::answer::{self, KnownNetworks};
use crate::rate::{RateLimits, RateSettings};
use crate::{CloudApi, Instance, InstanceLimits, ProviderError, SecurityGroup, Subnet, Vpc};

/// What the read checks saw, for the mutating checks to build on.
pub struct Snapshot {
    pub subnets: Vec<Subnet>,
    pub instances: Vec<Instance>,
    pub limits: BTreeMap<String, InstanceLimits>,
}

fn unique<'a>(what: &str, ids: impl Iterator<Item = &'a str>) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for id in ids {
        if id.is_empty() {
            return Err(format!("a {what} has an empty id"));
        }
        if !seen.insert(id) {
            return Err(format!("{what} id {id} appears twice"));
        }
    }
    Ok(())
}

fn check_info(cloud: &dyn CloudApi) -> Result<(), String> {
    let info = cloud.info();
    if info.name.is_empty() {
        return Err("empty name".into());
    }
    let parts: Vec<&str> = info
        .version
        .split(['-', '+'])
        .next()
        .unwrap_or("")
        .split('.')
        .collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u64>().is_err()) {
        return Err(format!("version {:?} is not semver", info.version));
    }
    if info.max_concurrency == 0 {
        return Err("max-concurrency is 0".into());
    }
    if let Some(model) = &info.rate_model {
        RateLimits::from_model(model, info.capabilities, &RateSettings::default())
            .map_err(|e| format!("rate model: {e}"))?;
    }
    Ok(())
}

fn check_vpcs(vpcs: &[Vpc]) -> Result<(), String> {
    unique("vpc", vpcs.iter().map(|v| v.id.as_str()))?;
    for vpc in vpcs {
        if !vpc.cidrs.contains(&vpc.primary_cidr) {
            return Err(format!(
                "vpc {}: primary cidr {} is not among its cidrs",
                vpc.id, vpc.primary_cidr
            ));
        }
    }
    Ok(())
}

fn check_subnets(subnets: &[Subnet], vpcs: &[Vpc]) -> Result<(), String> {
    unique("subnet", subnets.iter().map(|s| s.id.as_str()))?;
    for subnet in subnets {
        let net = subnet.cidr;
        let vpc = vpcs
            .iter()
            .find(|v| v.id == subnet.vpc_id)
            .ok_or_else(|| format!("subnet {}: vpc {} was not listed", subnet.id, subnet.vpc_id))?;
        let inside = vpc.cidrs.iter().any(|v| v.contains(&net));
        if !inside {
            return Err(format!(
                "subnet {} ({}) is outside vpc {}",
                subnet.id, subnet.cidr, vpc.id
            ));
        }
        if u64::from(subnet.available_addresses) > 1u64 << (32 - net.prefix_len()) {
            return Err(format!(
                "subnet {}: {} available addresses in a /{}",
                subnet.id,
                subnet.available_addresses,
                net.prefix_len()
            ));
        }
        if subnet.availability_zone.is_empty() {
            return Err(format!("subnet {}: no availability zone", subnet.id));
        }
    }
    Ok(())
}

fn check_security_groups(groups: &[SecurityGroup], vpcs: &[Vpc]) -> Result<(), String> {
    unique("security group", groups.iter().map(|g| g.id.as_str()))?;
    for group in groups {
        if !vpcs.iter().any(|v| v.id == group.vpc_id) {
            return Err(format!(
                "security group {}: vpc {} was not listed",
                group.id, group.vpc_id
            ));
        }
    }
    Ok(())
}

fn check_instances(instances: &[Instance], vpcs: &[Vpc], subnets: &[Subnet]) -> Result<(), String> {
    unique("instance", instances.iter().map(|i| i.id.as_str()))?;
    unique(
        "interface",
        instances
            .iter()
            .flat_map(|i| i.interfaces.iter().map(|e| e.id.as_str())),
    )?;
    let mut known = KnownNetworks::default();
    known.learn_vpcs(vpcs);
    known.learn_subnets(subnets);
    if let Some((_, bad)) = answer::check_instances(instances, &known)
        .into_iter()
        .next()
    {
        return Err(bad.to_string());
    }
    for instance in instances {
        let indices: BTreeSet<u32> = instance.interfaces.iter().map(|i| i.index).collect();
        for eni in &instance.interfaces {
            if let Some(prefix) = eni.prefixes.iter().find(|p| p.prefix_len() != 28) {
                return Err(format!(
                    "instance {} interface {}: prefix {prefix} is not a /28",
                    instance.id, eni.id
                ));
            }
        }
        if !instance.interfaces.is_empty() && !indices.contains(&0) {
            return Err(format!(
                "instance {}: no primary interface at index 0",
                instance.id
            ));
        }
    }
    Ok(())
}

fn check_within_limits(
    instances: &[Instance],
    limits: &BTreeMap<String, InstanceLimits>,
) -> Result<(), String> {
    for instance in instances {
        let Some(l) = limits.get(&instance.instance_type) else {
            continue;
        };
        answer::check_limits(l).map_err(|bad| format!("type {}: {bad}", instance.instance_type))?;
        if instance.interfaces.len() as u32 > l.max_interfaces {
            return Err(format!(
                "instance {} has {} interfaces, its type allows {}",
                instance.id,
                instance.interfaces.len(),
                l.max_interfaces
            ));
        }
        for eni in &instance.interfaces {
            let slots = 1 + eni.addresses.len() + eni.prefixes.len();
            if slots as u32 > l.ipv4_per_interface {
                return Err(format!(
                    "interface {} uses {slots} slots, its type allows {}",
                    eni.id, l.ipv4_per_interface
                ));
            }
        }
    }
    Ok(())
}

/// Run the read checks; `None` when the cloud could not even be listed.
pub async fn run(cloud: &dyn CloudApi, r: &mut Recorder<'_>) -> Option<Snapshot> {
    r.record(
        "info: name, semver version, concurrency, a whole rate model",
        check_info(cloud),
    );

    let vpcs = cloud.get_vpcs().await;
    let subnets = cloud.get_subnets().await;
    let groups = cloud.get_security_groups().await;
    let instances = cloud.get_instances(&[]).await;
    let (vpcs, subnets, groups, instances) = match (vpcs, subnets, groups, instances) {
        (Ok(v), Ok(s), Ok(g), Ok(i)) => (v, s, g, i),
        (v, s, g, i) => {
            let errors: Vec<String> = [v.err(), s.err(), g.err(), i.err()]
                .into_iter()
                .flatten()
                .map(|e| e.to_string())
                .collect();
            r.record(
                "list vpcs, subnets, security groups, instances",
                Err(errors.join("; ")),
            );
            return None;
        }
    };
    r.record("get-vpcs: unique ids, valid cidrs", check_vpcs(&vpcs));
    r.record(
        "get-subnets: unique ids, inside their vpc, capacity",
        check_subnets(&subnets, &vpcs),
    );
    r.record(
        "get-security-groups: unique ids, known vpcs",
        check_security_groups(&groups, &vpcs),
    );
    r.record(
        "get-instances: indices, addresses in subnet, no address twice",
        check_instances(&instances, &vpcs, &subnets),
    );

    match instances.first() {
        None => r.not_applicable("get-instances by id", "the provider lists no instance"),
        Some(first) => {
            let result = match cloud.get_instances(std::slice::from_ref(&first.id)).await {
                Ok(found) if found.len() == 1 && found[0] == *first => Ok(()),
                Ok(found) => Err(format!(
                    "asked for {}, got {:?}",
                    first.id,
                    found.iter().map(|i| &i.id).collect::<Vec<_>>()
                )),
                Err(e) => Err(e.to_string()),
            };
            r.record("get-instances by id returns that instance", result);
        }
    }
    let unknown = cloud
        .get_instances(&["i-conformance-does-not-exist".to_string()])
        .await;
    r.record(
        "get-instances leaves unknown ids out",
        match unknown {
            Ok(found) if found.is_empty() => Ok(()),
            Ok(found) => Err(format!("got {} instances for an unknown id", found.len())),
            Err(e) => Err(format!("an unknown id is not an error, got {e}")),
        },
    );

    let mut limits = BTreeMap::new();
    let mut limit_errors = Vec::new();
    let types: BTreeSet<&str> = instances.iter().map(|i| i.instance_type.as_str()).collect();
    for t in types {
        match cloud.get_instance_limits(t).await {
            Ok(l) => {
                limits.insert(t.to_string(), l);
            }
            Err(e) => limit_errors.push(format!("{t}: {e}")),
        }
    }
    r.record(
        "get-instance-limits for every listed type",
        if limit_errors.is_empty() {
            Ok(())
        } else {
            Err(limit_errors.join("; "))
        },
    );
    r.record(
        "instances stay within their type's limits",
        check_within_limits(&instances, &limits),
    );
    let unknown_type = cloud.get_instance_limits("conformance.unknown-type").await;
    r.record(
        "get-instance-limits of an unknown type is not-found",
        match unknown_type {
            Err(e) if matches!(e.provider_error(), Some(ProviderError::NotFound(_))) => Ok(()),
            Err(e) => Err(format!("expected not-found, got {e}")),
            Ok(l) => Err(format!("expected not-found, got {l:?}")),
        },
    );
    Some(Snapshot {
        subnets,
        instances,
        limits,
    })
}
