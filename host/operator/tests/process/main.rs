//! `ipam-operator run` as a process, against the fake API server served
//! over HTTP on 127.0.0.1 through a kubeconfig: one test binary, so the
//! fixtures (and wasmtime, through them) are linked once.

mod beside_cilium;
mod kvstore;
mod lifecycle;
mod metrics;
mod migration;
mod private_registry;
mod sigkill;
mod startup;
mod support;
mod two_writers;
