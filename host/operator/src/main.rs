//! `ipam-operator`: the operator's command line. Thin: parsing and
//! dispatch in `cli`, composition of the crates in each command.

mod cli;
mod duties;
mod error_text;
mod modules;
mod rate_flags;
mod serve;
mod startup;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;
use ipam_logging::LogFormat;

/// Every error that ends the process is logged in the chosen format (JSON
/// included, whatever the level) before it exits: 2 for a refused command
/// line, 1 for a failure.
fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().collect();
    let parsed = cli::expand_config_file(raw.clone())
        .map(|args| cli::Cli::try_parse_from(args).map_err(refused));
    let args = match parsed {
        Ok(Ok(args)) => args,
        Ok(Err(code)) => return code,
        Err(error) => {
            let (format, level) = cli::LogArgs::before_parsing(&raw);
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

/// A command line clap refused (or `--help`, `--version`): clap's own
/// message and code, or, with `--log-format json`, the message as a JSON
/// log line and code 2.
fn refused(error: clap::Error) -> ExitCode {
    let (format, level) = cli::LogArgs::before_parsing(&std::env::args().collect::<Vec<_>>());
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    if informational || format == LogFormat::Text {
        let _ = error.print();
        return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
    }
    ipam_logging::init(format, &level);
    ipam_logging::fatal(error.render().to_string().trim());
    ExitCode::from(2)
}
