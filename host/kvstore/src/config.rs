//! How to reach etcd: endpoints, TLS, username and password, timeouts, the
//! leases' TTLs and the operator's own request rate. Read from flags, or
//! from a file in Cilium's `etcd.config` format (the `etcd-config` entry of
//! the `cilium-config` ConfigMap), so a cluster's existing etcd secret and
//! config mount work unchanged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Cilium's kvstore lease TTL (`--kvstore-lease-ttl`): keys the operator
/// writes with its session lease outlive it by this much.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15 * 60);

/// Cilium's lock lease TTL: a lock whose holder died goes this long after.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(25);

/// TLS towards etcd: the CA that signed its serving certificate, and our
/// client certificate when etcd asks for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM), both or neither.
    pub client: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    pub tls: Option<TlsFiles>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub connect_timeout: Duration,
    /// One request's limit.
    pub request_timeout: Duration,
    pub lease_ttl: Duration,
    pub lock_ttl: Duration,
    /// Requests per second the operator may send (its own traffic only).
    pub qps: f64,
    /// Requests allowed at once above the rate.
    pub burst: u32,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            tls: None,
            username: None,
            password: None,
            connect_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(25),
            lease_ttl: DEFAULT_LEASE_TTL,
            lock_ttl: DEFAULT_LOCK_TTL,
            qps: 20.0,
            burst: 40,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an etcd config in Cilium's format: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("no etcd endpoints: give --etcd-endpoints or an etcd config file with `endpoints`")]
    NoEndpoints,
    #[error("etcd endpoint {endpoint:?}: {problem}")]
    BadEndpoint { endpoint: String, problem: String },
    #[error("the client certificate and key go together: {given} is given without {missing}")]
    HalfIdentity {
        given: &'static str,
        missing: &'static str,
    },
    #[error("an etcd password without a username")]
    PasswordWithoutUser,
    #[error("{what} must be positive")]
    NotPositive { what: &'static str },
}

/// Cilium's `etcd.config` file: the keys it reads (others refused, so a
/// misspelt key is not silently ignored).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct CiliumEtcdFile {
    #[serde(default)]
    endpoints: Vec<String>,
    trusted_ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
}

impl EtcdConfig {
    /// Fill endpoints, TLS and credentials from a Cilium `etcd.config`
    /// file; what the config already has wins (flags over the file).
    pub fn merge_cilium_file(mut self, path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: CiliumEtcdFile = serde_yaml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if self.endpoints.is_empty() {
            self.endpoints = file.endpoints;
        }
        if self.tls.is_none() {
            let client = identity(file.cert_file, file.key_file)?;
            if file.trusted_ca_file.is_some() || client.is_some() {
                self.tls = Some(TlsFiles {
                    ca: file.trusted_ca_file,
                    client,
                });
            }
        }
        self.username = self.username.or(file.username);
        self.password = self.password.or(file.password);
        Ok(self)
    }

    /// Refuse what cannot work before dialling.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        for endpoint in &self.endpoints {
            let rest = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"))
                .ok_or_else(|| ConfigError::BadEndpoint {
                    endpoint: endpoint.clone(),
                    problem: "not http:// or https://".into(),
                })?;
            if rest.is_empty() || rest.contains('/') && !rest.ends_with('/') {
                return Err(ConfigError::BadEndpoint {
                    endpoint: endpoint.clone(),
                    problem: "expected scheme://host:port".into(),
                });
            }
        }
        if self.password.is_some() && self.username.is_none() {
            return Err(ConfigError::PasswordWithoutUser);
        }
        let positive = [
            ("the lease TTL", self.lease_ttl.as_secs() > 0),
            ("the lock lease TTL", self.lock_ttl.as_secs() > 0),
            ("the request timeout", !self.request_timeout.is_zero()),
            ("the etcd QPS", self.qps > 0.0 && self.qps.is_finite()),
            ("the etcd burst", self.burst > 0),
        ];
        match positive.iter().find(|(_, ok)| !ok) {
            Some((what, _)) => Err(ConfigError::NotPositive { what }),
            None => Ok(()),
        }
    }
}

/// The client certificate and key, both or neither.
pub fn identity(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<(PathBuf, PathBuf)>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some((cert, key))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::HalfIdentity {
            given: "the certificate",
            missing: "the key",
        }),
        (None, Some(_)) => Err(ConfigError::HalfIdentity {
            given: "the key",
            missing: "the certificate",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.config");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_cilium_etcd_config_file_fills_what_flags_left_out() {
        let (_dir, path) = write(
            "endpoints:\n- https://etcd-0:2379\n- https://etcd-1:2379\ntrusted-ca-file: /var/lib/etcd-secrets/etcd-client-ca.crt\n\
             key-file: /var/lib/etcd-secrets/etcd-client.key\ncert-file: /var/lib/etcd-secrets/etcd-client.crt\n",
        );
        let config = EtcdConfig::default().merge_cilium_file(&path).unwrap();
        assert_eq!(
            config.endpoints,
            ["https://etcd-0:2379", "https://etcd-1:2379"]
        );
        let tls = config.tls.clone().unwrap();
        assert_eq!(
            tls.ca.unwrap(),
            Path::new("/var/lib/etcd-secrets/etcd-client-ca.crt")
        );
        assert_eq!(
            tls.client.unwrap().1,
            Path::new("/var/lib/etcd-secrets/etcd-client.key")
        );
        config.validate().unwrap();

        let flags = EtcdConfig {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            ..EtcdConfig::default()
        };
        assert_eq!(
            flags.merge_cilium_file(&path).unwrap().endpoints,
            ["http://127.0.0.1:2379"]
        );
    }

    #[test]
    fn bad_files_and_settings_are_named() {
        let (_dir, path) = write("endpoints: [http://a:2379]\ntrusted-ca: /x\n");
        let error = EtcdConfig::default()
            .merge_cilium_file(&path)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `trusted-ca`"), "{error}");
        let (_dir, path) = write("endpoints: [http://a:2379]\ncert-file: /c\n");
        let error = EtcdConfig::default()
            .merge_cilium_file(&path)
            .unwrap_err()
            .to_string();
        assert!(error.contains("without the key"), "{error}");

        let with = |endpoints: &[&str]| EtcdConfig {
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            ..EtcdConfig::default()
        };
        assert!(matches!(
            with(&[]).validate(),
            Err(ConfigError::NoEndpoints)
        ));
        assert!(matches!(
            with(&["etcd:2379"]).validate(),
            Err(ConfigError::BadEndpoint { .. })
        ));
        assert!(with(&["https://etcd:2379"]).validate().is_ok());
        let mut zero = with(&["http://a:1"]);
        zero.qps = 0.0;
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "the etcd QPS must be positive"
        );
        let mut password = with(&["http://a:1"]);
        password.password = Some("p".into());
        assert!(matches!(
            password.validate(),
            Err(ConfigError::PasswordWithoutUser)
        ));
    }
}
