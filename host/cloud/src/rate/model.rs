//! The rate model a provider declares (WIT 0.2.0 `rate-model`), the
//! operator's adjustments to it, and the checks that turn both into
//! [`RateLimits`]. A declaration that leaves an operation the host may call
//! without a cost, or names a bucket it does not declare, is refused when the
//! provider is loaded: a silent default would throttle the host too much or
//! not at all.

use std::collections::BTreeMap;

use super::{BucketConfig, RateLimits};
use crate::{Capabilities, Operation, ProviderInfo};

/// One of the cloud's buckets as a provider declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaredBucket {
    pub name: String,
    pub burst: u32,
    pub per_second: f64,
}

/// One call of the cloud's API an operation makes: one token of `bucket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    /// The cloud's name for it (`AttachNetworkInterface`).
    pub name: String,
    pub bucket: String,
}

/// The calls one operation makes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationCost {
    pub operation: Operation,
    pub calls: Vec<ApiCall>,
}

/// How the cloud throttles a provider's calls, as the provider declares it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RateModel {
    pub buckets: Vec<DeclaredBucket>,
    pub costs: Vec<OperationCost>,
}

/// The operator's adjustments to a provider's rate model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RateSettings {
    /// Buckets whose figures replace the declared ones (an account with
    /// raised limits), by the name the provider declares.
    pub overrides: BTreeMap<String, BucketConfig>,
    /// A bucket every API call of every operation also takes a token from.
    pub global_cap: Option<BucketConfig>,
}

/// Name of the bucket the operator's global cap adds; no provider bucket
/// may have it.
pub const GLOBAL_CAP: &str = "global-cap";

/// Name of the one bucket of a provider that declares no rate model.
pub const UNDECLARED: &str = "all";

/// Why a declared rate model, or the operator's adjustment of it, cannot be
/// kept to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateModelError {
    #[error("bucket {0:?} is declared twice")]
    DuplicateBucket(String),
    #[error("bucket {name:?} is declared with {problem}")]
    BadBucket { name: String, problem: String },
    #[error("{0} has two declared costs")]
    DuplicateCost(Operation),
    #[error(
        "{operation} calls {call} from bucket {bucket:?}, which the rate model does not declare"
    )]
    UnknownBucket {
        operation: Operation,
        call: String,
        bucket: String,
    },
    #[error(
        "{0} has no declared cost, and the provider's capabilities let the host call it \
         (declare the cloud API calls it makes)"
    )]
    MissingCost(Operation),
    #[error(
        "the operator's configuration sets bucket {bucket:?}, which the provider's rate model \
         does not declare (it declares {declared})"
    )]
    UnknownOverride { bucket: String, declared: String },
}

/// The operations the host may call on a provider with these capabilities.
fn callable(capabilities: Capabilities) -> impl Iterator<Item = Operation> {
    Operation::ALL
        .into_iter()
        .filter(move |operation| match operation {
            Operation::CreateInterface => capabilities.create_interface,
            Operation::DeleteInterface => capabilities.delete_interface,
            Operation::UnassignIps => capabilities.release,
            _ => true,
        })
}

impl RateLimits {
    /// The limits a provider's declared model gives, adjusted by the
    /// operator's settings. Every operation `capabilities` enable must have a
    /// cost, every bucket a cost names must be declared once, with figures
    /// the host can keep to.
    pub fn from_model(
        model: &RateModel,
        capabilities: Capabilities,
        settings: &RateSettings,
    ) -> Result<Self, RateModelError> {
        let mut buckets: Vec<(String, BucketConfig)> = Vec::with_capacity(model.buckets.len());
        for declared in &model.buckets {
            if buckets.iter().any(|(name, _)| *name == declared.name) || declared.name == GLOBAL_CAP
            {
                return Err(RateModelError::DuplicateBucket(declared.name.clone()));
            }
            let config = BucketConfig {
                burst: f64::from(declared.burst),
                per_second: declared.per_second,
            };
            if let Some(problem) = config.problem() {
                return Err(RateModelError::BadBucket {
                    name: declared.name.clone(),
                    problem: format!(
                        "burst {} and refill {}/s: {problem}",
                        declared.burst, declared.per_second
                    ),
                });
            }
            buckets.push((declared.name.clone(), config));
        }
        let mut limits = RateLimits::new(buckets);
        for cost in &model.costs {
            if limits.costs.contains_key(&cost.operation) {
                return Err(RateModelError::DuplicateCost(cost.operation));
            }
            let mut tokens: BTreeMap<usize, f64> = BTreeMap::new();
            for call in &cost.calls {
                let index = limits.bucket_index(&call.bucket).ok_or_else(|| {
                    RateModelError::UnknownBucket {
                        operation: cost.operation,
                        call: call.name.clone(),
                        bucket: call.bucket.clone(),
                    }
                })?;
                *tokens.entry(index).or_default() += 1.0;
            }
            limits
                .costs
                .insert(cost.operation, tokens.into_iter().collect());
        }
        if let Some(missing) = callable(capabilities).find(|op| !limits.costs.contains_key(op)) {
            return Err(RateModelError::MissingCost(missing));
        }
        let calls = |operation: Operation| {
            model
                .costs
                .iter()
                .find(|cost| cost.operation == operation)
                .map_or(0, |cost| cost.calls.len())
        };
        limits.adjusted(settings, calls)
    }

    /// The limits the host keeps to for a provider: the rate model it
    /// declares, or, when it declares none, [`RateLimits::undeclared`].
    pub fn of_provider(
        info: &ProviderInfo,
        settings: &RateSettings,
    ) -> Result<Self, RateModelError> {
        match &info.rate_model {
            Some(model) => RateLimits::from_model(model, info.capabilities, settings),
            None => RateLimits::undeclared(settings),
        }
    }

    /// The limits for a provider that declares no rate model (built for WIT
    /// 0.1.0): one bucket for every call, Cilium's own client-side default
    /// (`limit-ipam-api-qps` 4, `limit-ipam-api-burst` 20), which the
    /// operator may set as bucket `all`.
    pub fn undeclared(settings: &RateSettings) -> Result<Self, RateModelError> {
        let limits = RateLimits::shared_bucket(BucketConfig {
            burst: 20.0,
            per_second: 4.0,
        });
        let mut shared = limits.buckets.clone();
        shared[0].0 = UNDECLARED.to_string();
        RateLimits {
            buckets: shared,
            ..limits
        }
        .adjusted(settings, |_| 1)
    }

    fn bucket_index(&self, name: &str) -> Option<usize> {
        self.buckets.iter().position(|(bucket, _)| bucket == name)
    }

    /// Apply the operator's overrides and global cap; `calls` says how many
    /// API calls an operation makes (each takes a token of the cap).
    fn adjusted(
        mut self,
        settings: &RateSettings,
        calls: impl Fn(Operation) -> usize,
    ) -> Result<Self, RateModelError> {
        for (name, config) in &settings.overrides {
            let index = self
                .bucket_index(name)
                .ok_or_else(|| RateModelError::UnknownOverride {
                    bucket: name.clone(),
                    declared: self
                        .buckets
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            self.buckets[index].1 = *config;
        }
        if let Some(cap) = settings.global_cap {
            self.buckets.push((GLOBAL_CAP.to_string(), cap));
            let index = self.buckets.len() - 1;
            for operation in Operation::ALL {
                let tokens = calls(operation);
                if tokens > 0 {
                    // Counts of API calls are small; f64 holds them exactly.
                    let tokens = tokens as f64;
                    self.costs
                        .entry(operation)
                        .or_default()
                        .push((index, tokens));
                }
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests;
