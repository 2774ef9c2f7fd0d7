//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF
//! distribution registry, or `IPAM_DOCKER_REGISTRY`) on 127.0.0.1 at a free
//! port, serving https with a certificate from a CA the test makes, and
//! asking for a user and password: htpasswd (bcrypt, written with Apache's
//! `htpasswd -B`; a Basic challenge), or a token server
//! (`registry_token`; a Bearer challenge, as ECR and ACR). Content is pushed with Debian's `skopeo` from OCI image
//! layouts or archives. A missing binary fails the test loudly: `cargo
//! xtask test` installs Debian's docker-registry, skopeo and apache2-utils.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use ipam_http_client::testing::PrivateCa;

/// The user the registry knows.
pub const USER: &str = "ipam-puller";

/// How the registry asks for the user and password.
enum Auth {
    /// `Basic`, checked against an htpasswd file.
    Htpasswd,
    /// `Bearer`, with a token from the realm of this token server.
    Token { realm: String },
}

pub struct RegistryServer {
    dir: tempfile::TempDir,
    port: u16,
    password: String,
    auth: Auth,
    child: Option<Child>,
}

/// `binary` (or the path in `variable`) when it exists; else the test
/// fails, naming the Debian package that has it.
fn tool(variable: &str, binary: &str, package: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(binary));
    assert!(
        path.exists(),
        "no {}: install Debian's {package} (cargo xtask test does) or set {variable}",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// The htpasswd line of `user` with a bcrypt hash of `password`.
fn htpasswd_line(user: &str, password: &str) -> String {
    let htpasswd = tool("IPAM_HTPASSWD", "/usr/bin/htpasswd", "apache2-utils");
    let output = Command::new(&htpasswd)
        .args(["-B", "-b", "-n", user, password])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", htpasswd.display()));
    assert!(
        output.status.success(),
        "htpasswd -B: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A password no test shares.
fn fresh_password() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("pw-{}-{nanos}", std::process::id())
}

impl RegistryServer {
    /// Start the registry with htpasswd auth (a Basic challenge) and wait
    /// until it answers over https.
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// Start the registry with token auth (a Bearer challenge, the token
    /// asked from a token server with the user and password).
    pub async fn start_with_token_server() -> Self {
        Self::start_with(true).await
    }

    async fn start_with(token_server: bool) -> Self {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let ca = PrivateCa::new("registry test CA");
        let (certificate, key) = ca.server_pem(&["127.0.0.1", "localhost"]);
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text)
                .unwrap_or_else(|e| panic!("writing {name}: {e}"))
        };
        std::fs::create_dir_all(dir.path().join("certs")).expect("certs dir");
        write("certs/ca.crt", &ca.pem());
        write("server.crt", &certificate);
        write("server.key", &key);
        let password = fresh_password();
        let auth = if token_server {
            Auth::Token {
                realm: crate::registry_token::start(&ca, USER, &password).await,
            }
        } else {
            write("htpasswd", &format!("{}\n", htpasswd_line(USER, &password)));
            Auth::Htpasswd
        };
        let mut server = Self {
            port: free_port(),
            dir,
            password,
            auth,
            child: None,
        };
        let config = server.dir.path().join("config.yml");
        std::fs::write(&config, server.config()).expect("writing config.yml");
        server.spawn().await;
        server
    }

    fn config(&self) -> String {
        let dir = self.dir.path().display();
        let auth = match &self.auth {
            Auth::Htpasswd => format!(
                "  htpasswd:
    realm: ipam-test-registry
    path: {dir}/htpasswd
"
            ),
            Auth::Token { realm } => format!(
                "  token:
    realm: {realm}
    service: {service}
    issuer: {issuer}
    rootcertbundle: {dir}/certs/ca.crt
",
                service = crate::registry_token::SERVICE,
                issuer = crate::registry_token::ISSUER,
            ),
        };
        format!(
            "version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {dir}/storage
http:
  addr: 127.0.0.1:{port}
  secret: test-only-secret
  tls:
    certificate: {dir}/server.crt
    key: {dir}/server.key
auth:
{auth}",
            port = self.port
        )
    }

    async fn spawn(&mut self) {
        let binary = tool(
            "IPAM_DOCKER_REGISTRY",
            "/usr/bin/docker-registry",
            "docker-registry",
        );
        let log = std::fs::File::create(self.dir.path().join("registry.log")).expect("log file");
        let child = Command::new(&binary)
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        self.child = Some(child);
        let trust = ca_trust(&self.ca_path());
        let url = format!("https://{}/v2/", self.address());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer =
                ipam_http_client::request(&trust, http::Method::GET, &url, &[], Default::default())
                    .await;
            if answer.is_ok_and(|reply| reply.status == http::StatusCode::UNAUTHORIZED) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("docker-registry exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer 401 at {url} within 30 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `127.0.0.1:PORT`: the registry part of references to it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The CA its certificate chains to, PEM.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("certs").join("ca.crt")
    }

    /// A directory holding only the CA as `ca.crt` (skopeo's `--dest-cert-dir`).
    pub fn cert_dir(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    /// The user and password it accepts.
    pub fn credentials(&self) -> (&str, &str) {
        (USER, &self.password)
    }

    /// A Docker config JSON (a `kubernetes.io/dockerconfigjson` Secret's
    /// `.dockerconfigjson`) logging `user` in with `password` here.
    pub fn docker_config_as(&self, user: &str, password: &str) -> String {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        serde_json::json!({"auths": {self.address(): {"auth": auth}}}).to_string()
    }

    /// [`Self::docker_config_as`] with the right credentials, written to a
    /// file in the registry's directory; its path.
    pub fn docker_config_file(&self) -> PathBuf {
        let path = self.dir.path().join("dockerconfig.json");
        let (user, password) = self.credentials();
        std::fs::write(&path, self.docker_config_as(user, password)).expect("write docker config");
        path
    }

    /// Copy `source` (skopeo's syntax: `oci:DIR:TAG` for an OCI image
    /// layout, `oci-archive:FILE` for one packed in a tar) to
    /// `REPOSITORY:TAG` here, with the credentials, trusting the CA, digests
    /// kept as they are. skopeo's output on failure. skopeo runs on tokio's
    /// blocking pool, so the test's runtime keeps serving the token server
    /// meanwhile (one thread is enough).
    pub async fn push(&self, source: &str, repository_tag: &str) -> Result<(), String> {
        let mut command = self.push_command(source, repository_tag)?;
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .map_err(|e| format!("skopeo copy {source}: {e}"))?
            .map_err(|e| format!("running skopeo: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "skopeo copy {source} to {repository_tag}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    fn push_command(&self, source: &str, repository_tag: &str) -> Result<Command, String> {
        let skopeo = tool("IPAM_SKOPEO", "/usr/bin/skopeo", "skopeo");
        // Its own policy: whatever /etc/containers says, accept what is pushed.
        let policy = self.dir.path().join("policy.json");
        std::fs::write(
            &policy,
            r#"{"default": [{"type": "insecureAcceptAnything"}]}"#,
        )
        .map_err(|e| format!("{}: {e}", policy.display()))?;
        let mut command = Command::new(&skopeo);
        command
            .arg("--policy")
            .arg(&policy)
            .args(["copy", "--quiet", "--preserve-digests", "--dest-cert-dir"])
            .arg(self.cert_dir())
            .arg("--dest-authfile")
            .arg(self.docker_config_file())
            .arg(source)
            .arg(format!("docker://{}/{repository_tag}", self.address()))
            .stdin(Stdio::null());
        Ok(command)
    }

    /// What the registry printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The registry goes down (SIGKILL); its port stays unanswered.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The webpki roots and the CA at `path`.
pub fn ca_trust(path: &Path) -> ipam_http_client::TrustRoots {
    ipam_http_client::TrustRoots::with_extra_pem_file(path).expect("the registry's CA is a root")
}

/// An OCI image layout of one artifact in `dir`, tagged `tag`: a manifest
/// whose config has media type `config_type` and whose layers are
/// `layers` (media type, bytes). For artifacts the build does not make
/// (a layer that is not a component); its manifest digest.
pub fn write_oci_layout(
    dir: &Path,
    tag: &str,
    config_type: &str,
    layers: &[(&str, &[u8])],
) -> String {
    let sha = |bytes: &[u8]| format!("sha256:{}", ipam_provider_module::sha256_hex(bytes));
    let blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).expect("blobs dir");
    let put = |bytes: &[u8]| {
        let digest = sha(bytes);
        std::fs::write(blobs.join(digest.trim_start_matches("sha256:")), bytes).expect("blob");
        serde_json::json!({"digest": digest, "size": bytes.len()})
    };
    let mut config = put(b"{}");
    config["mediaType"] = config_type.into();
    let layers: Vec<serde_json::Value> = layers
        .iter()
        .map(|(media_type, bytes)| {
            let mut layer = put(bytes);
            layer["mediaType"] = (*media_type).into();
            layer
        })
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    }))
    .expect("manifest");
    let mut entry = put(&manifest);
    entry["mediaType"] = "application/vnd.oci.image.manifest.v1+json".into();
    entry["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": tag});
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [entry]});
    std::fs::write(dir.join("index.json"), index.to_string()).expect("index.json");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
        .expect("oci-layout");
    sha(&manifest)
}

/// Where `cargo xtask artifacts` put the provider modules' OCI layouts:
/// `$IPAM_ARTIFACTS_DIR`, else `target/artifacts` of this checkout.
pub fn artifacts_dir() -> PathBuf {
    match std::env::var_os("IPAM_ARTIFACTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/artifacts"),
    }
}

/// The OCI layout of provider `name` built by `cargo xtask artifacts`, as
/// skopeo's `oci:DIR:TAG`, and its manifest digest (from its index). Fails
/// loudly when the build step was skipped.
pub fn provider_artifact(name: &str) -> (String, String) {
    let dir = artifacts_dir().join(name);
    let index = dir.join("index.json");
    let text = std::fs::read_to_string(&index).unwrap_or_else(|e| {
        panic!(
            "{}: {e}. Build the provider artifacts first: cargo xtask artifacts (cargo xtask test does)",
            index.display()
        )
    });
    let doc: serde_json::Value = serde_json::from_str(&text).expect("index.json is JSON");
    let entry = &doc["manifests"][0];
    let digest = entry["digest"].as_str().expect("a manifest digest");
    let tag = entry["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("a tag");
    (format!("oci:{}:{tag}", dir.display()), digest.to_string())
}
