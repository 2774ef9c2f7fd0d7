//! The decision for one frame from a pod's interface.

use crate::maps::{DropReason, EndpointInfo, EndpointKey};
use crate::packet::{parse, PacketBytes, ParseError, Parsed};

/// `TC_ACT_UNSPEC`: no objection; tcx runs the next program (`TCX_NEXT`)
/// and the stack carries on.
pub const TC_ACT_UNSPEC: i32 = -1;
/// `TC_ACT_SHOT`: drop the packet.
pub const TC_ACT_SHOT: i32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop(DropReason),
}

impl Verdict {
    /// The tc program's return value for this verdict.
    pub const fn tc_action(self) -> i32 {
        match self {
            Self::Pass => TC_ACT_UNSPEC,
            Self::Drop(_) => TC_ACT_SHOT,
        }
    }
}

/// Judges a frame that arrived from the pod behind interface `ifindex`:
/// ARP, neighbour discovery and multicast listener discovery pass; an IP packet passes only if `lookup`
/// finds its source address as a pod endpoint on this same interface.
#[inline(always)]
pub fn verdict<P, L>(frame: &P, ifindex: u32, lookup: L) -> Verdict
where
    P: PacketBytes + ?Sized,
    L: FnOnce(&EndpointKey) -> Option<EndpointInfo>,
{
    let key = match parse(frame) {
        Ok(Parsed::Arp | Parsed::NeighbourDiscovery | Parsed::MulticastListener) => {
            return Verdict::Pass
        }
        Ok(Parsed::Ipv4 { source }) => EndpointKey::ipv4(source),
        Ok(Parsed::Ipv6 { source }) => EndpointKey::ipv6(source),
        Err(ParseError::Truncated | ParseError::BadIpHeader) => {
            return Verdict::Drop(DropReason::Malformed)
        }
        Err(ParseError::UnknownL3 { .. }) => return Verdict::Drop(DropReason::UnknownL3),
    };
    match lookup(&key) {
        None => Verdict::Drop(DropReason::UnknownSource),
        Some(endpoint) if endpoint.is_host() => Verdict::Drop(DropReason::HostSource),
        Some(endpoint) if endpoint.ifindex != ifindex => Verdict::Drop(DropReason::WrongInterface),
        Some(_) => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::frames::*;
    use crate::packet::ETH_P_ARP;

    const POD_IFINDEX: u32 = 7;
    const POD_V4: [u8; 4] = [10, 0, 0, 7];
    const OTHER_POD_V4: [u8; 4] = [10, 0, 0, 8];
    const HOST_V4: [u8; 4] = [10, 0, 0, 1];
    const POD_V6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];

    fn endpoints(key: &EndpointKey) -> Option<EndpointInfo> {
        [
            (EndpointKey::ipv4(POD_V4), EndpointInfo::pod(POD_IFINDEX, 1)),
            (EndpointKey::ipv4(OTHER_POD_V4), EndpointInfo::pod(8, 1)),
            (EndpointKey::ipv4(HOST_V4), EndpointInfo::host()),
            (EndpointKey::ipv6(POD_V6), EndpointInfo::pod(POD_IFINDEX, 0)),
        ]
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
    }

    #[test]
    fn holds_each_pod_to_its_own_sources() {
        use DropReason::*;
        let cases: &[(&str, std::vec::Vec<u8>, Verdict)] = &[
            ("own ipv4", ipv4(POD_V4), Verdict::Pass),
            ("own ipv6", ipv6(POD_V6, 6, &[0; 20]), Verdict::Pass),
            (
                "unknown ipv4",
                ipv4([192, 0, 2, 1]),
                Verdict::Drop(UnknownSource),
            ),
            (
                "unknown ipv6",
                ipv6([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9], 17, &[]),
                Verdict::Drop(UnknownSource),
            ),
            (
                "the ipv4 of the v6 key's bytes",
                ipv4([0xfd, 0, 0, 0]),
                Verdict::Drop(UnknownSource),
            ),
            (
                "another pod's address",
                ipv4(OTHER_POD_V4),
                Verdict::Drop(WrongInterface),
            ),
            (
                "the host's address",
                ipv4(HOST_V4),
                Verdict::Drop(HostSource),
            ),
            ("arp", ethernet(ETH_P_ARP, &[0; 28]), Verdict::Pass),
            (
                "neighbour solicitation from ::",
                ipv6([0; 16], 58, &[135, 0, 0, 0]),
                Verdict::Pass,
            ),
            (
                "truncated ipv4",
                ipv4(POD_V4)[..20].to_vec(),
                Verdict::Drop(Malformed),
            ),
            ("runt", std::vec![0; 10], Verdict::Drop(Malformed)),
            ("vlan", ethernet(0x8100, &[0; 46]), Verdict::Drop(UnknownL3)),
        ];
        for (name, frame, want) in cases {
            assert_eq!(
                verdict(frame.as_slice(), POD_IFINDEX, endpoints),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_malformed_frame_is_judged_without_a_lookup() {
        let looked_up = core::cell::Cell::new(false);
        let frame = ipv4(POD_V4);
        let got = verdict(&frame[..16], POD_IFINDEX, |_| {
            looked_up.set(true);
            None
        });
        assert_eq!(got, Verdict::Drop(DropReason::Malformed));
        assert!(!looked_up.get());
    }

    #[test]
    fn tc_actions() {
        assert_eq!(Verdict::Pass.tc_action(), -1);
        assert_eq!(Verdict::Drop(DropReason::UnknownSource).tc_action(), 2);
    }
}
