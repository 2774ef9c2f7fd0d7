//! Injected failures. Two kinds, as the wasm mock's `faults` settings have
//! them: an operation that fails before doing anything (the cloud refused the
//! call), and a create-interface that creates its interface, leaves it
//! detached and then fails (a provider that crashed between create and
//! attach: what leaked-interface GC exists for).

use std::collections::VecDeque;

use ipam_cloud::{Operation, ProviderError};

#[derive(Debug)]
struct Armed {
    remaining: u32,
    error: ProviderError,
}

#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Per operation, in the order armed: the first with calls left fires.
    failures: Vec<(Operation, VecDeque<Armed>)>,
    leaks: VecDeque<Armed>,
}

/// Count one firing off the front of `queue`; the error if one fired.
fn fire(queue: &mut VecDeque<Armed>) -> Option<ProviderError> {
    let front = queue.front_mut()?;
    front.remaining -= 1;
    let error = front.error.clone();
    if front.remaining == 0 {
        queue.pop_front();
    }
    Some(error)
}

fn arm(queue: &mut VecDeque<Armed>, times: u32, error: ProviderError) {
    if times > 0 {
        queue.push_back(Armed {
            remaining: times,
            error,
        });
    }
}

impl Faults {
    pub fn fail(&mut self, operation: Operation, times: u32, error: ProviderError) {
        let at = match self.failures.iter().position(|(op, _)| *op == operation) {
            Some(at) => at,
            None => {
                self.failures.push((operation, VecDeque::new()));
                self.failures.len() - 1
            }
        };
        arm(&mut self.failures[at].1, times, error);
    }

    pub fn leak(&mut self, times: u32, error: ProviderError) {
        arm(&mut self.leaks, times, error);
    }

    /// A call of `operation` is starting: the error to fail it with, if any.
    pub fn failure(&mut self, operation: Operation) -> Option<ProviderError> {
        let (_, queue) = self.failures.iter_mut().find(|(op, _)| *op == operation)?;
        fire(queue)
    }

    /// A create-interface passed its checks and created its interface: the
    /// error to leak it with, if any.
    pub fn leak_now(&mut self) -> Option<ProviderError> {
        fire(&mut self.leaks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armed_failures_fire_in_order_then_stop() {
        let mut faults = Faults::default();
        let throttled = ProviderError::Throttled(std::time::Duration::ZERO);
        let transient = ProviderError::Transient("x".into());
        faults.fail(Operation::AssignIps, 2, throttled.clone());
        faults.fail(Operation::AssignIps, 1, transient.clone());
        faults.fail(Operation::GetVpcs, 0, transient.clone());
        assert_eq!(
            faults.failure(Operation::GetVpcs),
            None,
            "zero times arms nothing"
        );
        assert_eq!(faults.failure(Operation::UnassignIps), None);
        let fired: Vec<_> = (0..4)
            .map(|_| faults.failure(Operation::AssignIps))
            .collect();
        assert_eq!(
            fired,
            [
                Some(throttled.clone()),
                Some(throttled),
                Some(transient),
                None
            ]
        );
    }
}
