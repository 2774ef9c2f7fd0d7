//! How an `oci://` provider module is pulled: the registry credentials file
//! and the loopback registries spoken to over plain HTTP. Shared by `run`
//! and `provider inspect|conformance`; read at start, before the pull.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ipam_provider_runtime::oci::RegistryAccess;
use ipam_provider_runtime::registry_logins::RegistryLogins;
use ipam_provider_runtime::TrustRoots;

#[derive(Args, Debug, Clone, Default)]
pub struct RegistryArgs {
    /// A Docker config JSON file with the user and password of the registry
    /// an oci:// module is pulled from: the `.dockerconfigjson` key of a
    /// kubernetes.io/dockerconfigjson Secret, mounted (`auths` → registry
    /// host[:port] → `auth` base64 user:password, or `username` and
    /// `password`). Without it, pulls are anonymous.
    #[arg(long, env = "IPAM_REGISTRY_CREDENTIALS_FILE", value_name = "FILE")]
    pub registry_credentials_file: Option<PathBuf>,
    /// A loopback registry (127.0.0.1:PORT, localhost:PORT, [::1]:PORT)
    /// pulled from over plain HTTP, as a development registry; repeatable.
    /// Every other registry is spoken to over https, and a registry that is
    /// not loopback is refused here.
    #[arg(
        long = "plain-http-registry",
        env = "IPAM_PLAIN_HTTP_REGISTRIES",
        value_delimiter = ',',
        value_name = "HOST:PORT"
    )]
    pub plain_http_registries: Vec<String>,
}

impl RegistryArgs {
    /// How registries are reached: over https verified against `trust`, with
    /// the credentials file's logins.
    pub fn access(&self, trust: TrustRoots) -> anyhow::Result<RegistryAccess> {
        let logins = match &self.registry_credentials_file {
            Some(path) => RegistryLogins::from_file(path)?,
            None => RegistryLogins::default(),
        };
        RegistryAccess::new(trust)
            .with_logins(logins)
            .with_plain_http(&self.plain_http_registries)
            .context("--plain-http-registry")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_credentials_file_or_a_remote_plain_http_registry_stops_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"auths": {"r.example": {"auth": "%%%"}}}"#).unwrap();
        let args = RegistryArgs {
            registry_credentials_file: Some(path),
            ..RegistryArgs::default()
        };
        let error = args.access(TrustRoots::webpki()).expect_err("refused");
        assert!(
            format!("{error:#}")
                .contains("config.json: registry r.example: \"auth\" is not base64"),
            "{error:#}"
        );
        let args = RegistryArgs {
            plain_http_registries: vec!["registry.example:5000".into()],
            ..RegistryArgs::default()
        };
        let error = args.access(TrustRoots::webpki()).expect_err("refused");
        assert!(
            format!("{error:#}").contains(
                "registry.example:5000: plain HTTP is only allowed for a loopback registry"
            ),
            "{error:#}"
        );
    }
}
