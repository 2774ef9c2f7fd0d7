//! The AWS component's build, and for `test` its clippy, in a lane of their
//! own. aws-sdk-ec2 is one crate whose compile is mostly single-threaded: in
//! `test`, the lane runs in the background (output to a log file in the build
//! cache) while the host is linted and built on the other core, and the tests
//! wait for it only when they are about to run. Either step is skipped when
//! the component cache holds its result for the current inputs.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::components::{
    clippy_cargo, components_dir, copy, target_dir, toolchain_identity, wasm_cargo, Toolchain, AWS,
};
use crate::{build_cache, component_cache, run};

pub enum Mode {
    /// Build only, output on the console (`providers`, `run`, `bench`).
    Foreground,
    /// Build and lint in a background thread, output to the lane's log.
    BackgroundWithLint,
}

pub struct AwsLane {
    key: String,
    work: Option<JoinHandle<Result<(), String>>>,
    /// The command the lane is running, to stop it if xtask gives up first.
    running: Arc<AtomicU32>,
    log: PathBuf,
    started: Instant,
}

impl AwsLane {
    pub fn start(toolchain: Toolchain, mode: Mode) -> Result<AwsLane, String> {
        let (package, artifact, name) = AWS;
        let key = component_cache::key(&toolchain_identity(&toolchain)?)?;
        let short = key[..16].to_string();
        let build = component_cache::component(name, &key).is_none();
        let lint = matches!(mode, Mode::BackgroundWithLint) && !component_cache::linted(name, &key);
        let log = build_cache().join("aws-lane.log");
        let mut lane = AwsLane {
            key: key.clone(),
            work: None,
            running: Arc::new(AtomicU32::new(0)),
            log: log.clone(),
            started: Instant::now(),
        };
        if !build {
            eprintln!(
                "xtask: {name} component from the build cache (inputs unchanged, key {short})"
            );
        }
        if !build && !lint {
            return Ok(lane);
        }
        let mut build_command = wasm_cargo(&toolchain, "build")?;
        build_command.args(["--package", package]);
        let built = target_dir(&toolchain).join(format!("{artifact}.wasm"));
        let store = move |key: &str| component_cache::store(name, key, &built);
        if build {
            eprintln!(
                "xtask: building the {name} component (its inputs changed since the cached build, \
                 key {short}; when aws-sdk-ec2 itself is not built yet this takes about 12 minutes \
                 on 2 cores)"
            );
        }
        if let Mode::Foreground = mode {
            run(&mut build_command)?;
            store(&key)?;
            return Ok(lane);
        }
        let mut lint_command = clippy_cargo(&toolchain, "aws-clippy")?;
        lint_command.args([
            "--package",
            package,
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]);
        if lint {
            eprintln!("xtask: clippy on {package} (its inputs changed since it last passed)");
        }
        eprintln!(
            "xtask: the {name} lane runs in the background; its output: {}",
            log.display()
        );
        let running = lane.running.clone();
        lane.work = Some(std::thread::spawn(move || {
            let output = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
            if build {
                run_logged(&mut build_command, &output, &running)?;
                store(&key)?;
            }
            if lint {
                run_logged(&mut lint_command, &output, &running)?;
                component_cache::mark_linted(name, &key)?;
            }
            Ok(())
        }));
        Ok(lane)
    }

    /// Wait for the lane, then put the component where the host finds it.
    pub fn finish(mut self) -> Result<(), String> {
        let (_, _, name) = AWS;
        if let Some(work) = self.work.take() {
            eprintln!("xtask: waiting for the {name} lane");
            let outcome = work
                .join()
                .unwrap_or_else(|_| Err(format!("the {name} lane panicked")));
            if let Err(message) = outcome {
                show_tail(&self.log);
                return Err(message);
            }
            eprintln!(
                "xtask: the {name} lane finished after {:.0} s",
                self.started.elapsed().as_secs_f64()
            );
        }
        let cached = component_cache::component(name, &self.key)
            .ok_or_else(|| format!("the {name} component is not in the build cache"))?;
        copy(&cached, &components_dir().join(format!("{name}.wasm")))
    }
}

impl Drop for AwsLane {
    /// xtask is giving up before the lane finished: stop its command rather
    /// than leave a compile running behind it.
    fn drop(&mut self) {
        let pid = self.running.load(Ordering::SeqCst);
        if self.work.is_some() && pid != 0 {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

fn run_logged(command: &mut Command, log: &File, running: &AtomicU32) -> Result<(), String> {
    let shown = format!("{command:?}");
    let clone = |file: &File| file.try_clone().map_err(|e| format!("lane log: {e}"));
    let mut child = command
        .stdout(Stdio::from(clone(log)?))
        .stderr(Stdio::from(clone(log)?))
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    running.store(child.id(), Ordering::SeqCst);
    let status = child.wait().map_err(|e| format!("{shown}: {e}"));
    running.store(0, Ordering::SeqCst);
    match status? {
        status if status.success() => Ok(()),
        status => Err(format!("{shown} failed: {status}")),
    }
}

/// The end of the lane's log, where a compile error or lint is.
fn show_tail(log: &std::path::Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    eprintln!("xtask: the last lines of {}:", log.display());
    for line in &lines[lines.len().saturating_sub(80)..] {
        eprintln!("{line}");
    }
}
