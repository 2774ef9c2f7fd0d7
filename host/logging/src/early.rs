//! Logging before the command line is parsed: the log flags read from the
//! arguments and the environment by hand, for an error clap or a config
//! file raises before the flags exist, so that it too is logged in the
//! format asked for.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::ValueEnum;

use crate::{LogFormat, LogLevel};

/// The flags and variables both binaries take.
pub const FORMAT_FLAG: &str = "--log-format";
pub const FORMAT_VARIABLE: &str = "IPAM_LOG_FORMAT";
pub const LEVEL_FLAG: &str = "--log-level";
pub const LEVEL_VARIABLE: &str = "IPAM_LOG";

/// The log flags as `args` (then the variables) give them; a value that
/// would be refused gives text, or `default_level`.
pub fn before_parsing(args: &[String], default_level: tracing::Level) -> (LogFormat, LogLevel) {
    let format = given(args, FORMAT_FLAG)
        .or_else(|| std::env::var(FORMAT_VARIABLE).ok())
        .and_then(|value| LogFormat::from_str(&value, true).ok())
        .unwrap_or(LogFormat::Text);
    let level = given(args, LEVEL_FLAG)
        .or_else(|| std::env::var(LEVEL_VARIABLE).ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| LogLevel::level(default_level));
    (format, level)
}

/// The last value of `flag` in `args` (`--flag V` or `--flag=V`).
fn given(args: &[String], flag: &str) -> Option<String> {
    let mut value = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == flag {
            value = rest.next().cloned();
        } else if let Some(inline) = arg.strip_prefix(flag).and_then(|v| v.strip_prefix('=')) {
            value = Some(inline.to_string());
        }
    }
    value
}

/// A command line clap refused (or `--help`, `--version`): clap's own
/// output and code; with JSON logs, the message as one fatal JSON line and
/// code 2.
pub fn refused(error: clap::Error, args: &[String], default_level: tracing::Level) -> ExitCode {
    let (format, level) = before_parsing(args, default_level);
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    if informational || format == LogFormat::Text {
        let _ = error.print();
        return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
    }
    crate::init(format, &level);
    crate::fatal(error.render().to_string().trim());
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_last_flag_wins_in_either_spelling() {
        let cases: [(&[&str], Option<&str>); 5] = [
            (&["x", "run"], None),
            (&["x", "--log-format", "json"], Some("json")),
            (
                &["x", "--log-format=json", "run", "--log-format", "text"],
                Some("text"),
            ),
            (&["x", "--log-format"], None),
            (&["x", "--log-formats=json"], None),
        ];
        for (given_args, want) in cases {
            assert_eq!(
                given(&args(given_args), FORMAT_FLAG).as_deref(),
                want,
                "{given_args:?}"
            );
        }
    }
}
