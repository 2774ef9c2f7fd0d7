//! A simulation scenario (YAML): the mock cloud, the nodes that join it,
//! the pods that come and go on them, and the engine's settings. Times are
//! seconds of simulated time. `default-scenario.yaml` is the embedded
//! default and the documented example.

use std::time::Duration;

use serde::Deserialize;

use ipam_ciliumnode::NodeSpec;
use ipam_cloud::rate::{RateLimits, RateModelError, RateSettings};
use ipam_cloud::ProviderInfo;
use ipam_engine::{LoopSettings, MaintenanceSettings};

use crate::cloud_model::Latency;
use crate::cloud_table::{CloudTable, TableError, CILIUM_BUCKET};

pub const DEFAULT_SCENARIO: &str = include_str!("default-scenario.yaml");

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("scenario: {0}")]
    Parse(#[from] serde_yaml::Error),
    #[error("scenario: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Scenario {
    #[serde(default = "Scenario::default_name")]
    pub name: String,
    /// Simulated seconds to run.
    pub duration_seconds: u64,
    pub nodes: NodeGroup,
    /// Pods per node from a time on; the first entry should be at 0.
    pub workload: Vec<Phase>,
    /// How often the simulated agents act (take addresses for pods, answer
    /// the release handshake).
    #[serde(default = "Scenario::default_agent_interval")]
    pub agent_interval_seconds: u64,
    /// A progress line every this many simulated seconds.
    #[serde(default = "Scenario::default_progress")]
    pub progress_seconds: u64,
    #[serde(default)]
    pub engine: EngineKnobs,
    #[serde(default)]
    pub latency: Latency,
    /// The throttling table the simulated cloud enforces.
    #[serde(default)]
    pub cloud_table: SimulatedCloud,
    /// The limits the engine keeps to.
    #[serde(default)]
    pub engine_limits: EngineLimits,
    /// The mock provider's settings (providers/mock/README.md) without
    /// `instances`: one instance per node is added.
    pub cloud: serde_yaml::Mapping,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NodeGroup {
    pub count: u32,
    pub instance_type: String,
    pub subnet_id: String,
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// The CiliumNode spec every node registers with (spec.ipam, spec.eni).
    #[serde(default)]
    pub spec: NodeSpec,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Phase {
    pub at: u64,
    pub pods_per_node: u32,
}

/// Whose throttling table the simulated cloud enforces (`clouds/*.yaml`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum SimulatedCloud {
    /// EC2: a bucket per API.
    #[default]
    Ec2,
    /// Azure Resource Manager: read, write and delete buckets; the cloud
    /// refuses create-interface and delete-interface.
    Arm,
}

impl SimulatedCloud {
    pub fn table(self) -> Result<CloudTable, TableError> {
        match self {
            SimulatedCloud::Ec2 => CloudTable::ec2(),
            SimulatedCloud::Arm => CloudTable::arm(),
        }
    }
}

/// What the engine believes the cloud's limits are.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum EngineLimits {
    /// The rate model the provider declares, as the operator keeps to it
    /// (a provider without one gets the operator's shared bucket).
    #[default]
    Declared,
    /// Exactly the cloud's table ([`CloudTable::engine_limits`]).
    Cloud,
    /// Cilium's default client-side limit: one bucket of 4 a second, burst
    /// 20, that every cloud API call takes a token from (Cilium's EC2 client
    /// waits on its limiter before each call).
    Cilium,
}

impl EngineLimits {
    pub fn limits(
        self,
        table: &CloudTable,
        info: &ProviderInfo,
    ) -> Result<RateLimits, RateModelError> {
        match self {
            EngineLimits::Declared => RateLimits::of_provider(info, &RateSettings::default()),
            EngineLimits::Cloud => Ok(table.engine_limits()),
            EngineLimits::Cilium => Ok(table.shared_limits(CILIUM_BUCKET)),
        }
    }
}

/// The engine's settings a scenario may change; the rest are the defaults.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct EngineKnobs {
    pub resync_seconds: u64,
    pub max_concurrent_nodes: usize,
    pub release_delay_seconds: u64,
    pub gc_interval_seconds: u64,
    pub gc_grace_seconds: u64,
    pub reuse_cooldown_seconds: u64,
    pub prefix_delegation: bool,
    pub free_interfaces: bool,
}

impl Default for EngineKnobs {
    fn default() -> Self {
        let config = LoopSettings::default();
        let settings = MaintenanceSettings::default();
        Self {
            resync_seconds: config.resync_interval.as_secs(),
            max_concurrent_nodes: config.max_concurrent_nodes,
            release_delay_seconds: settings.release_delay.as_secs(),
            gc_interval_seconds: config.gc_interval.as_secs(),
            gc_grace_seconds: config.gc_grace.as_secs(),
            reuse_cooldown_seconds: 30,
            prefix_delegation: settings.prefix_delegation,
            free_interfaces: settings.free_interfaces,
        }
    }
}

impl Scenario {
    fn default_name() -> String {
        "unnamed".into()
    }
    fn default_agent_interval() -> u64 {
        5
    }
    fn default_progress() -> u64 {
        60
    }

    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let scenario: Scenario = serde_yaml::from_str(text)?;
        scenario.check()?;
        Ok(scenario)
    }

    fn check(&self) -> Result<(), ScenarioError> {
        let invalid = |m: &str| Err(ScenarioError::Invalid(m.to_string()));
        if self.nodes.count == 0 {
            return invalid("nodes.count must be at least 1");
        }
        if self.workload.is_empty() {
            return invalid("workload needs at least one phase");
        }
        if self.workload.windows(2).any(|w| w[0].at >= w[1].at) {
            return invalid("workload phases must be in increasing order of `at`");
        }
        if self.agent_interval_seconds == 0 || self.progress_seconds == 0 {
            return invalid("agent-interval-seconds and progress-seconds must be at least 1");
        }
        if self.engine.max_concurrent_nodes == 0 {
            return invalid("engine.max-concurrent-nodes must be at least 1");
        }
        if self.cloud.contains_key("instances") {
            return invalid("cloud.instances is generated from `nodes`; leave it out");
        }
        Ok(())
    }

    pub fn node_name(index: u32) -> String {
        format!("node-{index:05}")
    }

    pub fn instance_id(index: u32) -> String {
        format!("i-sim{index:05}")
    }

    /// The mock provider's settings as JSON: `cloud` plus one instance per node.
    pub fn mock_settings(&self) -> Result<String, ScenarioError> {
        let mut cloud = self.cloud.clone();
        let instances: Vec<serde_json::Value> = (0..self.nodes.count)
            .map(|i| {
                serde_json::json!({
                    "id": Self::instance_id(i),
                    "instance-type": self.nodes.instance_type,
                    "subnet-id": self.nodes.subnet_id,
                    "security-groups": self.nodes.security_groups,
                })
            })
            .collect();
        cloud.insert(
            "instances".into(),
            serde_yaml::to_value(instances).map_err(ScenarioError::Parse)?,
        );
        serde_json::to_string(&cloud).map_err(|e| ScenarioError::Invalid(e.to_string()))
    }

    /// Pods per node at `at` seconds.
    pub fn pods_at(&self, at: u64) -> u32 {
        self.workload
            .iter()
            .take_while(|p| p.at <= at)
            .last()
            .map_or(0, |p| p.pods_per_node)
    }

    pub fn engine_settings(&self, cluster_name: &str) -> MaintenanceSettings {
        MaintenanceSettings {
            cluster_name: cluster_name.to_string(),
            prefix_delegation: self.engine.prefix_delegation,
            release_delay: Duration::from_secs(self.engine.release_delay_seconds),
            free_interfaces: self.engine.free_interfaces,
            ..MaintenanceSettings::default()
        }
    }

    pub fn engine_config(&self) -> LoopSettings {
        LoopSettings {
            resync_interval: Duration::from_secs(self.engine.resync_seconds),
            max_concurrent_nodes: self.engine.max_concurrent_nodes,
            gc_interval: Duration::from_secs(self.engine.gc_interval_seconds),
            gc_grace: Duration::from_secs(self.engine.gc_grace_seconds),
            ..LoopSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_scenario_parses_and_generates_instances() {
        let scenario = Scenario::parse(DEFAULT_SCENARIO).unwrap();
        let settings: serde_json::Value =
            serde_json::from_str(&scenario.mock_settings().unwrap()).unwrap();
        assert_eq!(
            settings["instances"].as_array().map(Vec::len),
            Some(scenario.nodes.count as usize)
        );
        assert_eq!(scenario.pods_at(0), scenario.workload[0].pods_per_node);
    }

    #[test]
    fn bad_scenarios_say_what_is_wrong() {
        let base = DEFAULT_SCENARIO.replace("count: 20", "count: 0");
        let error = Scenario::parse(&base).unwrap_err().to_string();
        assert!(error.contains("nodes.count"), "{error}");
        let error = Scenario::parse("duration-seconds: 1\nnodes: {}\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing field"), "{error}");
        let error = Scenario::parse(&format!("{DEFAULT_SCENARIO}\nsurprise: 1\n"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field"), "{error}");
    }

    #[test]
    fn the_cloud_table_and_the_engine_limits_are_chosen_by_name() {
        let info = ProviderInfo {
            name: "p".into(),
            version: "0.1.0".into(),
            capabilities: Default::default(),
            max_concurrency: 1,
            rate_model: None,
        };
        let scenario = Scenario::parse(DEFAULT_SCENARIO).unwrap();
        assert_eq!(scenario.cloud_table, SimulatedCloud::Ec2);
        assert_eq!(scenario.engine_limits, EngineLimits::Declared);
        let table = scenario.cloud_table.table().unwrap();
        // A provider that declares nothing gets the operator's shared bucket.
        let declared = scenario.engine_limits.limits(&table, &info).unwrap();
        assert_eq!(declared.summary(), "all 20:4");
        let text = DEFAULT_SCENARIO.replace("engine-limits: declared", "engine-limits: cloud");
        let scenario = Scenario::parse(&text).unwrap();
        assert_eq!(
            scenario.engine_limits.limits(&table, &info),
            Ok(table.engine_limits())
        );
        let text = DEFAULT_SCENARIO
            .replace("cloud-table: ec2", "cloud-table: arm")
            .replace("engine-limits: declared", "engine-limits: cilium");
        let scenario = Scenario::parse(&text).unwrap();
        assert_eq!(scenario.cloud_table.table().unwrap().name(), "ARM");
        let limits = scenario.engine_limits.limits(&table, &info).unwrap();
        assert_eq!(limits.buckets().len(), 1);
        assert_eq!(limits.buckets()[0].1, CILIUM_BUCKET);
        // One token per EC2 call: create-interface makes four.
        assert_eq!(
            limits.cost(ipam_cloud::Operation::CreateInterface),
            &[(0, 4.0)]
        );
        // Left out: EC2 and the provider's declaration.
        let text = DEFAULT_SCENARIO
            .replace("cloud-table: ec2\n", "")
            .replace("engine-limits: declared\n", "");
        let scenario = Scenario::parse(&text).unwrap();
        assert_eq!(scenario.cloud_table, SimulatedCloud::Ec2);
        assert_eq!(scenario.engine_limits, EngineLimits::Declared);
        let error =
            Scenario::parse(&DEFAULT_SCENARIO.replace("cloud-table: ec2", "cloud-table: gcp"))
                .unwrap_err()
                .to_string();
        assert!(error.contains("gcp") && error.contains("arm"), "{error}");
    }

    #[test]
    fn phases_apply_from_their_time_on() {
        let mut scenario = Scenario::parse(DEFAULT_SCENARIO).unwrap();
        scenario.workload = vec![
            Phase {
                at: 0,
                pods_per_node: 1,
            },
            Phase {
                at: 100,
                pods_per_node: 7,
            },
        ];
        assert_eq!(scenario.pods_at(99), 1);
        assert_eq!(scenario.pods_at(100), 7);
        assert_eq!(scenario.pods_at(10_000), 7);
    }
}
