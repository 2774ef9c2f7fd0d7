//! A real etcd for tests (feature `testing`): Debian's `etcd` binary (or
//! `IPAM_ETCD`) on 127.0.0.1 with free ports and a temporary data dir,
//! killed with SIGKILL and restarted on the same data dir on demand. A
//! missing binary fails the test loudly: `cargo xtask test` installs
//! Debian's `etcd-server`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::EtcdClient;
use crate::config::{EtcdConfig, TlsFiles};

pub struct EtcdServer {
    binary: PathBuf,
    data: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    /// Served over TLS, asking for a client certificate.
    tls: Option<TlsFiles>,
}

/// A throwaway CA, etcd's serving certificate for 127.0.0.1
/// (`server.crt`, `server.key`) and a client certificate, as PEM files in
/// `dir`; what a client needs.
fn tls_files(dir: &std::path::Path) -> TlsFiles {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key"))
        .expect("self-signed CA");
    let issue = |names: Vec<String>, stem: &str| -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let certificate = CertificateParams::new(names)
            .expect("certificate params")
            .signed_by(&key, &ca)
            .expect("certificate");
        let (cert_path, key_path) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&cert_path, certificate.pem()).expect("write certificate");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        (cert_path, key_path)
    };
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).expect("write CA");
    issue(vec!["127.0.0.1".into(), "localhost".into()], "server");
    TlsFiles {
        ca: Some(ca_path),
        client: Some(issue(vec!["ipam-operator".into()], "client")),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn etcd_binary() -> PathBuf {
    let binary = std::env::var_os("IPAM_ETCD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    assert!(
        binary.exists(),
        "no etcd at {}: install Debian's etcd-server (cargo xtask test does) or set IPAM_ETCD",
        binary.display()
    );
    binary
}

impl EtcdServer {
    /// Start etcd and wait until it answers.
    pub async fn start() -> Self {
        let mut server = Self::new();
        server.spawn().await;
        server
    }

    /// Start etcd over TLS, asking clients for a certificate of its CA;
    /// [`EtcdServer::config`] carries the CA and a client certificate.
    pub async fn start_tls() -> Self {
        let mut server = Self::new();
        server.tls = Some(tls_files(server.data.path()));
        server.spawn().await;
        server
    }

    fn new() -> Self {
        Self {
            binary: etcd_binary(),
            data: tempfile::tempdir().expect("a temporary data dir"),
            client_port: free_port(),
            peer_port: free_port(),
            child: None,
            tls: None,
        }
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// A config for this server, with the given lease TTLs left default.
    pub fn config(&self) -> EtcdConfig {
        EtcdConfig {
            endpoints: vec![self.endpoint()],
            tls: self.tls.clone(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            qps: 10_000.0,
            burst: 10_000,
            ..EtcdConfig::default()
        }
    }

    pub async fn client(&self) -> EtcdClient {
        EtcdClient::connect(&self.config())
            .await
            .expect("connect to the test etcd")
    }

    /// Turn authentication on with one user, `user`, holding etcd's root
    /// role: from then on a key needs the user's password.
    pub async fn enable_auth(&self, user: &str, password: &str) {
        let mut admin = self.client().await.raw();
        // The root role may already be there; the grant below needs it.
        let _ = admin.role_add("root").await;
        admin
            .user_add(user, password, None)
            .await
            .expect("the user");
        admin
            .user_grant_role(user, "root")
            .await
            .expect("the root role");
        admin.auth_enable().await.expect("auth on");
    }

    async fn spawn(&mut self) {
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.data.path().join("etcd.log")).expect("etcd log file");
        let child = Command::new(&self.binary)
            .arg("--name=test")
            .arg(format!(
                "--data-dir={}",
                self.data.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={}", self.endpoint()))
            .arg(format!("--advertise-client-urls={}", self.endpoint()))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            // No metrics or profiling listeners beyond these two ports.
            .arg("--listen-metrics-urls=")
            .args(self.tls_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(client) = EtcdClient::connect(&self.config()).await {
                if client.get("health-probe").await.is_ok() {
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("etcd exited with {status}: {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not answer within 30 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn tls_args(&self) -> Vec<String> {
        match &self.tls {
            None => Vec::new(),
            Some(tls) => {
                let dir = self.data.path();
                let ca = tls.ca.clone().unwrap_or_default();
                vec![
                    format!("--cert-file={}", dir.join("server.crt").display()),
                    format!("--key-file={}", dir.join("server.key").display()),
                    format!("--trusted-ca-file={}", ca.display()),
                    "--client-cert-auth".into(),
                ]
            }
        }
    }

    /// What etcd printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.path().join("etcd.log")).unwrap_or_default()
    }

    /// SIGKILL: no clean shutdown, as a crashed node.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start again on the same data dir and ports.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    /// Compact the history up to `revision` (older revisions unreadable).
    pub async fn compact(&self, revision: i64) {
        let mut raw = self.client().await.raw();
        raw.compact(revision, None).await.expect("compact");
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
