//! What every version's bindings module has in common, written once: the
//! linked component and the instance, the calls of the `provider` exports,
//! the `host` imports, the check that each export has its WIT type, and the
//! conversions of the records no version has changed (tags, security groups,
//! limits, capabilities, the create request, the ip request, the error).
//! wasmtime's bindgen gives each version types of its own, so these are
//! expanded in each version's module (as `version_bindings!("0.2.0")`, after
//! its `bindgen!` and its `t`/`wit_host` aliases) instead of shared as
//! functions. What a version changed stays in its module, named the same in
//! each: `vpc`, `subnet`, `interface`, `instance`, `assigned`,
//! `provider_info`, and `unassign_arguments` with its `UnassignAddress` and
//! `UnassignPrefix` types.

macro_rules! version_bindings {
    ($version:literal) => {
        use $crate::state::StoreState;
        use $crate::wit::{Converted, GuestResult};
        use ipam_cloud as cloud;
        use wasmtime::component::{Component, HasSelf, Linker};
        use wasmtime::Store;

        pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
            wit_host::add_to_linker::<_, HasSelf<StoreState>>(linker, |state| state)
        }

        /// A component linked against this version's world.
        pub struct Pre(IpamProviderPre<StoreState>);

        /// An instance of this version's world.
        pub struct Instance(IpamProvider);

        impl Pre {
            pub fn new(linker: &Linker<StoreState>, component: &Component) -> wasmtime::Result<Self> {
                let pre = IpamProviderPre::new(linker.instantiate_pre(component)?)?;
                match first_mismatched_export(pre.instance_pre()) {
                    Some(mismatch) => Err(wasmtime::format_err!("{mismatch}")),
                    None => Ok(Self(pre)),
                }
            }

            pub async fn instantiate(
                &self,
                store: &mut Store<StoreState>,
            ) -> wasmtime::Result<Instance> {
                Ok(Instance(self.0.instantiate_async(store).await?))
            }
        }

        /// The first export whose type differs from this version's WIT.
        fn first_mismatched_export(
            pre: &wasmtime::component::InstancePre<StoreState>,
        ) -> Option<String> {
            $crate::wit::first_mismatched_export!(pre, concat!("ipam:provider/provider@", $version), {
                "info": () -> t::ProviderInfo;
                "configure": (&str) -> Result<(), t::Error>;
                "get-vpcs": () -> Result<Vec<t::Vpc>, t::Error>;
                "get-subnets": () -> Result<Vec<t::Subnet>, t::Error>;
                "get-security-groups": () -> Result<Vec<t::SecurityGroup>, t::Error>;
                "get-instances": (&[String]) -> Result<Vec<t::Instance>, t::Error>;
                "get-detached-interfaces": (&[t::Tag]) -> Result<Vec<t::NetworkInterface>, t::Error>;
                "get-instance-limits": (&str) -> Result<t::Limits, t::Error>;
                "create-interface": (&t::CreateInterfaceRequest) -> Result<t::NetworkInterface, t::Error>;
                "delete-interface": (&str) -> Result<(), t::Error>;
                "assign-ips": (&str, t::IpRequest) -> Result<t::Assigned, t::Error>;
                "unassign-ips": (&str, &[UnassignAddress], &[UnassignPrefix]) -> Result<(), t::Error>;
            })
        }

        /// Each item of a listing converted (an item that does not is its
        /// error).
        fn listing<A, B>(
            answer: Result<Vec<A>, t::Error>,
            convert: impl Fn(A) -> Converted<B>,
        ) -> Result<Vec<Converted<B>>, cloud::ProviderError> {
            answer
                .map(|items| items.into_iter().map(convert).collect())
                .map_err(Into::into)
        }

        fn converted<A, B>(
            answer: Result<A, t::Error>,
            convert: impl FnOnce(A) -> B,
        ) -> Result<B, cloud::ProviderError> {
            answer.map(convert).map_err(Into::into)
        }

        impl Instance {
            pub async fn info(
                &self,
                store: &mut Store<StoreState>,
            ) -> wasmtime::Result<cloud::ProviderInfo> {
                let provider = self.0.ipam_provider_provider();
                Ok(provider_info(provider.call_info(store).await?))
            }

            pub async fn configure(
                &self,
                store: &mut Store<StoreState>,
                settings: &str,
            ) -> GuestResult<()> {
                let provider = self.0.ipam_provider_provider();
                Ok(converted(provider.call_configure(store, settings).await?, |()| ()))
            }

            pub async fn get_vpcs(
                &self,
                store: &mut Store<StoreState>,
            ) -> GuestResult<Vec<Converted<cloud::Vpc>>> {
                let provider = self.0.ipam_provider_provider();
                Ok(listing(provider.call_get_vpcs(store).await?, vpc))
            }

            pub async fn get_subnets(
                &self,
                store: &mut Store<StoreState>,
            ) -> GuestResult<Vec<Converted<cloud::Subnet>>> {
                let provider = self.0.ipam_provider_provider();
                Ok(listing(provider.call_get_subnets(store).await?, subnet))
            }

            pub async fn get_security_groups(
                &self,
                store: &mut Store<StoreState>,
            ) -> GuestResult<Vec<cloud::SecurityGroup>> {
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider.call_get_security_groups(store).await?,
                    |groups| groups.into_iter().map(Into::into).collect(),
                ))
            }

            pub async fn get_instances(
                &self,
                store: &mut Store<StoreState>,
                ids: &[String],
            ) -> GuestResult<Vec<Converted<cloud::Instance>>> {
                let provider = self.0.ipam_provider_provider();
                Ok(listing(provider.call_get_instances(store, ids).await?, instance))
            }

            pub async fn get_detached_interfaces(
                &self,
                store: &mut Store<StoreState>,
                tags: &[cloud::Tag],
            ) -> GuestResult<Vec<Converted<cloud::NetworkInterface>>> {
                let tags: Vec<t::Tag> = tags.iter().map(Into::into).collect();
                let provider = self.0.ipam_provider_provider();
                Ok(listing(
                    provider.call_get_detached_interfaces(store, &tags).await?,
                    |i| interface(i, &|| "interfaces".to_string()),
                ))
            }

            pub async fn get_instance_limits(
                &self,
                store: &mut Store<StoreState>,
                instance_type: &str,
            ) -> GuestResult<cloud::InstanceLimits> {
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider.call_get_instance_limits(store, instance_type).await?,
                    Into::into,
                ))
            }

            pub async fn create_interface(
                &self,
                store: &mut Store<StoreState>,
                request: &cloud::CreateInterfaceRequest,
            ) -> GuestResult<Converted<cloud::NetworkInterface>> {
                let request: t::CreateInterfaceRequest = request.into();
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider.call_create_interface(store, &request).await?,
                    |i| interface(i, &|| "interface".to_string()),
                ))
            }

            pub async fn delete_interface(
                &self,
                store: &mut Store<StoreState>,
                interface_id: &str,
            ) -> GuestResult<()> {
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider.call_delete_interface(store, interface_id).await?,
                    |()| (),
                ))
            }

            pub async fn assign_ips(
                &self,
                store: &mut Store<StoreState>,
                interface_id: &str,
                request: cloud::IpRequest,
            ) -> GuestResult<Converted<cloud::Assigned>> {
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider
                        .call_assign_ips(store, interface_id, request.into())
                        .await?,
                    assigned,
                ))
            }

            pub async fn unassign_ips(
                &self,
                store: &mut Store<StoreState>,
                interface_id: &str,
                addresses: &[std::net::Ipv4Addr],
                prefixes: &[cloud::Ipv4Net],
            ) -> GuestResult<()> {
                let (addresses, prefixes) = unassign_arguments(addresses, prefixes);
                let provider = self.0.ipam_provider_provider();
                Ok(converted(
                    provider
                        .call_unassign_ips(store, interface_id, &addresses, &prefixes)
                        .await?,
                    |()| (),
                ))
            }
        }

        /// The `host` interface of this version, served from the store's
        /// state.
        impl wit_host::Host for StoreState {
            fn log(&mut self, level: wit_host::LogLevel, message: String) {
                let level = match level {
                    wit_host::LogLevel::Trace => tracing::Level::TRACE,
                    wit_host::LogLevel::Debug => tracing::Level::DEBUG,
                    wit_host::LogLevel::Info => tracing::Level::INFO,
                    wit_host::LogLevel::Warn => tracing::Level::WARN,
                    wit_host::LogLevel::Error => tracing::Level::ERROR,
                };
                self.guest_log(level, &message);
            }

            fn get_credentials(&mut self) -> Result<wit_host::Credentials, String> {
                let credentials = self.credentials()?;
                Ok(wit_host::Credentials {
                    values: credentials.values.into_iter().collect(),
                    expires_at: credentials.expires_at,
                })
            }
        }

        impl From<t::Tag> for cloud::Tag {
            fn from(tag: t::Tag) -> Self {
                Self {
                    key: tag.key,
                    value: tag.value,
                }
            }
        }

        impl From<&cloud::Tag> for t::Tag {
            fn from(tag: &cloud::Tag) -> Self {
                Self {
                    key: tag.key.clone(),
                    value: tag.value.clone(),
                }
            }
        }

        fn tags(tags: Vec<t::Tag>) -> Vec<cloud::Tag> {
            tags.into_iter().map(Into::into).collect()
        }

        impl From<t::SecurityGroup> for cloud::SecurityGroup {
            fn from(g: t::SecurityGroup) -> Self {
                Self {
                    id: g.id,
                    vpc_id: g.vpc_id,
                    tags: tags(g.tags),
                }
            }
        }

        impl From<t::Limits> for cloud::InstanceLimits {
            fn from(l: t::Limits) -> Self {
                Self {
                    max_interfaces: l.max_interfaces,
                    ipv4_per_interface: l.ipv4_per_interface,
                    ipv6_per_interface: l.ipv6_per_interface,
                    prefix_delegation: l.prefix_delegation,
                }
            }
        }

        fn capabilities(c: t::Capabilities) -> cloud::Capabilities {
            cloud::Capabilities {
                create_interface: c.create_interface,
                release: c.release,
                prefixes: c.prefixes,
                delete_interface: c.delete_interface,
            }
        }

        impl From<&cloud::CreateInterfaceRequest> for t::CreateInterfaceRequest {
            fn from(r: &cloud::CreateInterfaceRequest) -> Self {
                Self {
                    instance_id: r.instance_id.clone(),
                    index: r.index,
                    subnet_id: r.subnet_id.clone(),
                    security_groups: r.security_groups.clone(),
                    description: r.description.clone(),
                    tags: r.tags.iter().map(Into::into).collect(),
                    delete_on_termination: r.delete_on_termination,
                    ipv4_count: r.ipv4_count,
                    use_prefixes: r.use_prefixes,
                }
            }
        }

        impl From<cloud::IpRequest> for t::IpRequest {
            fn from(r: cloud::IpRequest) -> Self {
                match r {
                    cloud::IpRequest::Addresses(n) => Self::Addresses(n),
                    cloud::IpRequest::Prefixes(n) => Self::Prefixes(n),
                }
            }
        }

        impl From<t::Error> for cloud::ProviderError {
            fn from(e: t::Error) -> Self {
                use cloud::ProviderError as P;
                match e {
                    t::Error::Throttled(ms) => P::Throttled(std::time::Duration::from_millis(ms)),
                    t::Error::NotFound(m) => P::NotFound(m),
                    t::Error::InterfaceLimit(m) => P::InterfaceLimit(m),
                    t::Error::AddressLimit(m) => P::AddressLimit(m),
                    t::Error::SubnetFull(m) => P::SubnetFull(m),
                    t::Error::InsufficientPrefixes(m) => P::InsufficientPrefixes(m),
                    t::Error::Conflict(m) => P::Conflict(m),
                    t::Error::InvalidArgument(m) => P::InvalidArgument(m),
                    t::Error::Unauthorized(m) => P::Unauthorized(m),
                    t::Error::Transient(m) => P::Transient(m),
                    t::Error::Other(m) => P::Other(m),
                }
            }
        }
    };
}

pub(crate) use version_bindings;
