use std::net::IpAddr;

use agent_ebpf_common::EndpointKey;

/// The endpoint map key of an address.
pub fn endpoint_key(address: IpAddr) -> EndpointKey {
    match address {
        IpAddr::V4(v4) => EndpointKey::ipv4(v4.octets()),
        IpAddr::V6(v6) => EndpointKey::ipv6(v6.octets()),
    }
}
