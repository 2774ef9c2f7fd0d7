//! Uninstall on the node (`uninstall` decides when): everything the agent
//! put there goes, each step tried whatever the others did, in the order
//! that stops new pods first: the agent's conflists (a runtime then falls
//! back to whatever other network is configured), the `ipam-cni` plugin,
//! the policy routes and rules, the SNAT table and the pinned BPF objects
//! (which detaches the datapath's programs once the agent's own handles
//! close at exit). The state file stays: it is on a tmpfs that a reboot
//! empties, and an agent installed again before that learns from it which
//! addresses the node's remaining pods still hold.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cni_thread::CniThread;
use crate::install_cni;
use crate::nft_snat::NftSnat;
use crate::routing::RouteTable;
use crate::{cni_conf_dir, datapath};

/// What there is to remove.
pub struct Teardown {
    /// The CNI configuration directory, when the agent installs its
    /// conflist there.
    pub cni_conf_dir: Option<PathBuf>,
    /// The CNI plugin directory, when the init container installs ipam-cni
    /// there.
    pub cni_bin_dir: Option<PathBuf>,
    pub routes: Arc<dyn RouteTable>,
    /// bpffs, when the agent runs the datapath.
    pub bpffs: Option<PathBuf>,
}

/// What each step did: (step, Ok(what was removed) or Err(why not)).
pub type Report = Vec<(&'static str, Result<String, String>)>;

impl Teardown {
    /// Runs every step; the routes on the CNI thread, whose netlink
    /// connection they use.
    pub async fn run(self, cni: &CniThread) -> Report {
        let mut report: Report = Vec::new();
        if let Some(dir) = &self.cni_conf_dir {
            report.push((
                "conflist",
                cni_conf_dir::remove_agents(dir)
                    .map(|names| format!("{names:?} from {}", dir.display()))
                    .map_err(|e| e.to_string()),
            ));
        }
        if let Some(dir) = &self.cni_bin_dir {
            let plugin = install_cni::plugin_name();
            report.push((
                "plugin",
                install_cni::remove(dir, plugin)
                    .map(|removed| match removed {
                        true => format!("{}", dir.join(plugin).display()),
                        false => "nothing".to_string(),
                    })
                    .map_err(|e| e.to_string()),
            ));
        }
        let routes = self.routes.clone();
        let reconciled = cni
            .run(
                "removing the routes",
                async move { routes.reconcile(&[]).await },
            )
            .await;
        report.push((
            "routes",
            match reconciled {
                Ok(Ok(())) => Ok("every pod rule and table".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        ));
        report.push((
            "snat",
            NftSnat
                .remove()
                .map(|()| format!("table ip {}", crate::nft_messages::TABLE))
                .map_err(|e| e.to_string()),
        ));
        if let Some(bpffs) = &self.bpffs {
            let pins = bpffs.join(datapath::PIN_FOLDER);
            report.push((
                "bpf pins",
                match std::fs::remove_dir_all(&pins) {
                    Ok(()) => Ok(pins.display().to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok("nothing".to_string()),
                    Err(e) => Err(format!("{}: {e}", pins.display())),
                },
            ));
        }
        report
    }
}
