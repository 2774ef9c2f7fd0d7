//! The route table over netlink: `ipam-node-routes`' Router, in the
//! agent's network namespace (the host's, as a host-network DaemonSet).
//! The tables this agent has written are remembered, so an ADD on an
//! interface whose table is in place only adds its two rules (no netlink
//! dumps, which grow with the pods on the node); every DEL and every start
//! reconciles everything and refreshes what is remembered. A table flushed
//! by someone else meanwhile is rewritten at the next reconcile.

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use ipam_node_routes::{PodRoute, Router, RouterError};

use crate::routing::{RouteError, RouteTable};

pub struct NetlinkRoutes {
    router: Router,
    /// Tables known to hold their routes.
    written: Mutex<BTreeSet<u32>>,
}

impl NetlinkRoutes {
    /// A netlink connection driven on the current tokio runtime.
    pub fn new() -> Result<Self, RouterError> {
        Ok(Self {
            router: Router::connect()?,
            written: Mutex::new(BTreeSet::new()),
        })
    }

    fn written(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        // The set holds no invariant a panicking holder could break.
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn route_error(error: RouterError) -> RouteError {
    RouteError(error.to_string())
}

#[async_trait]
impl RouteTable for NetlinkRoutes {
    async fn install(&self, route: &PodRoute) -> Result<(), RouteError> {
        let table = route.table().map_err(|e| RouteError(e.to_string()))?;
        if self.written().contains(&table) {
            return self.router.add_rules(route).await.map_err(route_error);
        }
        self.router.install(route).await.map_err(route_error)?;
        self.written().insert(table);
        Ok(())
    }

    async fn reconcile(&self, wanted: &[PodRoute]) -> Result<(), RouteError> {
        let report = self.router.reconcile(wanted).await.map_err(route_error)?;
        let written: BTreeSet<u32> = wanted
            .iter()
            .filter(|route| !report.missing_interfaces.contains(&route.interface_mac))
            .filter_map(|route| route.table().ok())
            .collect();
        *self.written() = written;
        if !report.missing_interfaces.is_empty() {
            tracing::warn!(missing = ?report.missing_interfaces, "interfaces not on the host yet: their pods' routes wait");
        }
        Ok(())
    }
}
