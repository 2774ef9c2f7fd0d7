//! Two writers of one CiliumNode would fight: Cilium's own operator, with
//! its ENI or Azure IPAM on, writes the same `spec.ipam.pool`,
//! `status.eni` and `status.azure` this operator does. While another
//! writer is seen, this operator's engine does not run (no cloud mutation,
//! no CiliumNode write), as on a replica that does not lead; it resumes
//! once the other has stopped.
//!
//! Another writer is seen two ways:
//! - [`managed_fields`]: a field manager (neither this operator's nor an
//!   ignored one, `cilium-agent` by default) whose managedFields entry of a
//!   node holds a contested field and changed within the window (and,
//!   once seen, until that window has passed even if its entry goes:
//!   [`seen`]);
//! - [`cilium_operator`]: Cilium's operator Lease held and its IPAM mode
//!   `eni` or `azure` (read by [`cilium_probe`]).
//!
//! [`watch::OtherWriterWatch`] follows both and publishes a [`pause::Pause`]
//! (the reason `/readyz` gives), the `cilium_operator_ipam_other_writer`
//! gauge, a warning at the start and end of a pause, and an `OtherWriter`
//! Event on each node once per manager and episode; [`watch::writing`]
//! turns leadership and the pause into the engine's gate.

pub mod cilium_operator;
pub mod cilium_probe;
pub mod managed_fields;
pub mod pause;
pub mod seen;
pub mod watch;

pub use pause::Pause;
pub use watch::{writing, OtherWriterSettings, OtherWriterWatch};
