//! The ARM permissions this provider needs: one entry per kind of request
//! it sends (method and resource type), and the join permissions ARM checks
//! on the resources a written body references. The custom roles in
//! `deploy/azure/` are checked against these lists, and [`Guarded`] refuses,
//! before sending it, a request no entry covers: a new call cannot be added
//! without naming its permission here, and then the role test fails until
//! the role grants it too.

use std::ops::Deref;
use std::time::Duration;

use ipam_provider_sdk::Error;

use crate::transport::{Request, Response, Transport};

/// Where in the subscription a request's resource lives, so where the role
/// granting it must be assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The settings' `resource-group` (AKS's node resource group, `MC_...`).
    NodeGroup,
    /// The node resource group and each of `network-resource-groups` (the
    /// virtual network's own group).
    NetworkGroups,
    /// The subscription itself.
    Subscription,
}

/// One kind of request: its method, the ARM resource type its URL names
/// (provider namespace and type segments), and the permission ARM checks.
#[derive(Debug)]
pub struct Call {
    pub method: &'static str,
    pub resource_type: &'static str,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the role test"))]
    pub permission: &'static str,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the role test"))]
    pub scope: Scope,
}

const fn call(
    method: &'static str,
    resource_type: &'static str,
    permission: &'static str,
    scope: Scope,
) -> Call {
    Call {
        method,
        resource_type,
        permission,
        scope,
    }
}

/// Every request the provider sends (`read.rs`, `assign.rs`, `undo.rs`,
/// and `arm.rs`'s polls).
pub const CALLS: &[Call] = &[
    // get-vpcs, get-subnets: VirtualNetworks.List.
    call(
        "GET",
        "Microsoft.Network/virtualNetworks",
        "Microsoft.Network/virtualNetworks/read",
        Scope::NetworkGroups,
    ),
    // get-security-groups: NetworkSecurityGroups.List.
    call(
        "GET",
        "Microsoft.Network/networkSecurityGroups",
        "Microsoft.Network/networkSecurityGroups/read",
        Scope::NetworkGroups,
    ),
    // get-instances: VirtualMachineScaleSets.List.
    call(
        "GET",
        "Microsoft.Compute/virtualMachineScaleSets",
        "Microsoft.Compute/virtualMachineScaleSets/read",
        Scope::NodeGroup,
    ),
    // get-instances: VirtualMachineScaleSetVMs.List; assign and unassign:
    // VirtualMachineScaleSetVMs.Get.
    call(
        "GET",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
        Scope::NodeGroup,
    ),
    // assign and unassign on a scale-set VM: VirtualMachineScaleSetVMs.Update.
    call(
        "PUT",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write",
        Scope::NodeGroup,
    ),
    // get-instances: a scale set's NICs.
    call(
        "GET",
        "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces",
        "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",
        Scope::NodeGroup,
    ),
    // assign and unassign: a scale-set VM's NIC.
    call(
        "GET",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read",
        Scope::NodeGroup,
    ),
    // get-instances: VirtualMachines.List (standalone VMs).
    call(
        "GET",
        "Microsoft.Compute/virtualMachines",
        "Microsoft.Compute/virtualMachines/read",
        Scope::NodeGroup,
    ),
    // get-instances: NetworkInterfaces.List; assign and unassign on a
    // standalone VM: NetworkInterfaces.Get.
    call(
        "GET",
        "Microsoft.Network/networkInterfaces",
        "Microsoft.Network/networkInterfaces/read",
        Scope::NodeGroup,
    ),
    // assign and unassign on a standalone VM: NetworkInterfaces.CreateOrUpdate.
    call(
        "PUT",
        "Microsoft.Network/networkInterfaces",
        "Microsoft.Network/networkInterfaces/write",
        Scope::NodeGroup,
    ),
    // A write's long-running operation, polled at Azure-AsyncOperation:
    // NIC writes report on Network's, scale-set VM writes on Compute's. A
    // Location to poll at instead (`.../operationResults/...`, which ARM
    // gives these writes only beside Azure-AsyncOperation) is not listed:
    // the guard would refuse it, naming the URL.
    call(
        "GET",
        "Microsoft.Network/locations/operations",
        "Microsoft.Network/locations/operations/read",
        Scope::NodeGroup,
    ),
    call(
        "GET",
        "Microsoft.Compute/locations/operations",
        "Microsoft.Compute/locations/operations/read",
        Scope::NodeGroup,
    ),
    // get-instance-limits: ResourceSkus.List, at the subscription.
    call(
        "GET",
        "Microsoft.Compute/skus",
        "Microsoft.Compute/skus/read",
        Scope::Subscription,
    ),
];

/// Permissions ARM checks on the resources a NIC or scale-set VM body
/// references (its "linked" authorization), every one of them, changed or
/// not: the provider writes back what it read. Only the role test reads it.
#[cfg(test)]
pub const LINKED: &[(&str, Scope, &str)] = &[
    (
        "Microsoft.Network/virtualNetworks/subnets/join/action",
        Scope::NetworkGroups,
        "every IP configuration names its subnet",
    ),
    (
        "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action",
        Scope::NetworkGroups,
        "new configurations take the first configuration's application security groups",
    ),
    (
        "Microsoft.Network/networkSecurityGroups/join/action",
        Scope::NetworkGroups,
        "a NIC (or a scale set's NIC configuration) names its network security group",
    ),
    (
        "Microsoft.Network/loadBalancers/backendAddressPools/join/action",
        Scope::NodeGroup,
        "AKS puts nodes' primary configurations in its load balancer's backend pools",
    ),
];

/// The path of `url` (`https://host[:port]/path?query`), without its query.
fn path_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme
        .find('/')
        .map_or("", |start| &after_scheme[start..]);
    path.split_once('?').map_or(path, |(path, _)| path)
}

/// The ARM resource type a path names: its provider namespace and type
/// segments (`Microsoft.Compute/virtualMachineScaleSets/virtualMachines`),
/// whether it names one resource or lists them. `None` for a path that is
/// not an ARM resource's.
pub fn resource_type(path: &str) -> Option<String> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut rest = match segments.as_slice() {
        ["subscriptions", _, rest @ ..] => rest,
        _ => return None,
    };
    if let [group, _, after @ ..] = rest {
        if group.eq_ignore_ascii_case("resourceGroups") {
            rest = after;
        }
    }
    let [providers, namespace, types_and_names @ ..] = rest else {
        return None;
    };
    if !providers.eq_ignore_ascii_case("providers") || types_and_names.is_empty() {
        return None;
    }
    let types = types_and_names.iter().step_by(2).copied();
    let parts: Vec<&str> = std::iter::once(*namespace).chain(types).collect();
    Some(parts.join("/"))
}

/// The entry of [`CALLS`] covering a request, if any (ARM compares types
/// without case).
pub fn covering(method: &str, url: &str) -> Option<&'static Call> {
    let resource_type = resource_type(path_of(url))?;
    CALLS
        .iter()
        .find(|c| c.method == method && c.resource_type.eq_ignore_ascii_case(&resource_type))
}

/// A transport that sends only requests [`CALLS`] covers; anything else is
/// refused as `other`, naming the request, before it is sent.
pub struct Guarded<T>(pub T);

impl<T> Deref for Guarded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Transport> Transport for Guarded<T> {
    fn send(&self, request: &Request) -> Result<Response, Error> {
        if covering(request.method, &request.url).is_none() {
            return Err(Error::Other(format!(
                "{} {} is not in the provider's permission list (providers/azure/src/permissions.rs), \
                 so the custom role in deploy/azure does not grant it",
                request.method, request.url
            )));
        }
        self.0.send(request)
    }

    fn sleep(&self, wait: Duration) {
        self.0.sleep(wait)
    }

    fn now(&self) -> Duration {
        self.0.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arm::scripted::{answer, Scripted};

    const SUB: &str = "/subscriptions/00000000-1111-2222-3333-444444444444";

    #[test]
    fn a_path_names_its_resource_type_listed_or_one() {
        let cases = [
            (
                format!("{SUB}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks"),
                "Microsoft.Network/virtualNetworks",
            ),
            (
                format!("{SUB}/resourcegroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/3/networkInterfaces/nic"),
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces",
            ),
            (
                format!("{SUB}/providers/Microsoft.Compute/skus"),
                "Microsoft.Compute/skus",
            ),
            (
                format!("{SUB}/providers/Microsoft.Network/locations/eastus/operations/abc"),
                "Microsoft.Network/locations/operations",
            ),
        ];
        for (path, wanted) in cases {
            assert_eq!(resource_type(&path).as_deref(), Some(wanted), "{path}");
        }
        for not_arm in [
            "/op/1",
            "/subscriptions/s",
            "/subscriptions/s/resourceGroups/rg",
        ] {
            assert_eq!(resource_type(not_arm), None, "{not_arm}");
        }
    }

    #[test]
    fn a_url_is_matched_by_its_path_alone() {
        let url = format!(
            "https://management.azure.com{SUB}/providers/Microsoft.Compute/skus?$filter=location%20eq%20%27eastus%27&api-version=2021-07-01"
        );
        assert_eq!(
            covering("GET", &url).map(|c| c.permission),
            Some("Microsoft.Compute/skus/read")
        );
        assert!(covering("PUT", &url).is_none(), "no write of SKUs");
        assert!(covering(
            "DELETE",
            &format!(
                "http://a{SUB}/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n"
            )
        )
        .is_none());
    }

    #[test]
    fn each_permission_is_its_resource_types_read_or_write() {
        for c in CALLS {
            let verb = match c.method {
                "GET" => "read",
                "PUT" => "write",
                other => panic!("{other}"),
            };
            assert_eq!(c.permission, format!("{}/{verb}", c.resource_type));
        }
    }

    #[test]
    fn the_guard_refuses_an_unlisted_request_without_sending_it() {
        let guarded = Guarded(Scripted::new(vec![answer(200, &[], "{}")]));
        let delete = Request {
            method: "DELETE",
            url: format!("http://127.0.0.1:1{SUB}/resourceGroups/g/providers/Microsoft.Network/networkInterfaces/n"),
            if_match: None,
            body: None,
        };
        let Err(Error::Other(text)) = guarded.send(&delete) else {
            panic!("a DELETE went through");
        };
        assert!(
            text.contains("is not in the provider's permission list"),
            "{text}"
        );
        assert!(guarded.sent.borrow().is_empty());
        let get = Request {
            method: "GET",
            ..delete
        };
        assert!(guarded.send(&get).is_ok());
        assert_eq!(guarded.sent.borrow().len(), 1);
    }
}
