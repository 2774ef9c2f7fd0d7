//! `ipam-operator`: the operator's command line. Thin: parsing and
//! dispatch in `cli`, composition of the crates in each command.

mod cli;
mod duties;
mod error_text;
mod modules;
mod plan_report;
mod rate_flags;
mod serve;
mod startup;

use std::process::ExitCode;

use clap::Parser;

/// Every error that ends the process is logged in the chosen format (JSON
/// included, whatever the level) before it exits: 2 for a refused command
/// line, 1 for a failure.
fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    let default_level = cli::DEFAULT_LOG_LEVEL
        .parse()
        .unwrap_or(tracing::Level::WARN);
    let args = match cli::expand_config_file(raw.clone()) {
        Ok(args) => match cli::Cli::try_parse_from(args) {
            Ok(args) => args,
            Err(error) => return ipam_logging::early::refused(error, &raw, default_level),
        },
        Err(error) => {
            let (format, level) = ipam_logging::early::before_parsing(&raw, default_level);
            ipam_logging::init(format, &level);
            ipam_logging::fatal(&error_text::chain(&error));
            return ExitCode::FAILURE;
        }
    };
    ipam_logging::init(args.log.log_format, &args.log.log_level);
    match cli::run(args) {
        Ok(code) => code,
        Err(error) => {
            ipam_logging::fatal(&error_text::chain(&error));
            ExitCode::FAILURE
        }
    }
}
