//! Deciding what to change, from what is wanted and the rules the kernel
//! lists: pure functions over plain data.
//!
//! An interface table is shared by every pod on that interface, so its
//! routes are flushed only once no rule at all (ours or anyone's) looks it up.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use crate::pod_route::is_reserved_table;
use crate::{Direction, ObservedRule, PlanError, PodRoute, PodRule, TableRoutes};

/// The changes that take the host from the listed rules to the wanted ones.
/// Applied in field order: tables first (so a new rule never points at an
/// empty table), then rules added, then rules deleted, then tables flushed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Interface tables whose routes are written (replacing what is there).
    pub table_routes: Vec<TableRoutes>,
    pub add_rules: Vec<PodRule>,
    pub delete_rules: Vec<PodRule>,
    /// Tables whose routes are all removed: no rule looks them up any more.
    pub flush_tables: Vec<u32>,
}

/// Installing one pod address: its two rules and its interface's table,
/// replacing rules of the same address that look up another table.
pub fn plan_install(route: &PodRoute, present: &[ObservedRule]) -> Result<Plan, PlanError> {
    converge(
        std::slice::from_ref(route),
        present,
        |rule| rule.address == route.address,
        None,
    )
}

/// Removing one pod address: every pod rule of that address goes, and the
/// tables they looked up (and the route's own) are flushed if now unused.
pub fn plan_remove(route: &PodRoute, present: &[ObservedRule]) -> Result<Plan, PlanError> {
    converge(
        &[],
        present,
        |rule| rule.address == route.address,
        Some(route.table()?),
    )
}

/// Converging on exactly `wanted`: every pod rule not wanted goes.
pub fn plan_reconcile(wanted: &[PodRoute], present: &[ObservedRule]) -> Result<Plan, PlanError> {
    converge(wanted, present, |_| true, None)
}

/// The pod rules among the listed ones.
pub fn pod_rules(present: &[ObservedRule]) -> Vec<PodRule> {
    present
        .iter()
        .filter_map(ObservedRule::as_pod_rule)
        .collect()
}

/// `owned` says which listed pod rules this change may delete; `also_flush`
/// is a table to flush if unused even though no deleted rule looked it up
/// (a second remove after the rules went but before the table was flushed).
fn converge(
    wanted: &[PodRoute],
    present: &[ObservedRule],
    owned: impl Fn(&PodRule) -> bool,
    also_flush: Option<u32>,
) -> Result<Plan, PlanError> {
    let wanted_rules = wanted_rules(wanted)?;
    let table_routes = wanted_tables(wanted)?;
    let present_pod_rules: BTreeSet<PodRule> = pod_rules(present).into_iter().collect();

    let add_rules: Vec<PodRule> = wanted_rules
        .difference(&present_pod_rules)
        .copied()
        .collect();
    let delete_rules: Vec<PodRule> = present_pod_rules
        .iter()
        .filter(|rule| owned(rule) && !wanted_rules.contains(rule))
        .copied()
        .collect();

    let deleted: BTreeSet<&PodRule> = delete_rules.iter().collect();
    let still_looked_up: BTreeSet<u32> = present
        .iter()
        .filter(|observed| {
            observed
                .as_pod_rule()
                .is_none_or(|rule| !deleted.contains(&rule))
        })
        .filter_map(|observed| observed.table)
        .chain(add_rules.iter().map(|rule| rule.table))
        .chain(table_routes.iter().map(|routes| routes.table))
        .collect();
    let flush_tables: Vec<u32> = delete_rules
        .iter()
        .filter(|rule| rule.direction == Direction::FromPod)
        .map(|rule| rule.table)
        .chain(also_flush)
        .filter(|table| !is_reserved_table(*table) && !still_looked_up.contains(table))
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();

    Ok(Plan {
        table_routes,
        add_rules,
        delete_rules,
        flush_tables,
    })
}

fn wanted_rules(wanted: &[PodRoute]) -> Result<BTreeSet<PodRule>, PlanError> {
    let mut table_of: BTreeMap<Ipv4Addr, u32> = BTreeMap::new();
    let mut rules = BTreeSet::new();
    for route in wanted {
        let table = route.table()?;
        if let Some(&first_table) = table_of.get(&route.address) {
            if first_table != table {
                return Err(PlanError::ConflictingAddress {
                    address: route.address,
                    first_table,
                    second_table: table,
                });
            }
        }
        table_of.insert(route.address, table);
        rules.extend(route.rules()?);
    }
    Ok(rules)
}

fn wanted_tables(wanted: &[PodRoute]) -> Result<Vec<TableRoutes>, PlanError> {
    let mut tables: BTreeMap<u32, TableRoutes> = BTreeMap::new();
    for route in wanted {
        let routes = route.table_routes()?;
        match tables.get(&routes.table) {
            Some(first) if *first != routes => {
                return Err(PlanError::ConflictingTable {
                    table: routes.table,
                    first_mac: first.interface_mac,
                    first_gateway: first.gateway,
                    second_mac: routes.interface_mac,
                    second_gateway: routes.gateway,
                })
            }
            Some(_) => {}
            None => {
                tables.insert(routes.table, routes);
            }
        }
    }
    Ok(tables.into_values().collect())
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::{Mac, MAIN_TABLE};

    const ENI1: Mac = Mac([2, 0, 0, 0, 0, 1]);
    const ENI2: Mac = Mac([2, 0, 0, 0, 0, 2]);

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, last)
    }

    fn gateway() -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, 1)
    }

    fn pod(last: u8, interface_number: u32) -> PodRoute {
        PodRoute {
            address: ip(last),
            interface_mac: if interface_number == 1 { ENI1 } else { ENI2 },
            interface_number,
            gateway: gateway(),
        }
    }

    fn observed(rule: PodRule) -> ObservedRule {
        let (source, destination) = match rule.direction {
            Direction::ToPod => (None, Some((IpAddr::V4(rule.address), 32))),
            Direction::FromPod => (Some((IpAddr::V4(rule.address), 32)), None),
        };
        ObservedRule {
            priority: rule.priority(),
            source,
            destination,
            table: Some(rule.table),
            has_other_terms: false,
        }
    }

    /// The kernel's own rules: local, main and default.
    fn host_rules() -> Vec<ObservedRule> {
        let lookup = |priority, table| ObservedRule {
            priority,
            source: None,
            destination: None,
            table: Some(table),
            has_other_terms: false,
        };
        vec![
            lookup(0, 255),
            lookup(32766, MAIN_TABLE),
            lookup(32767, 253),
        ]
    }

    fn installed(pods: &[PodRoute]) -> Vec<ObservedRule> {
        let mut rules = host_rules();
        for pod in pods {
            rules.extend(pod.rules().unwrap().map(observed));
        }
        rules
    }

    fn table(pod: &PodRoute) -> TableRoutes {
        pod.table_routes().unwrap()
    }

    #[test]
    fn install_adds_what_is_missing_and_replaces_a_stale_table() {
        let a = pod(10, 1);
        let a_on_eni2 = pod(10, 2);
        let b = pod(11, 1);
        let cases: Vec<(&str, PodRoute, Vec<ObservedRule>, Plan)> = vec![
            (
                "nothing there",
                a,
                host_rules(),
                Plan {
                    table_routes: vec![table(&a)],
                    add_rules: vec![PodRule::to_pod(ip(10)), PodRule::from_pod(ip(10), 11)],
                    ..Plan::default()
                },
            ),
            (
                "already there: only the table is rewritten",
                a,
                installed(&[a, b]),
                Plan {
                    table_routes: vec![table(&a)],
                    ..Plan::default()
                },
            ),
            (
                "moved to another interface: the old from-rule goes, its table is flushed",
                a_on_eni2,
                installed(&[a]),
                Plan {
                    table_routes: vec![table(&a_on_eni2)],
                    add_rules: vec![PodRule::from_pod(ip(10), 12)],
                    delete_rules: vec![PodRule::from_pod(ip(10), 11)],
                    flush_tables: vec![11],
                },
            ),
            (
                "moved, but the old table is shared: it stays",
                a_on_eni2,
                installed(&[a, b]),
                Plan {
                    table_routes: vec![table(&a_on_eni2)],
                    add_rules: vec![PodRule::from_pod(ip(10), 12)],
                    delete_rules: vec![PodRule::from_pod(ip(10), 11)],
                    flush_tables: vec![],
                },
            ),
        ];
        for (what, route, present, want) in cases {
            assert_eq!(plan_install(&route, &present).unwrap(), want, "{what}");
        }
    }

    #[test]
    fn remove_deletes_the_address_rules_and_flushes_only_an_unused_table() {
        let a = pod(10, 1);
        let b = pod(11, 1);
        let someone_elses = ObservedRule {
            priority: 111,
            source: None,
            destination: None,
            table: Some(11),
            has_other_terms: true,
        };
        let both_rules_of_a = vec![PodRule::to_pod(ip(10)), PodRule::from_pod(ip(10), 11)];
        let cases: Vec<(&str, Vec<ObservedRule>, Plan)> = vec![
            (
                "another pod shares the table",
                installed(&[a, b]),
                Plan {
                    delete_rules: both_rules_of_a.clone(),
                    ..Plan::default()
                },
            ),
            (
                "the last pod on the table",
                installed(&[a]),
                Plan {
                    delete_rules: both_rules_of_a.clone(),
                    flush_tables: vec![11],
                    ..Plan::default()
                },
            ),
            (
                "a rule not ours still looks the table up",
                [installed(&[a]), vec![someone_elses]].concat(),
                Plan {
                    delete_rules: both_rules_of_a.clone(),
                    ..Plan::default()
                },
            ),
            (
                "removed before: the table is flushed again, nothing else",
                host_rules(),
                Plan {
                    flush_tables: vec![11],
                    ..Plan::default()
                },
            ),
            (
                "only the to-rule was left",
                [host_rules(), vec![observed(PodRule::to_pod(ip(10)))]].concat(),
                Plan {
                    delete_rules: vec![PodRule::to_pod(ip(10))],
                    flush_tables: vec![11],
                    ..Plan::default()
                },
            ),
        ];
        for (what, present, want) in cases {
            assert_eq!(plan_remove(&a, &present).unwrap(), want, "{what}");
        }
    }

    #[test]
    fn reconcile_converges_on_the_wanted_list_and_leaves_other_rules_alone() {
        let a = pod(10, 1);
        let b = pod(11, 1);
        let c = pod(20, 2);
        let not_ours = vec![
            // A /24 at priority 111 is not a pod rule even in a pod table.
            ObservedRule {
                priority: 111,
                source: Some((IpAddr::V4(ip(0)), 24)),
                destination: None,
                table: Some(12),
                has_other_terms: false,
            },
        ];
        let cases: Vec<(&str, Vec<PodRoute>, Vec<ObservedRule>, Plan)> = vec![
            (
                "in step",
                vec![a, b],
                installed(&[a, b]),
                Plan {
                    table_routes: vec![table(&a)],
                    ..Plan::default()
                },
            ),
            (
                "one gone while the agent was down, one new",
                vec![a, c],
                [installed(&[a, b]), not_ours.clone()].concat(),
                Plan {
                    table_routes: vec![table(&a), table(&c)],
                    add_rules: vec![PodRule::to_pod(ip(20)), PodRule::from_pod(ip(20), 12)],
                    delete_rules: vec![PodRule::to_pod(ip(11)), PodRule::from_pod(ip(11), 11)],
                    flush_tables: vec![],
                },
            ),
            (
                "nothing wanted: every pod rule goes, unused tables are flushed",
                vec![],
                [installed(&[a, b, c]), not_ours.clone()].concat(),
                Plan {
                    delete_rules: vec![
                        PodRule::to_pod(ip(10)),
                        PodRule::to_pod(ip(11)),
                        PodRule::to_pod(ip(20)),
                        PodRule::from_pod(ip(10), 11),
                        PodRule::from_pod(ip(11), 11),
                        PodRule::from_pod(ip(20), 12),
                    ],
                    // 12 is still looked up by the rule that is not ours.
                    flush_tables: vec![11],
                    ..Plan::default()
                },
            ),
        ];
        for (what, wanted, present, want) in cases {
            assert_eq!(plan_reconcile(&wanted, &present).unwrap(), want, "{what}");
        }
    }

    #[test]
    fn contradictory_wanted_routes_are_refused() {
        let a = pod(10, 1);
        let other_gateway = PodRoute {
            gateway: Ipv4Addr::new(192, 168, 1, 254),
            ..pod(11, 1)
        };
        let cases: Vec<(&str, Vec<PodRoute>, PlanError)> = vec![
            (
                "one address on two interfaces",
                vec![a, pod(10, 2)],
                PlanError::ConflictingAddress {
                    address: ip(10),
                    first_table: 11,
                    second_table: 12,
                },
            ),
            (
                "one table with two gateways",
                vec![a, other_gateway],
                PlanError::ConflictingTable {
                    table: 11,
                    first_mac: ENI1,
                    first_gateway: gateway(),
                    second_mac: ENI1,
                    second_gateway: other_gateway.gateway,
                },
            ),
            (
                "a reserved table",
                vec![pod(10, 244)],
                PlanError::ReservedTable {
                    interface_number: 244,
                    table: 254,
                },
            ),
        ];
        for (what, wanted, want) in cases {
            assert_eq!(plan_reconcile(&wanted, &host_rules()), Err(want), "{what}");
        }
    }
}
