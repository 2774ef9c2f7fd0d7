//! Provider modules and the chart in a real registry: Debian's
//! docker-registry on 127.0.0.1 with TLS from a test CA and a password
//! (`common::registry::RegistryServer`). The artifacts `cargo xtask
//! artifacts` built are pushed with skopeo and pulled by digest with a
//! Docker config JSON file and the CA; each way a pull can go wrong fails
//! naming the registry or the reference, and leaves nothing in the cache.
//! The same with the registry asking for a Bearer token from a token
//! server. The chart goes there as an OCI chart and renders from it.

use ipam_tests as common;

use std::path::Path;
use std::process::{Command, Output};

use common::registry::{ca_trust, provider_artifact, write_oci_layout, RegistryServer};
use ipam_provider_runtime::oci::{pull, OciError, OciReference, RegistryAccess};
use ipam_provider_runtime::registry_logins::RegistryLogins;
use ipam_provider_runtime::TrustRoots;

fn reference(registry: &RegistryServer, repository: &str, digest: &str) -> OciReference {
    format!("oci://{}/{repository}@{digest}", registry.address())
        .parse()
        .expect("an OCI reference")
}

/// The registry's CA and the logins of the Docker config JSON `config`.
fn access(registry: &RegistryServer, config: &str) -> RegistryAccess {
    let logins = RegistryLogins::parse(config.as_bytes(), "test docker config").expect("logins");
    RegistryAccess::new(ca_trust(&registry.ca_path())).with_logins(logins)
}

fn logged_in(registry: &RegistryServer) -> RegistryAccess {
    let (user, password) = registry.credentials();
    access(registry, &registry.docker_config_as(user, password))
}

/// What a failed pull left in `cache`: nothing, or the test fails.
fn assert_nothing_cached(cache: &Path, case: &str) {
    let left: Vec<_> = std::fs::read_dir(cache)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{case} left {left:?} in the module cache");
}

/// Pull `reference` into an empty cache; it must fail. The error, and
/// nothing cached.
async fn refused(reference: &OciReference, access: &RegistryAccess, case: &str) -> OciError {
    let cache = tempfile::tempdir().unwrap();
    let error = pull(reference, cache.path(), access)
        .await
        .err()
        .unwrap_or_else(|| panic!("{case}: pulled"));
    assert_nothing_cached(cache.path(), case);
    error
}

#[tokio::test]
async fn each_provider_artifact_pushed_with_credentials_is_pulled_by_digest_and_runs() {
    let registry = RegistryServer::start().await;
    let cache = tempfile::tempdir().unwrap();
    for name in ["mock", "aws", "azure"] {
        let (layout, digest) = provider_artifact(name);
        registry
            .push(&layout, &format!("providers/{name}:0.1.0"))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
        let pulled = pull(
            &reference(&registry, &format!("providers/{name}"), &digest),
            cache.path(),
            &logged_in(&registry),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            pulled,
            common::component(name),
            "{name}: the built component"
        );
        let (_, info) = common::runtime()
            .describe(&pulled)
            .await
            .unwrap_or_else(|e| panic!("{name} describes itself: {e:#}"));
        assert_eq!(info.name, name);
    }
    // What was pulled runs.
    let (_, digest) = provider_artifact("mock");
    let mock = pull(
        &reference(&registry, "providers/mock", &digest),
        cache.path(),
        &logged_in(&registry),
    )
    .await
    .expect("from the cache");
    let provider = common::runtime()
        .load(&mock, common::config(&common::json(common::MOCK_SETTINGS)))
        .await
        .expect("the pulled mock loads");
    assert!(!ipam_cloud::CloudApi::get_subnets(&provider)
        .await
        .expect("the pulled mock answers")
        .is_empty());
}

#[tokio::test]
async fn every_failed_pull_names_the_registry_and_leaves_nothing_behind() {
    let mut registry = RegistryServer::start().await;
    let (layout, digest) = provider_artifact("mock");
    registry
        .push(&layout, "providers/mock:0.1.0")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
    let address = registry.address();
    let good = reference(&registry, "providers/mock", &digest);

    // A digest the registry does not hold.
    let other = reference(
        &registry,
        "providers/mock",
        &format!("sha256:{}", "ab".repeat(32)),
    );
    let error = refused(&other, &logged_in(&registry), "a wrong digest").await;
    assert!(
        matches!(&error, OciError::ManifestUnknown { registry, .. } if *registry == address),
        "{error}"
    );
    assert!(error.to_string().contains(&other.to_string()), "{error}");

    // No credentials for this registry (only for another one).
    let elsewhere = r#"{"auths": {"registry.example": {"auth": "dTpw"}}}"#;
    let error = refused(&good, &access(&registry, elsewhere), "no credentials").await;
    assert!(
        matches!(&error, OciError::NoCredentials { registry, .. } if *registry == address),
        "{error}"
    );
    assert!(error.to_string().contains("Basic"), "{error}");

    // The right user, a wrong password: refused, and the password is in no
    // error text.
    let (user, _) = registry.credentials();
    let wrong = access(
        &registry,
        &registry.docker_config_as(user, "not-the-password"),
    );
    let error = refused(&good, &wrong, "a wrong password").await;
    assert!(
        matches!(&error, OciError::Refused { registry, username, .. } if *registry == address && username == user),
        "{error}"
    );
    assert!(
        !format!("{error:?}").contains("not-the-password"),
        "{error:?}"
    );

    // The registry's CA is not trusted: the webpki roots only.
    let untrusted =
        RegistryAccess::new(TrustRoots::webpki()).with_logins(logged_in(&registry).logins.clone());
    let error = refused(&good, &untrusted, "an unknown CA").await;
    let text = error.to_string();
    assert!(
        matches!(error, OciError::Http { .. }) && text.contains(&address),
        "{text}"
    );
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
        "{text}"
    );

    // An artifact whose wasm layer is a core module, not a component, and a
    // container image's manifest (a tar layer) pinned by mistake.
    let dir = tempfile::tempdir().unwrap();
    let core_module = dir.path().join("core");
    let core_digest = write_oci_layout(
        &core_module,
        "1",
        "application/vnd.wasm.config.v0+json",
        &[("application/wasm", b"\0asm\x01\0\0\0")],
    );
    registry
        .push(
            &format!("oci:{}:1", core_module.display()),
            "providers/core:1",
        )
        .await
        .unwrap();
    let error = refused(
        &reference(&registry, "providers/core", &core_digest),
        &logged_in(&registry),
        "a core module",
    )
    .await;
    assert!(matches!(error, OciError::NotAComponent { .. }), "{error}");
    assert!(error.to_string().contains("providers/core"), "{error}");
    let image = dir.path().join("image");
    let image_digest = write_oci_layout(
        &image,
        "1",
        "application/vnd.oci.image.config.v1+json",
        &[("application/vnd.oci.image.layer.v1.tar", b"not a wasm file")],
    );
    registry
        .push(&format!("oci:{}:1", image.display()), "images/app:1")
        .await
        .unwrap();
    let error = refused(
        &reference(&registry, "images/app", &image_digest),
        &logged_in(&registry),
        "a container image",
    )
    .await;
    assert!(
        matches!(error, OciError::Manifest(..)) && error.to_string().contains("no wasm layer"),
        "{error}"
    );

    // The registry goes down.
    registry.stop();
    let error = refused(&good, &logged_in(&registry), "the registry down").await;
    assert!(
        matches!(&error, OciError::Http { .. }) && error.to_string().contains(&address),
        "{error}"
    );
}

#[tokio::test]
async fn a_registry_asking_for_a_bearer_token_is_pulled_from_with_the_login() {
    // The token is asked from the realm with the user and password, as
    // distribution with a token server, ECR and ACR expect.
    let registry = RegistryServer::start_with_token_server().await;
    let (layout, digest) = provider_artifact("mock");
    registry
        .push(&layout, "providers/mock:0.1.0")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
    let good = reference(&registry, "providers/mock", &digest);
    let cache = tempfile::tempdir().unwrap();
    let pulled = pull(&good, cache.path(), &logged_in(&registry))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", registry.log()));
    assert_eq!(pulled, common::component("mock"));

    // Anonymous: the token server hands out a token without access, and
    // the registry refuses it.
    let address = registry.address();
    let error = refused(&good, &access(&registry, r#"{"auths": {}}"#), "anonymous").await;
    assert!(
        matches!(&error, OciError::NoCredentials { registry, challenge, .. } if *registry == address && challenge == "Bearer"),
        "{error}"
    );
    let (user, _) = registry.credentials();
    let wrong = access(
        &registry,
        &registry.docker_config_as(user, "not-the-password"),
    );
    let error = refused(&good, &wrong, "a wrong password at the token server").await;
    assert!(
        matches!(&error, OciError::Refused { username, .. } if username == user),
        "{error}"
    );
}

/// helm with its config, cache and registry logins in `home`.
fn helm(home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let helm = std::env::var("IPAM_HELM").unwrap_or_else(|_| "helm".into());
    let mut child = Command::new(&helm)
        .args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "`{helm}` cannot be run ({e}): `cargo xtask test` installs helm and passes it \
                 as IPAM_HELM; or put helm on the PATH"
            )
        });
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input.as_bytes()).expect("write to helm");
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("helm ran");
    assert!(
        output.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test]
async fn the_chart_is_pushed_as_an_oci_chart_and_renders_from_the_registry() {
    let registry = RegistryServer::start().await;
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/ipam-operator");
    let chart_yaml = std::fs::read_to_string(chart.join("Chart.yaml")).expect("Chart.yaml");
    let version = chart_yaml
        .lines()
        .find_map(|l| l.strip_prefix("version:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("a chart version");
    let packages = home.join("packages");
    let out = packages.display().to_string();
    helm(
        home,
        &[
            "package",
            &chart.display().to_string(),
            "--destination",
            &out,
        ],
        None,
    );
    let package = packages.join(format!("ipam-operator-{version}.tgz"));
    assert!(package.exists(), "helm package made {}", package.display());
    let ca = registry.ca_path().display().to_string();
    let address = registry.address();
    let (user, password) = registry.credentials();
    // The mock module beside the chart, installed by its digest.
    let (layout, digest) = provider_artifact("mock");
    registry
        .push(&layout, "providers/mock:0.1.0")
        .await
        .expect("the mock module pushed");
    let module = format!("oci://{address}/providers/mock@{digest}");
    helm(
        home,
        &[
            "registry",
            "login",
            &address,
            "--ca-file",
            &ca,
            "--username",
            user,
            "--password-stdin",
        ],
        Some(password),
    );
    let pushed = helm(
        home,
        &[
            "push",
            &package.display().to_string(),
            &format!("oci://{address}/charts"),
            "--ca-file",
            &ca,
        ],
        None,
    );
    let said = String::from_utf8_lossy(&pushed.stdout).to_string()
        + &String::from_utf8_lossy(&pushed.stderr);
    assert!(
        said.contains("sha256:"),
        "helm push names the digest: {said}"
    );
    let rendered = helm(
        home,
        &[
            "template",
            "ipam-operator",
            &format!("oci://{address}/charts/ipam-operator"),
            "--version",
            &version,
            "--ca-file",
            &ca,
            "--namespace",
            "kube-system",
            "--set",
            "clusterName=registry-test",
            "--set",
            "provider.name=mock",
            "--set",
            &format!("provider.module={module}"),
            "--set",
            "provider.pullSecret=registry-login",
        ],
        None,
    );
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        text.contains("kind: Deployment")
            && text.contains("registry-test")
            && text.contains(&module),
        "the chart from the registry names the module pushed beside it: {text}"
    );
    // Without the login, the same chart is refused.
    helm(home, &["registry", "logout", &address], None);
    let status = Command::new(std::env::var("IPAM_HELM").unwrap_or_else(|_| "helm".into()))
        .args([
            "template",
            "t",
            &format!("oci://{address}/charts/ipam-operator"),
            "--version",
            &version,
            "--ca-file",
            &ca,
        ])
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache-2"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("HELM_REGISTRY_CONFIG", home.join("registry.json"))
        .output()
        .expect("helm ran");
    assert!(!status.status.success(), "rendered without a login");
}
