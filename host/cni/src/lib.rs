//! The CNI IPAM plugin `ipam-cni` and the protocol it speaks with the node
//! agent (`ipam-agent`).
//!
//! A CNI main plugin (`ptp`, `bridge`) runs `ipam-cni` with the CNI_*
//! environment and the network configuration on stdin; the plugin turns that
//! into one [`protocol::AgentRequest`], sends it over the agent's unix socket
//! and prints the agent's answer as a CNI 1.0.0 / 1.1.0 result or error.
//!
//! - [`env`]: the CNI_* environment parsed into a typed [`env::Invocation`].
//! - [`config`]: the network configuration on stdin, version-checked.
//! - [`result`]: the IPAM result, error and version JSON the plugin prints.
//! - [`protocol`]: the plugin<->agent messages, the sync client
//!   [`protocol::ask`] and the helpers the agent's server side uses.
//! - [`plugin`]: the pure decisions between them: which request a command
//!   makes and what the agent's answer prints.
//! - [`datapath_step`]: `ipam-cni` chained after the main plugin: the
//!   configuration without an `ipam` section, and the `attach`/`detach`
//!   requests that put the agent's datapath on the pod's host-side veth.
//! - [`names`]: container ids and interface names checked as the spec says.
//! - [`version`]: the CNI versions this plugin speaks.
//!
//! The JSON layer is written here rather than taken from `rscni-types`; the
//! crate README says why.

pub mod config;
pub mod datapath_step;
pub mod env;
pub mod names;
pub mod plugin;
pub mod protocol;
pub mod result;
pub mod version;
