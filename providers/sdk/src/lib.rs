//! Write a cloud-IPAM provider for `ipam-operator` as a WebAssembly component.
//!
//! Implement [`Provider`] for a type that holds your provider's state, then
//! export it with [`export_provider!`]. The WIT types of `ipam:provider@0.2.0`
//! are re-exported at the crate root, and the WIT version the component is
//! built for is stamped into it automatically, so the host can refuse a module
//! it cannot serve before compiling it. See `docs/writing-a-provider.md`.
//!
//! Besides the bindings:
//! - [`net`]: IPv4 addresses ([`Ipv4`], a `u32`) and networks ([`Ipv4Net`])
//!   as the WIT carries them, from and to [`std::net::Ipv4Addr`] and
//!   "a.b.c.d/n" text, refusing a network with bits set past its length;
//! - [`settings::parse`]: the provider's JSON settings into your type, an
//!   error naming the key path of a bad setting;
//! - [`rate`]: building the rate model [`Provider::info`] declares, and
//!   checking it against the contract's rules;
//! - [`http`]: a small blocking HTTP client over `wasi:http`.
//!
//! The `component` feature (on by default) is the provider world itself:
//! [`export_provider!`], the host's imports ([`log`], `get_credentials`) and
//! [`http`]. Without it the crate keeps the types, the trait and the helpers,
//! and its bindings describe no export, so that a provider's logic can be
//! linked into a component of another WIT version.

// The generated bindings and export macro name this crate by its own name, so
// that they expand the same way inside this crate and in a provider crate.
extern crate self as ipam_provider_sdk;

#[cfg(feature = "component")]
pub mod http;
pub mod net;
mod provider;
pub mod rate;
pub mod settings;

/// The `ipam-provider` world: the `provider` export (through
/// [`export_provider!`]), the host's imports and WASI's.
#[cfg(feature = "component")]
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.2.0",
        world: "ipam-provider",
        generate_all,
        // The vendored WASI 0.2.12 files gate an import behind this feature; the
        // parser needs it on to resolve them. Nothing in our world uses it.
        features: ["clocks-timezone"],
        pub_export_macro: true,
        export_macro_name: "__export_ipam_provider_world",
        default_bindings_module: "ipam_provider_sdk::bindings",
        runtime_path: "ipam_provider_sdk::__wit_bindgen_rt",
    });
}

/// The types alone, in a world that imports nothing else and exports
/// nothing: the same Rust types at the same paths as the whole world's.
#[cfg(not(feature = "component"))]
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.2.0",
        inline: "
            package ipam:provider-sdk;
            world types-only {
                import ipam:provider/types@0.2.0;
            }
        ",
        world: "ipam:provider-sdk/types-only",
        generate_all,
        features: ["clocks-timezone"],
        default_bindings_module: "ipam_provider_sdk::bindings",
        runtime_path: "ipam_provider_sdk::__wit_bindgen_rt",
    });
}

#[doc(hidden)]
pub use wit_bindgen::rt as __wit_bindgen_rt;

#[cfg(feature = "component")]
pub use bindings::ipam::provider::host::{get_credentials, Credentials, LogLevel};
pub use bindings::ipam::provider::types::{
    ApiCall, Assigned, Capabilities, CreateInterfaceRequest, Error, Instance, IpRequest, Ipv4,
    Ipv4Net, Limits, NetworkInterface, Operation, OperationCost, ProviderInfo, RateBucket,
    RateModel, SecurityGroup, Subnet, Tag, Vpc,
};
pub use provider::{unsupported, Provider};

/// The `ipam:provider` WIT version this SDK builds components for. The stamp
/// [`export_provider!`] puts in every component is made of these bytes.
pub const WIT_VERSION: &str = "0.2.0";

/// Name of the custom section that carries [`WIT_VERSION`] in every component
/// built with this SDK. The host reads it before compiling a module.
pub const WIT_VERSION_SECTION: &str = "ipam-provider-wit-version";

/// A WIT version as the byte array a stamp's static holds (`N` is its
/// length, so that the array and the version cannot differ). The SDK stamps
/// [`WIT_VERSION`]; a component of another version stamps its own.
#[doc(hidden)]
pub const fn __wit_version_stamp<const N: usize>(version: &str) -> [u8; N] {
    let version = version.as_bytes();
    assert!(version.len() == N, "the stamp is the version's length");
    let mut stamp = [0u8; N];
    let mut i = 0;
    while i < N {
        stamp[i] = version[i];
        i += 1;
    }
    stamp
}

impl PartialEq for Error {
    /// The same variant with the same payload (tests compare errors so).
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (Throttled(a), Throttled(b)) => a == b,
            (NotFound(a), NotFound(b))
            | (InterfaceLimit(a), InterfaceLimit(b))
            | (AddressLimit(a), AddressLimit(b))
            | (SubnetFull(a), SubnetFull(b))
            | (InsufficientPrefixes(a), InsufficientPrefixes(b))
            | (Conflict(a), Conflict(b))
            | (InvalidArgument(a), InvalidArgument(b))
            | (Unauthorized(a), Unauthorized(b))
            | (Transient(a), Transient(b))
            | (Other(a), Other(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Error {}

/// Write a line to the operator's log, tagged with the provider's name.
/// Outside a wasm host (a provider's native `cargo test`) there is no host
/// to call: the line goes to standard error instead, so code that logs can
/// be tested natively.
#[cfg(feature = "component")]
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_family = "wasm")]
    bindings::ipam::provider::host::log(level, message);
    #[cfg(not(target_family = "wasm"))]
    eprintln!("[{level:?}] {message}");
}

/// Export a type implementing [`Provider`] as the component's
/// `ipam:provider/provider` interface, and stamp the WIT version into the
/// component. Use it once, at the root of a `cdylib` crate.
///
/// ```
/// use ipam_provider_sdk::net::NetError;
/// use ipam_provider_sdk::rate::{bucket, cost};
/// use ipam_provider_sdk::*;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, Default)]
/// #[serde(rename_all = "kebab-case", deny_unknown_fields)]
/// struct Settings {
///     vpc_id: String,
///     cidr: String,
/// }
///
/// #[derive(Default)]
/// struct MyCloud {
///     vpc: Option<Vpc>,
/// }
///
/// impl Provider for MyCloud {
///     fn info() -> ProviderInfo {
///         // The API's one bucket, and the call each read makes.
///         let read = |operation| cost(operation, &[("GET /v1/networks", "api")]);
///         ProviderInfo {
///             name: "my-cloud".into(),
///             version: "0.1.0".into(),
///             capabilities: Capabilities { create_interface: false, release: false, prefixes: false, delete_interface: false },
///             max_concurrency: 4,
///             rate_model: RateModel {
///                 buckets: vec![bucket("api", 20, 4.0)],
///                 costs: vec![
///                     read(Operation::GetVpcs),
///                     read(Operation::GetSubnets),
///                     read(Operation::GetSecurityGroups),
///                     read(Operation::GetInstances),
///                     read(Operation::GetDetachedInterfaces),
///                     read(Operation::GetInstanceLimits),
///                     read(Operation::AssignIps),
///                 ],
///             },
///         }
///     }
///     fn configure(&mut self, settings: &str) -> Result<(), Error> {
///         let settings: Settings = settings::parse(settings)?;
///         let cidr: Ipv4Net = settings.cidr.parse().map_err(|e: NetError| {
///             Error::InvalidArgument(format!("settings: cidr: {e}"))
///         })?;
///         self.vpc = Some(Vpc { id: settings.vpc_id, primary_cidr: cidr, cidrs: vec![cidr] });
///         Ok(())
///     }
///     fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> { Ok(self.vpc.clone().into_iter().collect()) }
///     fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> { Ok(vec![]) }
///     fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> { Ok(vec![]) }
///     fn get_instances(&mut self, _ids: &[String]) -> Result<Vec<Instance>, Error> { Ok(vec![]) }
///     fn get_instance_limits(&mut self, t: &str) -> Result<Limits, Error> {
///         Err(Error::NotFound(t.to_string()))
///     }
/// }
///
/// export_provider!(MyCloud);
///
/// # assert_eq!(rate::check(&MyCloud::info()), Ok(()));
/// # let mut cloud = MyCloud::default();
/// # cloud.configure(r#"{"vpc-id": "vpc-1", "cidr": "10.0.0.0/16"}"#).unwrap();
/// # assert_eq!(cloud.get_vpcs().unwrap()[0].primary_cidr.to_string(), "10.0.0.0/16");
/// # let bad = cloud.configure(r#"{"vpc-id": "vpc-1", "cidr": "10.0.0.1/16"}"#);
/// # assert!(matches!(bad, Err(Error::InvalidArgument(m)) if m.contains("bits set past")));
/// ```
#[cfg(feature = "component")]
#[macro_export]
macro_rules! export_provider {
    ($provider:ty) => {
        const _: () = {
            // The host reads this section (WIT_VERSION_SECTION) to learn which
            // WIT version to serve; its bytes are WIT_VERSION's.
            #[used]
            #[link_section = "ipam-provider-wit-version"]
            static WIT_VERSION_STAMP: [u8; $crate::WIT_VERSION.len()] =
                $crate::__wit_version_stamp($crate::WIT_VERSION);

            struct Export;

            ::std::thread_local! {
                static STATE: ::std::cell::RefCell<::std::option::Option<$provider>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }

            fn with<R>(f: impl FnOnce(&mut $provider) -> R) -> R {
                STATE.with(|cell| {
                    let mut state = cell.borrow_mut();
                    f(state.get_or_insert_with(<$provider as ::std::default::Default>::default))
                })
            }

            use $crate::bindings::exports::ipam::provider::provider::Guest;
            use $crate::Provider as _;
            impl Guest for Export {
                fn info() -> $crate::ProviderInfo {
                    <$provider>::info()
                }
                fn configure(settings: String) -> Result<(), $crate::Error> {
                    with(|p| p.configure(&settings))
                }
                fn get_vpcs() -> Result<Vec<$crate::Vpc>, $crate::Error> {
                    with(|p| p.get_vpcs())
                }
                fn get_subnets() -> Result<Vec<$crate::Subnet>, $crate::Error> {
                    with(|p| p.get_subnets())
                }
                fn get_security_groups() -> Result<Vec<$crate::SecurityGroup>, $crate::Error> {
                    with(|p| p.get_security_groups())
                }
                fn get_instances(ids: Vec<String>) -> Result<Vec<$crate::Instance>, $crate::Error> {
                    with(|p| p.get_instances(&ids))
                }
                fn get_detached_interfaces(
                    tags: Vec<$crate::Tag>,
                ) -> Result<Vec<$crate::NetworkInterface>, $crate::Error> {
                    with(|p| p.get_detached_interfaces(&tags))
                }
                fn get_instance_limits(
                    instance_type: String,
                ) -> Result<$crate::Limits, $crate::Error> {
                    with(|p| p.get_instance_limits(&instance_type))
                }
                fn create_interface(
                    request: $crate::CreateInterfaceRequest,
                ) -> Result<$crate::NetworkInterface, $crate::Error> {
                    with(|p| p.create_interface(request))
                }
                fn delete_interface(interface_id: String) -> Result<(), $crate::Error> {
                    with(|p| p.delete_interface(&interface_id))
                }
                fn assign_ips(
                    interface_id: String,
                    request: $crate::IpRequest,
                ) -> Result<$crate::Assigned, $crate::Error> {
                    with(|p| p.assign_ips(&interface_id, request))
                }
                fn unassign_ips(
                    interface_id: String,
                    addresses: Vec<$crate::Ipv4>,
                    prefixes: Vec<$crate::Ipv4Net>,
                ) -> Result<(), $crate::Error> {
                    with(|p| p.unassign_ips(&interface_id, &addresses, &prefixes))
                }
            }

            // Component exports exist only on wasm; natively (unit tests of a
            // provider crate) their symbol names would not even link. Clippy
            // never links, and checks them everywhere.
            #[cfg(any(target_arch = "wasm32", clippy))]
    $crate::bindings::__export_ipam_provider_world!(Export with_types_in $crate::bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "component")]
    #[test]
    fn logging_works_in_a_native_test() {
        // Calling the host import natively traps (`unreachable`) and aborts
        // the test binary; the fallback writes to standard error.
        log(LogLevel::Info, "a provider's native test may log");
    }

    #[test]
    fn the_stamp_is_the_wit_version() {
        let stamp: [u8; WIT_VERSION.len()] = __wit_version_stamp(WIT_VERSION);
        assert_eq!(&stamp, b"0.2.0");
    }

    /// The folder the bindings are generated from (`bindings` above) is of
    /// WIT_VERSION's package.
    #[test]
    fn the_wit_folder_of_this_version_declares_it() {
        let types = include_str!("../../../wit/0.2.0/types.wit");
        assert!(types.contains(&format!("package ipam:provider@{WIT_VERSION};")));
    }
}
