//! The AWS provider: ENIs and their secondary addresses and /28 prefixes on
//! EC2, through the AWS SDK for Rust (`aws-sdk-ec2`) over `wasi:http`.
//! Credentials come from the host (`get-credentials`); the guest never reads
//! files, environment or instance metadata. Settings: `README.md`.
//!
//! Each operation runs the SDK's futures on wstd's single-threaded executor;
//! retries and timeouts sleep on wasi:clocks.

mod client;
mod convert;
mod ec2_actions;
mod ec2_rates;
mod errors;
#[cfg(test)]
mod iam_policy_tests;
mod interfaces;
mod rate_model;
mod read;
mod settings;

use std::future::Future;

use ipam_provider_sdk::{
    export_provider, Assigned, Capabilities, CreateInterfaceRequest, Error, Instance, IpRequest,
    Ipv4, Ipv4Net, Limits, NetworkInterface, Provider, ProviderInfo, SecurityGroup, Subnet, Tag,
    Vpc,
};

use settings::Settings;

/// The EC2 client and the settings it was built from.
pub(crate) struct Ec2 {
    client: aws_sdk_ec2::Client,
    settings: Settings,
}

#[derive(Default)]
pub struct AwsProvider {
    ec2: Option<Ec2>,
}

impl AwsProvider {
    /// Run one operation to completion, after checking that the host has
    /// credentials (so that their absence is `unauthorized`, said plainly).
    fn run<'a, T, F>(&'a self, operation: impl FnOnce(&'a Ec2) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        let ec2 = self.ec2.as_ref().ok_or_else(|| {
            Error::InvalidArgument("the aws provider has not been configured".to_string())
        })?;
        client::check_credentials()?;
        wstd::runtime::block_on(operation(ec2))
    }
}

impl Provider for AwsProvider {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "aws".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            capabilities: Capabilities {
                create_interface: true,
                release: true,
                prefixes: true,
                delete_interface: true,
            },
            // Nothing is kept in the guest but the client: instances are
            // interchangeable, and the operator's rate limits bound the calls.
            max_concurrency: 8,
            // EC2's per-action buckets and the calls of each operation.
            rate_model: rate_model::rate_model(),
        }
    }

    fn configure(&mut self, settings: &str) -> Result<(), Error> {
        let settings = Settings::parse(settings)?;
        self.ec2 = Some(Ec2 {
            client: client::build(&settings),
            settings,
        });
        Ok(())
    }

    fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> {
        self.run(Ec2::vpcs)
    }

    fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> {
        self.run(Ec2::subnets)
    }

    fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> {
        self.run(Ec2::security_groups)
    }

    fn get_instances(&mut self, ids: &[String]) -> Result<Vec<Instance>, Error> {
        self.run(|ec2| ec2.instances(ids))
    }

    fn get_detached_interfaces(&mut self, tags: &[Tag]) -> Result<Vec<NetworkInterface>, Error> {
        self.run(|ec2| ec2.detached_interfaces(tags))
    }

    fn get_instance_limits(&mut self, instance_type: &str) -> Result<Limits, Error> {
        self.run(|ec2| ec2.instance_limits(instance_type))
    }

    fn create_interface(
        &mut self,
        request: CreateInterfaceRequest,
    ) -> Result<NetworkInterface, Error> {
        self.run(|ec2| ec2.create_interface(request))
    }

    fn delete_interface(&mut self, interface_id: &str) -> Result<(), Error> {
        self.run(|ec2| ec2.delete_interface(interface_id))
    }

    fn assign_ips(&mut self, interface_id: &str, request: IpRequest) -> Result<Assigned, Error> {
        self.run(|ec2| ec2.assign(interface_id, request))
    }

    fn unassign_ips(
        &mut self,
        interface_id: &str,
        addresses: &[Ipv4],
        prefixes: &[Ipv4Net],
    ) -> Result<(), Error> {
        self.run(|ec2| ec2.unassign(interface_id, addresses, prefixes))
    }
}

export_provider!(AwsProvider);
