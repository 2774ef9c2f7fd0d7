//! The node agent (`ipam-agent`), a DaemonSet binary: it registers its
//! node's CiliumNode from the instance metadata, hands pod addresses out of
//! spec.ipam.pool to the `ipam-cni` plugin over a unix socket, saves its
//! allocations atomically before answering, publishes status.ipam.used,
//! answers the release handshake, and installs the policy routes of
//! addresses on secondary interfaces; with `--datapath-object`, it loads the
//! eBPF datapath and keeps its endpoints in step; it installs its conflist
//! once it serves (never over another network's unless told to), keeps
//! pod traffic leaving the VPC masqueraded, and removes all it put on the
//! node when its DaemonSet is deleted. The decisions are `ipam_pool::agent`'s
//! (the simulation's agents use the same ones); this crate does the I/O.
//! It never links wasmtime.
//!
//! | module | what |
//! | --- | --- |
//! | `cli` | flags and their environment variables |
//! | `run` | the start-up order and the tasks |
//! | `startup` | the start-up steps `/readyz` names while it waits for them |
//! | `state_file` | the allocations in their file (under /run by default), written atomically |
//! | `allocator` | the decisions over the node view and the allocations, under one lock |
//! | `status_change` | status.ipam.used and the handshake answers, as a typed change sent as a merge patch |
//! | `install_cni`, `cni_conflist` | the `install-cni` subcommand: the plugin (and a checked conflist) put in place atomically |
//! | `cni_conf_plan`, `cni_conf_dir` | whether the agent installs its conflist beside what the node's CNI directory holds, and doing it |
//! | `cni_server` | the plugin's unix socket |
//! | `cni_thread` | the thread that serves the socket and makes every change of the allocations |
//! | `kube_node` | the CiliumNode (register, watch, status patches), the Node, the pods |
//! | `register` | the spec the agent registers, as plain data |
//! | `facts`, `provider_id` | the instance's facts from the metadata service, the flags or the Node's spec.providerID |
//! | `snat`, `nft_messages`, `nft_snat` | masquerading traffic that leaves the VPC: the rules wanted, their nf_tables batch, the netlink socket |
//! | `uninstall`, `teardown` | at SIGTERM, restart or uninstall; removing what the agent put on the node |
//! | `routing`, `netlink_routes` | the policy routes wanted, and their netlink table |
//! | `datapath` | the eBPF datapath (`ipam-datapath`) in step with the allocations |
//! | `metrics` | `ipam_agent_*` |

pub mod allocator;
pub mod cli;
pub mod cni_conf_dir;
pub mod cni_conf_plan;
pub mod cni_conflist;
pub mod cni_server;
pub mod cni_thread;
pub mod datapath;
pub mod facts;
pub mod install_cni;
pub mod kube_node;
pub mod metrics;
pub mod netlink_routes;
pub mod nft_messages;
pub mod nft_snat;
pub mod provider_id;
pub mod register;
pub mod routing;
pub mod run;
pub mod snat;
pub mod startup;
pub mod state_file;
pub mod status_change;
pub mod teardown;
pub mod uninstall;
