//! Sending a hand-made Ethernet frame out of an interface with an AF_PACKET
//! socket: how a test makes a pod send what its kernel never would (a
//! truncated IP header).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Sends `frame` (Ethernet header included) out of the interface with
/// `ifindex`, in the calling thread's network namespace.
pub fn send_raw_frame(ifindex: u32, frame: &[u8]) -> io::Result<()> {
    // SAFETY: socket(2) takes no pointers; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket descriptor that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_ifindex = ifindex as i32;
    address.sll_halen = 6;
    address.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: the buffer and the address are valid for the lengths given
    // and outlive the call; the socket is open.
    let sent = unsafe {
        libc::sendto(
            socket.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&address as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != frame.len() {
        return Err(io::Error::other(format!(
            "sent {sent} of {} bytes",
            frame.len()
        )));
    }
    Ok(())
}
