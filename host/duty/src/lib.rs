//! The operator's duties besides IPAM: periodic rounds (a heartbeat, a
//! sweep, a GC pass) that run only while this replica leads.
//!
//! A [`Duty`] does one round at a time; [`run_while_leading`] runs its
//! rounds on an interval from the moment this replica leads until it stops
//! leading (the round in flight is dropped: nothing a duty does may need a
//! clean end, which is why its locks sit on a short lease) or shuts down,
//! and starts it afresh, with new state, when it leads again. Every round is
//! counted in [`DutyMetrics`].

mod metrics;
mod runner;

pub use metrics::{DutyLabel, DutyMetrics};
pub use runner::{run_while_leading, Duty, RoundReport};
