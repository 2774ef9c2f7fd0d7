//! The mutating operations: create (and attach) and delete interfaces, assign
//! and unassign addresses and prefixes.

use std::time::Duration;

use aws_sdk_ec2::types::{
    NetworkInterfaceAttachmentChanges, ResourceType, Tag as Ec2Tag, TagSpecification,
};
use ipam_provider_sdk::net::ipv4_text;
use ipam_provider_sdk::{
    log, Assigned, CreateInterfaceRequest, Error, IpRequest, Ipv4, Ipv4Net, LogLevel,
    NetworkInterface,
};

use crate::convert;
use crate::errors::{from_sdk, is_not_assigned};
use crate::Ec2;

/// How long a detach is waited for, polling once a second.
const DETACH_POLLS: u32 = 15;

async fn pause() {
    wstd::task::sleep(wstd::time::Duration::from(Duration::from_secs(1))).await;
}

impl Ec2 {
    pub async fn create_interface(
        &self,
        request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        if request.use_prefixes && request.ipv4_count == 0 {
            return Err(Error::InvalidArgument(
                "use-prefixes with an ipv4-count of 0".to_string(),
            ));
        }
        // Refused before anything is created: EC2 would refuse the attach
        // anyway, and an interface made for nothing costs a delete.
        if let Some(holder) = self
            .holder_of_device_index(&request.instance_id, request.index)
            .await?
        {
            return Err(Error::Conflict(format!(
                "device index {} of {} is taken by {holder}",
                request.index, request.instance_id
            )));
        }
        let created = self.create_detached(&request).await?;
        let id = created.id.clone();
        let attachment_id = match self.attach(&id, &request).await {
            Ok(attachment_id) => attachment_id,
            Err(error) => return Err(self.discard(&id, None, error).await),
        };
        if request.delete_on_termination {
            let changes = NetworkInterfaceAttachmentChanges::builder()
                .attachment_id(&attachment_id)
                .delete_on_termination(true)
                .build();
            let modified = self
                .client
                .modify_network_interface_attribute()
                .network_interface_id(&id)
                .attachment(changes)
                .send()
                .await;
            if let Err(error) = modified {
                let error = from_sdk("ModifyNetworkInterfaceAttribute", error);
                return Err(self.discard(&id, Some(&attachment_id), error).await);
            }
        }
        Ok(NetworkInterface {
            index: request.index,
            instance_id: Some(request.instance_id),
            ..created
        })
    }

    /// CreateNetworkInterface with the addresses (or prefixes) and tags asked
    /// for, plus the settings' extra tags.
    async fn create_detached(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        let mut tags: Vec<Ec2Tag> = request
            .tags
            .iter()
            .map(|t| Ec2Tag::builder().key(&t.key).value(&t.value).build())
            .collect();
        for (key, value) in &self.settings.extra_tags {
            if !request.tags.iter().any(|t| &t.key == key) {
                tags.push(Ec2Tag::builder().key(key).value(value).build());
            }
        }
        let mut create = self
            .client
            .create_network_interface()
            .subnet_id(&request.subnet_id)
            .set_groups(Some(request.security_groups.clone()))
            .description(&request.description)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::NetworkInterface)
                    .set_tags(Some(tags))
                    .build(),
            );
        let count = i32::try_from(request.ipv4_count)
            .map_err(|_| Error::InvalidArgument(format!("ipv4-count {}", request.ipv4_count)))?;
        if request.use_prefixes {
            create = create.ipv4_prefix_count(count);
        } else if count > 0 {
            create = create.secondary_private_ip_address_count(count);
        }
        let answer = create
            .send()
            .await
            .map_err(|e| from_sdk("CreateNetworkInterface", e))?;
        let eni = answer.network_interface().ok_or_else(|| {
            Error::Other("CreateNetworkInterface answered without the interface".to_string())
        })?;
        convert::interface(eni)
    }

    /// AttachNetworkInterface on network card 0 at the requested index; the
    /// attachment's id. The engine picks the index; EC2 refusing it as taken
    /// is `conflict`, and the engine reads the instance again and picks anew.
    async fn attach(&self, id: &str, request: &CreateInterfaceRequest) -> Result<String, Error> {
        let device_index = i32::try_from(request.index)
            .map_err(|_| Error::InvalidArgument(format!("device index {}", request.index)))?;
        let answer = self
            .client
            .attach_network_interface()
            .network_interface_id(id)
            .instance_id(&request.instance_id)
            .device_index(device_index)
            .network_card_index(0)
            .send()
            .await
            .map_err(|e| from_sdk("AttachNetworkInterface", e))?;
        let attachment_id = answer
            .attachment_id()
            .ok_or_else(|| Error::Other("AttachNetworkInterface answered without an id".into()))?;
        Ok(attachment_id.to_string())
    }

    /// Delete an interface this call created and return the error that made
    /// it give up. If the clean-up fails too, the interface is left with its
    /// ownership tags for the operator's leaked-interface collection.
    async fn discard(&self, id: &str, attachment: Option<&str>, error: Error) -> Error {
        if let Err(cleanup) = self.remove(id, attachment).await {
            log(
                LogLevel::Error,
                &format!("could not delete {id} after a failed create ({cleanup:?}); left for collection"),
            );
        }
        error
    }

    pub async fn delete_interface(&self, id: &str) -> Result<(), Error> {
        let Some((interface, attachment)) = self.interface(id).await? else {
            return Ok(());
        };
        if let (Some(instance), 0) = (&interface.instance_id, interface.index) {
            return Err(Error::InvalidArgument(format!(
                "{id} is the primary interface of {instance}"
            )));
        }
        self.remove(id, attachment.as_deref()).await
    }

    /// Detach the interface if it has a live attachment, then delete it.
    async fn remove(&self, id: &str, attachment: Option<&str>) -> Result<(), Error> {
        let Some(attachment) = attachment else {
            return self.delete_detached(id).await;
        };
        let detached = self
            .client
            .detach_network_interface()
            .attachment_id(attachment)
            .send()
            .await;
        match detached.map_err(|e| from_sdk("DetachNetworkInterface", e)) {
            Ok(_) | Err(Error::NotFound(_)) => {}
            Err(other) => return Err(other),
        }
        // Detaching takes EC2 a few seconds; delete refuses an interface
        // still in use.
        for _ in 0..DETACH_POLLS {
            match self.delete_detached(id).await {
                Err(Error::Conflict(_)) => pause().await,
                done => return done,
            }
        }
        Err(Error::Transient(format!(
            "{id} is still detaching; deleting it again will finish"
        )))
    }

    /// DeleteNetworkInterface; an interface already gone is success.
    async fn delete_detached(&self, id: &str) -> Result<(), Error> {
        let deleted = self
            .client
            .delete_network_interface()
            .network_interface_id(id)
            .send()
            .await;
        match deleted.map_err(|e| from_sdk("DeleteNetworkInterface", e)) {
            Ok(_) | Err(Error::NotFound(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }

    pub async fn assign(&self, id: &str, request: IpRequest) -> Result<Assigned, Error> {
        let (count, prefixes) = match request {
            IpRequest::Addresses(n) => (n, false),
            IpRequest::Prefixes(n) => (n, true),
        };
        if count == 0 {
            return Err(Error::InvalidArgument("assign-ips of 0".to_string()));
        }
        let count = i32::try_from(count)
            .map_err(|_| Error::InvalidArgument(format!("assign-ips of {count}")))?;
        let assign = self
            .client
            .assign_private_ip_addresses()
            .network_interface_id(id);
        let assign = if prefixes {
            assign.ipv4_prefix_count(count)
        } else {
            assign.secondary_private_ip_address_count(count)
        };
        let answer = assign
            .send()
            .await
            .map_err(|e| from_sdk("AssignPrivateIpAddresses", e))?;
        convert::assigned(&answer, request)
    }

    /// UnassignPrivateIpAddresses for the addresses, then for the prefixes
    /// (EC2 takes one kind per call, as text). Those no longer on the
    /// interface are ignored: when EC2 refuses the list, the interface is read
    /// and the call repeated with what it still has.
    pub async fn unassign(
        &self,
        id: &str,
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        if !addresses.is_empty() {
            match self
                .unassign_once(id, addresses_text(addresses), false)
                .await
            {
                Err(error) if is_not_assigned(&error) => {
                    let interface = self.still_there(id).await?;
                    if addresses.contains(&interface.primary_ip) {
                        return Err(Error::InvalidArgument(format!(
                            "{} is the primary address of {id}",
                            ipv4_text(interface.primary_ip)
                        )));
                    }
                    let still: Vec<Ipv4> = addresses
                        .iter()
                        .copied()
                        .filter(|a| interface.addresses.contains(a))
                        .collect();
                    if !still.is_empty() {
                        self.unassign_once(id, addresses_text(&still), false)
                            .await?;
                    }
                }
                other => other?,
            }
        }
        if !prefixes.is_empty() {
            match self.unassign_once(id, prefixes_text(prefixes), true).await {
                Err(error) if is_not_assigned(&error) => {
                    let interface = self.still_there(id).await?;
                    let still: Vec<Ipv4Net> = prefixes
                        .iter()
                        .copied()
                        .filter(|p| interface.prefixes.contains(p))
                        .collect();
                    if !still.is_empty() {
                        self.unassign_once(id, prefixes_text(&still), true).await?;
                    }
                }
                other => other?,
            }
        }
        Ok(())
    }

    /// The interface as EC2 has it now; not-found when it is gone.
    async fn still_there(&self, id: &str) -> Result<NetworkInterface, Error> {
        match self.interface(id).await? {
            Some((interface, _)) => Ok(interface),
            None => Err(Error::NotFound(format!("interface {id}"))),
        }
    }

    async fn unassign_once(
        &self,
        id: &str,
        list: Vec<String>,
        prefixes: bool,
    ) -> Result<(), Error> {
        let unassign = self
            .client
            .unassign_private_ip_addresses()
            .network_interface_id(id);
        let unassign = if prefixes {
            unassign.set_ipv4_prefixes(Some(list))
        } else {
            unassign.set_private_ip_addresses(Some(list))
        };
        unassign
            .send()
            .await
            .map(drop)
            .map_err(|e| from_sdk("UnassignPrivateIpAddresses", e))
    }
}

/// Addresses as EC2 takes them (`10.0.1.17`).
fn addresses_text(addresses: &[Ipv4]) -> Vec<String> {
    addresses.iter().copied().map(ipv4_text).collect()
}

/// Prefixes as EC2 takes them (`10.0.1.16/28`). The host checked them as
/// networks before calling.
fn prefixes_text(prefixes: &[Ipv4Net]) -> Vec<String> {
    prefixes.iter().map(Ipv4Net::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_prefixes_go_to_ec2_in_its_text() {
        let addresses = [0x0a00_0111, 0x6440_0a63];
        assert_eq!(addresses_text(&addresses), ["10.0.1.17", "100.64.10.99"]);
        let prefixes = [
            "10.0.1.16/28".parse().unwrap(),
            "10.0.2.0/28".parse().unwrap(),
        ];
        assert_eq!(prefixes_text(&prefixes), ["10.0.1.16/28", "10.0.2.0/28"]);
    }
}
