//! `ipam-agent`: see the crate's README and docs/agent.md.

use std::process::ExitCode;

use clap::Parser;
use ipam_agent::cli::{Agent, AgentCommand, Cli, DEFAULT_LOG_LEVEL};
use ipam_agent::install_cni::{self, InstallCniArgs};

/// Every error that ends the agent is logged in the chosen format (JSON
/// included, whatever the level) before it exits: 2 for a refused command
/// line, 1 for a failure.
#[tokio::main]
async fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    let agent = match Agent::try_parse_from(&raw) {
        Ok(agent) => agent,
        Err(error) => {
            let default = DEFAULT_LOG_LEVEL.parse().unwrap_or(tracing::Level::INFO);
            return ipam_logging::early::refused(error, &raw, default);
        }
    };
    match (agent.command, agent.run) {
        (Some(AgentCommand::InstallCni(args)), _) => install(&args),
        (None, Some(cli)) => run(cli).await,
        // Clap requires the agent's flags when no subcommand is given.
        (None, None) => {
            eprintln!("ipam-agent: no subcommand and no agent flags");
            ExitCode::from(2)
        }
    }
}

fn install(args: &InstallCniArgs) -> ExitCode {
    match install_cni::install(args) {
        Ok((installed, conflist)) => {
            for file in installed {
                println!("{file}");
            }
            if let Some(conflist) = conflist {
                println!(
                    "conflist {:?} (CNI {}): {}",
                    conflist.name,
                    conflist.cni_version,
                    conflist.plugin_types.join(" -> ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("ipam-agent install-cni: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    ipam_logging::init(cli.log_format, &cli.log_level);
    match ipam_agent::run::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            ipam_logging::fatal(&format!("{error:#}"));
            ExitCode::FAILURE
        }
    }
}
