//! The operator pulling its module from a real registry with TLS and a
//! password (`ipam_tests::registry::RegistryServer`): `provider inspect`
//! with the credentials file and the CA shows the pulled module; `run` with
//! a wrong password or without the CA stops before anything starts, names
//! the registry, never prints the password, and leaves no module in the
//! cache.

use std::path::Path;
use std::process::{Command, Output};

use ipam_tests::registry::{provider_artifact, RegistryServer};

/// `ipam-operator ARGS` with its cache under `dir`.
fn operator(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args(args)
        // No cluster: a refused pull must stop the start before one is asked.
        .env("KUBECONFIG", dir.join("absent"))
        .env("IPAM_CACHE_DIR", dir.join("cache"))
        .env_remove("IPAM_REGISTRY_CREDENTIALS_FILE")
        .env_remove("IPAM_EGRESS_CA_FILE")
        .output()
        .expect("the operator runs")
}

/// The modules the operator's cache holds.
fn cached_modules(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("cache").join("modules"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn the_operator_pulls_its_module_with_the_credentials_file_and_refuses_to_start_without() {
    let registry = RegistryServer::start().await;
    let (layout, digest) = provider_artifact("mock");
    registry
        .push(&layout, "providers/mock:0.1.0")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
    let module = format!("oci://{}/providers/mock@{digest}", registry.address());
    let ca = registry.ca_path().display().to_string();
    let credentials = registry.docker_config_file().display().to_string();

    // A wrong password: `run` stops, naming the registry and the user.
    let dir = tempfile::tempdir().unwrap();
    let (user, _) = registry.credentials();
    let wrong = dir.path().join("wrong.json");
    std::fs::write(&wrong, registry.docker_config_as(user, "wrong-password")).unwrap();
    let wrong = wrong.display().to_string();
    let output = operator(
        dir.path(),
        &[
            "run",
            "--provider",
            &module,
            "--egress-ca-file",
            &ca,
            "--registry-credentials-file",
            &wrong,
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started: {stderr}");
    assert!(
        stderr.contains(&format!(
            "registry {} refused the credentials of user {user}",
            registry.address()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-password"), "{stderr}");
    assert!(
        cached_modules(dir.path()).is_empty(),
        "{:?}",
        cached_modules(dir.path())
    );

    // The right credentials without the registry's CA: refused too.
    let output = operator(
        dir.path(),
        &[
            "run",
            "--provider",
            &module,
            "--registry-credentials-file",
            &credentials,
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "started: {stderr}");
    assert!(stderr.contains(&registry.address()), "{stderr}");
    assert!(cached_modules(dir.path()).is_empty());

    // Both, through their environment variables: `provider inspect` pulls
    // the module and shows it; it is then in the cache.
    let output = Command::new(env!("CARGO_BIN_EXE_ipam-operator"))
        .args(["provider", "inspect", &module])
        .env("IPAM_CACHE_DIR", dir.path().join("cache"))
        .env("IPAM_EGRESS_CA_FILE", &ca)
        .env("IPAM_REGISTRY_CREDENTIALS_FILE", &credentials)
        .output()
        .expect("the operator runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("name:            mock"), "{stdout}");
    assert_eq!(
        cached_modules(dir.path()).len(),
        2,
        "the module and its layer digest"
    );
}
