//! `ipam-operator`: the operator's command line. Thin: parsing and
//! dispatch in `cli`, composition of the crates in each command.

mod cli;
mod duties;
mod error_text;
mod modules;
mod rate_flags;
mod serve;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = match cli::expand_config_file(std::env::args().collect()) {
        Ok(args) => cli::Cli::parse_from(args),
        Err(error) => {
            eprintln!("error: {}", error_text::chain(&error));
            return std::process::ExitCode::FAILURE;
        }
    };
    cli::init_logging(&args.log);
    match cli::run(args) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", error_text::chain(&error));
            std::process::ExitCode::FAILURE
        }
    }
}
