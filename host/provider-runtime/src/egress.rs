//! Fail-closed egress policy of one provider: outgoing HTTP requests may go
//! only to origins on its allow-list (scheme://host[:port]), and never to a
//! special address ([`crate::special_address`]: cloud metadata, link-local,
//! every IPv6 spelling of those), whatever name led there, unless the
//! operator opted that one address in. The check runs twice: on the URL the
//! guest asked for, and on every address its host name resolves to. An
//! authority with userinfo is refused outright. An https server whose
//! certificate does not verify is refused as well
//! ([`EgressError::UntrustedCertificate`]). What a refusal keeps of the
//! guest's text is cut ([`crate::guest_text`]).

use std::net::IpAddr;

use crate::guest_text;
use crate::special_address::{self, Special};

/// The longest authority a guest may set on a request: a DNS name is at
/// most 253 bytes, and a trailing dot and `:port` add at most 7 (an IPv6
/// literal in brackets is shorter). A longer one names no host; refusing it
/// keeps megabyte "names" out of the host's errors and log.
pub const AUTHORITY_BYTES: usize = 260;
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
    ForbiddenAddress { address: IpAddr, why: Special },
    /// `user:password@host`: never sent, lest it reach the wire in the Host
    /// header or confuse which host is meant.
    #[error("{authority:?} carries userinfo; no provider may send it")]
    Userinfo { authority: String },
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
        if authority.as_str().contains('@') {
            return Err(bad());
        }
        Origin::new(scheme, authority.host(), authority.port_u16()).ok_or_else(bad)
    }
}

/// The allow-list of one provider, and the special addresses its operator
/// opted in. Empty means no egress at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allowed: Vec<Origin>,
    special_allowed: Vec<IpAddr>,
}

impl EgressPolicy {
    pub fn new(entries: &[String]) -> Result<Self, EgressError> {
        let allowed = entries
            .iter()
            .map(|e| Origin::parse(e))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            allowed,
            special_allowed: Vec::new(),
        })
    }

    /// Opt these special addresses in, each exactly as written (an IPv6 form
    /// carrying one of them is a different address and stays refused).
    pub fn with_special_addresses(mut self, addresses: &[IpAddr]) -> Self {
        self.special_allowed = addresses.to_vec();
        self
    }

    /// The refusal of an address, if it is special and not opted in.
    pub fn check_address(&self, address: IpAddr) -> Result<(), EgressError> {
        match special_address::special(address) {
            Some(why) if !self.special_allowed.contains(&address) => {
                Err(EgressError::ForbiddenAddress { address, why })
            }
            _ => Ok(()),
        }
    }

    /// First check: the origin the guest named.
    pub fn check_origin(&self, origin: &Origin) -> Result<(), EgressError> {
        if let Ok(address) = origin.host.parse::<IpAddr>() {
            self.check_address(address)?;
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
    pub fn check_resolved(&self, addresses: &[IpAddr]) -> Result<(), EgressError> {
        addresses.iter().try_for_each(|&a| self.check_address(a))
    }
}

/// Refuse an authority (`host[:port]` as the guest gave it) with userinfo.
pub fn check_authority(authority: &str) -> Result<(), EgressError> {
    if authority.contains('@') {
        return Err(EgressError::Userinfo {
            authority: guest_text::kept(authority),
        });
    }
    Ok(())
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
        for bad in [
            "ec2.amazonaws.com",
            "ftp://x",
            "https://x/path",
            "https://",
            "https://user@ec2.amazonaws.com",
        ] {
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
        let targets = [
            "http://169.254.169.254",
            "http://[fd00:ec2::254]",
            "http://168.63.129.16",
            "http://[fd20:ce::254]",
            "http://[fd00:c1::a9fe:a9fe]",
            "http://[fd00:42::42]",
        ];
        let p = policy(&targets);
        for target in targets {
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
        let p = EgressPolicy::default();
        let ok: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "10.1.2.3".parse().unwrap()];
        assert!(p.check_resolved(&ok).is_ok());
        for bad in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd00:ec2::23",
            "fd20:ce::254",
            "fd00:c1::a9fe:a9fe",
            "fd00:42::42",
            "fe80::1",
            "0.0.0.0",
            "100.100.100.200",
        ] {
            let addresses = vec!["127.0.0.1".parse().unwrap(), bad.parse().unwrap()];
            assert!(
                matches!(
                    p.check_resolved(&addresses),
                    Err(EgressError::ForbiddenAddress { address, .. })
                        if address == bad.parse::<IpAddr>().unwrap()
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_special_address_opted_in_is_allowed_in_that_form_only() {
        let task_metadata: IpAddr = "169.254.170.2".parse().unwrap();
        let p = policy(&["http://169.254.170.2"]).with_special_addresses(&[task_metadata]);
        assert!(p.check_origin(&origin("http://169.254.170.2")).is_ok());
        assert!(p.check_resolved(&[task_metadata]).is_ok());
        let mapped: IpAddr = "::ffff:169.254.170.2".parse().unwrap();
        assert!(p.check_resolved(&[mapped]).is_err());
        assert!(p
            .check_resolved(&["169.254.169.254".parse().unwrap()])
            .is_err());
    }

    #[test]
    fn an_authority_with_userinfo_is_refused() {
        assert!(check_authority("127.0.0.1:8080").is_ok());
        assert!(check_authority("[::1]:8080").is_ok());
        for bad in [
            "127.0.0.2:18091@127.0.0.1:18097",
            "user:pw@ec2.amazonaws.com",
            "@host",
        ] {
            assert_eq!(
                check_authority(bad),
                Err(EgressError::Userinfo {
                    authority: bad.to_string()
                }),
                "{bad}"
            );
        }
    }
}
