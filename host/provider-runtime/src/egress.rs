//! Fail-closed egress policy of one provider: outgoing HTTP requests may go
//! only to origins on its allow-list (scheme://host[:port]), and never to a
//! link-local or cloud-metadata address, whatever name led there. The check
//! runs twice: on the URL the guest asked for, and on every address its host
//! name resolves to. An https server whose certificate does not verify is
//! refused as well ([`EgressError::UntrustedCertificate`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One allowed origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("{0:?} is not an origin of the form scheme://host[:port]")]
    BadOrigin(String),
    #[error("{origin} is not on the provider's egress allow-list")]
    NotAllowed { origin: String },
    #[error("{address} is {why}; no provider may reach it")]
    ForbiddenAddress { address: IpAddr, why: &'static str },
    #[error("resolving {host}: {message}")]
    Resolution { host: String, message: String },
    /// The server's certificate did not verify for the name the guest used
    /// against the trusted roots; nothing was sent to it.
    #[error("the TLS certificate of {host} was refused: {message}")]
    UntrustedCertificate { host: String, message: String },
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

impl Origin {
    pub fn new(scheme: &str, host: &str, port: Option<u16>) -> Option<Self> {
        let scheme = scheme.to_ascii_lowercase();
        let port = port.or_else(|| default_port(&scheme))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        (!host.is_empty()).then_some(Self { scheme, host, port })
    }

    /// Parse an allow-list entry: `https://ec2.eu-west-1.amazonaws.com`,
    /// `http://127.0.0.1:5000`.
    pub fn parse(text: &str) -> Result<Self, EgressError> {
        let bad = || EgressError::BadOrigin(text.to_string());
        let uri: http::Uri = text.parse().map_err(|_| bad())?;
        let path_is_root = uri
            .path_and_query()
            .is_none_or(|p| p.as_str() == "/" || p.as_str().is_empty());
        if !path_is_root {
            return Err(bad());
        }
        let scheme = uri.scheme_str().ok_or_else(bad)?;
        let authority = uri.authority().ok_or_else(bad)?;
        Origin::new(scheme, authority.host(), authority.port_u16()).ok_or_else(bad)
    }
}

/// Why an address may never be reached by a provider, if it may not.
pub fn forbidden_address(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    }
}

fn forbidden_v4(v4: Ipv4Addr) -> Option<&'static str> {
    if v4.is_link_local() {
        // 169.254.0.0/16: AWS, GCP and OpenStack metadata, ECS task metadata.
        Some("link-local (instance metadata lives here)")
    } else if v4 == Ipv4Addr::new(168, 63, 129, 16) {
        Some("the Azure WireServer")
    } else if v4 == Ipv4Addr::new(100, 100, 100, 200) {
        Some("the Alibaba Cloud metadata service")
    } else if v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast() {
        Some("not a unicast address")
    } else {
        None
    }
}

fn forbidden_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let segments = v6.segments();
    if segments[0] & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        Some("the AWS instance metadata service")
    } else if v6.is_unspecified() || v6.is_multicast() {
        Some("not a unicast address")
    } else {
        None
    }
}

/// The allow-list of one provider. Empty means no egress at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allowed: Vec<Origin>,
}

impl EgressPolicy {
    pub fn new(entries: &[String]) -> Result<Self, EgressError> {
        let allowed = entries
            .iter()
            .map(|e| Origin::parse(e))
            .collect::<Result<_, _>>()?;
        Ok(Self { allowed })
    }

    /// First check: the origin the guest named.
    pub fn check_origin(&self, origin: &Origin) -> Result<(), EgressError> {
        if let Ok(address) = origin.host.parse::<IpAddr>() {
            if let Some(why) = forbidden_address(address) {
                return Err(EgressError::ForbiddenAddress { address, why });
            }
        }
        if self.allowed.contains(origin) {
            Ok(())
        } else {
            Err(EgressError::NotAllowed {
                origin: origin.to_string(),
            })
        }
    }

    /// Second check: every address the allowed name resolved to.
    pub fn check_resolved(addresses: &[IpAddr]) -> Result<(), EgressError> {
        for &address in addresses {
            if let Some(why) = forbidden_address(address) {
                return Err(EgressError::ForbiddenAddress { address, why });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> EgressPolicy {
        EgressPolicy::new(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn origin(text: &str) -> Origin {
        Origin::parse(text).unwrap()
    }

    #[test]
    fn origins_parse_with_default_ports() {
        assert_eq!(
            origin("https://EC2.eu-west-1.amazonaws.com").to_string(),
            "https://ec2.eu-west-1.amazonaws.com:443"
        );
        assert_eq!(origin("http://127.0.0.1:5000/").port, 5000);
        assert_eq!(origin("http://[::1]:8080").host, "::1");
        for bad in ["ec2.amazonaws.com", "ftp://x", "https://x/path", "https://"] {
            assert!(Origin::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn allow_list_is_exact_and_fail_closed() {
        let p = policy(&[
            "https://ec2.eu-west-1.amazonaws.com",
            "http://127.0.0.1:5000",
        ]);
        assert!(p
            .check_origin(&origin("https://ec2.eu-west-1.amazonaws.com"))
            .is_ok());
        assert!(p.check_origin(&origin("http://127.0.0.1:5000")).is_ok());
        for denied in [
            "http://ec2.eu-west-1.amazonaws.com",
            "https://ec2.eu-west-1.amazonaws.com:8443",
            "https://sts.amazonaws.com",
            "http://127.0.0.1:5001",
        ] {
            assert!(
                matches!(
                    p.check_origin(&origin(denied)),
                    Err(EgressError::NotAllowed { .. })
                ),
                "{denied}"
            );
        }
        assert!(EgressPolicy::default()
            .check_origin(&origin("http://127.0.0.1:5000"))
            .is_err());
    }

    #[test]
    fn metadata_addresses_are_refused_even_when_allow_listed() {
        let p = policy(&[
            "http://169.254.169.254",
            "http://[fd00:ec2::254]",
            "http://168.63.129.16",
        ]);
        for target in [
            "http://169.254.169.254",
            "http://[fd00:ec2::254]",
            "http://168.63.129.16",
        ] {
            assert!(
                matches!(
                    p.check_origin(&origin(target)),
                    Err(EgressError::ForbiddenAddress { .. })
                ),
                "{target}"
            );
        }
    }

    #[test]
    fn resolved_addresses_are_rechecked() {
        let ok: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "10.1.2.3".parse().unwrap()];
        assert!(EgressPolicy::check_resolved(&ok).is_ok());
        for bad in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "100.100.100.200",
        ] {
            let addresses = vec![bad.parse().unwrap()];
            assert!(EgressPolicy::check_resolved(&addresses).is_err(), "{bad}");
        }
    }
}
