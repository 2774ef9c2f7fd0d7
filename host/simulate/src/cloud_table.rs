//! A cloud's own throttling table, as data: its token buckets, the API calls
//! that take their tokens, and, per WIT operation, the API calls a provider
//! makes inside it, in order. The simulated cloud ([`crate::CloudModel`])
//! enforces such a table; what the engine keeps to is a separate
//! [`RateLimits`] (its belief), so the engine is not judged by its own model.
//! EC2's and ARM's tables are embedded (`clouds/ec2.yaml`, `clouds/arm.yaml`,
//! whose comments document the format).
//!
//! [`TableBuckets`] is the table's state at run time (the arithmetic is
//! `ipam-pool`'s [`TokenBucket`]); [`admission_bound`] is the least time in
//! which the cloud admits the calls of nodes joining together.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Deserialize;

use ipam_cloud::rate::{BucketConfig, RateLimits};
use ipam_cloud::Operation;
use ipam_pool::token_bucket::TokenBucket;

/// EC2's table: a bucket per API.
pub const EC2_TABLE: &str = include_str!("clouds/ec2.yaml");
/// ARM's table: read, write and delete buckets per subscription and region.
pub const ARM_TABLE: &str = include_str!("clouds/arm.yaml");

/// Cilium's own client-side limit (`limit-ipam-api-qps` 4,
/// `limit-ipam-api-burst` 20): one bucket for every call.
/// The name of [`CloudTable::shared_limits`]'s one bucket.
pub const SHARED_BUCKET: &str = "all";

pub const CILIUM_BUCKET: BucketConfig = BucketConfig {
    burst: 20.0,
    per_second: 4.0,
};

/// What is wrong with a table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cloud table: {0}")]
    Parse(#[from] serde_yaml::Error),
    #[error("cloud table: unknown operation {name:?}; the operations are {}", Operation::ALL.map(Operation::wit_name).join(", "))]
    UnknownOperation { name: String },
    #[error("cloud table: {operation} is neither under `operations` nor under `unsupported`")]
    MissingOperation { operation: Operation },
    #[error("cloud table: {operation} is both under `operations` and under `unsupported`")]
    OperationTwice { operation: Operation },
    #[error("cloud table: API {api} takes tokens of bucket {bucket:?}, which the table does not declare")]
    UnknownBucket { api: String, bucket: String },
    #[error("cloud table: {named_by} names API {api:?}, which the table does not declare")]
    UnknownApi { api: String, named_by: String },
    #[error("cloud table: bucket {bucket} has burst 0: it would admit nothing")]
    ZeroBurst { bucket: String },
    #[error("cloud table: bucket {bucket} refills {per_second} tokens a second; it must be finite and above 0")]
    BadRefill { bucket: String, per_second: f64 },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct RawTable {
    name: String,
    buckets: BTreeMap<String, RawBucket>,
    apis: BTreeMap<String, RawApi>,
    operations: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    unsupported: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct RawBucket {
    burst: u32,
    per_second: f64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct RawApi {
    bucket: String,
    #[serde(default)]
    mutates: bool,
}

/// One API of the cloud: the bucket each call takes a token of.
#[derive(Debug, Clone, PartialEq)]
pub struct Api {
    pub name: String,
    /// Index into [`CloudTable::buckets`].
    pub bucket: usize,
    /// Whether a call changes the cloud.
    pub mutates: bool,
}

/// A checked throttling table.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudTable {
    name: String,
    buckets: Vec<(String, BucketConfig)>,
    apis: Vec<Api>,
    /// Per supported operation: indices into `apis`, in call order.
    operations: BTreeMap<Operation, Vec<usize>>,
    unsupported: BTreeSet<Operation>,
}

fn operation(name: &str) -> Result<Operation, TableError> {
    Operation::from_wit_name(name).ok_or_else(|| TableError::UnknownOperation {
        name: name.to_string(),
    })
}

impl CloudTable {
    /// Parse and check a table (YAML, the format of `clouds/ec2.yaml`).
    pub fn parse(text: &str) -> Result<Self, TableError> {
        let raw: RawTable = serde_yaml::from_str(text)?;
        let mut buckets = Vec::with_capacity(raw.buckets.len());
        for (name, bucket) in raw.buckets {
            if bucket.burst == 0 {
                return Err(TableError::ZeroBurst { bucket: name });
            }
            if !bucket.per_second.is_finite() || bucket.per_second <= 0.0 {
                return Err(TableError::BadRefill {
                    bucket: name,
                    per_second: bucket.per_second,
                });
            }
            let config = BucketConfig {
                burst: f64::from(bucket.burst),
                per_second: bucket.per_second,
            };
            buckets.push((name, config));
        }
        let mut apis = Vec::with_capacity(raw.apis.len());
        for (name, api) in raw.apis {
            let bucket = buckets
                .iter()
                .position(|(b, _)| *b == api.bucket)
                .ok_or_else(|| TableError::UnknownBucket {
                    api: name.clone(),
                    bucket: api.bucket.clone(),
                })?;
            apis.push(Api {
                name,
                bucket,
                mutates: api.mutates,
            });
        }
        let mut operations = BTreeMap::new();
        for (name, calls) in raw.operations {
            let operation = operation(&name)?;
            let calls = calls
                .iter()
                .map(|api| {
                    apis.iter()
                        .position(|a| a.name == *api)
                        .ok_or_else(|| TableError::UnknownApi {
                            api: api.clone(),
                            named_by: name.clone(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            operations.insert(operation, calls);
        }
        let mut unsupported = BTreeSet::new();
        for name in &raw.unsupported {
            let operation = operation(name)?;
            if operations.contains_key(&operation) {
                return Err(TableError::OperationTwice { operation });
            }
            unsupported.insert(operation);
        }
        if let Some(operation) = Operation::ALL
            .into_iter()
            .find(|op| !operations.contains_key(op) && !unsupported.contains(op))
        {
            return Err(TableError::MissingOperation { operation });
        }
        Ok(Self {
            name: raw.name,
            buckets,
            apis,
            operations,
            unsupported,
        })
    }

    /// EC2's embedded table.
    pub fn ec2() -> Result<Self, TableError> {
        Self::parse(EC2_TABLE)
    }

    /// ARM's embedded table.
    pub fn arm() -> Result<Self, TableError> {
        Self::parse(ARM_TABLE)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The buckets, by name (APIs index into this).
    pub fn buckets(&self) -> &[(String, BucketConfig)] {
        &self.buckets
    }

    pub fn apis(&self) -> &[Api] {
        &self.apis
    }

    pub fn api(&self, name: &str) -> Option<&Api> {
        self.apis.iter().find(|a| a.name == name)
    }

    /// Whether the cloud accepts `operation` at all.
    pub fn supports(&self, operation: Operation) -> bool {
        !self.unsupported.contains(&operation)
    }

    /// The API calls one `operation` makes, in order (none when unsupported).
    pub fn calls(&self, operation: Operation) -> impl Iterator<Item = &Api> + '_ {
        self.operations
            .get(&operation)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|&api| &self.apis[api])
    }

    /// The limits an engine that knew this cloud exactly would keep: a
    /// bucket per table bucket, each operation taking one token per call in
    /// that bucket (an unsupported operation takes none).
    pub fn engine_limits(&self) -> RateLimits {
        let limits = RateLimits::new(self.buckets.iter().cloned());
        self.operations.keys().fold(limits, |limits, &operation| {
            let mut cost: BTreeMap<usize, f64> = BTreeMap::new();
            for api in self.calls(operation) {
                *cost.entry(api.bucket).or_default() += 1.0;
            }
            let cost: Vec<(&str, f64)> = cost
                .into_iter()
                .map(|(bucket, tokens)| (self.buckets[bucket].0.as_str(), tokens))
                .collect();
            // The buckets are the table's own, checked when parsed.
            limits
                .with_cost(operation, &cost)
                .expect("a table's APIs name only its own buckets")
        })
    }

    /// One bucket that every API call of every operation takes a token
    /// from (a client-side limit like Cilium's).
    pub fn shared_limits(&self, bucket: BucketConfig) -> RateLimits {
        let limits = RateLimits::new([(SHARED_BUCKET, bucket)]);
        self.operations.keys().fold(limits, |limits, &operation| {
            // Counts of calls are small; f64 holds them exactly.
            let tokens = self.calls(operation).count() as f64;
            limits
                .with_cost(operation, &[(SHARED_BUCKET, tokens)])
                .expect("the one bucket is declared just above")
        })
    }

    /// The API calls `operations` make (each operation with how many times
    /// it is called), by API name. Unsupported operations make none.
    pub fn calls_of(&self, operations: &[(Operation, u64)]) -> BTreeMap<String, u64> {
        let mut calls: BTreeMap<String, u64> = BTreeMap::new();
        for &(operation, times) in operations {
            for api in self.calls(operation) {
                *calls.entry(api.name.clone()).or_default() += times;
            }
        }
        calls
    }
}

/// Why the cloud refused an operation.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The call to `api` found its bucket empty: the operation's first
    /// `made` calls happened (their tokens stay spent), the rest did not.
    Throttled {
        api: String,
        made: usize,
        /// Until `api`'s bucket has a token.
        retry_after: Duration,
    },
    /// The table marks the operation unsupported.
    Unsupported,
}

/// A table's buckets at run time, full when made.
#[derive(Debug, Clone)]
pub struct TableBuckets {
    table: CloudTable,
    buckets: Vec<TokenBucket>,
}

impl TableBuckets {
    pub fn new(table: CloudTable, now: Instant) -> Self {
        let buckets = table
            .buckets
            .iter()
            .map(|(_, config)| TokenBucket::new(*config, now))
            .collect();
        Self { table, buckets }
    }

    pub fn table(&self) -> &CloudTable {
        &self.table
    }

    /// Make `operation`'s calls in order, each taking a token of its
    /// bucket; the first whose bucket is empty refuses the operation.
    pub fn admit(&mut self, operation: Operation, now: Instant) -> Result<(), Refusal> {
        if !self.table.supports(operation) {
            return Err(Refusal::Unsupported);
        }
        let Self { table, buckets } = self;
        for (made, api) in table.calls(operation).enumerate() {
            if let Err(retry_after) = buckets[api.bucket].try_take(1.0, now) {
                return Err(Refusal::Throttled {
                    api: api.name.clone(),
                    made,
                    retry_after,
                });
            }
        }
        Ok(())
    }
}

/// The least time in which a cloud admits what nodes joining together need.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionBound {
    /// Seconds from the start until the last call can be admitted.
    pub seconds: f64,
    /// The bucket that takes longest (none when nothing waits past the
    /// bursts).
    pub bucket: Option<String>,
}

/// How soon `table`'s cloud can admit `nodes` nodes' calls when each needs
/// at least `per_node` (API name -> calls): per bucket, the calls beyond its
/// burst at its refill rate, max(0, (nodes x calls in the bucket - burst) /
/// per second); the slowest bucket decides.
pub fn admission_bound(
    table: &CloudTable,
    nodes: u64,
    per_node: &BTreeMap<String, u64>,
) -> Result<AdmissionBound, TableError> {
    let mut in_bucket = vec![0_u64; table.buckets.len()];
    for (name, &calls) in per_node {
        let api = table.api(name).ok_or_else(|| TableError::UnknownApi {
            api: name.clone(),
            named_by: "the calls per node".into(),
        })?;
        in_bucket[api.bucket] += calls;
    }
    let mut bound = AdmissionBound {
        seconds: 0.0,
        bucket: None,
    };
    for ((name, config), calls) in table.buckets.iter().zip(in_bucket) {
        // Exact for any realistic count (below 2^53).
        let tokens = nodes.saturating_mul(calls) as f64;
        let seconds = ((tokens - config.burst) / config.per_second).max(0.0);
        if seconds > bound.seconds {
            bound = AdmissionBound {
                seconds,
                bucket: Some(name.clone()),
            };
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests;
