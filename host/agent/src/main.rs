//! `ipam-agent`: see the crate's docs and docs/agent.md.

use clap::Parser;
use ipam_agent::cli::{Agent, AgentCommand, Cli, LogFormat};
use ipam_agent::install_cni::{self, InstallCniArgs};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let agent = Agent::parse();
    match (agent.command, agent.run) {
        (Some(AgentCommand::InstallCni(args)), _) => install(&args),
        (None, Some(cli)) => run(cli).await,
        // Clap requires the agent's flags when no subcommand is given.
        (None, None) => {
            eprintln!("ipam-agent: no subcommand and no agent flags");
            std::process::ExitCode::from(2)
        }
    }
}

fn install(args: &InstallCniArgs) -> std::process::ExitCode {
    match install_cni::install(args) {
        Ok((installed, conflist)) => {
            for file in installed {
                println!("{file}");
            }
            println!(
                "conflist {:?} (CNI {}): {}",
                conflist.name,
                conflist.cni_version,
                conflist.plugin_types.join(" -> ")
            );
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("ipam-agent install-cni: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    match ipam_agent::run::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
