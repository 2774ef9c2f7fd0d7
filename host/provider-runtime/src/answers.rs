//! The runtime's side of the boundary checks (`ipam_cloud::answer`): every
//! answer of a provider, converted into the model, is checked against what
//! the provider answered before. A listing loses the items that cannot be
//! believed (the others are still served); a mutation's answer that cannot
//! be believed is an error. Each refusal is logged and told to the sink.

use std::sync::{Arc, Mutex, MutexGuard};

use ipam_cloud::answer::{self, BadField, KnownNetworks, RefusalSink};
use ipam_cloud::{
    Assigned, CloudError, CreateInterfaceRequest, Instance, InstanceLimits, IpRequest,
    NetworkInterface, Operation, Subnet, Vpc,
};

use crate::wit::Converted;

pub(crate) struct AnswerChecks {
    known: Mutex<KnownNetworks>,
    sink: Option<Arc<dyn RefusalSink>>,
}

impl AnswerChecks {
    pub(crate) fn new(sink: Option<Arc<dyn RefusalSink>>) -> Self {
        Self {
            known: Mutex::new(KnownNetworks::default()),
            sink,
        }
    }

    fn known(&self) -> MutexGuard<'_, KnownNetworks> {
        // What was learnt stays valid whatever panicked while holding it.
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn refuse(&self, provider: &str, operation: Operation, bad: BadField) -> CloudError {
        tracing::warn!(provider, %operation, field = %bad.field, problem = %bad.problem,
            "refused the provider's answer: {}", bad.detail);
        if let Some(sink) = &self.sink {
            sink.refused(provider, operation, &bad);
        }
        CloudError::BadAnswer {
            provider: provider.to_string(),
            operation: operation.wit_name(),
            bad,
        }
    }

    /// The items that converted; the others refused.
    fn believed<T>(
        &self,
        provider: &str,
        operation: Operation,
        items: Vec<Converted<T>>,
    ) -> Vec<T> {
        items
            .into_iter()
            .filter_map(|item| {
                item.map_err(|bad| self.refuse(provider, operation, bad))
                    .ok()
            })
            .collect()
    }

    pub(crate) fn vpcs(&self, provider: &str, items: Vec<Converted<Vpc>>) -> Vec<Vpc> {
        let vpcs = self.believed(provider, Operation::GetVpcs, items);
        self.known().learn_vpcs(&vpcs);
        vpcs
    }

    pub(crate) fn subnets(&self, provider: &str, items: Vec<Converted<Subnet>>) -> Vec<Subnet> {
        let subnets = self.believed(provider, Operation::GetSubnets, items);
        self.known().learn_subnets(&subnets);
        subnets
    }

    /// `every`: the listing is of every instance (no ids asked), so it says
    /// which interfaces exist.
    pub(crate) fn instances(
        &self,
        provider: &str,
        items: Vec<Converted<Instance>>,
        every: bool,
    ) -> Vec<Instance> {
        let mut instances = self.believed(provider, Operation::GetInstances, items);
        let mut known = self.known();
        let bad = answer::check_instances(&instances, &known);
        for (n, bad) in bad.into_iter().rev() {
            instances.remove(n);
            self.refuse(provider, Operation::GetInstances, bad);
        }
        if every {
            known.forget_interfaces();
        }
        known.learn_interfaces(instances.iter().flat_map(|i| &i.interfaces));
        instances
    }

    pub(crate) fn detached(
        &self,
        provider: &str,
        items: Vec<Converted<NetworkInterface>>,
    ) -> Vec<NetworkInterface> {
        let operation = Operation::GetDetachedInterfaces;
        let interfaces = self.believed(provider, operation, items);
        let known = self.known();
        interfaces
            .into_iter()
            .filter(|i| {
                let at = format!("interfaces[{}]", i.id);
                answer::check_interface(i, &at, &known)
                    .map_err(|bad| self.refuse(provider, operation, bad))
                    .is_ok()
            })
            .collect()
    }

    pub(crate) fn limits(
        &self,
        provider: &str,
        limits: InstanceLimits,
    ) -> Result<InstanceLimits, CloudError> {
        answer::check_limits(&limits)
            .map(|()| limits)
            .map_err(|bad| self.refuse(provider, Operation::GetInstanceLimits, bad))
    }

    pub(crate) fn created(
        &self,
        provider: &str,
        request: &CreateInterfaceRequest,
        created: Converted<NetworkInterface>,
    ) -> Result<NetworkInterface, CloudError> {
        let operation = Operation::CreateInterface;
        let created = created.map_err(|bad| self.refuse(provider, operation, bad))?;
        let mut known = self.known();
        answer::check_created(request, &created, &known)
            .map_err(|bad| self.refuse(provider, operation, bad))?;
        known.learn_interfaces([&created]);
        Ok(created)
    }

    pub(crate) fn assigned(
        &self,
        provider: &str,
        interface_id: &str,
        request: IpRequest,
        assigned: Converted<Assigned>,
    ) -> Result<Assigned, CloudError> {
        let operation = Operation::AssignIps;
        let assigned = assigned.map_err(|bad| self.refuse(provider, operation, bad))?;
        answer::check_assigned(interface_id, request, &assigned, &self.known())
            .map_err(|bad| self.refuse(provider, operation, bad))?;
        Ok(assigned)
    }
}
