//! ARM's side of the write paths' tests: an Azure client on a scripted
//! transport, and the NICs, scale-set VMs and operations it answers with.

use crate::arm::scripted::{answer, Scripted};
use crate::settings::Settings;
use crate::transport::Response;
use crate::Azure;

pub const ARM: &str = "http://127.0.0.1:1";
pub const RG: &str = "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/rg";

pub fn subnet() -> String {
    format!("{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes")
}

pub fn standalone_nic() -> String {
    format!("{RG}/providers/Microsoft.Network/networkInterfaces/vm1-nic")
}

pub fn scale_set_vm() -> String {
    format!("{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/3")
}

/// The NIC of [`scale_set_vm`], named `pool-nic` in its model.
pub fn scale_set_nic() -> String {
    format!("{}/networkInterfaces/pool-nic", scale_set_vm())
}

pub fn azure(answers: Vec<Response>) -> Azure<Scripted> {
    let settings = Settings::parse(&format!(
        r#"{{"subscription-id": "00000000-1111-2222-3333-444444444444",
            "resource-group": "rg", "arm-endpoint": "{ARM}",
            "operation-timeout-ms": 5000, "poll-interval-ms": 100}}"#
    ))
    .expect("settings");
    Azure::new(Scripted::new(answers), settings)
}

/// A secondary configuration of the NIC, in the primary's subnet.
pub fn config(name: &str, address: &str, state: &str) -> String {
    format!(
        r#"{{"name": "{name}", "properties": {{"privateIPAddress": "{address}", "provisioningState": "{state}",
            "subnet": {{"id": "{}"}}}}}}"#,
        subnet()
    )
}

/// A NIC with etag `etag`: its primary configuration `ipconfig1`
/// (10.0.1.4), then `configs`.
pub fn nic(id: &str, etag: &str, configs: &[String]) -> Response {
    let mut all = vec![format!(
        r#"{{"name": "ipconfig1", "properties": {{"primary": true, "privateIPAddress": "10.0.1.4",
            "provisioningState": "Succeeded", "subnet": {{"id": "{}"}}}}}}"#,
        subnet()
    )];
    all.extend(configs.iter().cloned());
    answer(
        200,
        &[],
        &format!(
            r#"{{"id": "{id}", "etag": "{}", "properties": {{"ipConfigurations": [{}]}}}}"#,
            etag.replace('"', "\\\""),
            all.join(",")
        ),
    )
}

/// [`scale_set_vm`] with etag `etag`, its model's `pool-nic` holding
/// `ipconfig1` and a configuration named after each of `names`.
pub fn vm(etag: &str, names: &[&str]) -> Response {
    let mut configs = vec![format!(
        r#"{{"name": "ipconfig1", "properties": {{"primary": true, "subnet": {{"id": "{}"}}}}}}"#,
        subnet()
    )];
    configs.extend(names.iter().map(|name| {
        format!(
            r#"{{"name": "{name}", "properties": {{"primary": false, "subnet": {{"id": "{}"}}}}}}"#,
            subnet()
        )
    }));
    answer(
        200,
        &[],
        &format!(
            r#"{{"id": "{}", "etag": "{}", "properties": {{"networkProfileConfiguration": {{"networkInterfaceConfigurations": [
                {{"name": "pool-nic", "properties": {{"ipConfigurations": [{}]}}}}]}}}}}}"#,
            scale_set_vm(),
            etag.replace('"', "\\\""),
            configs.join(",")
        ),
    )
}

/// Where [`accepted`] says its operation is polled: Network's operations
/// of the region, as ARM answers a NIC's PUT.
pub fn operation_url() -> String {
    format!("{ARM}{RG_SUBSCRIPTION}/providers/Microsoft.Network/locations/eastus/operations/1")
}

/// The subscription of [`RG`].
const RG_SUBSCRIPTION: &str = "/subscriptions/00000000-1111-2222-3333-444444444444";

/// A PUT taken, its operation to poll at [`operation_url`].
pub fn accepted() -> Response {
    answer(201, &[("Azure-AsyncOperation", &operation_url())], "{}")
}

/// The operation's end: `Succeeded`, or `Failed` with `code`.
pub fn operation(code: Option<&str>) -> Response {
    match code {
        None => answer(200, &[], r#"{"status": "Succeeded"}"#),
        Some(code) => answer(
            200,
            &[],
            &format!(
                r#"{{"status": "Failed", "error": {{"code": "{code}", "message": "ARM said {code}"}}}}"#
            ),
        ),
    }
}

/// Names `Cilium-1`, `Cilium-2`, ... in turn.
pub fn counter() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("Cilium-{n}")
    }
}

/// The configuration names in the body of the `n`th request sent, a NIC's
/// or a scale-set VM's.
pub fn names_put(azure: &Azure<Scripted>, n: usize) -> Vec<String> {
    let sent = azure.arm.transport.sent.borrow();
    let body: serde_json::Value =
        serde_json::from_slice(sent[n].body.as_deref().expect("a PUT body")).expect("JSON");
    let configs = body["properties"]["ipConfigurations"]
        .as_array()
        .or_else(|| {
            body["properties"]["networkProfileConfiguration"]["networkInterfaceConfigurations"][0]
                ["properties"]["ipConfigurations"]
                .as_array()
        })
        .expect("IP configurations");
    configs
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `METHOD url` of each request sent, without the api-version.
pub fn calls(azure: &Azure<Scripted>) -> Vec<String> {
    azure
        .arm
        .transport
        .urls()
        .into_iter()
        .map(|url| url.split('?').next().unwrap_or_default().to_string())
        .collect()
}
