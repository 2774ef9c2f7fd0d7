use std::net::IpAddr;

use agent_ebpf_common::maps::{FAMILY_IPV4, FAMILY_IPV6};
use agent_ebpf_common::EndpointKey;

/// The endpoint map key of an address.
pub fn endpoint_key(address: IpAddr) -> EndpointKey {
    match address {
        IpAddr::V4(v4) => EndpointKey::ipv4(v4.octets()),
        IpAddr::V6(v6) => EndpointKey::ipv6(v6.octets()),
    }
}

/// The address an endpoint map key holds; `None` for a family the map
/// does not use.
pub fn key_address(key: &EndpointKey) -> Option<IpAddr> {
    let bytes = key.address();
    match key.family() {
        FAMILY_IPV4 => Some(IpAddr::from([bytes[0], bytes[1], bytes[2], bytes[3]])),
        FAMILY_IPV6 => Some(IpAddr::from(bytes)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for ip in ["10.0.1.5", "fd00::7", "0.0.0.0", "::", "::ffff:10.0.0.1"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(key_address(&endpoint_key(ip)), Some(ip), "{ip}");
        }
    }
}
