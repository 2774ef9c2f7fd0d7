//! assign-ips and unassign-ips: read the resource that owns the NIC's IP
//! configurations (the NIC itself, or the scale-set VM whose model has
//! them), edit it (`ip_configs`), PUT it back with `If-Match` on its etag so
//! a concurrent change is a conflict and not a lost update, wait for ARM,
//! and read the addresses ARM allocated.

use ipam_provider_sdk::{Error, IpRequest, Ipv4, Ipv4Net};

use crate::ip_configs;
use crate::models::{Nic, ScaleSetVm};
use crate::resource_id::NicId;
use crate::transport::Transport;
use crate::Azure;

fn nic_id(interface_id: &str) -> Result<NicId, Error> {
    NicId::parse(interface_id).map_err(|bad| Error::NotFound(bad.to_string()))
}

impl<T: Transport> Azure<T> {
    fn nic_url(&self, nic: &NicId) -> String {
        let version = match nic {
            NicId::Standalone { .. } => &self.settings.api_versions.network,
            NicId::ScaleSet { .. } => &self.settings.api_versions.scale_set_network,
        };
        self.arm.url(&nic.path(), version)
    }

    fn read_nic(&self, nic: &NicId) -> Result<Nic, Error> {
        self.arm.get(&self.nic_url(nic))
    }

    /// Add `request`'s count of addresses to the NIC; the addresses ARM
    /// allocated. `names` gives each new configuration its name.
    pub fn assign(
        &self,
        interface_id: &str,
        request: IpRequest,
        names: &mut dyn FnMut() -> String,
    ) -> Result<Vec<Ipv4>, Error> {
        let count = match request {
            IpRequest::Addresses(0) => {
                return Err(Error::InvalidArgument(
                    "assign-ips of zero addresses".into(),
                ))
            }
            IpRequest::Addresses(count) => count as usize,
            IpRequest::Prefixes(_) => {
                return Err(Error::InvalidArgument(
                    "assign-ips with prefixes: Azure delegates no prefixes to a NIC".into(),
                ))
            }
        };
        if count > ip_configs::MAX_PER_NIC {
            return Err(Error::AddressLimit(format!(
                "{count} addresses: a NIC holds {} IP configurations at most",
                ip_configs::MAX_PER_NIC
            )));
        }
        let new_names: Vec<String> = (0..count).map(|_| names()).collect();
        let nic = nic_id(interface_id)?;
        match nic.scale_set_vm_path() {
            None => {
                let mut resource = self.read_nic(&nic)?;
                ip_configs::add_to_nic(&mut resource, &new_names)?;
                let etag = resource.etag.clone();
                self.arm
                    .put(&self.nic_url(&nic), &resource, etag.as_deref())?;
            }
            Some(vm_path) => {
                let url = self.arm.url(&vm_path, &self.settings.api_versions.compute);
                let mut vm: ScaleSetVm = self.arm.get(&url)?;
                ip_configs::add_to_scale_set_vm(&mut vm, nic_name(&nic), &new_names)?;
                let etag = vm.etag.clone();
                self.arm.put(&url, &vm, etag.as_deref())?;
            }
        }
        ip_configs::allocated(&self.read_nic(&nic)?, &new_names)
    }

    /// Remove the configurations holding `addresses`; those the NIC no
    /// longer holds are ignored, so a repeat changes nothing.
    pub fn unassign(
        &self,
        interface_id: &str,
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        if !prefixes.is_empty() {
            return Err(Error::InvalidArgument(
                "unassign-ips with prefixes: Azure delegates no prefixes to a NIC".into(),
            ));
        }
        let nic = nic_id(interface_id)?;
        let mut resource = self.read_nic(&nic)?;
        let names = ip_configs::names_holding(&resource, addresses)?;
        if names.is_empty() {
            return Ok(());
        }
        match nic.scale_set_vm_path() {
            None => {
                ip_configs::remove_from_nic(&mut resource, &names);
                let etag = resource.etag.clone();
                self.arm
                    .put(&self.nic_url(&nic), &resource, etag.as_deref())
            }
            Some(vm_path) => {
                let url = self.arm.url(&vm_path, &self.settings.api_versions.compute);
                let mut vm: ScaleSetVm = self.arm.get(&url)?;
                if ip_configs::remove_from_scale_set_vm(&mut vm, nic_name(&nic), &names)? == 0 {
                    // The model has lost them already; ARM is applying it.
                    return Ok(());
                }
                let etag = vm.etag.clone();
                self.arm.put(&url, &vm, etag.as_deref())
            }
        }
    }
}

fn nic_name(nic: &NicId) -> &str {
    match nic {
        NicId::Standalone { name, .. } | NicId::ScaleSet { name, .. } => name,
    }
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::net::parse_ipv4;

    use super::*;
    use crate::arm::scripted::{answer, Scripted};
    use crate::settings::Settings;

    const ARM: &str = "http://127.0.0.1:1";
    const RG: &str = "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/rg";

    fn azure(answers: Vec<crate::transport::Response>) -> Azure<Scripted> {
        let settings = Settings::parse(&format!(
            r#"{{"subscription-id": "00000000-1111-2222-3333-444444444444",
                "resource-group": "rg", "arm-endpoint": "{ARM}",
                "operation-timeout-ms": 5000, "poll-interval-ms": 100}}"#
        ))
        .unwrap();
        Azure::new(Scripted::new(answers), settings)
    }

    fn nic_body(id: &str, extra: &str) -> String {
        format!(
            r#"{{"id": "{id}", "etag": "W/\"e1\"", "properties": {{"ipConfigurations": [
                {{"name": "ipconfig1", "properties": {{"primary": true, "privateIPAddress": "10.0.1.4",
                  "subnet": {{"id": "{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes"}}}}}}{extra}]}}}}"#
        )
    }

    fn counter() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("Cilium-{n}")
        }
    }

    #[test]
    fn a_standalone_nic_is_read_put_back_with_if_match_polled_and_read_again() {
        let id = format!("{RG}/providers/Microsoft.Network/networkInterfaces/vm1-nic");
        let allocated = r#",{"name": "Cilium-1", "properties": {"privateIPAddress": "10.0.1.77"}}"#;
        let azure = azure(vec![
            answer(200, &[], &nic_body(&id, "")),
            answer(
                201,
                &[("Azure-AsyncOperation", &format!("{ARM}/op/1"))],
                "{}",
            ),
            answer(200, &[], r#"{"status": "Succeeded"}"#),
            answer(200, &[], &nic_body(&id, allocated)),
        ]);
        let got = azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap();
        assert_eq!(got, [parse_ipv4("10.0.1.77").unwrap()]);
        let sent = azure.arm.transport.sent.borrow();
        assert_eq!(sent[1].method, "PUT");
        assert_eq!(sent[1].url, format!("{ARM}{id}?api-version=2024-03-01"));
        assert_eq!(sent[1].if_match.as_deref(), Some("W/\"e1\""));
        let body: serde_json::Value =
            serde_json::from_slice(sent[1].body.as_ref().unwrap()).unwrap();
        assert_eq!(
            body["properties"]["ipConfigurations"][1]["name"],
            "Cilium-1"
        );
    }

    #[test]
    fn a_scale_set_nics_configurations_go_through_its_vm() {
        let vm = format!(
            "{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/3"
        );
        let id = format!("{vm}/networkInterfaces/pool-nic");
        let vm_body = format!(
            r#"{{"id": "{vm}", "etag": "\"9\"", "properties": {{"networkProfileConfiguration": {{"networkInterfaceConfigurations": [
                {{"name": "pool-nic", "properties": {{"ipConfigurations": [{{"name": "ipconfig1", "properties": {{"primary": true,
                  "subnet": {{"id": "{RG}/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes"}}}}}}]}}}}]}}}}}}"#
        );
        let allocated = r#",{"name": "Cilium-1", "properties": {"privateIPAddress": "10.0.1.8"}},
                           {"name": "Cilium-2", "properties": {"privateIPAddress": "10.0.1.9"}}"#;
        let azure = azure(vec![
            answer(200, &[], &vm_body),
            answer(202, &[("Azure-AsyncOperation", &format!("{ARM}/op/2"))], ""),
            answer(200, &[], r#"{"status": "InProgress"}"#),
            answer(200, &[], r#"{"status": "Succeeded"}"#),
            answer(200, &[], &nic_body(&id, allocated)),
        ]);
        let got = azure
            .assign(&id, IpRequest::Addresses(2), &mut counter())
            .unwrap();
        assert_eq!(
            got,
            [
                parse_ipv4("10.0.1.8").unwrap(),
                parse_ipv4("10.0.1.9").unwrap()
            ]
        );
        let urls = azure.arm.transport.urls();
        assert_eq!(urls[0], format!("GET {ARM}{vm}?api-version=2024-07-01"));
        assert_eq!(urls[1], format!("PUT {ARM}{vm}?api-version=2024-07-01"));
        assert_eq!(urls[4], format!("GET {ARM}{id}?api-version=2018-10-01"));
        assert_eq!(
            azure.arm.transport.sent.borrow()[1].if_match.as_deref(),
            Some("\"9\"")
        );
    }

    #[test]
    fn impossible_requests_are_refused_before_any_call() {
        let azure = azure(vec![]);
        let id = format!("{RG}/providers/Microsoft.Network/networkInterfaces/n");
        for (request, want) in [
            (IpRequest::Addresses(0), "invalid-argument"),
            (IpRequest::Prefixes(1), "invalid-argument"),
            (IpRequest::Addresses(257), "address-limit"),
        ] {
            let error = azure.assign(&id, request, &mut counter()).unwrap_err();
            let variant = match error {
                Error::InvalidArgument(_) => "invalid-argument",
                Error::AddressLimit(_) => "address-limit",
                _ => "other",
            };
            assert_eq!(variant, want);
        }
        assert!(matches!(
            azure.assign("eni-1", IpRequest::Addresses(1), &mut counter()),
            Err(Error::NotFound(_))
        ));
        assert!(azure.arm.transport.sent.borrow().is_empty());
    }

    #[test]
    fn unassigning_what_the_nic_no_longer_holds_sends_no_put() {
        let id = format!("{RG}/providers/Microsoft.Network/networkInterfaces/vm1-nic");
        let azure = azure(vec![answer(200, &[], &nic_body(&id, ""))]);
        azure
            .unassign(&id, &[parse_ipv4("10.0.1.99").unwrap()], &[])
            .unwrap();
        assert_eq!(azure.arm.transport.sent.borrow().len(), 1);
    }

    #[test]
    fn unassigning_removes_the_configuration_under_if_match() {
        let id = format!("{RG}/providers/Microsoft.Network/networkInterfaces/vm1-nic");
        let held = r#",{"name": "Cilium-1", "properties": {"privateIPAddress": "10.0.1.77"}}"#;
        let azure = azure(vec![
            answer(200, &[], &nic_body(&id, held)),
            answer(200, &[], "{}"),
        ]);
        azure
            .unassign(&id, &[parse_ipv4("10.0.1.77").unwrap()], &[])
            .unwrap();
        let sent = azure.arm.transport.sent.borrow();
        let body: serde_json::Value =
            serde_json::from_slice(sent[1].body.as_ref().unwrap()).unwrap();
        assert_eq!(
            body["properties"]["ipConfigurations"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(sent[1].if_match.as_deref(), Some("W/\"e1\""));
    }
}
