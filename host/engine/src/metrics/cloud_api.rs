//! Cilium's cloud API families, `cilium_operator_<subsystem>_api_
//! duration_seconds{operation, response_code}` and `..._api_rate_limit_
//! duration_seconds{operation}` (`ec2` for AWS, `azure` for Azure), beside
//! the provider-neutral `cilium_operator_ipam_api_*`. Cilium labels a call
//! with the cloud's name for it; the host sees WIT operations, each of
//! which may make several cloud calls, and labels one with the cloud calls
//! its provider's rate model declares for it (distinct, in order, joined
//! with `+`), or its WIT name when the provider declares none.

use std::collections::BTreeMap;
use std::time::Duration;

use ipam_cloud::rate::RateModel;
use ipam_cloud::Operation;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::labels::{CloudCallLabel, CloudOperationLabel};
use super::{seconds_histogram, HistogramFamily, CILIUM_BUCKETS};

type Histograms<L> = HistogramFamily<L>;

fn api_histogram() -> Histogram {
    Histogram::new(CILIUM_BUCKETS)
}

/// client_golang's default buckets start at 5 ms; waits for a bucket are
/// often shorter: the engine's own 1 ms .. ~33 s.
fn wait_histogram() -> Histogram {
    seconds_histogram()
}

#[derive(Clone)]
pub struct CloudApiMetrics {
    pub duration_seconds: Histograms<CloudCallLabel>,
    pub rate_limit_duration_seconds: Histograms<CloudOperationLabel>,
}

impl CloudApiMetrics {
    pub(crate) fn new() -> Self {
        Self {
            duration_seconds: Family::new_with_constructor(api_histogram),
            rate_limit_duration_seconds: Family::new_with_constructor(wait_histogram),
        }
    }

    /// Register under the subsystem's registry (`cilium_operator_ec2`).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "api_duration_seconds",
            "Duration of interactions with API",
            self.duration_seconds.clone(),
        );
        registry.register(
            "api_rate_limit_duration_seconds",
            "Duration of client-side rate limiter blocking",
            self.rate_limit_duration_seconds.clone(),
        );
    }

    /// A call attempt labelled `operation` (see [`operation_labels`]).
    pub fn observe_call(&self, operation: &str, ok: bool, took: Duration) {
        self.duration_seconds
            .get_or_create(&CloudCallLabel {
                operation: operation.to_string(),
                response_code: if ok { "OK" } else { "Failed" },
            })
            .observe(took.as_secs_f64());
    }

    /// A wait for the client-side buckets; Cilium records only the calls
    /// that did wait.
    pub fn observe_wait(&self, operation: &str, waited: Duration) {
        if !waited.is_zero() {
            self.rate_limit_duration_seconds
                .get_or_create(&CloudOperationLabel {
                    operation: operation.to_string(),
                })
                .observe(waited.as_secs_f64());
        }
    }
}

/// How Cilium's families label each operation of a provider declaring
/// `model`: its declared cloud calls, distinct, in order, joined with `+`
/// (`AssignPrivateIpAddresses`; `DescribeInstances+DescribeNetworkInterfaces`);
/// the WIT name for an operation that declares none.
pub fn operation_labels(model: Option<&RateModel>) -> BTreeMap<Operation, String> {
    Operation::ALL
        .into_iter()
        .map(|operation| {
            let mut names: Vec<&str> = Vec::new();
            let calls = model
                .and_then(|m| m.costs.iter().find(|c| c.operation == operation))
                .map(|c| c.calls.as_slice())
                .unwrap_or_default();
            for call in calls {
                if !names.contains(&call.name.as_str()) {
                    names.push(&call.name);
                }
            }
            let label = match names.is_empty() {
                true => operation.wit_name().to_string(),
                false => names.join("+"),
            };
            (operation, label)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_cloud::rate::{ApiCall, OperationCost};

    fn call(name: &str) -> ApiCall {
        ApiCall {
            name: name.into(),
            bucket: name.into(),
        }
    }

    #[test]
    fn operations_are_labelled_with_their_declared_calls_else_their_wit_names() {
        let model = RateModel {
            buckets: Vec::new(),
            costs: vec![
                OperationCost {
                    operation: Operation::AssignIps,
                    calls: vec![call("AssignPrivateIpAddresses")],
                },
                OperationCost {
                    operation: Operation::DeleteInterface,
                    calls: vec![
                        call("DetachNetworkInterface"),
                        call("DeleteNetworkInterface"),
                        call("DeleteNetworkInterface"),
                    ],
                },
                OperationCost {
                    operation: Operation::GetDetachedInterfaces,
                    calls: Vec::new(),
                },
            ],
        };
        let labels = operation_labels(Some(&model));
        assert_eq!(labels[&Operation::AssignIps], "AssignPrivateIpAddresses");
        assert_eq!(
            labels[&Operation::DeleteInterface],
            "DetachNetworkInterface+DeleteNetworkInterface"
        );
        assert_eq!(
            labels[&Operation::GetDetachedInterfaces],
            "get-detached-interfaces"
        );
        assert_eq!(labels[&Operation::GetVpcs], "get-vpcs", "not declared");
        assert_eq!(
            operation_labels(None)[&Operation::UnassignIps],
            "unassign-ips"
        );
    }

    #[test]
    fn only_calls_that_waited_are_recorded_as_waits() {
        let metrics = CloudApiMetrics::new();
        metrics.observe_wait("AssignPrivateIpAddresses", Duration::ZERO);
        metrics.observe_wait("UnassignPrivateIpAddresses", Duration::from_millis(3));
        let waited = |operation: &str| {
            metrics
                .rate_limit_duration_seconds
                .get(&CloudOperationLabel {
                    operation: operation.into(),
                })
                .is_some()
        };
        assert!(!waited("AssignPrivateIpAddresses"));
        assert!(waited("UnassignPrivateIpAddresses"));
    }
}
