//! Logging as the operator and the node agent set it up: `--log-format`
//! (text or JSON lines, on stderr) and `--log-level` (a level, or
//! tracing-subscriber `EnvFilter` directives, checked when the flag is
//! parsed so that a typo is refused instead of silently logging nothing).
//! A fatal error goes through [`fatal`], in the chosen format and whatever
//! the level, just before the process exits non-zero.

pub mod early;
mod level;

pub use level::{LogLevel, LogLevelError};

use std::io::IsTerminal;

use clap::ValueEnum;

/// How log lines are written on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`,
    /// `target`), for a log collector.
    Json,
}

/// The target of [`fatal`]'s event: always enabled, so that `--log-level
/// off` or a filter naming other targets still shows why the process ended.
pub const FATAL_TARGET: &str = "fatal";

/// Install the process's subscriber: `format` on stderr, events filtered
/// by `level`, plus [`FATAL_TARGET`] at error. Colours only on a terminal:
/// `| tee run.log` must not keep escape codes.
pub fn init(format: LogFormat, level: &LogLevel) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(level.filter_with_fatal())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Log the error that ends the process (its whole chain of causes, as one
/// message), at error level in the subscriber's format.
pub fn fatal(message: &str) {
    tracing::error!(target: FATAL_TARGET, "{message}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_fatal_error_is_one_json_line_at_error_even_with_logging_off() {
        let captured = Captured::default();
        let writer = captured.clone();
        let level: LogLevel = "off".parse().unwrap();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(level.filter_with_fatal())
            .with_writer(move || writer.clone())
            .json()
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!("an ordinary error, filtered out");
            fatal("reading module /nope.wasm: No such file or directory");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["level"], "ERROR");
        assert_eq!(
            line["fields"]["message"],
            "reading module /nope.wasm: No such file or directory"
        );
        assert_eq!(line["target"], FATAL_TARGET);
    }
}
