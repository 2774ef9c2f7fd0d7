//! The end of a simulation, for people: what converged and how fast, what
//! the cloud was asked, and a check that no address is in two places.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use ipam_ciliumnode::CiliumNode;
use ipam_cloud::{Instance, Operation};
use ipam_engine::{EngineState, Metrics};
use ipam_pool::select::pool_addresses;

use crate::agents::AgentTick;
use crate::cloud_model::ModelCounts;
use crate::cloud_table::CloudTable;
use crate::scenario::Scenario;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseResult {
    pub at: u64,
    pub pods_per_node: u32,
    /// Simulated time from the phase's start until every node was satisfied
    /// (no pod pending, nothing needed).
    pub satisfied_after: Option<Duration>,
    /// ... and settled (nothing excess, no release in progress).
    pub settled_after: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub name: String,
    pub simulated: Duration,
    pub wall: Duration,
    pub last: AgentTick,
    pub phases: Vec<PhaseResult>,
    pub interfaces_attached: usize,
    pub interfaces_created: u64,
    pub interfaces_deleted: u64,
    pub leaked_left: usize,
    /// Problems found by the address check; empty when all is well.
    pub address_problems: Vec<String>,
    /// Per operation: calls that reached the cloud, and those it throttled.
    pub calls: BTreeMap<Operation, (u64, u64)>,
    /// The cloud's throttling table, by name (EC2, ARM).
    pub cloud_table: String,
    /// Per API of that table: calls the cloud made (admitted), and whether
    /// the API changes the cloud.
    pub api_calls: BTreeMap<String, (u64, bool)>,
    pub engine: EngineState,
}

pub(super) struct Inputs<'a> {
    pub scenario: &'a Scenario,
    pub simulated: Duration,
    pub wall: Duration,
    pub last: AgentTick,
    pub phases: Vec<PhaseResult>,
    pub instances: &'a [Instance],
    pub nodes: &'a [CiliumNode],
    pub leaked_left: usize,
    pub model: ModelCounts,
    pub table: &'a CloudTable,
    pub metrics: &'a Metrics,
    pub engine: EngineState,
}

/// No address on two interfaces, every pool address on its node's own
/// instance, no used address outside the pool.
fn address_problems(instances: &[Instance], nodes: &[CiliumNode]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut on_instance: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for instance in instances {
        for eni in &instance.interfaces {
            for address in
                std::iter::once(eni.primary_ip.to_string()).chain(pool_addresses(eni, false))
            {
                if let Some(other) = seen.insert(address.clone(), eni.id.clone()) {
                    problems.push(format!("{address} is on {other} and {}", eni.id));
                }
                on_instance
                    .entry(instance.id.as_str())
                    .or_default()
                    .insert(address);
            }
        }
    }
    for node in nodes {
        let mine = on_instance.get(node.spec.instance_id.as_str());
        for address in node.spec.ipam.pool.keys() {
            if !mine.is_some_and(|m| m.contains(address)) {
                problems.push(format!(
                    "{address} is in {}'s pool but not on its instance",
                    node.name
                ));
            }
        }
        for address in node.status.ipam.used.keys() {
            if !node.spec.ipam.pool.contains_key(address) {
                problems.push(format!(
                    "{address} is used on {} outside its pool",
                    node.name
                ));
            }
        }
    }
    problems
}

pub(crate) fn summarize(inputs: Inputs<'_>) -> Summary {
    let mut calls: BTreeMap<Operation, (u64, u64)> = BTreeMap::new();
    for (op, n) in &inputs.model.calls {
        calls.entry(*op).or_default().0 = *n;
    }
    for (op, n) in &inputs.model.throttled {
        calls.entry(*op).or_default().1 = *n;
    }
    Summary {
        name: inputs.scenario.name.clone(),
        simulated: inputs.simulated,
        wall: inputs.wall,
        last: inputs.last,
        phases: inputs.phases,
        interfaces_attached: inputs
            .instances
            .iter()
            .flat_map(|i| &i.interfaces)
            .filter(|e| e.index != 0)
            .count(),
        interfaces_created: inputs
            .metrics
            .api_calls_with(Operation::CreateInterface, "ok"),
        interfaces_deleted: inputs
            .metrics
            .api_calls_with(Operation::DeleteInterface, "ok"),
        leaked_left: inputs.leaked_left,
        address_problems: address_problems(inputs.instances, inputs.nodes),
        calls,
        cloud_table: inputs.table.name().to_string(),
        api_calls: inputs
            .model
            .api_calls
            .iter()
            .map(|(api, n)| {
                let mutates = inputs.table.api(api).is_some_and(|a| a.mutates);
                (api.clone(), (*n, mutates))
            })
            .collect(),
        engine: inputs.engine,
    }
}

impl Summary {
    /// Every node satisfied at the end, every phase converged, no leak left,
    /// no address problem.
    pub fn healthy(&self) -> bool {
        self.last.satisfied == self.last.nodes
            && self
                .phases
                .iter()
                .all(|p| p.satisfied_after.is_some() && p.settled_after.is_some())
            && self.leaked_left == 0
            && self.address_problems.is_empty()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Simulation {:?}: {} nodes, {} s of simulated time in {:.1} s",
            self.name,
            self.last.nodes,
            self.simulated.as_secs(),
            self.wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "  nodes satisfied   {}/{}",
            self.last.satisfied, self.last.nodes
        )?;
        writeln!(
            f,
            "  pods              {} running, {} pending",
            self.last.pods_running, self.last.pods_pending
        )?;
        writeln!(f, "  IPs in pools      {}", self.last.pool)?;
        writeln!(
            f,
            "  interfaces        {} attached besides the primaries; {} created, {} deleted (freed or leaked); {} leaked left",
            self.interfaces_attached, self.interfaces_created, self.interfaces_deleted, self.leaked_left
        )?;
        if self.address_problems.is_empty() {
            writeln!(
                f,
                "  address check     ok: no address twice, every pool address on its node's instance"
            )?;
        } else {
            writeln!(
                f,
                "  address check     {} PROBLEMS:",
                self.address_problems.len()
            )?;
            for problem in self.address_problems.iter().take(10) {
                writeln!(f, "                    {problem}")?;
            }
        }
        writeln!(
            f,
            "  time to converge  (satisfied: no pod pending, nothing needed; settled: excess released too)"
        )?;
        let secs =
            |d: Option<Duration>| d.map_or("never".to_string(), |d| format!("{} s", d.as_secs()));
        for phase in &self.phases {
            writeln!(
                f,
                "    from {:>5} s ({:>3} pods/node): satisfied after {}, settled after {}",
                phase.at,
                phase.pods_per_node,
                secs(phase.satisfied_after),
                secs(phase.settled_after)
            )?;
        }
        writeln!(
            f,
            "  engine            {} resyncs, {} node passes, {} failed passes",
            self.engine.resyncs, self.engine.passes, self.engine.failed_passes
        )?;
        writeln!(
            f,
            "  cloud calls       operation                  calls  throttled"
        )?;
        for (op, (calls, throttled)) in &self.calls {
            writeln!(f, "                    {op:<26} {calls:>5}  {throttled:>9}")?;
        }
        writeln!(
            f,
            "  {} API calls     (made by the cloud; * changes it)",
            self.cloud_table
        )?;
        let width = self.api_calls.keys().map(String::len).max().unwrap_or(0);
        for (api, (calls, mutates)) in &self.api_calls {
            let mark = if *mutates { "*" } else { " " };
            writeln!(f, "                  {mark} {api:<width$} {calls:>6}")?;
        }
        Ok(())
    }
}
