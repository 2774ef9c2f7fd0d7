//! The `ipam-agent` binary as a process, against the fake API server and
//! metadata-service stubs on 127.0.0.1; the CNI chain and crash tests run
//! it inside network namespaces they make (as root, failing loudly
//! otherwise); the datapath tests also load the eBPF object, and the
//! capabilities tests run it with no more privilege than the DaemonSet
//! gives; the reboot test empties its state directory as a reboot empties
//! /run. `install-cni` runs as the init container runs it, in a temporary
//! directory.

mod capabilities;
mod cni_chain;
mod conflist;
mod crash;
mod datapath;
mod handshake;
mod install_cni;
mod node_ns;
mod reboot;
mod registration;
mod snat;
mod startup;
mod support;
mod uninstall;
