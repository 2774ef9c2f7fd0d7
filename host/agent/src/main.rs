//! `ipam-agent`: see the crate's README and docs/agent.md.

use std::process::ExitCode;

use clap::Parser;
use ipam_agent::cli::{Cli, DEFAULT_LOG_LEVEL};

/// Every error that ends the agent is logged in the chosen format (JSON
/// included, whatever the level) before it exits: 2 for a refused command
/// line, 1 for a failure.
#[tokio::main]
async fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(&raw) {
        Ok(cli) => cli,
        Err(error) => {
            let default = DEFAULT_LOG_LEVEL.parse().unwrap_or(tracing::Level::INFO);
            return ipam_logging::early::refused(error, &raw, default);
        }
    };
    ipam_logging::init(cli.log_format, &cli.log_level);
    match ipam_agent::run::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            ipam_logging::fatal(&format!("{error:#}"));
            ExitCode::FAILURE
        }
    }
}
