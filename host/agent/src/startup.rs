//! The agent's start-up steps after the state file is read and the health
//! endpoints are up, as `/readyz` names them while they are waited for
//! (with the last error of a step that is retried). The agent is ready
//! once the CNI socket is served.

use ipam_health_http::startup::Step;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentStep {
    /// The Kubernetes client from the kubeconfig or the pod's config.
    Kubernetes,
    /// The instance's facts from the metadata service or the flags;
    /// retried.
    InstanceFacts,
    /// The CiliumNode created or patched; retried.
    Registration,
    /// The eBPF datapath loaded over its pinned maps (off without
    /// `--datapath-object`).
    Datapath,
    /// The saved allocations judged against the pool and the live pods,
    /// the routes in step.
    Restore,
    /// The plugin's unix socket served.
    CniSocket,
}

impl Step for AgentStep {
    const ALL: &'static [Self] = &[
        AgentStep::Kubernetes,
        AgentStep::InstanceFacts,
        AgentStep::Registration,
        AgentStep::Datapath,
        AgentStep::Restore,
        AgentStep::CniSocket,
    ];

    fn name(self) -> &'static str {
        match self {
            AgentStep::Kubernetes => "kubernetes api",
            AgentStep::InstanceFacts => "instance facts",
            AgentStep::Registration => "ciliumnode registration",
            AgentStep::Datapath => "datapath",
            AgentStep::Restore => "restore",
            AgentStep::CniSocket => "cni socket",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_health_http::startup::Startup;

    #[test]
    fn readyz_names_a_retried_step_with_its_last_error() {
        let startup = Startup::<AgentStep>::default();
        startup.done(AgentStep::Kubernetes);
        startup.waiting(
            AgentStep::InstanceFacts,
            "retrying in 4s: GET http://169.254.169.254/latest/api/token: connection refused",
        );
        startup.off(AgentStep::Datapath);
        assert_eq!(
            startup.report().pending().as_deref(),
            Some(
                "waiting: instance facts (retrying in 4s: GET http://169.254.169.254/latest/api/token: \
                 connection refused), ciliumnode registration, restore, cni socket; failed: -"
            )
        );
        for step in [
            AgentStep::InstanceFacts,
            AgentStep::Registration,
            AgentStep::Restore,
            AgentStep::CniSocket,
        ] {
            startup.done(step);
        }
        assert_eq!(startup.report().pending(), None);
    }
}
