//! Write a cloud-IPAM provider for `ipam-operator` as a WebAssembly component.
//!
//! Implement [`Provider`] for a type that holds your provider's state, then
//! export it with [`export_provider!`]. The WIT types of `ipam:provider@0.1.0`
//! are re-exported at the crate root, and the WIT version the component is
//! built for is stamped into it automatically, so the host can refuse a module
//! it cannot serve before compiling it. See `docs/writing-a-provider.md`.

// The generated bindings and export macro name this crate by its own name, so
// that they expand the same way inside this crate and in a provider crate.
extern crate self as ipam_provider_sdk;

pub mod http;
mod provider;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.1.0",
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

#[doc(hidden)]
pub use wit_bindgen::rt as __wit_bindgen_rt;

pub use bindings::ipam::provider::host::{get_credentials, Credentials, LogLevel};
pub use bindings::ipam::provider::types::{
    Assigned, Capabilities, CreateInterfaceRequest, Error, Instance, IpRequest, Limits,
    NetworkInterface, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
pub use provider::{unsupported, Provider};

/// The `ipam:provider` WIT version this SDK builds components for.
pub const WIT_VERSION: &str = "0.1.0";

/// Name of the custom section that carries [`WIT_VERSION`] in every component
/// built with this SDK. The host reads it before compiling a module.
pub const WIT_VERSION_SECTION: &str = "ipam-provider-wit-version";

/// Write a line to the operator's log, tagged with the provider's name.
/// Outside a wasm host (a provider's native `cargo test`) there is no host
/// to call: the line goes to standard error instead, so code that logs can
/// be tested natively.
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
/// use ipam_provider_sdk::*;
///
/// #[derive(Default)]
/// struct MyCloud {
///     region: String,
/// }
///
/// impl Provider for MyCloud {
///     fn info() -> ProviderInfo {
///         ProviderInfo {
///             name: "my-cloud".into(),
///             version: "0.1.0".into(),
///             capabilities: Capabilities { create_interface: false, release: false, prefixes: false, delete_interface: false },
///             max_concurrency: 4,
///         }
///     }
///     fn configure(&mut self, settings: &str) -> Result<(), Error> {
///         self.region = settings.to_string();
///         Ok(())
///     }
///     fn get_vpcs(&mut self) -> Result<Vec<Vpc>, Error> { Ok(vec![]) }
///     fn get_subnets(&mut self) -> Result<Vec<Subnet>, Error> { Ok(vec![]) }
///     fn get_security_groups(&mut self) -> Result<Vec<SecurityGroup>, Error> { Ok(vec![]) }
///     fn get_instances(&mut self, _ids: &[String]) -> Result<Vec<Instance>, Error> { Ok(vec![]) }
///     fn get_instance_limits(&mut self, t: &str) -> Result<Limits, Error> {
///         Err(Error::NotFound(t.to_string()))
///     }
/// }
///
/// export_provider!(MyCloud);
/// ```
#[macro_export]
macro_rules! export_provider {
    ($provider:ty) => {
        const _: () = {
            // The host reads this section to learn which WIT version to serve.
            #[used]
            #[link_section = "ipam-provider-wit-version"]
            static WIT_VERSION_STAMP: [u8; 5] = *b"0.1.0";

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
                    addresses: Vec<String>,
                    prefixes: Vec<String>,
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

    #[test]
    fn logging_works_in_a_native_test() {
        // Calling the host import natively traps (`unreachable`) and aborts
        // the test binary; the fallback writes to standard error.
        log(LogLevel::Info, "a provider's native test may log");
    }
}
