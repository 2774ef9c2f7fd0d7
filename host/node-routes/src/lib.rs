//! Pod policy routing for addresses given from secondary cloud interfaces
//! (AWS ENIs), as Cilium's agent does in ENI mode.
//!
//! Each pod address on interface number `n` needs:
//! - rule priority 20: `to <ip>/32 lookup main` (traffic to the pod);
//! - rule priority 111: `from <ip>/32 lookup <10 + n>` (traffic from the pod);
//! - in table `10 + n`: `<gateway>/32 scope link dev <if>` and
//!   `default via <gateway> dev <if>`, the interface found by its MAC address
//!   and brought up if it is down.
//!
//! The decisions are pure functions over plain data ([`plan_install`],
//! [`plan_remove`], [`plan_reconcile`] over [`PodRoute`]s and the
//! [`ObservedRule`]s the kernel lists); [`Router`] lists the host's rules
//! and links over netlink (`rtnetlink`, no `ip` commands) and applies the
//! plan. Install and remove are idempotent; an interface table, shared by
//! all pods on its interface, is flushed only once no rule looks it up; only
//! rules of exactly a pod rule's shape (priority 20 or 111, a /32 selector
//! and nothing else) are ever deleted. IPv4 only, as ENI mode is.
//!
//! The router acts on the network namespace its netlink connection was
//! opened in; the tests run it inside throwaway namespaces (`ipam-netns`).

mod error;
mod mac;
mod plan;
mod pod_route;
mod router;
mod rule_message;

pub use error::{PlanError, RouterError};
pub use mac::{Mac, MacError};
pub use plan::{plan_install, plan_reconcile, plan_remove, pod_rules, Plan};
pub use pod_route::{
    route_table, Direction, PodRoute, PodRule, TableRoutes, FROM_POD_PRIORITY, MAIN_TABLE,
    TABLE_OFFSET, TO_POD_PRIORITY,
};
pub use router::{InstalledPodRule, ReconcileReport, Router};
pub use rule_message::{pod_rule_message, ObservedRule};
