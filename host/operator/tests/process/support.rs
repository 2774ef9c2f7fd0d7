//! What both process tests need: a free port, a GET against the operator's
//! endpoints, a kubeconfig for the fake API server.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

pub use ipam_health_http::probe::get as http_get;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub use ipam_tests::fake_apiserver::write_kubeconfig;

/// Send SIGTERM to `child` and wait up to 10 s for it to exit.
pub async fn terminate(child: &mut Child) -> ExitStatus {
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the operator did not stop within 10 s of SIGTERM");
}

/// `ipam-operator run ARGS` against the API server of `kubeconfig`, with
/// its cache under `dir`, the built components, its endpoints on a free
/// port, logging at info to a piped stderr (not yet started).
pub fn operator_run(dir: &Path, kubeconfig: &Path, args: &[String]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ipam-operator"));
    command
        .arg("run")
        .args(args)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--listen=127.0.0.1:{}", free_port()))
        .env("IPAM_CACHE_DIR", dir.join("cache"))
        .env("IPAM_COMPONENTS_DIR", ipam_tests::components_dir())
        .env("IPAM_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}
