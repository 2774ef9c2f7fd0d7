//! The agent's SNAT table in the kernel, over nf_tables netlink
//! (`NETLINK_NETFILTER`): each change is one batch of `nft_messages`, sent
//! on a socket of its own, and every message's acknowledgement checked.
//!
//! Netlink rather than the `nft` binary: the agent's image has no shell and
//! no nftables tools (nor their libraries), the agent already speaks
//! netlink for its routes, and a batch is one kernel transaction either
//! way. It needs CAP_NET_ADMIN, which the agent holds for its routes.

use std::os::fd::OwnedFd;

use rustix::net::netlink::{SocketAddrNetlink, NETFILTER};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

use crate::nft_messages::{self, Batch};
use crate::snat::SnatRules;

const NLMSG_ERROR: u16 = 2;

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("opening a netfilter netlink socket: {0}")]
    Socket(std::io::Error),
    #[error("sending the nf_tables batch: {0}")]
    Send(std::io::Error),
    #[error("reading nf_tables' answer: {0}")]
    Receive(std::io::Error),
    #[error("nf_tables refused {what}: {error}")]
    Refused { what: String, error: std::io::Error },
    #[error("nf_tables did not acknowledge {0}")]
    NoAck(String),
}

/// The agent's table, over netlink in the agent's network namespace.
#[derive(Debug, Default)]
pub struct NftSnat;

impl NftSnat {
    /// Replace the table with `rules` (one transaction).
    pub fn apply(&self, rules: &SnatRules) -> Result<(), NftError> {
        transact(&nft_messages::replace_table(rules, first_seq()))
    }

    /// Delete the table and everything in it, if it is there.
    pub fn remove(&self) -> Result<(), NftError> {
        transact(&nft_messages::delete_table(first_seq()))
    }
}

/// Sequence numbers only need to tell this socket's messages apart; a
/// fresh socket per batch makes any start do.
fn first_seq() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(1)
}

fn socket() -> Result<OwnedFd, NftError> {
    let socket = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, Some(NETFILTER))
        .map_err(|e| NftError::Socket(e.into()))?;
    rustix::net::bind(&socket, &SocketAddrNetlink::new(0, 0))
        .map_err(|e| NftError::Socket(e.into()))?;
    Ok(socket)
}

/// Sends `batch` and checks an acknowledgement came for each message that
/// asked for one. The kernel handles a netlink message in the sender's
/// context, so every answer is queued once the send returns: they are read
/// without waiting.
fn transact(batch: &Batch) -> Result<(), NftError> {
    let socket = socket()?;
    rustix::net::sendto(
        &socket,
        &batch.bytes,
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )
    .map_err(|e| NftError::Send(e.into()))?;
    let mut acked = std::collections::BTreeSet::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let received = match rustix::net::recv(&socket, &mut buffer[..], RecvFlags::DONTWAIT) {
            Ok((length, _)) => length,
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => return Err(NftError::Receive(e.into())),
        };
        for (seq, error) in answers(&buffer[..received]) {
            if error == 0 {
                acked.insert(seq);
                continue;
            }
            let what = batch
                .acked
                .iter()
                .find(|(s, _)| *s == seq)
                .map_or_else(|| format!("message {seq}"), |(_, what)| what.clone());
            return Err(NftError::Refused {
                what,
                error: std::io::Error::from_raw_os_error(-error),
            });
        }
    }
    match batch.acked.iter().find(|(seq, _)| !acked.contains(seq)) {
        Some((_, what)) => Err(NftError::NoAck(what.clone())),
        None => Ok(()),
    }
}

/// The (sequence number, error) of every NLMSG_ERROR answer in `bytes`
/// (error 0 is an acknowledgement).
fn answers(mut bytes: &[u8]) -> Vec<(u32, i32)> {
    let mut out = Vec::new();
    while bytes.len() >= 16 {
        let word = |at: usize| {
            u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let length = word(0) as usize;
        if length < 16 || length > bytes.len() {
            break;
        }
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if kind == NLMSG_ERROR && length >= 20 {
            // The answer's own sequence number is the request's.
            let seq = word(8);
            let error = word(16) as i32;
            out.push((seq, error));
        }
        bytes = bytes.get(length.div_ceil(4) * 4..).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_message(seq: u32, error: i32) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&36u32.to_ne_bytes());
        bytes.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        bytes.extend_from_slice(&0u16.to_ne_bytes());
        bytes.extend_from_slice(&seq.to_ne_bytes());
        bytes.extend_from_slice(&0u32.to_ne_bytes());
        bytes.extend_from_slice(&error.to_ne_bytes());
        bytes.extend_from_slice(&[0; 16]); // the request's header
        bytes
    }

    #[test]
    fn answers_are_read_by_sequence_number() {
        let mut bytes = error_message(5, 0);
        bytes.extend(error_message(6, -22));
        bytes.extend_from_slice(&[1, 2, 3]); // a truncated tail is ignored
        assert_eq!(answers(&bytes), [(5, 0), (6, -22)]);
    }
}
