//! The host's resident set, measured in a process of its own: a test runs
//! this test binary again on one ignored test (the case named in an
//! environment variable), which prints how far its RSS peaked above where
//! it started, so that what is measured is the one guest's host and not
//! the tests running beside it.

/// The resident set of this process now (`VmRSS`) or at its peak (`VmHWM`),
/// from /proc (Linux).
pub fn resident_bytes(which: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status is readable: these tests need Linux's /proc");
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix(which)?.strip_prefix(':'))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .unwrap_or_else(|| panic!("{which} in /proc/self/status"));
    kb * 1024
}

/// What the child prints: its peak RSS above `before`, and the peak itself.
pub fn print_peak_above(before: usize) {
    let peak = resident_bytes("VmHWM");
    println!("rss-growth-bytes={}", peak.saturating_sub(before));
    println!("rss-peak-bytes={peak}");
}

/// What one child measured.
pub struct Measured {
    pub growth: usize,
    pub peak: usize,
}

/// Run the ignored test `test` (its full path) in a process of its own with
/// `variable` set to `case`; it must pass and print [`print_peak_above`]'s
/// figures.
pub fn in_own_process(test: &str, variable: &str, case: &str) -> Measured {
    let binary = std::env::current_exe().expect("the test binary");
    let output = std::process::Command::new(&binary)
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(variable, case)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{case}: {stdout}\n{stderr}");
    let figure = |name: &str| -> usize {
        stdout
            .lines()
            .chain(stderr.lines())
            .find_map(|line| Some(line.split_once(name)?.1))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{case}: no {name} in {stdout}\n{stderr}"))
    };
    let measured = Measured {
        growth: figure("rss-growth-bytes="),
        peak: figure("rss-peak-bytes="),
    };
    eprintln!(
        "{case}: peak RSS {} KiB, {} KiB above the start",
        measured.peak >> 10,
        measured.growth >> 10
    );
    measured
}
