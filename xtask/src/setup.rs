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

/// `kubectl` (with its built-in kustomize) for the deploy tests: Debian's
/// package when no kubectl is on the PATH.
pub fn ensure_kubectl() -> Result<(), String> {
    if succeeds(Command::new("kubectl").args(["version", "--client"])) {
        return Ok(());
    }
    ensure_debian_packages(&["kubectl"])
}

/// What the AWS provider's tests run moto_server with.
const MOTO: &str = "moto[server]>=5,<6";

/// A Python that has moto (PyPI `moto[server]`, with boto3) for the AWS
/// provider's tests: python3's own, else installed there with pip, else in a
/// virtual environment in the build cache (for an externally managed
/// Python). Its path, for the tests' IPAM_MOTO_PYTHON.
pub fn ensure_moto(build_cache: &std::path::Path) -> Result<String, String> {
    let has_moto = |python: &str| {
        succeeds(Command::new(python).args(["-c", "import moto.server, boto3, flask"]))
    };
    let venv = build_cache.join("moto-venv");
    let venv_python = venv.join("bin").join("python3").display().to_string();
    for python in ["python3", venv_python.as_str()] {
        if has_moto(python) {
            return Ok(python.to_string());
        }
    }
    eprintln!("xtask: installing {MOTO} with pip (for the AWS provider's tests)");
    if succeeds(Command::new("python3").args(["-m", "pip", "install", "--quiet", MOTO]))
        && has_moto("python3")
    {
        return Ok("python3".to_string());
    }
    eprintln!(
        "xtask: python3 refused the install; using a virtual environment in {}",
        venv.display()
    );
    if !succeeds(Command::new("python3").args(["-m", "venv", "--help"])) {
        ensure_debian_packages(&["python3-venv"])?;
    }
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    run(Command::new(&venv_python).args(["-m", "pip", "install", "--quiet", MOTO]))?;
    if has_moto(&venv_python) {
        Ok(venv_python)
    } else {
        Err(format!(
            "{MOTO} is still missing after installing it into {}",
            venv.display()
        ))
    }
}
