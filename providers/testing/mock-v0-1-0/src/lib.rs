//! The mock provider's cloud served as `ipam:provider@0.1.0`, the contract
//! before compact addresses and rate models, so that the host's tests can
//! check it still serves a component built for 0.1.0
//! (`target/components/mock-v0.1.0.wasm`).
//!
//! It generates the 0.1.0 bindings itself (the SDK is 0.2.0), stamps 0.1.0
//! into the component the way the SDK stamps, and serves
//! [`mock_provider::MockProvider`], the same state machine as the mock
//! component: the same settings give the same cloud. Its 0.2.0 answers are
//! turned into 0.1.0's text (`10.0.1.17`, `10.0.0.0/16`), and 0.1.0's text
//! arguments into 0.2.0's types; an argument that does not parse is
//! `invalid-argument`. Its info is the mock's, named `mock-v0.1.0`, without
//! the rate model 0.1.0 has no room for.
//!
//! The SDK is linked without its `component` feature, so that none of
//! 0.2.0's world ends up in this component; `cargo xtask providers` builds it
//! in a cargo invocation of its own, where no other package turns the feature
//! on.

mod convert;

use std::cell::RefCell;

use exports::ipam::provider::provider::Guest;
use ipam::provider::types as v1;
use ipam_provider_sdk::Provider;
use mock_provider::MockProvider;

wit_bindgen::generate!({
    path: "../../../wit/0.1.0",
    world: "ipam-provider",
    generate_all,
    // As the SDK: the vendored WASI files gate an import behind this feature.
    features: ["clocks-timezone"],
});

/// The WIT version of the bindings above, stamped as the SDK stamps its own.
pub const WIT_VERSION: &str = "0.1.0";

// The host reads this section to learn which WIT version to serve.
#[used]
#[link_section = "ipam-provider-wit-version"]
static WIT_VERSION_STAMP: [u8; WIT_VERSION.len()] =
    ipam_provider_sdk::__wit_version_stamp(WIT_VERSION);

thread_local! {
    static MOCK: RefCell<MockProvider> = RefCell::new(MockProvider::default());
}

fn with<R>(f: impl FnOnce(&mut MockProvider) -> R) -> R {
    MOCK.with(|mock| f(&mut mock.borrow_mut()))
}

struct MockV010;

impl Guest for MockV010 {
    fn info() -> v1::ProviderInfo {
        convert::info(MockProvider::info())
    }

    fn configure(settings: String) -> Result<(), v1::Error> {
        with(|m| m.configure(&settings)).map_err(convert::error)
    }

    fn get_vpcs() -> Result<Vec<v1::Vpc>, v1::Error> {
        let vpcs = with(|m| m.get_vpcs()).map_err(convert::error)?;
        Ok(vpcs.into_iter().map(convert::vpc).collect())
    }

    fn get_subnets() -> Result<Vec<v1::Subnet>, v1::Error> {
        let subnets = with(|m| m.get_subnets()).map_err(convert::error)?;
        Ok(subnets.into_iter().map(convert::subnet).collect())
    }

    fn get_security_groups() -> Result<Vec<v1::SecurityGroup>, v1::Error> {
        let groups = with(|m| m.get_security_groups()).map_err(convert::error)?;
        Ok(groups.into_iter().map(convert::security_group).collect())
    }

    fn get_instances(ids: Vec<String>) -> Result<Vec<v1::Instance>, v1::Error> {
        let instances = with(|m| m.get_instances(&ids)).map_err(convert::error)?;
        Ok(instances.into_iter().map(convert::instance).collect())
    }

    fn get_detached_interfaces(tags: Vec<v1::Tag>) -> Result<Vec<v1::NetworkInterface>, v1::Error> {
        let tags: Vec<_> = tags.into_iter().map(convert::tag_in).collect();
        let found = with(|m| m.get_detached_interfaces(&tags)).map_err(convert::error)?;
        Ok(found.into_iter().map(convert::interface).collect())
    }

    fn get_instance_limits(instance_type: String) -> Result<v1::Limits, v1::Error> {
        with(|m| m.get_instance_limits(&instance_type))
            .map(convert::limits)
            .map_err(convert::error)
    }

    fn create_interface(
        request: v1::CreateInterfaceRequest,
    ) -> Result<v1::NetworkInterface, v1::Error> {
        let request = convert::create_request(request);
        with(|m| m.create_interface(request))
            .map(convert::interface)
            .map_err(convert::error)
    }

    fn delete_interface(interface_id: String) -> Result<(), v1::Error> {
        with(|m| m.delete_interface(&interface_id)).map_err(convert::error)
    }

    fn assign_ips(interface_id: String, request: v1::IpRequest) -> Result<v1::Assigned, v1::Error> {
        let request = convert::ip_request(request);
        with(|m| m.assign_ips(&interface_id, request))
            .map(convert::assigned)
            .map_err(convert::error)
    }

    fn unassign_ips(
        interface_id: String,
        addresses: Vec<String>,
        prefixes: Vec<String>,
    ) -> Result<(), v1::Error> {
        let addresses = convert::addresses_in(&addresses)?;
        let prefixes = convert::prefixes_in(&prefixes)?;
        with(|m| m.unassign_ips(&interface_id, &addresses, &prefixes)).map_err(convert::error)
    }
}

// Component exports exist only on wasm; natively (the unit tests of the
// conversions) their symbol names would not link. Clippy checks them
// everywhere.
#[cfg(any(target_arch = "wasm32", clippy))]
export!(MockV010);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_is_0_1_0_and_the_bindings_are_of_0_1_0() {
        assert_eq!(&WIT_VERSION_STAMP, b"0.1.0");
        let types = include_str!("../../../../wit/0.1.0/types.wit");
        assert!(types.contains(&format!("package ipam:provider@{WIT_VERSION};")));
    }
}
