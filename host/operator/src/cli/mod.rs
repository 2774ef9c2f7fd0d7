//! Command-line parsing and dispatch; errors become `anyhow` only here.

mod ipam_mode;
mod kvstore_args;
mod kvstore_duties;
mod provider;
mod registry_args;
mod run;
mod simulate;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "ipam-operator",
    version,
    args_override_self = true,
    about = "Cloud-IPAM operator for Kubernetes with WebAssembly provider plug-ins"
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, global = true, env = "IPAM_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (tracing-subscriber EnvFilter syntax).
    #[arg(long, global = true, env = "IPAM_LOG", default_value = "warn")]
    pub log_level: String,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect and check provider modules.
    #[command(subcommand)]
    Provider(provider::ProviderCommand),
    /// Run the operator in a cluster: watch CiliumNodes, keep their pools
    /// with the provider module, serve health and metrics.
    Run(Box<run::RunArgs>),
    /// Run the engine against the mock provider and simulated nodes whose
    /// pods come and go; prints progress and a summary.
    Simulate(simulate::SimulateArgs),
}

pub fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colours only on a terminal: `| tee run.log` must not keep escape codes.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Each command picks its runtime: the simulation needs a paused clock.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Provider(command) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(provider::run(command)),
        Command::Simulate(args) => simulate::run(args),
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(run::run(*args)),
    }
}

/// The command line with `run --config FILE` (or `IPAM_CONFIG`) expanded:
/// the file's keys become flags placed right after `run`, so the command
/// line's own flags and environment variables... come after and win.
pub fn expand_config_file(args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let Some(at) = args.iter().position(|a| a == "run") else {
        return Ok(args);
    };
    let mut file = std::env::var("IPAM_CONFIG").ok();
    let mut rest = args[at + 1..].iter();
    while let Some(arg) = rest.next() {
        if let Some(value) = arg.strip_prefix("--config=") {
            file = Some(value.to_string());
        } else if arg == "--config" {
            file = rest.next().cloned();
        }
    }
    let Some(file) = file else {
        return Ok(args);
    };
    let mut expanded = args[..=at].to_vec();
    expanded.extend(run::config_file_args(std::path::Path::new(&file))?);
    expanded.extend(args[at + 1..].iter().cloned());
    Ok(expanded)
}
