//! `ipam-operator plan`'s report, as text for people and as JSON for tools:
//! one section per node in the order `run` would take them, the GC's
//! findings, the changes counted by operation and their rate-model cost.

use std::collections::BTreeMap;
use std::fmt::Write;

use ipam_cloud::rate::RateLimits;
use ipam_cloud::Operation;
use ipam_engine::plan::{bucket_costs, PlannedCall};
use ipam_engine::{ClusterPlan, NodePlan, PlanSettings, Step};
use serde_json::{json, Value};

pub struct PlanReport<'a> {
    pub plan: &'a ClusterPlan,
    pub settings: &'a PlanSettings,
    /// CiliumNodes that could not be read: name, why.
    pub unreadable: &'a [(String, String)],
    pub limits: &'a RateLimits,
}

/// What a node comes to, in one word for tools.
fn verdict(node: &NodePlan) -> &'static str {
    if node.failed.is_some() {
        "failed"
    } else if node.blocked().is_some() {
        "blocked"
    } else if node.adopted_as_is() {
        "adopted-as-is"
    } else {
        "changes"
    }
}

fn call_text(call: &PlannedCall) -> String {
    let mut what = vec![];
    if call.addresses > 0 {
        what.push(format!("{} addresses", call.addresses));
    }
    if call.prefixes > 0 {
        what.push(format!("{} /28 prefixes", call.prefixes));
    }
    let subnet = call
        .subnet
        .as_deref()
        .map(|s| format!(" in {s}"))
        .unwrap_or_default();
    let with = match what.is_empty() {
        true => String::new(),
        false => format!(": {}", what.join(", ")),
    };
    format!("{} {}{subnet}{with}", call.operation, call.interface)
}

fn call_json(call: &PlannedCall) -> Value {
    json!({
        "operation": call.operation.wit_name(),
        "interface": call.interface,
        "subnet": call.subnet,
        "addresses": call.addresses,
        "prefixes": call.prefixes,
    })
}

/// Changes counted by operation, in the WIT's order.
fn by_operation(calls: &[PlannedCall]) -> BTreeMap<Operation, u32> {
    let mut counts = BTreeMap::new();
    for call in calls {
        *counts.entry(call.operation).or_default() += 1;
    }
    counts
}

fn counts_text(counts: &BTreeMap<Operation, u32>) -> String {
    match counts.is_empty() {
        true => "none".into(),
        false => counts
            .iter()
            .map(|(op, n)| format!("{op} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn counts_json(counts: &BTreeMap<Operation, u32>) -> Value {
    counts
        .iter()
        .map(|(op, n)| (op.wit_name().to_string(), json!(n)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

impl PlanReport<'_> {
    fn node_text(&self, out: &mut String, node: &NodePlan) {
        let _ = write!(
            out,
            "node {} ({}): {} in pool, {} used",
            node.name, node.instance_id, node.available, node.used
        );
        if node.pending_pods > 0 {
            let _ = write!(out, ", {} pods pending", node.pending_pods);
        }
        let verdict = match (node.failed.as_deref(), node.blocked()) {
            (Some(error), _) => format!("not planned: {error}"),
            (None, Some(reason)) => format!("blocked: {reason}"),
            _ if node.adopted_as_is() => "adopted as it is, nothing to do".into(),
            _ => "changes".into(),
        };
        let _ = writeln!(out, ": {verdict}");
        for call in &node.calls {
            let _ = writeln!(out, "  {}", call_text(call));
        }
        if node.pool_added > 0 || node.pool_removed > 0 {
            let _ = writeln!(
                out,
                "  spec.ipam.pool: +{} -{} ({} -> {}), {} still needed",
                node.pool_added,
                node.pool_removed,
                node.available,
                node.available_after,
                node.needed_after
            );
        }
        if node.interfaces_rewritten {
            let _ = writeln!(out, "  the interfaces status is rewritten from the cloud");
        }
        if !node.marked.is_empty() {
            let _ = writeln!(
                out,
                "  {} addresses marked for release once excess for {} s (released after the agent answers): {}",
                node.marked.len(),
                self.settings.maintenance.release_delay.as_secs(),
                node.marked.join(", ")
            );
        }
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let plan = self.plan;
        let settings = &self.settings.maintenance;
        let mut out = String::new();
        let pending: u32 = plan.nodes.iter().map(|n| n.pending_pods).sum();
        let _ = writeln!(
            out,
            "plan of provider {} for cluster {} ({} mode): {} CiliumNodes, {} pods pending",
            plan.provider,
            settings.cluster_name,
            settings.ipam_mode,
            plan.nodes.len(),
            pending
        );
        let _ = writeln!(
            out,
            "cloud calls this plan made: {}; changes made: none\n",
            counts_text(&plan.reads)
        );
        for node in &plan.nodes {
            self.node_text(&mut out, node);
        }
        for (name, why) in self.unreadable {
            let _ = writeln!(out, "CiliumNode {name}: not readable, left alone: {why}");
        }
        let gc = &plan.gc;
        let _ = writeln!(out);
        if !gc.can_delete {
            let _ = writeln!(
                out,
                "leaked-interface GC: off (the provider cannot delete interfaces)"
            );
        } else {
            let _ = writeln!(
                out,
                "leaked-interface GC (grace {} s): {} to delete once a second round still finds them detached, {} too young, {} listed but spared",
                gc.grace_seconds,
                gc.review.leaked.len(),
                gc.review.young.len(),
                gc.review.spared.len()
            );
            for interface in &gc.review.leaked {
                let _ = writeln!(
                    out,
                    "  delete-interface {} in {}",
                    interface.id, interface.subnet_id
                );
            }
            for (interface, why) in &gc.review.spared {
                let _ = writeln!(out, "  spared {interface}: {why}");
            }
        }
        let calls = plan.calls();
        let _ = writeln!(
            out,
            "\nchanges `run` would make: {}",
            counts_text(&by_operation(&calls))
        );
        for cost in bucket_costs(&calls, self.limits) {
            let beyond = cost.seconds_beyond_burst();
            let fit = match beyond > 0.0 {
                true => format!("{beyond:.1} s of refill beyond the burst"),
                false => "within the burst".into(),
            };
            let _ = writeln!(
                out,
                "  bucket {}: {} tokens of {} at once, {}/s: {fit}",
                cost.bucket, cost.tokens, cost.burst, cost.per_second
            );
        }
        let mut verdicts: BTreeMap<&str, usize> = BTreeMap::new();
        for node in &plan.nodes {
            *verdicts.entry(verdict(node)).or_default() += 1;
        }
        let summary: Vec<String> = verdicts.iter().map(|(v, n)| format!("{v} {n}")).collect();
        let _ = writeln!(
            out,
            "nodes: {}",
            match summary.is_empty() {
                true => "none".into(),
                false => summary.join(", "),
            }
        );
        out
    }

    /// The report for tools.
    pub fn json(&self) -> Value {
        let plan = self.plan;
        let settings = &self.settings.maintenance;
        let calls = plan.calls();
        let nodes: Vec<Value> = plan
            .nodes
            .iter()
            .map(|node| {
                json!({
                    "name": node.name,
                    "instanceId": node.instance_id,
                    "verdict": verdict(node),
                    "pendingPods": node.pending_pods,
                    "available": node.available,
                    "used": node.used,
                    "availableAfter": node.available_after,
                    "neededAfter": node.needed_after,
                    "poolAdded": node.pool_added,
                    "poolRemoved": node.pool_removed,
                    "interfacesRewritten": node.interfaces_rewritten,
                    "blocked": node.blocked(),
                    "failed": node.failed,
                    "markedForRelease": node.marked,
                    "steps": node.steps.iter().map(step_json).collect::<Vec<_>>(),
                    "calls": node.calls.iter().map(call_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        let costs: Vec<Value> = bucket_costs(&calls, self.limits)
            .into_iter()
            .map(|cost| {
                json!({
                    "bucket": cost.bucket,
                    "tokens": cost.tokens,
                    "burst": cost.burst,
                    "perSecond": cost.per_second,
                    "secondsBeyondBurst": cost.seconds_beyond_burst(),
                })
            })
            .collect();
        json!({
            "provider": plan.provider,
            "clusterName": settings.cluster_name,
            "ipamMode": settings.ipam_mode.to_string(),
            "nodes": nodes,
            "unreadable": self.unreadable.iter().map(|(name, why)| json!({"name": name, "why": why})).collect::<Vec<_>>(),
            "gc": {
                "canDelete": plan.gc.can_delete,
                "graceSeconds": plan.gc.grace_seconds,
                "leaked": plan.gc.review.leaked.iter().map(|i| json!({"interface": i.id, "subnet": i.subnet_id})).collect::<Vec<_>>(),
                "young": plan.gc.review.young,
                "spared": plan.gc.review.spared.iter().map(|(id, why)| json!({"interface": id, "why": why})).collect::<Vec<_>>(),
            },
            "changes": counts_json(&by_operation(&calls)),
            "cost": costs,
            "readsMade": counts_json(&plan.reads),
        })
    }
}

fn step_json(step: &Step) -> Value {
    match step {
        Step::Satisfied => json!({"step": "satisfied"}),
        Step::Blocked(reason) => json!({"step": "blocked", "reason": reason}),
        Step::Assigned {
            interface,
            subnet,
            addresses,
            prefixes,
        } => json!({"step": "assigned", "interface": interface, "subnet": subnet,
                    "addresses": addresses, "prefixes": prefixes}),
        Step::Created {
            interface,
            index,
            subnet,
        } => json!({"step": "created", "interface": interface, "index": index, "subnet": subnet}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use ipam_cloud::rate::BucketConfig;
    use ipam_engine::plan::GcPlan;
    use ipam_engine::MaintenanceSettings;

    fn node(name: &str) -> NodePlan {
        NodePlan {
            steps: vec![Step::Satisfied],
            ..NodePlan::before(name, &format!("i-{name}"), 0, 4, 2)
        }
    }

    fn report_of(plan: &ClusterPlan, check: impl Fn(&str, &Value)) {
        let settings = PlanSettings {
            maintenance: MaintenanceSettings {
                cluster_name: "prod".into(),
                ..MaintenanceSettings::default()
            },
            gc_grace: Duration::from_secs(600),
            reuse_cooldown: Duration::from_secs(30),
        };
        let limits = RateLimits::new([(
            "mutating",
            BucketConfig {
                burst: 1.0,
                per_second: 0.5,
            },
        )])
        .with_cost(Operation::AssignIps, &[("mutating", 1.0)])
        .unwrap()
        .with_cost(Operation::CreateInterface, &[("mutating", 2.0)])
        .unwrap();
        let unreadable = [("broken".to_string(), "spec is not an object".to_string())];
        let report = PlanReport {
            plan,
            settings: &settings,
            unreadable: &unreadable,
            limits: &limits,
        };
        check(&report.text(), &report.json());
    }

    #[test]
    fn each_node_says_what_comes_of_it_and_the_changes_are_costed() {
        let mut grows = node("grows");
        grows.steps = vec![
            Step::Created {
                interface: "planned-1".into(),
                index: 1,
                subnet: "subnet-a".into(),
            },
            Step::Satisfied,
        ];
        grows.calls = vec![PlannedCall {
            operation: Operation::CreateInterface,
            interface: "planned-1".into(),
            subnet: Some("subnet-a".into()),
            addresses: 3,
            prefixes: 0,
        }];
        grows.pool_added = 3;
        grows.available_after = 7;
        let mut blocked = node("full");
        blocked.steps = vec![Step::Blocked("subnet full".into())];
        let mut failed = node("gone");
        failed.failed = Some("instance i-gone does not exist".into());
        let mut shrinks = node("shrinks");
        shrinks.marked = vec!["10.0.0.9".into()];
        let plan = ClusterPlan {
            provider: "aws".into(),
            nodes: vec![grows, blocked, failed, shrinks, node("kept")],
            gc: GcPlan {
                can_delete: true,
                grace_seconds: 600,
                ..GcPlan::default()
            },
            reads: BTreeMap::from([(Operation::GetInstances, 1)]),
        };
        report_of(&plan, |text, json| {
            for line in [
                "node grows (i-grows): 4 in pool, 2 used: changes",
                "  create-interface planned-1 in subnet-a: 3 addresses",
                "  spec.ipam.pool: +3 -0 (4 -> 7), 0 still needed",
                "node full (i-full): 4 in pool, 2 used: blocked: subnet full",
                "node gone (i-gone): 4 in pool, 2 used: not planned: instance i-gone does not exist",
                "  1 addresses marked for release once excess for 180 s (released after the agent answers): 10.0.0.9",
                "node kept (i-kept): 4 in pool, 2 used: adopted as it is, nothing to do",
                "CiliumNode broken: not readable, left alone: spec is not an object",
                "cloud calls this plan made: get-instances 1; changes made: none",
                "changes `run` would make: create-interface 1",
                "  bucket mutating: 2 tokens of 1 at once, 0.5/s: 2.0 s of refill beyond the burst",
                "nodes: adopted-as-is 1, blocked 1, changes 2, failed 1",
            ] {
                assert!(text.contains(line), "missing {line:?} in:\n{text}");
            }
            let verdicts: Vec<&str> = json["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["verdict"].as_str().unwrap())
                .collect();
            assert_eq!(
                verdicts,
                ["changes", "blocked", "failed", "changes", "adopted-as-is"]
            );
            assert_eq!(json["changes"], json!({"create-interface": 1}));
            assert_eq!(json["cost"][0]["secondsBeyondBurst"], json!(2.0));
            assert_eq!(json["nodes"][0]["calls"][0]["addresses"], json!(3));
            assert_eq!(json["unreadable"][0]["name"], json!("broken"));
        });
    }

    #[test]
    fn nothing_to_do_costs_nothing() {
        let plan = ClusterPlan {
            provider: "mock".into(),
            nodes: vec![node("kept")],
            gc: GcPlan::default(),
            reads: BTreeMap::new(),
        };
        report_of(&plan, |text, json| {
            assert!(text.contains("changes `run` would make: none"), "{text}");
            assert!(text.contains("leaked-interface GC: off"), "{text}");
            assert!(!text.contains("bucket"), "{text}");
            assert_eq!(json["cost"], json!([]));
            assert_eq!(json["changes"], json!({}));
        });
    }
}
