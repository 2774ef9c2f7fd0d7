//! The WIT versions this host serves, behind one interface (as Zed's
//! extension host serves every extension API version with one
//! implementation). Each version has a module of its own with its bindings
//! and its conversions to the `ipam-cloud` model; nothing outside this folder
//! names a version's types. The rest of the runtime sees [`Bindings`] (an
//! instance) and [`BindingsPre`] (a linked component), whose calls answer in
//! the model's types. Every version's answers are converted item by item:
//! an item that does not convert (an address that does not parse) is
//! [`Converted`]'s error, naming the field, for the caller to refuse.

mod v0_1_0;
mod v0_2_0;
mod version;

use ipam_cloud::answer::BadField;
use std::net::Ipv4Addr;

use ipam_cloud::{
    Assigned, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest, Ipv4Net,
    NetworkInterface, ProviderError, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
use wasmtime::component::{Component, Linker};
use wasmtime::Store;

use crate::state::StoreState;

/// What a call into a guest gives: a trap or host error (outer), or the
/// provider's answer (inner).
pub type GuestResult<T> = wasmtime::Result<Result<T, ProviderError>>;

/// One item of an answer in the model's types, or the field that would not
/// convert.
pub type Converted<T> = Result<T, BadField>;

/// Add the `host` imports of every served version.
pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    v0_1_0::add_to_linker(linker)?;
    v0_2_0::add_to_linker(linker)
}

/// A component linked for the version it was built against.
pub enum BindingsPre {
    V0_1_0(v0_1_0::Pre),
    V0_2_0(v0_2_0::Pre),
}

/// One instance of a provider, of whichever version.
pub enum Bindings {
    V0_1_0(v0_1_0::Instance),
    V0_2_0(v0_2_0::Instance),
}

/// The version a module declares is not one this host serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no bindings for ipam:provider@{0}")]
pub struct UnservedVersion(pub String);

impl BindingsPre {
    /// Link `component`, built against `wit_version`.
    pub fn new(
        wit_version: &str,
        linker: &Linker<StoreState>,
        component: &Component,
    ) -> Result<Self, LinkError> {
        match wit_version {
            "0.1.0" => Ok(BindingsPre::V0_1_0(v0_1_0::Pre::new(linker, component)?)),
            "0.2.0" => Ok(BindingsPre::V0_2_0(v0_2_0::Pre::new(linker, component)?)),
            other => Err(LinkError::Version(UnservedVersion(other.to_string()))),
        }
    }

    pub async fn instantiate(&self, store: &mut Store<StoreState>) -> wasmtime::Result<Bindings> {
        match self {
            BindingsPre::V0_1_0(pre) => Ok(Bindings::V0_1_0(pre.instantiate(store).await?)),
            BindingsPre::V0_2_0(pre) => Ok(Bindings::V0_2_0(pre.instantiate(store).await?)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Version(#[from] UnservedVersion),
    #[error("{0:#}")]
    Wasmtime(#[from] wasmtime::Error),
}

/// The first export of a version's `provider` interface whose type is not
/// the one its WIT gives: wasmtime's own type error names the field that
/// differs but not the function, so each function is checked here, in the
/// WIT's order, when a component is linked.
macro_rules! first_mismatched_export {
    ($pre:expr, $interface:expr, { $($name:literal: ($($param:ty),*) -> $result:ty;)* }) => {{
        use wasmtime::component::types::ComponentItem;
        let component = $pre.component();
        let instance_type = $pre.instance_type();
        let interface = component.get_export(None, $interface).map(|(_, index)| index);
        let mut mismatch: Option<String> = None;
        $(
            if mismatch.is_none() {
                if let Some((ComponentItem::ComponentFunc(func), _)) =
                    interface.as_ref().and_then(|i| component.get_export(Some(i), $name))
                {
                    if let Err(error) = func.typecheck::<($($param,)*), ($result,)>(&instance_type) {
                        mismatch = Some(format!(
                            "export func `{}` of {} does not have the type the WIT gives it: {error:#}",
                            $name, $interface
                        ));
                    }
                }
            }
        )*
        mismatch
    }};
}
pub(crate) use first_mismatched_export;

/// Every call, dispatched to the instance's version.
macro_rules! dispatch {
    ($self:ident, $store:ident, $method:ident ( $($arg:expr),* )) => {
        match $self {
            Bindings::V0_1_0(instance) => instance.$method($store $(, $arg)*).await,
            Bindings::V0_2_0(instance) => instance.$method($store $(, $arg)*).await,
        }
    };
}

impl Bindings {
    pub async fn info(&self, store: &mut Store<StoreState>) -> wasmtime::Result<ProviderInfo> {
        dispatch!(self, store, info())
    }

    pub async fn configure(
        &self,
        store: &mut Store<StoreState>,
        settings: &str,
    ) -> GuestResult<()> {
        dispatch!(self, store, configure(settings))
    }

    pub async fn get_vpcs(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<Converted<Vpc>>> {
        dispatch!(self, store, get_vpcs())
    }

    pub async fn get_subnets(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<Converted<Subnet>>> {
        dispatch!(self, store, get_subnets())
    }

    pub async fn get_security_groups(
        &self,
        store: &mut Store<StoreState>,
    ) -> GuestResult<Vec<SecurityGroup>> {
        dispatch!(self, store, get_security_groups())
    }

    pub async fn get_instances(
        &self,
        store: &mut Store<StoreState>,
        ids: &[String],
    ) -> GuestResult<Vec<Converted<Instance>>> {
        dispatch!(self, store, get_instances(ids))
    }

    pub async fn get_detached_interfaces(
        &self,
        store: &mut Store<StoreState>,
        tags: &[Tag],
    ) -> GuestResult<Vec<Converted<NetworkInterface>>> {
        dispatch!(self, store, get_detached_interfaces(tags))
    }

    pub async fn get_instance_limits(
        &self,
        store: &mut Store<StoreState>,
        instance_type: &str,
    ) -> GuestResult<InstanceLimits> {
        dispatch!(self, store, get_instance_limits(instance_type))
    }

    pub async fn create_interface(
        &self,
        store: &mut Store<StoreState>,
        request: &CreateInterfaceRequest,
    ) -> GuestResult<Converted<NetworkInterface>> {
        dispatch!(self, store, create_interface(request))
    }

    pub async fn delete_interface(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
    ) -> GuestResult<()> {
        dispatch!(self, store, delete_interface(interface_id))
    }

    pub async fn assign_ips(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
        request: IpRequest,
    ) -> GuestResult<Converted<Assigned>> {
        dispatch!(self, store, assign_ips(interface_id, request))
    }

    pub async fn unassign_ips(
        &self,
        store: &mut Store<StoreState>,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> GuestResult<()> {
        dispatch!(self, store, unassign_ips(interface_id, addresses, prefixes))
    }
}
