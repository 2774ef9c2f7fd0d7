//! A component built against a copy of `ipam:provider@0.2.0` in which
//! `limits.max-interfaces` is a u64 instead of a u32: every export has the
//! contract's name, one has another type. The host must refuse it naming
//! the function (`get-instance-limits`), not only the field.

wit_bindgen::generate!({
    path: "wit",
    world: "ipam-provider",
    generate_all,
    features: ["clocks-timezone"],
});

// Stamped the way the SDK stamps.
#[used]
#[link_section = "ipam-provider-wit-version"]
static WIT_VERSION_STAMP: [u8; 5] = *b"0.2.0";

use exports::ipam::provider::provider::Guest;
use ipam::provider::types::*;

struct WrongType;

fn nothing<T>() -> Result<T, Error> {
    Err(Error::Other(
        "this component only exists to be refused".into(),
    ))
}

impl Guest for WrongType {
    fn info() -> ProviderInfo {
        ProviderInfo {
            name: "wrong-type".into(),
            version: "0.1.0".into(),
            capabilities: Capabilities {
                create_interface: false,
                release: false,
                prefixes: false,
                delete_interface: false,
            },
            max_concurrency: 1,
            rate_model: RateModel {
                buckets: vec![],
                costs: vec![],
            },
        }
    }
    fn configure(_: String) -> Result<(), Error> {
        Ok(())
    }
    fn get_vpcs() -> Result<Vec<Vpc>, Error> {
        nothing()
    }
    fn get_subnets() -> Result<Vec<Subnet>, Error> {
        nothing()
    }
    fn get_security_groups() -> Result<Vec<SecurityGroup>, Error> {
        nothing()
    }
    fn get_instances(_: Vec<String>) -> Result<Vec<Instance>, Error> {
        nothing()
    }
    fn get_detached_interfaces(_: Vec<Tag>) -> Result<Vec<NetworkInterface>, Error> {
        nothing()
    }
    fn get_instance_limits(_: String) -> Result<Limits, Error> {
        nothing()
    }
    fn create_interface(_: CreateInterfaceRequest) -> Result<NetworkInterface, Error> {
        nothing()
    }
    fn delete_interface(_: String) -> Result<(), Error> {
        nothing()
    }
    fn assign_ips(_: String, _: IpRequest) -> Result<Assigned, Error> {
        nothing()
    }
    fn unassign_ips(_: String, _: Vec<Ipv4>, _: Vec<Ipv4Net>) -> Result<(), Error> {
        nothing()
    }
}

export!(WrongType);
