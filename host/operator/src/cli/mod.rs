//! Command-line parsing and dispatch; errors become `anyhow` only here.

mod ipam_mode;
mod kvstore_args;
mod kvstore_duties;
mod other_writer_args;
mod plan;
mod provider;
mod registry_args;
mod run;
mod simulate;
mod start;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use ipam_logging::{LogFormat, LogLevel};

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

/// The level when neither `--log-level` nor `IPAM_LOG` says one.
pub const DEFAULT_LOG_LEVEL: &str = "warn";

#[derive(Args)]
pub struct LogArgs {
    /// Log format on stderr: text, or one JSON object per line. A fatal
    /// error is logged in it whatever the level.
    #[arg(long, global = true, env = "IPAM_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// Log level: trace, debug, info, warn, error or off, or directives
    /// TARGET=LEVEL separated by commas (info,ipam_engine=debug); anything
    /// else is refused.
    #[arg(long, global = true, env = "IPAM_LOG", default_value = DEFAULT_LOG_LEVEL)]
    pub log_level: LogLevel,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect and check provider modules.
    #[command(subcommand)]
    Provider(provider::ProviderCommand),
    /// Run the operator in a cluster: watch CiliumNodes, keep their pools
    /// with the provider module, serve health and metrics.
    Run(Box<run::RunArgs>),
    /// What `run` with the same flags would do first, read from the
    /// CiliumNodes and the cloud, changing neither: per node the pool kept
    /// as it is, the interfaces created, the addresses assigned and marked
    /// for release, the interfaces the GC would delete, and the cloud calls
    /// with their rate-model cost.
    Plan(Box<plan::PlanArgs>),
    /// Run the engine against the mock provider and simulated nodes whose
    /// pods come and go; prints progress and a summary.
    Simulate(simulate::SimulateArgs),
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
        Command::Plan(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(plan::run(*args)),
    }
}

/// The command line with `run --config FILE` (or `plan --config FILE`, or
/// `IPAM_CONFIG`) expanded: the file's keys become flags placed right after
/// the command, so the command line's own flags and environment
/// variables... come after and win.
pub fn expand_config_file(args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let Some(at) = args.iter().position(|a| a == "run" || a == "plan") else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// `command`'s arguments without help text, and its subcommands', as
    /// `command path --flag`.
    fn without_help(command: &clap::Command, path: &str) -> Vec<String> {
        let path = format!("{path} {}", command.get_name()).trim().to_string();
        let mut missing: Vec<String> = command
            .get_arguments()
            .filter(|arg| arg.get_help().is_none())
            .map(|arg| format!("{path} {}", arg.get_id()))
            .collect();
        for sub in command.get_subcommands() {
            missing.extend(without_help(sub, &path));
        }
        missing
    }

    #[test]
    fn every_flag_of_every_command_has_help_text() {
        let mut command = Cli::command();
        command.build();
        let missing = without_help(&command, "");
        assert!(missing.is_empty(), "flags without help: {missing:#?}");
    }
}
