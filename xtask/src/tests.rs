//! Running `cargo test` while echoing its output and counting its results.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[derive(Debug, Default)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
}

impl Tally {
    /// Count a libtest summary: `test result: ok. 3 passed; 1 failed; ...`.
    fn add(&mut self, line: &str) {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(kind), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            match kind {
                "passed" => self.passed += count,
                "failed" => self.failed += count,
                _ => {}
            }
        }
    }
}

/// Run a test command, echoing its standard output, adding its results.
pub fn run(command: &mut Command, tally: &mut Tally) -> Result<(), String> {
    let shown = format!("{command:?}");
    eprintln!("xtask: $ {shown}");
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("{shown}: {e}"))?;
            println!("{line}");
            tally.add(&line);
        }
    }
    let status = child.wait().map_err(|e| format!("{shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed: {status}"))
    }
}

#[cfg(test)]
mod unit {
    use super::Tally;

    #[test]
    fn counts_libtest_summaries() {
        let mut tally = Tally::default();
        tally.add("test result: ok. 13 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.40s");
        tally.add("test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out");
        tally.add("running 3 tests");
        assert_eq!((tally.passed, tally.failed), (15, 1));
    }
}
