//! Checks of the mutating operations, on one instance with room for another
//! interface. Everything created is tagged and deleted at the end.

use std::net::Ipv4Addr;

use super::reading::Snapshot;
use super::Recorder;
use crate::answer::{self, KnownNetworks};
use crate::{
    Capabilities, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits,
    IpRequest, NetworkInterface, ProviderError, Subnet, Tag,
};

const TAG_KEY: &str = "ipam-conformance";

const CREATED: &str =
    "create-interface: attached at the index, in the subnet, tagged, with the addresses asked";
const LISTED: &str = "get-instances shows the new interface";
const TAKEN_INDEX: &str = "create-interface at a taken index is a conflict and creates nothing";
const ASSIGN_ONE: &str = "assign-ips adds one address in the subnet";
const ASSIGN_BEYOND: &str = "assign-ips beyond the interface's slots is address-limit";
const ASSIGN_ZERO: &str = "assign-ips of zero addresses is invalid-argument";
const ASSIGN_UNKNOWN: &str = "assign-ips on an unknown interface is not-found";
const PREFIX: &str = "assign-ips of a /28 gives a /28 of the subnet (or insufficient-prefixes)";
const UNASSIGN: &str = "unassign-ips removes the address, and again is a no-op (idempotent)";
const UNASSIGN_PRIMARY: &str = "unassign-ips of the primary address is invalid-argument";
const FULL_INSTANCE: &str = "create-interface on a full instance is interface-limit";
const DELETE: &str = "delete-interface deletes, and again succeeds (idempotent)";
const CLEANED_UP: &str = "after cleanup the instance has its original interfaces";
const DELETE_PRIMARY: &str = "delete-interface of the primary interface is invalid-argument";
const NOTHING_LEFT: &str = "nothing the checks created is left detached";

/// The mutating checks of the capabilities `caps` declares, in the order
/// they run: what is listed as not run when they cannot.
pub fn declared_checks(caps: Capabilities) -> Vec<&'static str> {
    let mut checks = Vec::new();
    if caps.create_interface {
        checks.extend([
            CREATED,
            LISTED,
            TAKEN_INDEX,
            ASSIGN_ONE,
            ASSIGN_BEYOND,
            ASSIGN_ZERO,
            ASSIGN_UNKNOWN,
        ]);
    }
    if caps.create_interface && caps.prefixes {
        checks.push(PREFIX);
    }
    if caps.create_interface && caps.release {
        checks.extend([UNASSIGN, UNASSIGN_PRIMARY]);
    }
    if caps.create_interface {
        checks.push(FULL_INSTANCE);
    }
    if caps.create_interface && caps.delete_interface {
        checks.extend([DELETE, CLEANED_UP, DELETE_PRIMARY, NOTHING_LEFT]);
    }
    checks
}

/// List every check of `checks` after `after` (all of them for None) as
/// not run, for `why`.
fn not_run_after(r: &mut Recorder<'_>, checks: &[&'static str], after: Option<&str>, why: &str) {
    let start = after
        .and_then(|name| checks.iter().position(|c| *c == name))
        .map_or(0, |at| at + 1);
    for name in &checks[start..] {
        r.not_run(name, why);
    }
}

/// A result as a person reads it: the value, or `error:` and the error (not
/// a Rust debug dump).
fn shown<T: std::fmt::Display, E: std::fmt::Display>(result: &Result<T, E>) -> String {
    match result {
        Ok(value) => value.to_string(),
        Err(error) => format!("error: {error}"),
    }
}

fn expect_error<T: std::fmt::Debug>(
    result: Result<T, CloudError>,
    want: &str,
    matches: impl Fn(&ProviderError) -> bool,
) -> Result<(), String> {
    match result {
        Err(e) if e.provider_error().is_some_and(&matches) => Ok(()),
        Err(e) => Err(format!("expected {want}, got {e}")),
        Ok(value) => Err(format!("expected {want}, got success: {value:?}")),
    }
}

struct Target<'a> {
    instance: &'a Instance,
    limits: InstanceLimits,
    primary: &'a NetworkInterface,
    /// Where the checks' interface goes.
    subnet: &'a Subnet,
}

/// Free addresses the checks take from their subnet at most: the new
/// interface's primary, its secondary, and one assigned.
const ADDRESSES_NEEDED: u32 = 3;

/// A listed subnet the instance can take an interface from (its VPC and
/// zone) with room for the checks: the primary interface's when it has room,
/// else the roomiest. A provider whose settings select pod subnets by tag
/// lists no node subnet; one whose primary subnet is full has another.
fn subnet_for<'a>(
    snapshot: &'a Snapshot,
    instance: &Instance,
    primary: &NetworkInterface,
) -> Option<&'a Subnet> {
    let usable: Vec<&Subnet> = snapshot
        .subnets
        .iter()
        .filter(|s| {
            s.vpc_id == instance.vpc_id && s.availability_zone == instance.availability_zone
        })
        .filter(|s| s.available_addresses >= ADDRESSES_NEEDED)
        .collect();
    usable
        .iter()
        .find(|s| s.id == primary.subnet_id)
        .or_else(|| usable.iter().max_by_key(|s| s.available_addresses))
        .copied()
}

fn pick_target(snapshot: &Snapshot) -> Option<Target<'_>> {
    snapshot.instances.iter().find_map(|instance| {
        let limits = *snapshot.limits.get(&instance.instance_type)?;
        let primary = instance.interfaces.iter().find(|e| e.index == 0)?;
        let room = (instance.interfaces.len() as u32) < limits.max_interfaces;
        if !room || limits.ipv4_per_interface < 2 {
            return None;
        }
        let subnet = subnet_for(snapshot, instance, primary)?;
        Some(Target {
            instance,
            limits,
            primary,
            subnet,
        })
    })
}

fn free_index(interfaces: &[NetworkInterface]) -> u32 {
    (1..)
        .find(|n| !interfaces.iter().any(|e| e.index == *n))
        .unwrap_or(u32::MAX)
}

async fn interfaces_of(
    cloud: &dyn CloudApi,
    instance_id: &str,
) -> Result<Vec<NetworkInterface>, String> {
    let found = cloud
        .get_instances(&[instance_id.to_string()])
        .await
        .map_err(|e| e.to_string())?;
    match found.into_iter().next() {
        Some(instance) => Ok(instance.interfaces),
        None => Err(format!("instance {instance_id} vanished")),
    }
}

async fn secondaries_of(
    cloud: &dyn CloudApi,
    instance_id: &str,
    eni: &str,
) -> Result<Vec<Ipv4Addr>, String> {
    let interfaces = interfaces_of(cloud, instance_id).await?;
    let found = interfaces
        .into_iter()
        .find(|e| e.id == eni)
        .ok_or_else(|| format!("{eni} is not on {instance_id}"))?;
    Ok(found.addresses)
}

pub async fn run(cloud: &dyn CloudApi, snapshot: &Snapshot, r: &mut Recorder<'_>) {
    let caps = cloud.info().capabilities;
    if !caps.create_interface {
        r.not_applicable(
            "create-interface and the operations on it",
            "the provider does not declare create-interface",
        );
        return;
    }
    let checks = declared_checks(caps);
    let Some(target) = pick_target(snapshot) else {
        not_run_after(
            r,
            &checks,
            None,
            "no listed instance has room for another interface and two address slots, with a listed subnet of its VPC and zone that has three free addresses",
        );
        return;
    };
    let instance_id = target.instance.id.clone();
    let subnet_net = target.subnet.cidr;
    let tag = Tag {
        key: TAG_KEY.into(),
        value: "created".into(),
    };
    let request = CreateInterfaceRequest {
        instance_id: instance_id.clone(),
        index: free_index(&target.instance.interfaces),
        subnet_id: target.subnet.id.clone(),
        security_groups: target.primary.security_groups.clone(),
        description: "ipam-operator conformance check".into(),
        tags: vec![tag.clone()],
        delete_on_termination: true,
        ipv4_count: 1,
        use_prefixes: false,
    };
    let mut created: Vec<String> = Vec::new();

    let eni = match cloud.create_interface(&request).await {
        Ok(eni) => eni,
        Err(e) => {
            r.record(CREATED, Err(e.to_string()));
            not_run_after(
                r,
                &checks,
                Some(CREATED),
                "create-interface failed: no interface to run it on",
            );
            return;
        }
    };
    created.push(eni.id.clone());
    let mut known = KnownNetworks::default();
    known.learn_subnets(&snapshot.subnets);
    r.record(
        CREATED,
        answer::check_created(&request, &eni, &known)
            .map_err(|bad| bad.to_string())
            .and_then(|()| {
                eni.tags
                    .contains(&tag)
                    .then_some(())
                    .ok_or_else(|| "the requested tag is missing".to_string())
            }),
    );
    let listed = interfaces_of(cloud, &instance_id).await;
    r.record(
        LISTED,
        listed.and_then(|list| {
            list.iter()
                .any(|e| e.id == eni.id)
                .then_some(())
                .ok_or_else(|| format!("{} not listed", eni.id))
        }),
    );
    let before = interfaces_of(cloud, &instance_id).await.map(|l| l.len());
    let conflict = cloud.create_interface(&request).await;
    if let Ok(extra) = &conflict {
        created.push(extra.id.clone());
    }
    let after = interfaces_of(cloud, &instance_id).await.map(|l| l.len());
    r.record(
        TAKEN_INDEX,
        expect_error(conflict, "conflict", |e| {
            matches!(e, ProviderError::Conflict(_))
        })
        .and_then(|()| {
            (before == after).then_some(()).ok_or_else(|| {
                format!(
                    "interface count went from {} to {}",
                    shown(&before),
                    shown(&after)
                )
            })
        }),
    );

    let assigned = cloud.assign_ips(&eni.id, IpRequest::Addresses(1)).await;
    let new_address = assigned
        .as_ref()
        .ok()
        .and_then(|a| a.addresses.first().cloned());
    r.record(
        ASSIGN_ONE,
        match &assigned {
            Ok(a) if a.addresses.len() == 1 && a.prefixes.is_empty() => {
                let ip = a.addresses[0];
                if subnet_net.contains(&ip) {
                    Ok(())
                } else {
                    Err(format!("{ip} is outside {subnet_net}"))
                }
            }
            Ok(a) => Err(format!("asked for 1 address, got {a:?}")),
            Err(e) => Err(e.to_string()),
        },
    );
    let slots_left = target.limits.ipv4_per_interface;
    r.record(
        ASSIGN_BEYOND,
        expect_error(
            cloud
                .assign_ips(&eni.id, IpRequest::Addresses(slots_left))
                .await,
            "address-limit",
            |e| matches!(e, ProviderError::AddressLimit(_)),
        ),
    );
    r.record(
        ASSIGN_ZERO,
        expect_error(
            cloud.assign_ips(&eni.id, IpRequest::Addresses(0)).await,
            "invalid-argument",
            |e| matches!(e, ProviderError::InvalidArgument(_)),
        ),
    );
    r.record(
        ASSIGN_UNKNOWN,
        expect_error(
            cloud
                .assign_ips("eni-conformance-unknown", IpRequest::Addresses(1))
                .await,
            "not-found",
            |e| matches!(e, ProviderError::NotFound(_)),
        ),
    );

    if caps.prefixes && target.limits.prefix_delegation {
        let result = match cloud.assign_ips(&eni.id, IpRequest::Prefixes(1)).await {
            Ok(a) if a.prefixes.len() == 1 => match a.prefixes[0] {
                p if p.prefix_len() == 28 && subnet_net.contains(&p) => {
                    if caps.release {
                        cloud
                            .unassign_ips(&eni.id, &[], &a.prefixes)
                            .await
                            .map_err(|e| format!("unassigning the prefix: {e}"))
                    } else {
                        Ok(())
                    }
                }
                p => Err(format!("got prefix {p}, want a /28 of {subnet_net}")),
            },
            Ok(a) => Err(format!("asked for 1 prefix, got {a:?}")),
            Err(e)
                if matches!(
                    e.provider_error(),
                    Some(ProviderError::InsufficientPrefixes(_))
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        };
        r.record(PREFIX, result);
    } else if caps.prefixes {
        r.not_run(
            PREFIX,
            format!(
                "instance type {} has no prefix delegation",
                target.instance.instance_type
            ),
        );
    } else {
        r.not_applicable(
            "assign-ips of a /28",
            "the provider does not declare prefixes",
        );
    }

    if caps.release {
        match new_address {
            Some(ip) => {
                let first = cloud
                    .unassign_ips(&eni.id, std::slice::from_ref(&ip), &[])
                    .await;
                let second = cloud
                    .unassign_ips(&eni.id, std::slice::from_ref(&ip), &[])
                    .await;
                let listed = secondaries_of(cloud, &instance_id, &eni.id).await;
                r.record(
                    UNASSIGN,
                    match (first, second, listed) {
                        (Ok(()), Ok(()), Ok(left)) if !left.contains(&ip) => Ok(()),
                        (Ok(()), Ok(()), Ok(_)) => Err(format!("{ip} is still listed")),
                        (a, b, listed) => Err(format!(
                            "first unassign: {}; second: {}; then listed: {}",
                            shown(&a.map(|()| "ok")),
                            shown(&b.map(|()| "ok")),
                            shown(&listed.map(|left| {
                                left.iter()
                                    .map(ToString::to_string)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }))
                        )),
                    },
                );
            }
            None => r.not_run(UNASSIGN, "assign-ips gave no address to release"),
        }
        r.record(
            UNASSIGN_PRIMARY,
            expect_error(
                cloud
                    .unassign_ips(&eni.id, std::slice::from_ref(&eni.primary_ip), &[])
                    .await,
                "invalid-argument",
                |e| matches!(e, ProviderError::InvalidArgument(_)),
            ),
        );
    } else {
        r.not_applicable("unassign-ips", "the provider does not declare release");
    }

    // Fill the instance, then ask for one more interface at the next index.
    let mut fill = request.clone();
    fill.ipv4_count = 0;
    let mut fill_error = None;
    loop {
        let current = match interfaces_of(cloud, &instance_id).await {
            Ok(list) => list,
            Err(e) => {
                fill_error = Some(e);
                break;
            }
        };
        fill.index = free_index(&current);
        if current.len() as u32 >= target.limits.max_interfaces {
            break;
        }
        match cloud.create_interface(&fill).await {
            Ok(extra) => created.push(extra.id),
            Err(e) => {
                fill_error = Some(e.to_string());
                break;
            }
        }
    }
    match fill_error {
        Some(e) => r.not_run(FULL_INSTANCE, format!("could not fill the instance: {e}")),
        None => {
            let over = cloud.create_interface(&fill).await;
            if let Ok(extra) = &over {
                created.push(extra.id.clone());
            }
            r.record(
                FULL_INSTANCE,
                expect_error(over, "interface-limit", |e| {
                    matches!(e, ProviderError::InterfaceLimit(_))
                }),
            );
        }
    }

    if !caps.delete_interface {
        r.not_applicable(
            "delete-interface",
            format!(
                "not declared; {} interfaces created by the checks remain",
                created.len()
            ),
        );
        return;
    }
    let mut errors = Vec::new();
    for id in &created {
        for attempt in ["first", "second"] {
            if let Err(e) = cloud.delete_interface(id).await {
                errors.push(format!("{attempt} delete of {id}: {e}"));
            }
        }
    }
    r.record(
        DELETE,
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        },
    );
    let original: Vec<&str> = target
        .instance
        .interfaces
        .iter()
        .map(|e| e.id.as_str())
        .collect();
    r.record(
        CLEANED_UP,
        interfaces_of(cloud, &instance_id).await.and_then(|now| {
            let now: Vec<&str> = now.iter().map(|e| e.id.as_str()).collect();
            (now == original)
                .then_some(())
                .ok_or_else(|| format!("had {original:?}, now {now:?}"))
        }),
    );
    r.record(
        DELETE_PRIMARY,
        expect_error(
            cloud.delete_interface(&target.primary.id).await,
            "invalid-argument",
            |e| matches!(e, ProviderError::InvalidArgument(_)),
        ),
    );
    r.record(
        NOTHING_LEFT,
        match cloud.get_detached_interfaces(&[tag]).await {
            Ok(left) if left.is_empty() => Ok(()),
            Ok(left) => Err(format!(
                "left: {:?}",
                left.iter().map(|e| &e.id).collect::<Vec<_>>()
            )),
            Err(e) => Err(e.to_string()),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_shown_as_text_not_debug_dumps() {
        assert_eq!(shown(&Ok::<_, String>(3)), "3");
        let refused: Result<&str, CloudError> = Err(CloudError::Provider {
            provider: "toycloud".into(),
            error: ProviderError::InvalidArgument("bad index".into()),
        });
        let text = shown(&refused);
        assert!(text.starts_with("error: provider toycloud"), "{text}");
        assert!(!text.contains("Provider {"), "{text}");
    }
}
