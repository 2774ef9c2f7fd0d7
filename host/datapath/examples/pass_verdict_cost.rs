//! Per-packet cost of the pass verdict (parse, endpoint lookup, per-CPU
//! count) with BPF_PROG_TEST_RUN repeated 1,000,000 times, for IPv4 and
//! IPv6; seven such rounds each, printed with their minimum and median (a
//! busy machine shows up as spread between rounds). Needs root; run after
//! `cargo xtask ebpf`:
//!
//! ```text
//! cargo run --release -p ipam-datapath --example pass_verdict_cost
//! ```

use std::net::IpAddr;
use std::path::PathBuf;

use ipam_datapath::{ensure_bpffs, Datapath, EndpointInfo, PinDir};

/// The loopback device: the one ifindex a test run accepts without a device
/// of its own (the kernel's default for test runs).
const LOOPBACK_IFINDEX: u32 = 1;
const REPEAT: u32 = 1_000_000;
const ROUNDS: usize = 7;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let object_path = std::env::var_os("IPAM_EBPF_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ebpf/agent-ebpf.o")
        });
    let object = std::fs::read(&object_path).map_err(|e| {
        format!(
            "{}: {e} (build it with `cargo xtask ebpf`)",
            object_path.display()
        )
    })?;
    let bpffs = std::env::temp_dir().join(format!("ipam-datapath-bench-{}", std::process::id()));
    ensure_bpffs(&bpffs)?;
    let result = measure(&object, &bpffs);
    let _ = rustix::mount::unmount(&bpffs, rustix::mount::UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&bpffs);
    result
}

fn measure(object: &[u8], bpffs: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (mut datapath, _) = Datapath::load(object, PinDir::new(bpffs))?;
    let pod_v4: IpAddr = "10.0.0.7".parse()?;
    let pod_v6: IpAddr = "fd00::7".parse()?;
    for address in [pod_v4, pod_v6] {
        datapath.set_endpoint(address, EndpointInfo::pod(LOOPBACK_IFINDEX, 0))?;
    }
    for (name, frame) in [
        ("ipv4", ipv4_udp([10, 0, 0, 7])),
        ("ipv6", ipv6_udp(pod_v6)),
    ] {
        let mut per_packet = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let run = datapath.test_run(&frame, LOOPBACK_IFINDEX, REPEAT)?;
            if run.action != -1 {
                return Err(
                    format!("{name}: the frame was not passed (action {})", run.action).into(),
                );
            }
            per_packet.push(run.per_run.as_nanos());
        }
        per_packet.sort_unstable();
        println!(
            "{name}: pass verdict with the endpoint lookup: min {} ns, median {} ns per packet \
             ({ROUNDS} rounds of {REPEAT} runs: {per_packet:?})",
            per_packet[0],
            per_packet[ROUNDS / 2]
        );
    }
    Ok(())
}

fn ipv4_udp(source: [u8; 4]) -> Vec<u8> {
    let mut frame = vec![0u8; 14 + 20 + 8 + 18];
    frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    frame[14] = 0x45;
    frame[14 + 9] = 17;
    frame[14 + 12..14 + 16].copy_from_slice(&source);
    frame
}

fn ipv6_udp(source: IpAddr) -> Vec<u8> {
    let IpAddr::V6(source) = source else {
        unreachable!("an IPv6 test address")
    };
    let mut frame = vec![0u8; 14 + 40 + 8 + 18];
    frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    frame[14] = 0x60;
    frame[14 + 6] = 17;
    frame[14 + 8..14 + 24].copy_from_slice(&source.octets());
    frame
}
