//! Applying plans over netlink, in the network namespace the connection
//! was opened in.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use futures::TryStreamExt;
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags};
use rtnetlink::packet_route::route::{RouteAttribute, RouteMessage, RouteScope};
use rtnetlink::{Handle, IpVersion, LinkUnspec, RouteMessageBuilder};
use rustix::io::Errno;

use crate::plan::{plan_install, plan_reconcile, plan_remove, pod_rules, Plan};
use crate::rule_message::pod_rule_message;
use crate::{
    Direction, Mac, ObservedRule, PodRoute, PodRule, RouterError, TableRoutes, TABLE_OFFSET,
};

/// A pod's from-rule found on the host: which address uses which table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstalledPodRule {
    pub address: Ipv4Addr,
    pub table: u32,
}

impl InstalledPodRule {
    /// The interface number the table stands for (`table - 10`).
    pub fn interface_number(&self) -> Option<u32> {
        self.table.checked_sub(TABLE_OFFSET)
    }
}

/// What [`Router::reconcile`] could not do without failing the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Wanted interfaces not on the host (yet): their pods' rules were not
    /// added, and are added by a later reconcile once the interface shows up.
    pub missing_interfaces: Vec<Mac>,
}

/// Installs, removes and reconciles pod rules and interface tables.
#[derive(Clone, Debug)]
pub struct Router {
    handle: Handle,
}

/// A link as far as finding an interface by MAC needs it.
struct Link {
    index: u32,
    up: bool,
    mac: Option<Mac>,
}

impl Router {
    pub fn new(handle: Handle) -> Self {
        Self { handle }
    }

    /// Opens a netlink connection in the calling thread's network namespace,
    /// driven by a task spawned on the current tokio runtime.
    pub fn connect() -> Result<Self, RouterError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| RouterError::NoRuntime)?;
        let (connection, handle, _) = rtnetlink::new_connection().map_err(RouterError::Connect)?;
        runtime.spawn(connection);
        Ok(Self::new(handle))
    }

    /// Installs the pod address's rules and its interface's table, bringing
    /// the interface up if it is down. Installing again changes nothing.
    pub async fn install(&self, route: &PodRoute) -> Result<(), RouterError> {
        let plan = plan_install(route, &self.list_rules().await?)?;
        let links = self.list_links().await?;
        for table in &plan.table_routes {
            self.write_table(table, &links).await?;
        }
        self.apply_rules(&plan).await
    }

    /// Adds only the pod address's two rules (an existing one is fine),
    /// without reading the host's rules or links: for a caller that knows
    /// the interface's table is in place (it wrote it, by `install` or
    /// `reconcile`, and nothing flushed it since). Per ADD this saves two
    /// netlink dumps that grow with the number of pods on the node.
    pub async fn add_rules(&self, route: &PodRoute) -> Result<(), RouterError> {
        let plan = Plan {
            add_rules: route.rules()?.to_vec(),
            ..Plan::default()
        };
        self.apply_rules(&plan).await
    }

    /// Removes the pod address's rules, and its interface's table routes if
    /// no rule looks that table up any more. Removing again is fine.
    pub async fn remove(&self, route: &PodRoute) -> Result<(), RouterError> {
        let plan = plan_remove(route, &self.list_rules().await?)?;
        self.apply_rules(&plan).await
    }

    /// The pods' from-rules on the host (priority 111, `from <ip>/32`).
    pub async fn installed(&self) -> Result<Vec<InstalledPodRule>, RouterError> {
        let rules = self.list_rules().await?;
        Ok(pod_rules(&rules)
            .into_iter()
            .filter(|rule| rule.direction == Direction::FromPod)
            .map(|rule| InstalledPodRule {
                address: rule.address,
                table: rule.table,
            })
            .collect())
    }

    /// Every pod rule on the host, both directions, as the kernel lists them
    /// (a duplicated rule is listed twice).
    pub async fn pod_rule_list(&self) -> Result<Vec<PodRule>, RouterError> {
        Ok(pod_rules(&self.list_rules().await?))
    }

    /// Makes the host's pod rules exactly `wanted`: installs what is missing,
    /// rewrites the wanted tables, removes pod rules of addresses not wanted.
    /// Rules that are not pod rules are never touched. A wanted interface
    /// that is not on the host holds back only its own pods (see the report).
    pub async fn reconcile(&self, wanted: &[PodRoute]) -> Result<ReconcileReport, RouterError> {
        let mut plan = plan_reconcile(wanted, &self.list_rules().await?)?;
        let links = self.list_links().await?;
        let mut report = ReconcileReport::default();
        let mut unready_tables = BTreeSet::new();
        for table in &plan.table_routes {
            match self.write_table(table, &links).await {
                Ok(()) => {}
                Err(RouterError::InterfaceNotFound { mac }) => {
                    report.missing_interfaces.push(mac);
                    unready_tables.insert(table.table);
                }
                Err(e) => return Err(e),
            }
        }
        let held_back: BTreeSet<Ipv4Addr> = wanted
            .iter()
            .filter(|route| route.table().is_ok_and(|t| unready_tables.contains(&t)))
            .map(|route| route.address)
            .collect();
        plan.add_rules
            .retain(|rule| !held_back.contains(&rule.address));
        self.apply_rules(&plan).await?;
        Ok(report)
    }

    async fn apply_rules(&self, plan: &Plan) -> Result<(), RouterError> {
        for rule in &plan.add_rules {
            let mut request = self.handle.rule().add();
            *request.message_mut() = pod_rule_message(rule);
            tolerate(request.execute().await, Errno::EXIST)
                .map_err(netlink(format!("adding rule {rule}")))?;
        }
        for rule in &plan.delete_rules {
            let request = self.handle.rule().del(pod_rule_message(rule));
            tolerate(request.execute().await, Errno::NOENT)
                .map_err(netlink(format!("deleting rule {rule}")))?;
        }
        if !plan.flush_tables.is_empty() {
            self.flush_tables(&plan.flush_tables).await?;
        }
        Ok(())
    }

    /// Writes `<gateway>/32 scope link dev <if>` and `default via <gateway>
    /// dev <if>` into the table, replacing what is there; the first makes
    /// the gateway reachable for the second.
    async fn write_table(&self, routes: &TableRoutes, links: &[Link]) -> Result<(), RouterError> {
        let link = links
            .iter()
            .find(|link| link.mac == Some(routes.interface_mac))
            .ok_or(RouterError::InterfaceNotFound {
                mac: routes.interface_mac,
            })?;
        if !link.up {
            // A down link carries no routes: the kernel drops them on down.
            self.handle
                .link()
                .set(LinkUnspec::new_with_index(link.index).up().build())
                .execute()
                .await
                .map_err(netlink(format!(
                    "setting interface {} (index {}) up",
                    routes.interface_mac, link.index
                )))?;
        }
        let gateway_route = RouteMessageBuilder::<Ipv4Addr>::new()
            .table_id(routes.table)
            .destination_prefix(routes.gateway, 32)
            .scope(RouteScope::Link)
            .output_interface(link.index)
            .build();
        let default_route = RouteMessageBuilder::<Ipv4Addr>::new()
            .table_id(routes.table)
            .gateway(routes.gateway)
            .output_interface(link.index)
            .build();
        for (what, message) in [("gateway", gateway_route), ("default", default_route)] {
            self.handle
                .route()
                .add(message)
                .replace()
                .execute()
                .await
                .map_err(netlink(format!(
                    "writing the {what} route via {} into table {}",
                    routes.gateway, routes.table
                )))?;
        }
        Ok(())
    }

    async fn flush_tables(&self, tables: &[u32]) -> Result<(), RouterError> {
        let listed: Vec<RouteMessage> = self
            .handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(netlink("listing IPv4 routes".to_owned()))?;
        for route in listed {
            let table = route_table(&route);
            if !tables.contains(&table) {
                continue;
            }
            tolerate(self.handle.route().del(route).execute().await, Errno::SRCH)
                .map_err(netlink(format!("flushing table {table}")))?;
        }
        Ok(())
    }

    async fn list_rules(&self) -> Result<Vec<ObservedRule>, RouterError> {
        self.handle
            .rule()
            .get(IpVersion::V4)
            .execute()
            .map_ok(|message| ObservedRule::from_message(&message))
            .try_collect()
            .await
            .map_err(netlink("listing IPv4 rules".to_owned()))
    }

    async fn list_links(&self) -> Result<Vec<Link>, RouterError> {
        self.handle
            .link()
            .get()
            .execute()
            .map_ok(|message| Link {
                index: message.header.index,
                up: message.header.flags.contains(LinkFlags::Up),
                mac: message
                    .attributes
                    .iter()
                    .find_map(|attribute| match attribute {
                        LinkAttribute::Address(bytes) => {
                            <[u8; 6]>::try_from(bytes.as_slice()).ok().map(Mac)
                        }
                        _ => None,
                    }),
            })
            .try_collect()
            .await
            .map_err(netlink("listing links".to_owned()))
    }
}

/// The route's table: the attribute holds any id, the header only < 256.
fn route_table(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            RouteAttribute::Table(table) => Some(*table),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

/// Treats the one errno that means "already done" as success, which is
/// what makes install and remove idempotent under races too.
fn tolerate(result: Result<(), rtnetlink::Error>, done: Errno) -> Result<(), rtnetlink::Error> {
    match result {
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -done.raw_os_error() => Ok(()),
        other => other,
    }
}

fn netlink(doing: String) -> impl FnOnce(rtnetlink::Error) -> RouterError {
    move |source| RouterError::Netlink { doing, source }
}
