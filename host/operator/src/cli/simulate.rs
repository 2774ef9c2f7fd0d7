//! `ipam-operator simulate [--scenario FILE]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ipam_provider_runtime::{CallLimits, ProviderConfig, ProviderRuntime, RuntimeConfig};
use ipam_simulate::{Scenario, DEFAULT_SCENARIO};

use crate::modules::{resolve_module, search_path};

#[derive(Args)]
pub struct SimulateArgs {
    /// A scenario file (YAML); the embedded default when left out
    /// (`--print-default` shows it; its comments document the format).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// The mock provider module: a .wasm file or the name of a built component.
    #[arg(long, default_value = "mock")]
    module: String,
    /// Print the embedded default scenario and exit.
    #[arg(long)]
    print_default: bool,
}

/// Runs on its own current-thread runtime with tokio's clock paused: the
/// engine's and the cloud model's waits cost no wall time.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.print_default {
        print!("{DEFAULT_SCENARIO}");
        return Ok(ExitCode::SUCCESS);
    }
    let text = match &args.scenario {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        None => DEFAULT_SCENARIO.to_string(),
    };
    let scenario = Scenario::parse(&text).with_context(|| match &args.scenario {
        Some(path) => path.display().to_string(),
        None => "the embedded default scenario".into(),
    })?;
    let module_path = resolve_module(&args.module, &search_path())?;
    let module = std::fs::read(&module_path).with_context(|| {
        format!(
            "reading {} (build the components first: cargo xtask providers)",
            module_path.display()
        )
    })?;
    let runtime = ProviderRuntime::new(RuntimeConfig::default())?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    println!(
        "simulating {:?}: {} nodes for {} s of simulated time (mock provider {})",
        scenario.name,
        scenario.nodes.count,
        scenario.duration_seconds,
        module_path.display()
    );
    let mut config = ProviderConfig::new(scenario.mock_settings()?);
    config.limits = CallLimits {
        timeout: Duration::from_secs(30),
        ..CallLimits::default()
    };
    let summary = tokio.block_on(async {
        let provider = runtime
            .load(&module, config)
            .await
            .with_context(|| format!("loading {}", module_path.display()))?;
        let summary = ipam_simulate::run(provider, &scenario, &mut |p| println!("{p}")).await?;
        anyhow::Ok(summary)
    })?;
    println!();
    print!("{summary}");
    if summary.healthy() {
        Ok(ExitCode::SUCCESS)
    } else {
        println!("  NOT HEALTHY: a node unsatisfied, a phase that did not converge, a leak left or an address problem");
        Ok(ExitCode::FAILURE)
    }
}
