//! The agent's answers to the release handshake, as cilium-agent gives them:
//! an address marked for release is do-not-release while a pod holds it and
//! ready-for-release otherwise; a `released` entry whose address has left
//! the pool is removed. Everything else is left for the operator.

use std::collections::BTreeMap;

use ipam_ciliumnode::{CiliumNode, ReleaseState};

/// Per address in status.ipam.release-ips: `Some(state)` to write,
/// `None` to remove the entry. Addresses not named stay as they are.
pub type Answers = BTreeMap<String, Option<ReleaseState>>;

/// The answers for `node`, where `in_use` says whether a pod holds an
/// address (by its text as it appears in release-ips).
pub fn answers(node: &CiliumNode, in_use: impl Fn(&str) -> bool) -> Answers {
    let mut answers = Answers::new();
    for (ip, state) in &node.status.ipam.release_ips {
        match state {
            ReleaseState::MarkedForRelease if in_use(ip) => {
                answers.insert(ip.clone(), Some(ReleaseState::DoNotRelease));
            }
            ReleaseState::MarkedForRelease => {
                answers.insert(ip.clone(), Some(ReleaseState::ReadyForRelease));
            }
            ReleaseState::Released if !node.spec.ipam.pool.contains_key(ip) => {
                answers.insert(ip.clone(), None);
            }
            _ => {}
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_ciliumnode::AllocationIp;

    fn node(pool: &[&str], release: &[(&str, ReleaseState)]) -> CiliumNode {
        let mut node = CiliumNode::default();
        for ip in pool {
            node.spec
                .ipam
                .pool
                .insert(ip.to_string(), AllocationIp::default());
        }
        for (ip, state) in release {
            node.status
                .ipam
                .release_ips
                .insert(ip.to_string(), state.clone());
        }
        node
    }

    #[test]
    fn each_state_gets_cilium_agents_answer() {
        use ReleaseState::*;
        // (state, in the pool, in use) -> answer (None: no answer; Some(None): remove)
        let table: [(ReleaseState, bool, bool, Option<Option<ReleaseState>>); 10] = [
            (MarkedForRelease, true, true, Some(Some(DoNotRelease))),
            (MarkedForRelease, true, false, Some(Some(ReadyForRelease))),
            (MarkedForRelease, false, false, Some(Some(ReadyForRelease))),
            (ReadyForRelease, true, false, None),
            (ReadyForRelease, true, true, None),
            (DoNotRelease, true, true, None),
            (DoNotRelease, true, false, None),
            (Released, true, false, None),
            (Released, false, false, Some(None)),
            (Released, false, true, Some(None)),
        ];
        for (state, in_pool, in_use, expected) in table {
            let pool: &[&str] = if in_pool { &["10.0.0.1"] } else { &[] };
            let n = node(pool, &[("10.0.0.1", state.clone())]);
            let got = answers(&n, |_| in_use);
            assert_eq!(
                got.get("10.0.0.1").cloned(),
                expected,
                "{state:?} in pool {in_pool} in use {in_use}"
            );
        }
    }
}
