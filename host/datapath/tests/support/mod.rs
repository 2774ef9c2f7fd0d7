//! What the datapath tests share: the built object, a private bpffs, a
//! network namespace with veth pairs, and crafted frames.

#![allow(dead_code, reason = "each test binary uses its own part of this")]

pub mod raw_frame;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipam_datapath::{ensure_bpffs, Bpffs};
use ipam_netns::{NetLinks, NetNs};

/// The object `cargo xtask ebpf` builds; `IPAM_EBPF_OBJECT` names it when
/// xtask runs the tests.
pub fn object() -> Vec<u8> {
    let path = std::env::var_os("IPAM_EBPF_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ebpf/agent-ebpf.o")
        });
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "the eBPF object {} is missing ({e}): build it with `cargo xtask ebpf`",
            path.display()
        )
    })
}

/// Panics, saying why, unless this process can load BPF programs and make
/// namespaces (root), and the kernel has what the tests use.
pub fn require_privileges() {
    ipam_netns::require_root();
}

/// A bpffs mounted for one test under a temporary folder, unmounted and
/// removed on drop: the tests' pins never meet the host's.
pub struct TestBpffs {
    path: PathBuf,
}

impl TestBpffs {
    pub fn mount(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("ipam-datapath-{name}-{}", std::process::id()));
        let mounted = ensure_bpffs(&path)
            .unwrap_or_else(|e| panic!("this test needs bpffs (CONFIG_BPF_SYSCALL): {e}"));
        assert_eq!(
            mounted,
            Bpffs::Mounted,
            "{} was bpffs already",
            path.display()
        );
        assert_eq!(
            ensure_bpffs(&path).expect("checking bpffs again"),
            Bpffs::AlreadyMounted
        );
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestBpffs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.path, rustix::mount::UnmountFlags::DETACH);
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// A namespace with veth pairs `pod<i>h`/`pod<i>c` (host end, pod end), up;
/// returns it and the host ends' ifindexes.
pub fn namespace_with_veths(prefix: &str, pairs: usize) -> (NetNs, Vec<u32>) {
    let ns = NetNs::create_unique(prefix).expect("creating a network namespace");
    let indexes = ns
        .block_on(|| async move {
            let links = NetLinks::connect().expect("netlink");
            let mut indexes = Vec::new();
            for i in 0..pairs {
                let host = format!("pod{i}h");
                let pod = format!("pod{i}c");
                indexes.push(
                    links
                        .add_veth(&host, &pod, None)
                        .await
                        .expect("adding a veth"),
                );
                links.set_up(&host).await.expect("link up");
                links.set_up(&pod).await.expect("link up");
            }
            indexes
        })
        .expect("entering the namespace");
    (ns, indexes)
}

pub fn ip(address: &str) -> IpAddr {
    address.parse().expect("a test address")
}

pub fn ethernet(ether_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    frame.extend_from_slice(&ether_type.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An IPv4 UDP datagram from `source` with 18 bytes of payload.
pub fn ipv4_udp(source: [u8; 4]) -> Vec<u8> {
    let mut packet = vec![0u8; 20 + 8 + 18];
    packet[0] = 0x45;
    let total_length = packet.len() as u16;
    packet[2..4].copy_from_slice(&total_length.to_be_bytes());
    packet[8] = 64;
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source);
    packet[16..20].copy_from_slice(&[10, 0, 0, 1]);
    ethernet(0x0800, &packet)
}

/// An IPv6 packet from `source` with `next_header` and `payload`.
pub fn ipv6(source: [u8; 16], next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut packet = vec![0u8; 40];
    packet[0] = 0x60;
    packet[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
    packet[6] = next_header;
    packet[7] = 64;
    packet[8..24].copy_from_slice(&source);
    packet[24] = 0xfd;
    packet[39] = 1;
    packet.extend_from_slice(payload);
    ethernet(0x86dd, &packet)
}
