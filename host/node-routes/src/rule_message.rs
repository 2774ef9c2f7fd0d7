//! Policy rules as netlink messages, both ways: the rules the kernel lists
//! are read into [`ObservedRule`]s (the boundary: anything unexpected makes
//! a rule "not ours"), and [`PodRule`]s are written as messages to add or
//! delete.

use std::net::IpAddr;

use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage};
use rtnetlink::packet_route::AddressFamily;

use crate::pod_route::is_reserved_table;
use crate::{Direction, PodRule, FROM_POD_PRIORITY, MAIN_TABLE, TO_POD_PRIORITY};

/// How the kernel lists a suppressor that is not set (-1 as a u32).
const UNSET: u32 = u32::MAX;

/// A policy rule as listed by the kernel, reduced to what tells whether it
/// is a pod rule and which table it keeps in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedRule {
    pub priority: u32,
    pub source: Option<(IpAddr, u8)>,
    pub destination: Option<(IpAddr, u8)>,
    /// The table it looks up, if it is a lookup rule.
    pub table: Option<u32>,
    /// Any other selector or modifier (interface, mark, tos, ports, `not`,
    /// suppression, ...): such a rule is never one of ours.
    pub has_other_terms: bool,
}

impl ObservedRule {
    pub fn from_message(message: &RuleMessage) -> Self {
        let header = &message.header;
        let mut priority = 0;
        let mut source = None;
        let mut destination = None;
        let mut table_attribute = None;
        let mut has_other_terms = header.tos != 0 || header.flags.contains(RuleFlags::Invert);
        for attribute in &message.attributes {
            match attribute {
                RuleAttribute::Priority(p) => priority = *p,
                RuleAttribute::Source(ip) => source = Some((*ip, header.src_len)),
                RuleAttribute::Destination(ip) => destination = Some((*ip, header.dst_len)),
                RuleAttribute::Table(t) => table_attribute = Some(*t),
                // Who made the rule says nothing about what it selects.
                RuleAttribute::Protocol(_) => {}
                // The kernel lists unset suppressors as -1.
                RuleAttribute::SuppressPrefixLen(UNSET) | RuleAttribute::SuppressIfGroup(UNSET) => {
                }
                _ => has_other_terms = true,
            }
        }
        // The header's byte holds tables below 256; the attribute holds any.
        let table = (header.action == RuleAction::ToTable)
            .then(|| table_attribute.unwrap_or(u32::from(header.table)));
        Self {
            priority,
            source,
            destination,
            table,
            has_other_terms,
        }
    }

    /// The pod rule this is, if it has exactly a pod rule's shape: priority
    /// 20 `to <ipv4>/32 lookup main`, or priority 111 `from <ipv4>/32 lookup
    /// <non-reserved table>`, and nothing else.
    pub fn as_pod_rule(&self) -> Option<PodRule> {
        if self.has_other_terms {
            return None;
        }
        let table = self.table?;
        match (self.priority, self.source, self.destination) {
            (TO_POD_PRIORITY, None, Some((IpAddr::V4(address), 32))) if table == MAIN_TABLE => {
                Some(PodRule::to_pod(address))
            }
            (FROM_POD_PRIORITY, Some((IpAddr::V4(address), 32)), None)
                if !is_reserved_table(table) =>
            {
                Some(PodRule::from_pod(address, table))
            }
            _ => None,
        }
    }
}

/// The message that adds or deletes `rule`.
pub fn pod_rule_message(rule: &PodRule) -> RuleMessage {
    let mut message = RuleMessage::default();
    message.header.family = AddressFamily::Inet;
    message.header.action = RuleAction::ToTable;
    message
        .attributes
        .push(RuleAttribute::Priority(rule.priority()));
    let selected = IpAddr::V4(rule.address);
    match rule.direction {
        Direction::ToPod => {
            message.header.dst_len = 32;
            message
                .attributes
                .push(RuleAttribute::Destination(selected));
        }
        Direction::FromPod => {
            message.header.src_len = 32;
            message.attributes.push(RuleAttribute::Source(selected));
        }
    }
    // Tables past 255 do not fit the header's byte; the attribute carries
    // every table, and the header's byte is set when it fits, as iproute2 does.
    message.header.table = u8::try_from(rule.table).unwrap_or(0);
    message.attributes.push(RuleAttribute::Table(rule.table));
    message
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn pod_ip() -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, 10)
    }

    #[test]
    fn pod_rules_read_back_from_their_own_messages() {
        for rule in [
            PodRule::to_pod(pod_ip()),
            PodRule::from_pod(pod_ip(), 11),
            PodRule::from_pod(pod_ip(), 300),
        ] {
            let observed = ObservedRule::from_message(&pod_rule_message(&rule));
            assert_eq!(observed.as_pod_rule(), Some(rule), "{rule}");
        }
    }

    #[test]
    fn only_rules_of_exactly_a_pod_rules_shape_are_pod_rules() {
        let base = ObservedRule::from_message(&pod_rule_message(&PodRule::from_pod(pod_ip(), 11)));
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let cases: Vec<(&str, ObservedRule)> = vec![
            (
                "another priority",
                ObservedRule {
                    priority: 112,
                    ..base.clone()
                },
            ),
            (
                "a /24 source",
                ObservedRule {
                    source: Some((v4(192, 168, 1, 0), 24)),
                    ..base.clone()
                },
            ),
            (
                "an IPv6 source",
                ObservedRule {
                    source: Some(("fd00::1".parse().unwrap(), 32)),
                    ..base.clone()
                },
            ),
            (
                "a destination too",
                ObservedRule {
                    destination: Some((v4(10, 0, 0, 1), 32)),
                    ..base.clone()
                },
            ),
            (
                "the main table",
                ObservedRule {
                    table: Some(MAIN_TABLE),
                    ..base.clone()
                },
            ),
            (
                "the local table",
                ObservedRule {
                    table: Some(255),
                    ..base.clone()
                },
            ),
            (
                "not a lookup",
                ObservedRule {
                    table: None,
                    ..base.clone()
                },
            ),
            (
                "an interface selector",
                ObservedRule {
                    has_other_terms: true,
                    ..base.clone()
                },
            ),
            (
                "priority 20 to another table",
                ObservedRule {
                    priority: TO_POD_PRIORITY,
                    source: None,
                    destination: Some((v4(192, 168, 1, 10), 32)),
                    table: Some(11),
                    has_other_terms: false,
                },
            ),
            (
                "priority 20 from",
                ObservedRule {
                    priority: TO_POD_PRIORITY,
                    table: Some(MAIN_TABLE),
                    ..base.clone()
                },
            ),
        ];
        for (what, rule) in cases {
            assert_eq!(rule.as_pod_rule(), None, "{what}");
        }
    }

    #[test]
    fn terms_beyond_priority_selector_and_table_make_a_rule_not_ours() {
        let with = |extra: RuleAttribute| {
            let mut message = pod_rule_message(&PodRule::from_pod(pod_ip(), 11));
            message.attributes.push(extra);
            ObservedRule::from_message(&message).as_pod_rule()
        };
        assert_eq!(with(RuleAttribute::Iifname("eth1".into())), None);
        assert_eq!(with(RuleAttribute::FwMark(0x200)), None);
        assert_eq!(with(RuleAttribute::SuppressPrefixLen(0)), None);
        assert_eq!(with(RuleAttribute::SuppressIfGroup(7)), None);
        // As the kernel lists every rule: suppressors unset.
        assert!(with(RuleAttribute::SuppressPrefixLen(u32::MAX)).is_some());
        assert!(with(RuleAttribute::SuppressIfGroup(u32::MAX)).is_some());
        assert!(with(RuleAttribute::Protocol(
            rtnetlink::packet_route::route::RouteProtocol::Boot
        ))
        .is_some());

        let mut inverted = pod_rule_message(&PodRule::from_pod(pod_ip(), 11));
        inverted.header.flags |= RuleFlags::Invert;
        assert_eq!(ObservedRule::from_message(&inverted).as_pod_rule(), None);
    }

    #[test]
    fn the_table_comes_from_the_attribute_before_the_header() {
        let mut message = pod_rule_message(&PodRule::from_pod(pod_ip(), 300));
        message.header.table = 252;
        assert_eq!(ObservedRule::from_message(&message).table, Some(300));
        message
            .attributes
            .retain(|a| !matches!(a, RuleAttribute::Table(_)));
        assert_eq!(ObservedRule::from_message(&message).table, Some(252));
    }
}
