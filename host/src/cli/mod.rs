//! Command-line parsing and dispatch; errors become `anyhow` only here.

mod provider;
mod simulate;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "ipam-operator",
    version,
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
    /// Run the engine against the mock provider and simulated nodes whose
    /// pods come and go; prints progress and a summary.
    Simulate(simulate::SimulateArgs),
}

pub fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
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
    }
}
