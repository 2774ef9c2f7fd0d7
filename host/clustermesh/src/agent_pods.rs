//! Which nodes run a cilium-agent pod now: the nodes store leaves a node's
//! key alone while its agent runs, as cilium-operator's nodes GC does (the
//! agent would write the key again at once, and peers would lose the node
//! in between).
//!
//! [`AgentPodsView`] is fed by a watch of the agents' pods (in one
//! namespace, by label selector: Cilium's `--cilium-pod-namespace` and
//! `--cilium-pod-labels`); tests feed [`AgentPodsView::event`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::Client;
use tokio::sync::watch;

use crate::services::forward;

/// A label selector of equality terms (`k8s-app=cilium,tier=node`), the
/// form Cilium's `--cilium-pod-labels` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLabels(BTreeMap<String, String>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PodLabelsError {
    #[error("agent pod labels {0:?}: give at least one key=value")]
    Empty(String),
    #[error("agent pod labels {text:?}: {term:?} is not key=value with a non-empty key and value")]
    Term { text: String, term: String },
}

impl std::str::FromStr for PodLabels {
    type Err = PodLabelsError;

    fn from_str(text: &str) -> Result<Self, PodLabelsError> {
        let mut labels = BTreeMap::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let parsed = term
                .split_once('=')
                .map(|(key, value)| (key.trim(), value.trim()))
                .filter(|(key, value)| {
                    let allowed = |s: &str| {
                        s.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
                    };
                    !key.is_empty() && !value.is_empty() && allowed(key) && allowed(value)
                });
            let Some((key, value)) = parsed else {
                return Err(PodLabelsError::Term {
                    text: text.into(),
                    term: term.into(),
                });
            };
            labels.insert(key.to_string(), value.to_string());
        }
        if labels.is_empty() {
            return Err(PodLabelsError::Empty(text.into()));
        }
        Ok(Self(labels))
    }
}

impl PodLabels {
    /// The selector as the API server takes it.
    pub fn selector(&self) -> String {
        self.0
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[derive(Default)]
struct Pods {
    /// Running agent pods by (namespace/name), with their node.
    running: BTreeMap<String, String>,
    relisted: Option<BTreeMap<String, String>>,
}

/// The nodes with a running agent pod.
pub struct AgentPodsView {
    pods: Mutex<Pods>,
    synced: watch::Sender<bool>,
}

impl Default for AgentPodsView {
    fn default() -> Self {
        Self::new()
    }
}

/// A pod's id and node, when it runs there now (phase `Running`, as
/// Cilium's `IsPodRunning`).
fn running_on(pod: &Pod) -> Option<(String, String)> {
    let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
    let node = pod.spec.as_ref()?.node_name.clone()?;
    running.then_some((id_of(pod)?, node))
}

/// `namespace/name`.
fn id_of(pod: &Pod) -> Option<String> {
    Some(format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref()?
    ))
}

impl AgentPodsView {
    pub fn new() -> Self {
        Self {
            pods: Mutex::new(Pods::default()),
            synced: watch::Sender::new(false),
        }
    }

    fn pods(&self) -> MutexGuard<'_, Pods> {
        // Every update is one insert, remove or swap: a panic while holding
        // the lock leaves the maps whole.
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True once the agents' pods have been listed.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// The nodes an agent pod runs on now.
    pub fn nodes(&self) -> BTreeSet<String> {
        self.pods().running.values().cloned().collect()
    }

    /// Whether an agent pod runs on `node` now.
    pub fn runs_on(&self, node: &str) -> bool {
        self.pods().running.values().any(|n| n == node)
    }

    /// A watch event of the agents' pods.
    pub fn event(&self, event: Event<Pod>) {
        let mut pods = self.pods();
        match event {
            Event::Apply(pod) => match (running_on(&pod), id_of(&pod)) {
                (Some((id, node)), _) => {
                    pods.running.insert(id, node);
                }
                (None, Some(id)) => {
                    pods.running.remove(&id);
                }
                (None, None) => {}
            },
            Event::Delete(pod) => {
                if let Some(id) = id_of(&pod) {
                    pods.running.remove(&id);
                }
            }
            Event::Init => pods.relisted = Some(BTreeMap::new()),
            Event::InitApply(pod) => {
                if let (Some(list), Some((id, node))) = (pods.relisted.as_mut(), running_on(&pod)) {
                    list.insert(id, node);
                }
            }
            Event::InitDone => {
                pods.running = pods.relisted.take().unwrap_or_default();
                self.synced.send_replace(true);
            }
        }
    }

    /// Follow the agents' pods in `namespace` matching `labels` until the
    /// client is dropped. Watch errors are logged and retried with backoff.
    pub async fn follow(
        self: std::sync::Arc<Self>,
        client: Client,
        namespace: String,
        labels: PodLabels,
    ) {
        let api = Api::<Pod>::namespaced(client, &namespace);
        let config = watcher::Config::default()
            .labels(&labels.selector())
            .any_semantic();
        forward(watcher::watcher(api, config), "Pod", |e| self.event(e)).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, node: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn labels_are_key_value_terms() {
        let labels: PodLabels = "k8s-app=cilium, app.kubernetes.io/part-of=cilium"
            .parse()
            .unwrap();
        assert_eq!(
            labels.selector(),
            "app.kubernetes.io/part-of=cilium,k8s-app=cilium"
        );
        for (bad, wanted) in [
            ("", PodLabelsError::Empty(String::new())),
            (
                "k8s-app",
                PodLabelsError::Term {
                    text: "k8s-app".into(),
                    term: "k8s-app".into(),
                },
            ),
            (
                "a=b,=c",
                PodLabelsError::Term {
                    text: "a=b,=c".into(),
                    term: "=c".into(),
                },
            ),
            (
                "a!=b",
                PodLabelsError::Term {
                    text: "a!=b".into(),
                    term: "a!=b".into(),
                },
            ),
        ] {
            assert_eq!(bad.parse::<PodLabels>(), Err(wanted), "{bad:?}");
        }
    }

    #[test]
    fn only_running_pods_count_and_a_relist_replaces_them() {
        let view = AgentPodsView::new();
        assert!(!*view.synced().borrow());
        view.event(Event::Init);
        view.event(Event::InitApply(pod("a", "n1", "Running")));
        view.event(Event::InitApply(pod("b", "n2", "Pending")));
        view.event(Event::InitDone);
        assert!(*view.synced().borrow());
        assert_eq!(view.nodes(), ["n1".to_string()].into());

        view.event(Event::Apply(pod("b", "n2", "Running")));
        assert!(view.runs_on("n2"));
        view.event(Event::Apply(pod("a", "n1", "Failed")));
        assert!(!view.runs_on("n1"), "a pod that stopped running");
        view.event(Event::Delete(pod("b", "n2", "Running")));
        assert!(view.nodes().is_empty());

        view.event(Event::Apply(pod("c", "n3", "Running")));
        view.event(Event::Init);
        view.event(Event::InitApply(pod("d", "n4", "Running")));
        view.event(Event::InitDone);
        assert_eq!(
            view.nodes(),
            ["n4".to_string()].into(),
            "c went while unwatched"
        );
    }
}
