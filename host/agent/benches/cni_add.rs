//! CNI ADD through the plugin and the agent, as a runtime calls it (the
//! `ipam-cni` process asking the agent over its socket; ptp's own work not
//! counted): 1,000 allocations on a node in a network namespace, the agent
//! saving its state and installing the policy routes of each. Prints p50,
//! p99 and the worst, in milliseconds, with the agent's own share (its
//! request-duration histogram), and first what starting the plugin alone
//! costs (1,000 VERSION calls, which never reach the agent). As root (the
//! namespaces, the routes and a tmpfs mount).
//!
//! The 1,000 ADDs run twice, each time with a fresh node and agent: first
//! with the state directory on a tmpfs the bench mounts, as deployed (the
//! default `/run/ipam-agent/state`; `/run` is a tmpfs on a node), then on
//! the temporary directory's filesystem, this machine's disk, as for an
//! operator who keeps the state on disk across reboots (each run prints
//! the filesystem it found). Same code, same temporary file, fsync, rename
//! and directory fsync; on a tmpfs the fsyncs have nothing to write.
//! `IPAM_BENCH_STATE_ON` picks one run (`tmpfs` or `disk`; `both` is the
//! default), e.g. to alternate their order between runs.
//!
//! `IPAM_BENCH_AGENT_FLAGS` adds agent flags (e.g. `--routing=false`, to see
//! what the routes cost). The plugin is `IPAM_CNI_PLUGIN` when set (`cargo
//! xtask bench` sets it to the statically linked plugin, as deployed), else
//! the one built beside the agent; the bench prints which.

#[path = "../tests/process/node_ns.rs"]
#[allow(dead_code)]
mod node_ns;
#[path = "../tests/process/support.rs"]
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ipam_netns::NetNs;
use serde_json::json;

const ALLOCATIONS: usize = 1_000;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// p50, p99 and the worst of `sorted`, in milliseconds.
fn figures(sorted: &[Duration]) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(sorted, 0.50),
        percentile(sorted, 0.99),
        percentile(sorted, 1.0)
    )
}

/// `ALLOCATIONS` runs of the plugin for `command` (each its own container
/// id), each timed from start to exit, sorted.
fn timed_calls(
    node: &node_ns::NodeNs,
    command: &str,
    pod: Option<&NetNs>,
    config: &serde_json::Value,
) -> Vec<Duration> {
    let mut took: Vec<Duration> = (0..ALLOCATIONS)
        .map(|n| {
            let started = Instant::now();
            let output = node.cni("ipam-cni", command, &format!("bench-{n}"), pod, config);
            let elapsed = started.elapsed();
            node_ns::assert_ok(&output, command);
            elapsed
        })
        .collect();
    took.sort();
    took
}

/// Where a run keeps the agent's state directory.
#[derive(Clone, Copy, Debug)]
enum StateOn {
    /// A tmpfs mounted by the bench, as `/run` is on a node.
    Tmpfs,
    /// The temporary directory's own filesystem.
    Disk,
}

impl StateOn {
    /// The runs `IPAM_BENCH_STATE_ON` asks for: `tmpfs`, `disk`, or both
    /// (unset or `both`, tmpfs first).
    fn asked() -> Vec<Self> {
        match std::env::var("IPAM_BENCH_STATE_ON").as_deref() {
            Err(_) | Ok("both") => vec![StateOn::Tmpfs, StateOn::Disk],
            Ok("tmpfs") => vec![StateOn::Tmpfs],
            Ok("disk") => vec![StateOn::Disk],
            Ok(other) => panic!("IPAM_BENCH_STATE_ON={other:?}: tmpfs, disk or both"),
        }
    }

    fn describe(self, dir: &Path) -> String {
        match self {
            StateOn::Tmpfs => format!("state on a {}, as deployed under /run", filesystem_of(dir)),
            StateOn::Disk => format!("state on the temporary directory's {}", filesystem_of(dir)),
        }
    }
}

/// The filesystem `dir` is on: the usual ones by name.
fn filesystem_of(dir: &Path) -> String {
    let magic = match rustix::fs::statfs(dir) {
        Ok(stat) => stat.f_type as u64,
        Err(error) => return format!("filesystem that statfs cannot tell ({error})"),
    };
    match magic {
        0x0102_1994 => "tmpfs".into(),
        0xEF53 => "ext4 (or ext2/3)".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlayfs".into(),
        other => format!("filesystem of type {other:#x}"),
    }
}

/// A tmpfs mounted on a directory, unmounted on drop.
struct TmpfsMount(PathBuf);

impl TmpfsMount {
    /// On `dir`, which exists.
    fn on(dir: &Path) -> Self {
        rustix::mount::mount(
            "tmpfs",
            dir,
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            None,
        )
        .unwrap_or_else(|e| panic!("mounting a tmpfs on {}: {e}", dir.display()));
        Self(dir.to_path_buf())
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

fn agent_flags() -> Vec<String> {
    let mut extra: Vec<String> = std::env::var("IPAM_BENCH_AGENT_FLAGS")
        .map(|flags| flags.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    // The agent's default status interval, as deployed, unless asked.
    if !extra
        .iter()
        .any(|flag| flag.starts_with("--status-interval-ms"))
    {
        extra.push("--status-interval-ms=250".into());
    }
    extra
}

/// The bucket bound under which 99% of the agent's ADDs finished, and
/// their mean, in milliseconds, from its request-duration histogram.
fn agent_share(metrics: &str) -> (f64, f64) {
    let agent_side = |name: &str| {
        support::metric(
            metrics,
            &format!("ipam_agent_cni_request_duration_seconds_{name}{{command=\"ADD\"}}"),
        )
        .unwrap_or(f64::NAN)
    };
    let count = agent_side("count");
    let p99_bound = metrics
        .lines()
        .filter(|l| {
            l.starts_with("ipam_agent_cni_request_duration_seconds_bucket{")
                && l.contains("command=\"ADD\"")
        })
        .filter_map(|l| {
            let bound = l
                .split("le=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse::<f64>()
                .ok()?;
            let cumulative = l.rsplit(' ').next()?.parse::<f64>().ok()?;
            Some((bound, cumulative))
        })
        .find(|(_, cumulative)| *cumulative >= 0.99 * count)
        .map_or(f64::NAN, |(bound, _)| bound * 1000.0);
    (agent_side("sum") / count * 1000.0, p99_bound)
}

/// 1,000 ADDs on a fresh node and agent whose state is `on`; with
/// `plugin_alone`, 1,000 VERSION calls first.
async fn run(on: StateOn, extra: &[String], plugin_alone: bool) {
    // 10.0.1.10 onwards: 1,000 addresses need more than a /24.
    let node = node_ns::NodeNs::new_with_pool(
        (0..ALLOCATIONS as u32 + 10)
            .map(|n| {
                let host = 10 + n;
                format!("10.0.{}.{}", 1 + host / 256, host % 256)
            })
            .collect(),
        &extra.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let state_dir = node.setup.dir.path().join("state");
    std::fs::create_dir_all(&state_dir)
        .unwrap_or_else(|e| panic!("creating {}: {e}", state_dir.display()));
    let _tmpfs = matches!(on, StateOn::Tmpfs).then(|| TmpfsMount::on(&state_dir));
    let state_on = on.describe(&state_dir);
    let mut agent = node.setup.start(Some(&node.ns));
    node.setup.wait_ready(Some(&node.ns), &mut agent);
    let pod = NetNs::create_unique("ipam-pod").expect("a pod namespace");
    let config = node.config("1.0.0", json!({"type": "ipam-cni"}));
    if plugin_alone {
        println!("plugin: {}", support::plugin_binary().display());
        let exec_alone = timed_calls(&node, "VERSION", None, &config);
        println!(
            "ipam-cni VERSION alone (started and answering, no agent): {}",
            figures(&exec_alone)
        );
    }
    let took = timed_calls(&node, "ADD", Some(&pod), &config);
    println!(
        "cni ADD via ipam-cni + agent ({ALLOCATIONS} allocations, state saved and routes installed each; {state_on}): {}",
        figures(&took)
    );
    let (mean, p99_bound) = agent_share(&node.setup.metrics(Some(&node.ns)));
    println!("  of which in the agent: mean {mean:.2} ms, p99 under {p99_bound:.1} ms (flags: {extra:?})");
    support::kill(&mut agent);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let extra = agent_flags();
    runtime.block_on(async {
        for (n, on) in StateOn::asked().into_iter().enumerate() {
            run(on, &extra, n == 0).await;
        }
    });
}
