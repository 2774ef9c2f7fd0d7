//! Restart or uninstall, decided at SIGTERM, as plain data.
//!
//! A stopping agent cannot tell from the signal alone whether it is being
//! restarted (a rolling update, a crash loop, the kubelet's eviction), after
//! which its pods must keep their network, or uninstalled, after which
//! nothing of it may stay on the node: a conflist naming a plugin whose
//! agent is gone fails every new pod's sandbox, and its routes, SNAT rules
//! and pinned programs would outlive it. Its pod's owner tells: the
//! DaemonSet is deleted first when the agent is uninstalled (`helm
//! uninstall`, `kubectl delete -k`), and its pods are then deleted by the
//! garbage collector (at once, or after the DaemonSet was given a
//! deletionTimestamp with foreground deletion). A rolling update keeps the
//! DaemonSet. So at SIGTERM the agent reads its pod's owner reference and
//! that DaemonSet: gone (or re-created under another uid) or being deleted
//! means uninstall; anything else, including every error, means restart,
//! which keeps everything: the safe mistake is a leftover after an
//! uninstall, not pods cut off by a restart.
//!
//! A hook (`helm.sh/hook: pre-delete` running an uninstall Job on every
//! node) was the other design: it needs a Job per node, which the chart
//! cannot render without knowing the nodes, and kustomize has no hooks.

/// What the agent found of its owner at SIGTERM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// No `--pod-name`/`--pod-namespace`: the agent does not know its pod.
    NotKnown,
    /// The pod or its owner could not be read.
    Unreadable(String),
    /// The pod has no DaemonSet owner (a static pod, or run by hand).
    NotADaemonSet,
    /// The owner DaemonSet, as the API server has it.
    DaemonSet { name: String, state: DaemonSetState },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonSetState {
    /// There, with the uid of the pod's owner reference, not being deleted.
    Live,
    /// There with a deletionTimestamp (foreground deletion).
    Deleting,
    /// Not there, or there under another uid (deleted and made again).
    Gone,
}

/// What the agent does on its way out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnStop {
    /// Leave everything in place (why).
    Keep(String),
    /// Remove everything the agent put on the node (why).
    Uninstall(String),
}

pub fn on_stop(owner: &Owner) -> OnStop {
    let keep = |why: String| OnStop::Keep(why);
    match owner {
        Owner::NotKnown => {
            keep("the agent's pod is not known (no --pod-name and --pod-namespace)".into())
        }
        Owner::Unreadable(error) => keep(format!("its owner could not be read ({error})")),
        Owner::NotADaemonSet => keep("its pod has no DaemonSet owner".into()),
        Owner::DaemonSet { name, state } => match state {
            DaemonSetState::Live => keep(format!("DaemonSet {name} is still there")),
            DaemonSetState::Deleting => {
                OnStop::Uninstall(format!("DaemonSet {name} is being deleted"))
            }
            DaemonSetState::Gone => OnStop::Uninstall(format!("DaemonSet {name} is gone")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daemonset(state: DaemonSetState) -> Owner {
        Owner::DaemonSet {
            name: "ipam-agent".into(),
            state,
        }
    }

    #[test]
    fn only_a_deleted_daemonset_uninstalls() {
        let cases = [
            (Owner::NotKnown, false),
            (Owner::Unreadable("connection refused".into()), false),
            (Owner::NotADaemonSet, false),
            (daemonset(DaemonSetState::Live), false),
            (daemonset(DaemonSetState::Deleting), true),
            (daemonset(DaemonSetState::Gone), true),
        ];
        for (owner, uninstalls) in cases {
            let decision = on_stop(&owner);
            assert_eq!(
                matches!(decision, OnStop::Uninstall(_)),
                uninstalls,
                "{owner:?}: {decision:?}"
            );
        }
        assert_eq!(
            on_stop(&Owner::Unreadable("timed out".into())),
            OnStop::Keep("its owner could not be read (timed out)".into())
        );
        assert_eq!(
            on_stop(&daemonset(DaemonSetState::Gone)),
            OnStop::Uninstall("DaemonSet ipam-agent is gone".into())
        );
    }
}
