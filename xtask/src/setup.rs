//! Installing what a task needs when it is missing.

use std::process::Command;

use crate::run;

fn succeeds(command: &mut Command) -> bool {
    command
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn rustup_has_target(target: &str) -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == target)
        })
        .unwrap_or(false)
}

/// The target from rustup, installing it if rustup can; false if it cannot.
pub fn try_rustup_target(target: &str) -> bool {
    if rustup_has_target(target) {
        return true;
    }
    eprintln!("xtask: installing the {target} target with rustup");
    succeeds(Command::new("rustup").args(["target", "add", target])) && rustup_has_target(target)
}

pub fn ensure_rustup_components(components: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| {
            !succeeds(Command::new("cargo").args([c.trim_start_matches("rust"), "--version"]))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    run(Command::new("rustup")
        .arg("component")
        .arg("add")
        .args(&missing))
}

fn deb_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Install Debian packages that are not installed yet.
pub fn ensure_debian_packages(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !deb_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing Debian packages: {}", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing))
}
