//! A provider that misbehaves on purpose, for the host's tests. Its settings
//! choose what `get-vpcs` does; every other operation behaves, so a test can
//! check that the host still serves good calls after a bad one.

use ipam_provider_sdk::{
    export_provider, get_credentials, http, log, Capabilities, Error, Instance, Limits, LogLevel,
    Provider, ProviderInfo, SecurityGroup, Subnet, Vpc,
};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(tag = "mode", rename_all = "kebab-case")]
enum Mode {
    /// Behave: one VPC.
    #[default]
    Behave,
    /// Panic (a trap).
    Trap,
    /// Spin forever.
    Loop,
    /// Allocate until memory runs out.
    GrowMemory,
    /// GET the URL; the VPC id is the response's status and body.
    Fetch { url: String },
    /// The VPC id is the credential named `key`.
    Credentials { key: String },
}

#[derive(Default)]
struct Misbehave {
    mode: Mode,
}

fn vpc(id: String) -> Vpc {
    Vpc {
        id,
        primary_cidr: "10.0.0.0/16".into(),
        cidrs: vec!["10.0.0.0/16".into()],
    }
}

impl Provider for Misbehave {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "misbehave".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            capabilities: Capabilities {
                create_interface: false,
                release: false,
                prefixes: false,
                delete_interface: false,
            },
            max_concurrency: 2,
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        self.mode =
            serde_json::from_str(settings).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Ok(())
    }

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        log(LogLevel::Info, "get-vpcs called");
        match &self.mode {
            Mode::Behave => Ok(vec![vpc("vpc-good".into())]),
            Mode::Trap => panic!("deliberate trap"),
            Mode::Loop => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Mode::GrowMemory => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            Mode::Fetch { url } => {
                let response = http::send("GET", url, &[], &[])?;
                Ok(vec![vpc(format!(
                    "{} {}",
                    response.status,
                    String::from_utf8_lossy(&response.body)
                ))])
            }
            Mode::Credentials { key } => {
                let credentials = get_credentials().map_err(Error::Unauthorized)?;
                let value = credentials
                    .values
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone());
                Ok(vec![
                    vpc(value.ok_or_else(|| Error::NotFound(key.clone()))?),
                ])
            }
        }
    }

    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        Ok(Vec::new())
    }

    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
        Ok(Vec::new())
    }

    fn get_instances(&mut self, _ids: &[String]) -> Result<Vec<Instance>, Error> {
        Ok(Vec::new())
    }

    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
        Err(Error::NotFound(format!("instance type {instance_type}")))
    }
}

export_provider!(Misbehave);
