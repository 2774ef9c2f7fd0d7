//! The route table over netlink: `ipam-node-routes`' Router, in the
//! agent's network namespace (the host's, as a host-network DaemonSet).

use async_trait::async_trait;
use ipam_node_routes::{PodRoute, Router, RouterError};

use crate::routing::{RouteError, RouteTable};

pub struct NetlinkRoutes {
    router: Router,
}

impl NetlinkRoutes {
    /// A netlink connection driven on the current tokio runtime.
    pub fn new() -> Result<Self, RouterError> {
        Ok(Self {
            router: Router::connect()?,
        })
    }
}

#[async_trait]
impl RouteTable for NetlinkRoutes {
    async fn install(&self, route: &PodRoute) -> Result<(), RouteError> {
        self.router
            .install(route)
            .await
            .map_err(|e| RouteError(e.to_string()))
    }

    async fn reconcile(&self, wanted: &[PodRoute]) -> Result<(), RouteError> {
        let report = self
            .router
            .reconcile(wanted)
            .await
            .map_err(|e| RouteError(e.to_string()))?;
        tracing::debug!(?report, "routes reconciled");
        Ok(())
    }
}
