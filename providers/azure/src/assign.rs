//! assign-ips and unassign-ips: read the resource that owns the NIC's IP
//! configurations (the NIC itself, or the scale-set VM whose model has
//! them), edit it (`ip_configs`), PUT it back with `If-Match` on its etag so
//! a concurrent change is a conflict and not a lost update, wait for ARM,
//! and read the addresses ARM allocated. Every write leaves out the NIC's
//! configurations in provisioning state Failed; an assign whose operation
//! ended Failed is undone (`undo`).

use ipam_provider_sdk::{log, Error, IpRequest, Ipv4, Ipv4Net, LogLevel};

use crate::arm::PutError;
use crate::ip_configs;
use crate::models::{Nic, ScaleSetVm};
use crate::resource_id::NicId;
use crate::transport::Transport;
use crate::Azure;

fn nic_id(interface_id: &str) -> Result<NicId, Error> {
    NicId::parse(interface_id).map_err(|bad| Error::NotFound(bad.to_string()))
}

/// The configurations of `nic` in provisioning state Failed, which the write
/// about to be made leaves out, logged by name.
fn failed_to_drop(nic: &Nic) -> Vec<String> {
    let failed = ip_configs::failed_names(nic);
    if !failed.is_empty() {
        log(
            LogLevel::Warn,
            &format!(
                "{}: leaving out IP configurations in provisioning state Failed: {}",
                nic.id,
                failed.join(", ")
            ),
        );
    }
    failed
}

impl<T: Transport> Azure<T> {
    fn nic_url(&self, nic: &NicId) -> String {
        let version = match nic {
            NicId::Standalone { .. } => &self.settings.api_versions.network,
            NicId::ScaleSet { .. } => &self.settings.api_versions.scale_set_network,
        };
        self.arm.url(&nic.path(), version)
    }

    pub(crate) fn read_nic(&self, nic: &NicId) -> Result<Nic, Error> {
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
        match self.add_configurations(&nic, &new_names) {
            Ok(()) => {}
            Err(PutError::OperationFailed(error)) => {
                return Err(self.undo_assign(&nic, &new_names, error))
            }
            Err(PutError::Other(error)) => return Err(error),
        }
        ip_configs::allocated(&self.read_nic(&nic)?, &new_names)
    }

    /// PUT the NIC's configurations with `names` added and its Failed ones
    /// left out. A scale-set NIC's are its VM's model, which carries no
    /// provisioning state: the NIC is read for it.
    fn add_configurations(&self, nic: &NicId, names: &[String]) -> Result<(), PutError> {
        let mut resource = self.read_nic(nic)?;
        let failed = failed_to_drop(&resource);
        match nic.scale_set_vm_path() {
            None => {
                ip_configs::remove_from_nic(&mut resource, &failed);
                ip_configs::add_to_nic(&mut resource, names)?;
                let etag = resource.etag.clone();
                self.arm.put(&self.nic_url(nic), &resource, etag.as_deref())
            }
            Some(vm_path) => {
                let url = self.arm.url(&vm_path, &self.settings.api_versions.compute);
                let mut vm: ScaleSetVm = self.arm.get(&url)?;
                ip_configs::remove_from_scale_set_vm(&mut vm, nic_name(nic), &failed)?;
                ip_configs::add_to_scale_set_vm(&mut vm, nic_name(nic), names)?;
                let etag = vm.etag.clone();
                self.arm.put(&url, &vm, etag.as_deref())
            }
        }
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
        let resource = self.read_nic(&nic)?;
        let names = ip_configs::names_holding(&resource, addresses)?;
        if names.is_empty() {
            return Ok(());
        }
        self.remove_configurations(&nic, resource, &names)
            .map_err(Error::from)
    }

    /// PUT the NIC's configurations without those named `names`, and
    /// without its Failed ones; `resource` is the NIC as just read. When
    /// none of `names` is there (on a scale-set NIC: in its VM's model),
    /// nothing is written.
    pub(crate) fn remove_configurations(
        &self,
        nic: &NicId,
        mut resource: Nic,
        names: &[String],
    ) -> Result<(), PutError> {
        let held = ip_configs::remove_from_nic(&mut resource, names);
        match nic.scale_set_vm_path() {
            None => {
                if held == 0 {
                    return Ok(());
                }
                let failed = failed_to_drop(&resource);
                ip_configs::remove_from_nic(&mut resource, &failed);
                let etag = resource.etag.clone();
                self.arm.put(&self.nic_url(nic), &resource, etag.as_deref())
            }
            Some(vm_path) => {
                let url = self.arm.url(&vm_path, &self.settings.api_versions.compute);
                let mut vm: ScaleSetVm = self.arm.get(&url)?;
                if ip_configs::remove_from_scale_set_vm(&mut vm, nic_name(nic), names)? == 0 {
                    // The model has lost them already; ARM is applying it.
                    return Ok(());
                }
                let failed = failed_to_drop(&resource);
                ip_configs::remove_from_scale_set_vm(&mut vm, nic_name(nic), &failed)?;
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
    use crate::nic_scripts::{
        accepted, azure, calls, config, counter, names_put, nic, operation, operation_url,
        scale_set_nic, scale_set_vm, standalone_nic, vm, ARM,
    };

    fn address(text: &str) -> Ipv4 {
        parse_ipv4(text).expect("an address")
    }

    #[test]
    fn a_standalone_nic_is_read_put_back_with_if_match_polled_and_read_again() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(&id, "W/\"e1\"", &[]),
            accepted(),
            operation(None),
            nic(
                &id,
                "W/\"e2\"",
                &[config("Cilium-1", "10.0.1.77", "Succeeded")],
            ),
        ]);
        let got = azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap();
        assert_eq!(got, [address("10.0.1.77")]);
        assert_eq!(
            calls(&azure),
            [
                format!("GET {ARM}{id}"),
                format!("PUT {ARM}{id}"),
                format!("GET {}", operation_url()),
                format!("GET {ARM}{id}"),
            ]
        );
        let sent = azure.arm.transport.sent.borrow();
        assert_eq!(sent[1].url, format!("{ARM}{id}?api-version=2024-03-01"));
        assert_eq!(sent[1].if_match.as_deref(), Some("W/\"e1\""));
        drop(sent);
        assert_eq!(names_put(&azure, 1), ["ipconfig1", "Cilium-1"]);
    }

    #[test]
    fn a_scale_set_nics_configurations_go_through_its_vm() {
        let (vm_id, id) = (scale_set_vm(), scale_set_nic());
        let azure = azure(vec![
            nic(&id, "W/\"n1\"", &[]),
            vm("\"9\"", &[]),
            accepted(),
            operation(None),
            nic(
                &id,
                "W/\"n2\"",
                &[
                    config("Cilium-1", "10.0.1.8", "Succeeded"),
                    config("Cilium-2", "10.0.1.9", "Succeeded"),
                ],
            ),
        ]);
        let got = azure
            .assign(&id, IpRequest::Addresses(2), &mut counter())
            .unwrap();
        assert_eq!(got, [address("10.0.1.8"), address("10.0.1.9")]);
        let urls = azure.arm.transport.urls();
        assert_eq!(urls[0], format!("GET {ARM}{id}?api-version=2018-10-01"));
        assert_eq!(urls[1], format!("GET {ARM}{vm_id}?api-version=2024-07-01"));
        assert_eq!(urls[2], format!("PUT {ARM}{vm_id}?api-version=2024-07-01"));
        assert_eq!(urls[4], format!("GET {ARM}{id}?api-version=2018-10-01"));
        assert_eq!(
            azure.arm.transport.sent.borrow()[2].if_match.as_deref(),
            Some("\"9\"")
        );
        assert_eq!(names_put(&azure, 2), ["ipconfig1", "Cilium-1", "Cilium-2"]);
    }

    #[test]
    fn impossible_requests_are_refused_before_any_call() {
        let azure = azure(vec![]);
        let id = standalone_nic();
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
        let id = standalone_nic();
        let azure = azure(vec![nic(&id, "W/\"e1\"", &[])]);
        azure.unassign(&id, &[address("10.0.1.99")], &[]).unwrap();
        assert_eq!(azure.arm.transport.sent.borrow().len(), 1);
    }

    #[test]
    fn unassigning_removes_the_configuration_under_if_match() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(
                &id,
                "W/\"e1\"",
                &[config("Cilium-1", "10.0.1.77", "Succeeded")],
            ),
            operation(None),
        ]);
        azure.unassign(&id, &[address("10.0.1.77")], &[]).unwrap();
        assert_eq!(names_put(&azure, 1), ["ipconfig1"]);
        assert_eq!(
            azure.arm.transport.sent.borrow()[1].if_match.as_deref(),
            Some("W/\"e1\"")
        );
    }

    #[test]
    fn an_assign_leaves_the_nics_failed_configurations_out_of_its_put() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(
                &id,
                "W/\"e1\"",
                &[
                    config("Cilium-old", "10.0.1.30", "Failed"),
                    config("Cilium-ok", "10.0.1.31", "Succeeded"),
                ],
            ),
            operation(None),
            nic(
                &id,
                "W/\"e2\"",
                &[config("Cilium-1", "10.0.1.77", "Succeeded")],
            ),
        ]);
        azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap();
        assert_eq!(names_put(&azure, 1), ["ipconfig1", "Cilium-ok", "Cilium-1"]);
    }

    #[test]
    fn a_scale_set_assign_leaves_the_failed_configurations_its_nic_shows_out_of_the_vm_model() {
        let id = scale_set_nic();
        let azure = azure(vec![
            nic(
                &id,
                "W/\"n1\"",
                &[
                    config("Cilium-old", "10.0.1.30", "Failed"),
                    config("Cilium-ok", "10.0.1.31", "Succeeded"),
                ],
            ),
            vm("\"9\"", &["Cilium-old", "Cilium-ok"]),
            operation(None),
            nic(
                &id,
                "W/\"n2\"",
                &[config("Cilium-1", "10.0.1.77", "Succeeded")],
            ),
        ]);
        azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap();
        assert_eq!(names_put(&azure, 2), ["ipconfig1", "Cilium-ok", "Cilium-1"]);
    }

    #[test]
    fn an_unassign_leaves_failed_configurations_out_with_the_ones_it_removes() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(
                &id,
                "W/\"e1\"",
                &[
                    config("Cilium-a", "10.0.1.77", "Succeeded"),
                    config("Cilium-old", "10.0.1.30", "Failed"),
                    config("Cilium-b", "10.0.1.78", "Succeeded"),
                ],
            ),
            operation(None),
        ]);
        azure.unassign(&id, &[address("10.0.1.77")], &[]).unwrap();
        assert_eq!(names_put(&azure, 1), ["ipconfig1", "Cilium-b"]);
    }

    #[test]
    fn a_scale_set_unassign_leaves_failed_configurations_out_of_the_vm_model() {
        let id = scale_set_nic();
        let azure = azure(vec![
            nic(
                &id,
                "W/\"n1\"",
                &[
                    config("Cilium-a", "10.0.1.77", "Succeeded"),
                    config("Cilium-old", "10.0.1.30", "Failed"),
                ],
            ),
            vm("\"9\"", &["Cilium-a", "Cilium-old"]),
            operation(None),
        ]);
        azure.unassign(&id, &[address("10.0.1.77")], &[]).unwrap();
        assert_eq!(names_put(&azure, 2), ["ipconfig1"]);
    }
}
