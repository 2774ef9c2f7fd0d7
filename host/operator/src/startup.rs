//! The operator's start-up steps, in order, as `/readyz` names them while
//! they are waited for, and the readiness that follows them: once every
//! step is done (or off), ready as `ipam_k8s::operator` defines it, unless
//! another writer of the operator's CiliumNode fields is seen
//! (`ipam_k8s::other_writers`: the engine does not write, and the reason
//! names it) or the cloud refuses the provider's credentials (an operator
//! that cannot call its cloud does not do its job: `/readyz` answers 503
//! until a call of the refused operation succeeds). The other cloud
//! trouble is listed in `/readyz`'s body without failing it
//! (`crate::serve`).

use std::future::Future;
use std::sync::Arc;

use ipam_engine::CloudProblems;
use ipam_health_http::startup::{Startup, Step, StepState};
use ipam_health_http::Readiness;
use ipam_k8s::other_writers::Pause;
use tokio::sync::watch;

use crate::error_text;

/// The slow work between the HTTP listener and the operator's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartStep {
    /// Read from a file or pulled from a registry, then compiled and
    /// instantiated.
    ProviderModule,
    /// The provider's credentials: the mounted file, or the AWS or Azure
    /// chain's first resolution.
    Credentials,
    /// The first connection to etcd and its leases (off without etcd).
    Etcd,
    /// The Kubernetes client (and the CRD with --register-crd).
    Kubernetes,
    /// The first list of the CiliumNodes.
    NodeCache,
}

impl Step for StartStep {
    const ALL: &'static [Self] = &[
        StartStep::ProviderModule,
        StartStep::Credentials,
        StartStep::Etcd,
        StartStep::Kubernetes,
        StartStep::NodeCache,
    ];

    fn name(self) -> &'static str {
        match self {
            StartStep::ProviderModule => "provider module",
            StartStep::Credentials => "credentials",
            StartStep::Etcd => "etcd",
            StartStep::Kubernetes => "kubernetes api",
            StartStep::NodeCache => "ciliumnode cache",
        }
    }
}

/// What `/readyz` says after the start-up while `ready` is false: a
/// replica that leads is ready after the engine's first resync and pass.
const LEADING_NOT_READY: &str =
    "waiting: first resync and pass over every node (leading); failed: -";

/// What `/readyz` says while the cloud refuses the credentials (the
/// problem itself is listed below it).
const UNAUTHORIZED: &str = "not ready: the cloud refuses the provider's credentials";

/// `/readyz`: the start-up steps still waited for or failed, then another
/// writer seen, then refused credentials, then the operator's own
/// readiness.
pub fn readiness(
    startup: Startup<StartStep>,
    ready: watch::Receiver<bool>,
    pause: watch::Receiver<Option<Pause>>,
    problems: Arc<CloudProblems>,
) -> Readiness {
    Arc::new(move || {
        let unauthorized = problems.unauthorized(tokio::time::Instant::now());
        let paused = pause.borrow().as_ref().map(Pause::reason);
        not_ready(
            startup.report().pending(),
            paused,
            unauthorized.is_some(),
            *ready.borrow(),
        )
    })
}

fn not_ready(
    pending: Option<String>,
    paused: Option<String>,
    unauthorized: bool,
    ready: bool,
) -> Option<String> {
    match (pending, paused, unauthorized, ready) {
        (Some(pending), _, _, _) => Some(pending),
        (None, Some(paused), _, _) => Some(paused),
        (None, None, true, _) => Some(UNAUTHORIZED.to_string()),
        (None, None, false, true) => None,
        (None, None, false, false) => Some(LEADING_NOT_READY.to_string()),
    }
}

/// `work` as `step` (doing `doing`): done on success; failed with the
/// error as the fatal log will say it otherwise.
pub async fn step<T>(
    startup: &Startup<StartStep>,
    step: StartStep,
    doing: impl Into<String>,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    startup.waiting(step, doing);
    let result = work.await;
    match &result {
        Ok(_) => startup.done(step),
        Err(error) => startup.set(step, StepState::Failed(error_text::chain(error))),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_says_the_start_up_first_then_the_operators_own_readiness() {
        let startup = Startup::<StartStep>::default();
        let pending = || startup.report().pending();
        assert_eq!(
            not_ready(pending(), None, true, false).as_deref(),
            Some("waiting: provider module, credentials, etcd, kubernetes api, ciliumnode cache; failed: -")
        );
        startup.waiting(
            StartStep::ProviderModule,
            "pulling oci://127.0.0.1:5000/p@sha256:ab",
        );
        startup.done(StartStep::Credentials);
        startup.off(StartStep::Etcd);
        assert_eq!(
            not_ready(pending(), Some("paused: ...".into()), false, true).as_deref(),
            Some("waiting: provider module (pulling oci://127.0.0.1:5000/p@sha256:ab), kubernetes api, ciliumnode cache; failed: -"),
            "the start-up decides before the operator's readiness"
        );
        for done in [
            StartStep::ProviderModule,
            StartStep::Kubernetes,
            StartStep::NodeCache,
        ] {
            startup.done(done);
        }
        assert_eq!(
            not_ready(pending(), None, false, false).as_deref(),
            Some(LEADING_NOT_READY)
        );
        assert_eq!(not_ready(pending(), None, false, true), None);
        assert_eq!(
            not_ready(pending(), None, true, true).as_deref(),
            Some(UNAUTHORIZED),
            "refused credentials fail a ready operator"
        );
        assert_eq!(
            not_ready(
                pending(),
                Some("paused: cilium-operator-aws".into()),
                true,
                true
            )
            .as_deref(),
            Some("paused: cilium-operator-aws"),
            "another writer, before the rest"
        );
    }

    #[tokio::test]
    async fn a_failed_step_says_the_error_once() {
        let startup = Startup::<StartStep>::default();
        let result: anyhow::Result<()> = step(&startup, StartStep::Etcd, "connecting", async {
            Err(anyhow::anyhow!("refused"))
                .map_err(|e| e.context("connecting to etcd at http://127.0.0.1:1"))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(
            startup.report().state(StartStep::Etcd),
            Some(&StepState::Failed(
                "connecting to etcd at http://127.0.0.1:1: refused".into()
            ))
        );
    }
}
