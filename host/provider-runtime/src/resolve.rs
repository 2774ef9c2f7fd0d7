//! Name resolution for provider egress. The egress hook resolves once, checks
//! every address, and connects to those same addresses, so a name cannot
//! resolve to one place for the check and another for the connection.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

pub type Resolution<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

pub trait Resolver: Send + Sync {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolution<'a>;
}

/// The system resolver (an IP literal is used as it is).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolution<'a> {
        Box::pin(async move {
            if let Ok(ip) = host.parse::<IpAddr>() {
                return Ok(vec![ip]);
            }
            Ok(tokio::net::lookup_host((host, port))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// A fixed table of names (like /etc/hosts, but per provider): pins endpoints
/// and lets tests resolve names without DNS. Names not in it are not found;
/// IP literals resolve to themselves.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver(pub BTreeMap<String, Vec<IpAddr>>);

impl Resolver for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str, _port: u16) -> Resolution<'a> {
        Box::pin(async move {
            if let Ok(ip) = host.parse::<IpAddr>() {
                return Ok(vec![ip]);
            }
            self.0
                .get(&host.to_ascii_lowercase())
                .cloned()
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{host} is not in the static host table"),
                    )
                })
        })
    }
}
