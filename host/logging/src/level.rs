//! `--log-level`, checked: a level, or comma-separated tracing-subscriber
//! `EnvFilter` directives where each is a level or `TARGET=LEVEL`
//! (`info,ipam_engine=debug`). `EnvFilter` itself takes a bare word as a
//! target to log at every level, so `verbose` would silently mean "only
//! the target `verbose`": a bare word that is not a level is refused here.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::filter::{Directive, EnvFilter};

/// The level names a bare directive may be.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// Why a `--log-level` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogLevelError {
    #[error("the log level is empty; give one of {}", LEVELS.join(", "))]
    Empty,
    #[error(
        "unknown log level {0:?}: give one of {levels}, or directives TARGET=LEVEL separated by commas (e.g. info,ipam_engine=debug)",
        levels = LEVELS.join(", ")
    )]
    UnknownLevel(String),
    #[error("log directive {directive:?} is not TARGET=LEVEL with a known level: {reason}")]
    BadDirective { directive: String, reason: String },
}

/// A checked `--log-level`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLevel(String);

impl LogLevel {
    /// Exactly `level`.
    pub fn level(level: tracing::Level) -> Self {
        Self(level.as_str().to_ascii_lowercase())
    }

    /// The filter this level describes, with [`crate::FATAL_TARGET`] at
    /// error whatever it says.
    pub fn filter_with_fatal(&self) -> EnvFilter {
        let fatal = format!("{}=error", crate::FATAL_TARGET);
        // Both parts were checked (the level when parsed, the fatal
        // directive is a constant), so the fallback is never taken.
        EnvFilter::builder()
            .parse(format!("{},{fatal}", self.0))
            .unwrap_or_else(|_| EnvFilter::new(fatal))
    }
}

impl FromStr for LogLevel {
    type Err = LogLevelError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let directives: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .collect();
        if directives.is_empty() {
            return Err(LogLevelError::Empty);
        }
        for directive in &directives {
            if LEVELS.contains(&directive.to_ascii_lowercase().as_str()) {
                continue;
            }
            if !directive.contains('=') {
                return Err(LogLevelError::UnknownLevel(directive.to_string()));
            }
            Directive::from_str(directive).map_err(|error| LogLevelError::BadDirective {
                directive: directive.to_string(),
                reason: error.to_string(),
            })?;
        }
        Ok(Self(directives.join(",")))
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives_are_taken_and_typos_refused() {
        let taken = [
            ("warn", "warn"),
            ("INFO", "INFO"),
            (" debug ", "debug"),
            ("off", "off"),
            ("info,ipam_engine=debug", "info,ipam_engine=debug"),
            (
                "kube=warn, ipam_k8s::lease=trace",
                "kube=warn,ipam_k8s::lease=trace",
            ),
        ];
        for (given, kept) in taken {
            assert_eq!(
                given.parse::<LogLevel>().map(|l| l.to_string()),
                Ok(kept.to_string()),
                "{given:?}"
            );
        }
        let refused = [
            ("", LogLevelError::Empty),
            (" , ", LogLevelError::Empty),
            ("verbose", LogLevelError::UnknownLevel("verbose".into())),
            ("warning", LogLevelError::UnknownLevel("warning".into())),
            (
                "info,ipam_engine",
                LogLevelError::UnknownLevel("ipam_engine".into()),
            ),
        ];
        for (given, error) in refused {
            assert_eq!(given.parse::<LogLevel>(), Err(error), "{given:?}");
        }
        let bad = "ipam_engine=loud".parse::<LogLevel>().unwrap_err();
        assert!(
            matches!(&bad, LogLevelError::BadDirective { directive, .. } if directive == "ipam_engine=loud"),
            "{bad:?}"
        );
    }

    #[test]
    fn the_refusal_names_the_word_and_the_levels() {
        let text = "verbose".parse::<LogLevel>().unwrap_err().to_string();
        assert!(
            text.contains("\"verbose\"") && text.contains("trace, debug, info, warn, error, off"),
            "{text}"
        );
    }
}
