//! Making and setting links over netlink in the namespace of the thread that
//! connects: veth pairs with one end moved into another
//! namespace, MAC and IP addresses, up and down.

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::{Handle, LinkUnspec, LinkVeth};

use crate::{NetNs, NetnsError};

/// A netlink connection to the namespace it was made in.
#[derive(Debug, Clone)]
pub struct NetLinks {
    handle: Handle,
}

impl NetLinks {
    /// Connects to the calling thread's network namespace; the connection
    /// is driven by a task on the current tokio runtime.
    pub fn connect() -> Result<Self, NetnsError> {
        let (connection, handle, _) =
            rtnetlink::new_connection().map_err(NetnsError::io("opening a netlink socket"))?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| NetnsError::Io {
            doing: "finding a tokio runtime to drive the netlink connection".into(),
            source: std::io::Error::other(e),
        })?;
        runtime.spawn(connection);
        Ok(Self { handle })
    }

    /// The raw rtnetlink handle, for what these helpers do not cover.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Adds a veth pair `name`/`peer` here and returns the index of `name`;
    /// `peer` is moved into `peer_ns` if one is given. Both ends are left
    /// down. (Veth rather than dummy links: not every test kernel has the
    /// dummy driver, and a veth end works as a stand-in for a cloud NIC.)
    pub async fn add_veth(
        &self,
        name: &str,
        peer: &str,
        peer_ns: Option<&NetNs>,
    ) -> Result<u32, NetnsError> {
        self.handle
            .link()
            .add(LinkVeth::new(name, peer).build())
            .execute()
            .await
            .map_err(NetnsError::netlink(format!(
                "adding veth pair {name}/{peer}"
            )))?;
        if let Some(peer_ns) = peer_ns {
            let peer_index = self.index(peer).await?;
            let ns_file = peer_ns.open()?;
            let message = LinkUnspec::new_with_index(peer_index)
                .setns_by_fd(ns_file.as_raw_fd())
                .build();
            self.set(
                message,
                format!("moving {peer} into namespace {}", peer_ns.name()),
            )
            .await?;
        }
        self.index(name).await
    }

    /// The index of the link named `name`.
    pub async fn index(&self, name: &str) -> Result<u32, NetnsError> {
        Ok(self.link(name).await?.header.index)
    }

    /// Whether the link named `name` is administratively up.
    pub async fn is_up(&self, name: &str) -> Result<bool, NetnsError> {
        Ok(self.link(name).await?.header.flags.contains(LinkFlags::Up))
    }

    /// The link's MAC address, if it has a six-byte one.
    pub async fn mac(&self, name: &str) -> Result<Option<[u8; 6]>, NetnsError> {
        let link = self.link(name).await?;
        Ok(link
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                LinkAttribute::Address(bytes) => <[u8; 6]>::try_from(bytes.as_slice()).ok(),
                _ => None,
            }))
    }

    pub async fn set_mac(&self, name: &str, mac: [u8; 6]) -> Result<(), NetnsError> {
        let index = self.index(name).await?;
        let message = LinkUnspec::new_with_index(index)
            .address(mac.to_vec())
            .build();
        self.set(message, format!("setting the MAC address of {name}"))
            .await
    }

    pub async fn set_up(&self, name: &str) -> Result<(), NetnsError> {
        let index = self.index(name).await?;
        self.set(
            LinkUnspec::new_with_index(index).up().build(),
            format!("setting {name} up"),
        )
        .await
    }

    pub async fn set_down(&self, name: &str) -> Result<(), NetnsError> {
        let index = self.index(name).await?;
        self.set(
            LinkUnspec::new_with_index(index).down().build(),
            format!("setting {name} down"),
        )
        .await
    }

    /// Adds `address/prefix_len` to the link named `name`.
    pub async fn add_address(
        &self,
        name: &str,
        address: IpAddr,
        prefix_len: u8,
    ) -> Result<(), NetnsError> {
        let index = self.index(name).await?;
        self.handle
            .address()
            .add(index, address, prefix_len)
            .execute()
            .await
            .map_err(NetnsError::netlink(format!(
                "adding {address}/{prefix_len} to {name}"
            )))
    }

    async fn link(&self, name: &str) -> Result<LinkMessage, NetnsError> {
        let mut found = self.handle.link().get().match_name(name).execute();
        match found.try_next().await {
            Ok(Some(link)) => Ok(link),
            Ok(None) => Err(NetnsError::LinkNotFound {
                name: name.to_owned(),
            }),
            Err(rtnetlink::Error::NetlinkError(e))
                if e.raw_code() == -(rustix::io::Errno::NODEV.raw_os_error()) =>
            {
                Err(NetnsError::LinkNotFound {
                    name: name.to_owned(),
                })
            }
            Err(e) => Err(NetnsError::netlink(format!("looking up link {name}"))(e)),
        }
    }

    async fn set(&self, message: LinkMessage, doing: String) -> Result<(), NetnsError> {
        self.handle
            .link()
            .set(message)
            .execute()
            .await
            .map_err(NetnsError::netlink(doing))
    }
}
