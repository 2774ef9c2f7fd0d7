//! A provider component behind the [`CloudApi`] trait: a pool of instances
//! sized by what the provider declares, a deadline, a memory cap and a
//! host-resource budget on every call, every request a call started ended
//! with it, and an instance that trapped, timed out or went over its budget
//! replaced by a fresh one.

use std::future::Future;
use std::net::Ipv4Addr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Semaphore;
use wasmtime::{Engine, Store, Trap};

use ipam_cloud::credentials::CredentialSource;
use ipam_cloud::{
    Assigned, CloudApi, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    Ipv4Net, NetworkInterface, Operation, ProviderInfo, SecurityGroup, Subnet, Tag, Vpc,
};
use ipam_http_client::TrustRoots;
use ipam_provider_module::ModuleInfo;

use crate::answers::AnswerChecks;
use crate::config::{BudgetSink, CallLimits, ProviderConfig};
use crate::denials::DenialLog;
use crate::egress::EgressPolicy;
use crate::guest_text;
use crate::host_budget::OverBudget;
use crate::http_hooks::{CallScope, EgressHooks};
use crate::prepared::PreparedModule;
use crate::resolve::Resolver;
use crate::state::StoreState;
use crate::wit::{Bindings, BindingsPre, GuestResult};

/// Instances beyond this are never made, whatever a provider declares.
const MAX_INSTANCES: u32 = 64;

struct Live {
    store: Store<StoreState>,
    bindings: Bindings,
    _counted: LiveCount,
}

/// Counts an instance among the provider's live ones for as long as it exists.
struct LiveCount(Arc<AtomicU32>);

impl LiveCount {
    fn new(count: &Arc<AtomicU32>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for LiveCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

type CallFuture<'a, R> = Pin<Box<dyn Future<Output = GuestResult<R>> + Send + 'a>>;

pub struct WasmProvider {
    name: Arc<str>,
    info: ProviderInfo,
    module: ModuleInfo,
    engine: Engine,
    pre: BindingsPre,
    settings: String,
    egress: Arc<EgressPolicy>,
    resolver: Arc<dyn Resolver>,
    trust: TrustRoots,
    credentials: Arc<dyn CredentialSource>,
    limits: CallLimits,
    epoch_ticks: u64,
    permits: Semaphore,
    idle: Mutex<Vec<Live>>,
    live: Arc<AtomicU32>,
    instances_created: AtomicU64,
    over_budget: AtomicU64,
    budget_events: Option<Arc<dyn BudgetSink>>,
    answers: AnswerChecks,
}

impl WasmProvider {
    /// `engine` is the runtime's, whose epoch advances every `epoch_tick`.
    fn unstarted(
        engine: &Engine,
        epoch_tick: Duration,
        module: PreparedModule,
        egress: EgressPolicy,
        config: ProviderConfig,
    ) -> Self {
        let tick = epoch_tick.as_nanos().max(1);
        let epoch_ticks = (config.limits.timeout.as_nanos() / tick).max(1) as u64;
        Self {
            name: Arc::from(module.info.digest.get(..12).unwrap_or("provider")),
            info: ProviderInfo {
                name: String::new(),
                version: String::new(),
                capabilities: Default::default(),
                max_concurrency: 1,
                rate_model: None,
            },
            module: module.info,
            engine: engine.clone(),
            pre: module.pre,
            settings: config.settings,
            egress: Arc::new(egress),
            resolver: config.resolver,
            trust: config.trust,
            credentials: config.credentials,
            limits: config.limits,
            epoch_ticks,
            permits: Semaphore::new(1),
            idle: Mutex::new(Vec::new()),
            live: Arc::new(AtomicU32::new(0)),
            instances_created: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            budget_events: config.budget_events,
            answers: AnswerChecks::new(config.refusals),
        }
    }

    /// What a module declares through `info`, from an unconfigured instance.
    pub(crate) async fn describe(
        engine: &Engine,
        epoch_tick: Duration,
        module: PreparedModule,
    ) -> Result<ProviderInfo, CloudError> {
        let provider = Self::unstarted(
            engine,
            epoch_tick,
            module,
            EgressPolicy::default(),
            ProviderConfig::new(""),
        );
        Ok(provider.instantiate("load").await?.1)
    }

    pub(crate) async fn start(
        engine: &Engine,
        epoch_tick: Duration,
        module: PreparedModule,
        egress: EgressPolicy,
        config: ProviderConfig,
    ) -> Result<Self, CloudError> {
        let mut provider = Self::unstarted(engine, epoch_tick, module, egress, config);
        let (mut live, info) = provider.instantiate("load").await?;
        provider.name = Arc::from(info.name.as_str());
        live.store.data_mut().rename(provider.name.clone());
        provider.configure(&mut live).await?;
        let concurrency = info.max_concurrency.clamp(1, MAX_INSTANCES);
        provider.permits = Semaphore::new(concurrency as usize);
        provider.info = info;
        provider.park(live);
        tracing::info!(provider = %provider.name, version = %provider.info.version, concurrency, "provider started");
        Ok(provider)
    }

    pub fn module(&self) -> &ModuleInfo {
        &self.module
    }

    /// Instances made so far (a trap or timeout makes the next call make one).
    pub fn instances_created(&self) -> u64 {
        self.instances_created.load(Ordering::Relaxed)
    }

    /// Calls that ended with their instance over its host-resource budget.
    pub fn over_budget(&self) -> u64 {
        self.over_budget.load(Ordering::Relaxed)
    }

    /// Make instances now, up to the provider's declared concurrency, so that
    /// later calls do not pay for instantiation.
    pub async fn prewarm(&self) -> Result<(), CloudError> {
        let limit = self.info.max_concurrency.clamp(1, MAX_INSTANCES);
        loop {
            // Holding a permit, no call can start an instance meanwhile.
            let _permit = self
                .permits
                .acquire()
                .await
                .map_err(|e| self.host_error("prewarm", e))?;
            if self.live.load(Ordering::Relaxed) >= limit {
                return Ok(());
            }
            let live = self.fresh_instance().await?;
            self.park(live);
        }
    }

    /// Drop the idle instances (for example after the settings or the
    /// credentials changed); calls make fresh ones. How many were dropped.
    pub fn drain_idle(&self) -> usize {
        self.idle
            .lock()
            .map(|mut idle| idle.drain(..).count())
            .unwrap_or(0)
    }

    fn park(&self, live: Live) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(live);
        }
    }

    fn take_idle(&self) -> Option<Live> {
        self.idle.lock().ok()?.pop()
    }

    async fn fresh_instance(&self) -> Result<Live, CloudError> {
        let (mut live, _) = self.instantiate("instantiate").await?;
        self.configure(&mut live).await?;
        Ok(live)
    }

    /// Instantiate from the InstancePre and read the provider's info.
    async fn instantiate(
        &self,
        operation: &'static str,
    ) -> Result<(Live, ProviderInfo), CloudError> {
        let hooks = EgressHooks {
            policy: self.egress.clone(),
            resolver: self.resolver.clone(),
            roots: self.trust.clone(),
            denials: DenialLog::default(),
            requests: Arc::new(Semaphore::new(self.limits.concurrent_requests)),
            call_body_bytes: self.limits.call_body_bytes,
            call: CallScope::new(self.limits.call_body_bytes),
            call_sent: false,
            sends_refused: false,
        };
        let state = StoreState::new(
            self.name.clone(),
            hooks,
            &self.limits,
            self.credentials.clone(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.memory);
        store.set_epoch_deadline(self.epoch_ticks);
        let work = async {
            let bindings = self.pre.instantiate(&mut store).await?;
            let info = bindings.info(&mut store).await?;
            Ok::<_, wasmtime::Error>((bindings, info))
        };
        let outcome = tokio::time::timeout(self.limits.timeout, work).await;
        store.data_mut().hooks_mut().end_call();
        store.data().denials().take();
        self.close_log(store.data_mut());
        let (bindings, info) = match outcome {
            Err(_) => return Err(self.timeout(operation)),
            Ok(Err(error)) => return Err(self.classify(operation, error, store.data_mut())),
            Ok(Ok(done)) => done,
        };
        self.instances_created.fetch_add(1, Ordering::Relaxed);
        Ok((
            Live {
                store,
                bindings,
                _counted: LiveCount::new(&self.live),
            },
            info,
        ))
    }

    async fn configure(&self, live: &mut Live) -> Result<(), CloudError> {
        let settings = self.settings.clone();
        self.run(live, "configure", |l| {
            Box::pin(async move { l.bindings.configure(&mut l.store, &settings).await })
        })
        .await
        .map_err(|(error, _)| error)
    }

    /// One call on a pooled instance; the instance goes back to the pool
    /// unless the call trapped or timed out.
    async fn call<R: Send>(
        &self,
        operation: Operation,
        f: impl for<'a> FnOnce(&'a mut Live) -> CallFuture<'a, R> + Send,
    ) -> Result<R, CloudError> {
        let operation = operation.wit_name();
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| self.host_error(operation, e))?;
        let mut live = match self.take_idle() {
            Some(live) => live,
            None => self.fresh_instance().await?,
        };
        match self.run(&mut live, operation, f).await {
            Ok(value) => {
                self.park(live);
                Ok(value)
            }
            Err((error, reusable)) => {
                if reusable {
                    self.park(live);
                } else {
                    tracing::warn!(provider = %self.name, operation, %error, "dropping provider instance");
                }
                Err(error)
            }
        }
    }

    /// Run `f` under the deadlines; on error, also say whether the instance
    /// can still be used.
    async fn run<R>(
        &self,
        live: &mut Live,
        operation: &'static str,
        f: impl for<'a> FnOnce(&'a mut Live) -> CallFuture<'a, R>,
    ) -> Result<R, (CloudError, bool)> {
        live.store.set_epoch_deadline(self.epoch_ticks);
        live.store.data_mut().memory.hit = false;
        live.store.data_mut().budget.exceeded = None;
        let outcome = tokio::time::timeout(self.limits.timeout, f(live)).await;
        // Whatever the outcome, the requests this call started end with it,
        // and so do its denials and its log budget.
        live.store.data_mut().hooks_mut().end_call();
        let denials = live.store.data().denials().take();
        self.close_log(live.store.data_mut());
        if let Ok(Err(error)) = &outcome {
            live.store.data_mut().budget.note_trap(error);
        }
        if let Some(over) = live.store.data().budget.exceeded {
            // Even when the guest handled the refusal, the instance holds
            // what it was refused for: it is replaced.
            let mut error = self.budget_error(operation, over, live.store.data());
            if let (CloudError::Trap { message, .. }, Ok(Ok(Err(answer)))) = (&mut error, &outcome)
            {
                let answer = answer.to_string();
                let answer = guest_text::cut(&answer, guest_text::KEPT_BYTES);
                message.push_str(&format!("; the guest answered: {answer}"));
            }
            return Err((error, false));
        }
        match outcome {
            Err(_) => Err((self.timeout(operation), false)),
            Ok(Err(error)) => Err((
                self.classify(operation, error, live.store.data_mut()),
                false,
            )),
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(error))) => {
                let error = match denials.first {
                    Some((destination, reason)) => CloudError::EgressDenied {
                        provider: self.name.to_string(),
                        destination,
                        reason: reason.to_string(),
                    },
                    None => CloudError::Provider {
                        provider: self.name.to_string(),
                        error,
                    },
                };
                Err((error, true))
            }
        }
    }

    /// One line for the guest log lines the call dropped, counted in the
    /// sink.
    fn close_log(&self, state: &mut StoreState) {
        let dropped = state.end_log_call();
        if dropped == 0 {
            return;
        }
        tracing::warn!(
            provider = %self.name,
            dropped,
            "provider log lines over its per-call budget were dropped"
        );
        if let Some(sink) = &self.budget_events {
            sink.log_lines_dropped(&self.name, dropped);
        }
    }

    fn timeout(&self, operation: &'static str) -> CloudError {
        CloudError::Timeout {
            provider: self.name.to_string(),
            operation,
            limit: self.limits.timeout,
        }
    }

    fn host_error(&self, operation: &'static str, error: impl std::fmt::Display) -> CloudError {
        CloudError::Host {
            provider: self.name.to_string(),
            operation,
            message: error.to_string(),
        }
    }

    /// The call went over the instance's host-resource budget: reported as
    /// a trap naming what was over, counted and told to the sink.
    fn budget_error(
        &self,
        operation: &'static str,
        over: OverBudget,
        state: &StoreState,
    ) -> CloudError {
        self.over_budget.fetch_add(1, Ordering::Relaxed);
        if let Some(sink) = &self.budget_events {
            sink.over_budget(&self.name, over);
        }
        let budget = &state.budget;
        let what = match over {
            OverBudget::Entries => format!("{} resource-table entries", budget.entries),
            OverBudget::Bytes => format!("{} bytes of header sets, URLs and bodies", budget.bytes),
            OverBudget::HeaderSet => format!(
                "{} bytes in one header set",
                crate::host_budget::HEADER_SET_BYTES
            ),
        };
        CloudError::Trap {
            provider: self.name.to_string(),
            operation,
            message: format!("over its host-resource budget of {what}"),
        }
    }

    fn classify(
        &self,
        operation: &'static str,
        error: wasmtime::Error,
        state: &mut StoreState,
    ) -> CloudError {
        state.budget.note_trap(&error);
        if let Some(over) = state.budget.exceeded {
            return self.budget_error(operation, over, state);
        }
        let provider = self.name.to_string();
        if state.memory.hit {
            return CloudError::MemoryLimit {
                provider,
                operation,
                limit_bytes: state.memory.limit_bytes,
            };
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => self.timeout(operation),
            Some(trap) => {
                let stderr = state.stderr_tail();
                let message = if stderr.is_empty() {
                    trap.to_string()
                } else {
                    format!("{trap}; guest stderr: {stderr}")
                };
                CloudError::Trap {
                    provider,
                    operation,
                    message,
                }
            }
            None => self.host_error(operation, format!("{error:#}")),
        }
    }
}

impl std::fmt::Debug for WasmProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProvider")
            .field("name", &self.name)
            .field("digest", &self.module.digest)
            .field("instances_created", &self.instances_created())
            .finish_non_exhaustive()
    }
}

fn provider_call<'a, R, Fut>(fut: Fut) -> CallFuture<'a, R>
where
    Fut: Future<Output = GuestResult<R>> + Send + 'a,
{
    Box::pin(fut)
}

#[async_trait]
impl CloudApi for WasmProvider {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }

    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        let vpcs = self
            .call(Operation::GetVpcs, |l| {
                provider_call(l.bindings.get_vpcs(&mut l.store))
            })
            .await?;
        Ok(self.answers.vpcs(&self.name, vpcs))
    }

    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        let subnets = self
            .call(Operation::GetSubnets, |l| {
                provider_call(l.bindings.get_subnets(&mut l.store))
            })
            .await?;
        Ok(self.answers.subnets(&self.name, subnets))
    }

    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.call(Operation::GetSecurityGroups, |l| {
            provider_call(l.bindings.get_security_groups(&mut l.store))
        })
        .await
    }

    async fn get_instances(&self, ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        let every = ids.is_empty();
        // Owned: a call's future may not borrow its caller's arguments.
        let ids = ids.to_vec();
        let instances = self
            .call(Operation::GetInstances, |l| {
                provider_call(async move { l.bindings.get_instances(&mut l.store, &ids).await })
            })
            .await?;
        Ok(self.answers.instances(&self.name, instances, every))
    }

    async fn get_detached_interfaces(
        &self,
        tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        let tags = tags.to_vec();
        let interfaces = self
            .call(Operation::GetDetachedInterfaces, |l| {
                provider_call(async move {
                    l.bindings
                        .get_detached_interfaces(&mut l.store, &tags)
                        .await
                })
            })
            .await?;
        Ok(self.answers.detached(&self.name, interfaces))
    }

    async fn get_instance_limits(&self, instance_type: &str) -> Result<InstanceLimits, CloudError> {
        let instance_type = instance_type.to_string();
        let limits = self
            .call(Operation::GetInstanceLimits, |l| {
                provider_call(async move {
                    l.bindings
                        .get_instance_limits(&mut l.store, &instance_type)
                        .await
                })
            })
            .await?;
        self.answers.limits(&self.name, limits)
    }

    async fn create_interface(
        &self,
        request: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        let asked = request.clone();
        let created = self
            .call(Operation::CreateInterface, |l| {
                provider_call(
                    async move { l.bindings.create_interface(&mut l.store, &asked).await },
                )
            })
            .await?;
        self.answers.created(&self.name, request, created)
    }

    async fn delete_interface(&self, interface_id: &str) -> Result<(), CloudError> {
        let id = interface_id.to_string();
        self.call(Operation::DeleteInterface, |l| {
            provider_call(async move { l.bindings.delete_interface(&mut l.store, &id).await })
        })
        .await
    }

    async fn assign_ips(
        &self,
        interface_id: &str,
        request: IpRequest,
    ) -> Result<Assigned, CloudError> {
        let id = interface_id.to_string();
        let assigned = self
            .call(Operation::AssignIps, |l| {
                provider_call(
                    async move { l.bindings.assign_ips(&mut l.store, &id, request).await },
                )
            })
            .await?;
        self.answers
            .assigned(&self.name, interface_id, request, assigned)
    }

    async fn unassign_ips(
        &self,
        interface_id: &str,
        addresses: &[Ipv4Addr],
        prefixes: &[Ipv4Net],
    ) -> Result<(), CloudError> {
        let (id, addresses, prefixes) = (
            interface_id.to_string(),
            addresses.to_vec(),
            prefixes.to_vec(),
        );
        self.call(Operation::UnassignIps, |l| {
            provider_call(async move {
                l.bindings
                    .unassign_ips(&mut l.store, &id, &addresses, &prefixes)
                    .await
            })
        })
        .await
    }
}
