//! Provider modules from an OCI registry, pinned to a digest:
//! `oci://REGISTRY/REPOSITORY@sha256:HEX`. The manifest is fetched by that
//! digest and checked against it, its wasm layer (media type
//! `application/wasm` or `application/vnd.wasm.content.layer.v1+wasm`) is
//! fetched, checked against the layer digest and read as a WebAssembly
//! component, so what runs is exactly what was pinned (a tag is refused: it
//! can move). Only then is it kept under the cache directory, by digest:
//! a failed pull leaves nothing there.
//!
//! Authentication: anonymous first; on `401` the registry's challenge is
//! answered with the login for its host from [`RegistryLogins`] (a Docker
//! config JSON file): `Basic` with the user and password, `Bearer` with a
//! token asked from the challenge's realm with the user and password (or
//! anonymously when there are none), as distribution, ECR, ACR and ghcr.io
//! expect. Passwords and tokens appear in no error and no log.
//!
//! Transport: every registry over https, verified against the caller's
//! trust roots (the operator's, with its `--egress-ca-file`: a registry
//! behind a private CA), its token endpoint and blob redirects too. Plain
//! HTTP only for loopback registries named in [`RegistryAccess::with_plain_http`]
//! (a development registry on 127.0.0.1), never for any other host.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use bytes::Bytes;
use http::{Method, StatusCode, Uri};

use ipam_http_client::{request, Reply, TrustRoots};

use crate::registry_challenge::Challenge;
use crate::registry_logins::{Login, RegistryLogins};

const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
/// Layer media types of a wasm component (wkg / wasm-pkg-tools, ORAS).
const WASM_LAYERS: &[&str] = &[
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
];

#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{0}: not an OCI reference (oci://REGISTRY/REPOSITORY@sha256:HEX)")]
    Syntax(String),
    #[error("{0}: pin the module to a digest (…@sha256:HEX); a tag can move")]
    NotPinned(String),
    #[error("{0}: plain HTTP is only allowed for a loopback registry (localhost, 127.0.0.0/8, [::1]); any other is spoken to over https")]
    NotLoopback(String),
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url}: the registry answered {status}")]
    Status { url: String, status: StatusCode },
    #[error("{reference}: registry {registry} has no manifest with that digest")]
    ManifestUnknown { reference: String, registry: String },
    #[error("{reference}: registry {registry} asks for credentials ({challenge}) and none are given for it (an \"auths\" entry for {registry} in the registry credentials file)")]
    NoCredentials {
        reference: String,
        registry: String,
        challenge: String,
    },
    #[error("{reference}: registry {registry} refused the credentials of user {username}")]
    Refused {
        reference: String,
        registry: String,
        username: String,
    },
    #[error("{what}: digest is {actual}, expected {expected}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("manifest {0}: {1}")]
    Manifest(String, String),
    #[error("{reference}: its layer {layer} is not a WebAssembly component: {message}")]
    NotAComponent {
        reference: String,
        layer: String,
        message: String,
    },
    #[error("module cache {0}: {1}")]
    Cache(PathBuf, std::io::Error),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    pub registry: String,
    pub repository: String,
    /// `sha256:HEX`
    pub digest: String,
}

impl FromStr for OciReference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, OciError> {
        let rest = text
            .strip_prefix("oci://")
            .ok_or_else(|| OciError::Syntax(text.into()))?;
        let (name, digest) = rest
            .split_once('@')
            .ok_or_else(|| OciError::NotPinned(text.into()))?;
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| OciError::Syntax(text.into()))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(OciError::Syntax(text.into()));
        }
        let (registry, repository) = name
            .split_once('/')
            .filter(|(r, p)| !r.is_empty() && !p.is_empty())
            .ok_or_else(|| OciError::Syntax(text.into()))?;
        if repository.contains(':') {
            return Err(OciError::NotPinned(text.into()));
        }
        Ok(Self {
            registry: registry.into(),
            repository: repository.into(),
            digest: format!("sha256:{}", hex.to_ascii_lowercase()),
        })
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "oci://{}/{}@{}",
            self.registry, self.repository, self.digest
        )
    }
}

/// The host of `host[:port]` (`[::1]:5000` → `::1`).
fn host_of(registry: &str) -> &str {
    match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => registry.split(':').next().unwrap_or_default(),
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// How registries are reached: the roots their https certificates must
/// chain to, the logins by registry, and the loopback registries spoken to
/// over plain HTTP.
#[derive(Clone)]
pub struct RegistryAccess {
    pub trust: TrustRoots,
    pub logins: RegistryLogins,
    plain_http: Vec<String>,
}

/// The registries with a login and the plain-HTTP ones; never a password.
impl fmt::Debug for RegistryAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAccess")
            .field("logins", &self.logins.registries().collect::<Vec<_>>())
            .field("plain_http", &self.plain_http)
            .finish_non_exhaustive()
    }
}

impl RegistryAccess {
    /// Anonymous, over https verified against `trust`.
    pub fn new(trust: TrustRoots) -> Self {
        Self {
            trust,
            logins: RegistryLogins::default(),
            plain_http: Vec::new(),
        }
    }

    pub fn with_logins(self, logins: RegistryLogins) -> Self {
        Self { logins, ..self }
    }

    /// Speak plain HTTP to these registries (`host[:port]`), each of which
    /// must be a loopback one.
    pub fn with_plain_http(self, registries: &[String]) -> Result<Self, OciError> {
        for registry in registries {
            if !is_loopback(host_of(registry)) {
                return Err(OciError::NotLoopback(registry.clone()));
            }
        }
        let plain_http = registries.iter().map(|r| r.to_ascii_lowercase()).collect();
        Ok(Self { plain_http, ..self })
    }

    fn scheme(&self, registry: &str) -> &'static str {
        if self.plain_http.contains(&registry.to_ascii_lowercase()) {
            "http"
        } else {
            "https"
        }
    }

    /// A login may be sent to `url` over https, or to a loopback host.
    fn may_send_login_to(url: &str) -> bool {
        url.parse::<Uri>().is_ok_and(|uri| {
            uri.scheme_str() == Some("https") || uri.host().is_some_and(is_loopback)
        })
    }
}

impl OciReference {
    fn base(&self, scheme: &str) -> String {
        format!("{scheme}://{}/v2/{}", self.registry, self.repository)
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", ipam_provider_module::sha256_hex(bytes))
}

/// GET following redirects (blob downloads go to storage); `authorization`
/// is only sent to the origin first asked.
async fn get(
    trust: &TrustRoots,
    url: &str,
    accept: &str,
    authorization: Option<&str>,
) -> Result<Reply, OciError> {
    let origin = |u: &str| u.parse::<Uri>().ok().and_then(|u| u.authority().cloned());
    let first = origin(url);
    let mut url = url.to_string();
    for _ in 0..5 {
        let mut headers = vec![("accept", accept.to_string())];
        if let Some(value) = authorization.filter(|_| origin(&url) == first) {
            headers.push(("authorization", value.to_string()));
        }
        let reply = request(trust, Method::GET, &url, &headers, Bytes::new())
            .await
            .map_err(|e| OciError::Http {
                url: e.url,
                message: e.message,
            })?;
        if reply.status.is_redirection() {
            if let Some(location) = reply
                .headers
                .get(http::header::LOCATION)
                .and_then(|l| l.to_str().ok())
            {
                url = location.to_string();
                continue;
            }
        }
        return Ok(reply);
    }
    Err(OciError::Http {
        url,
        message: "too many redirects".into(),
    })
}

/// The requests of one pull: the `Authorization` the registry's challenge
/// asked for, found on the first 401 and reused after.
struct Session<'a> {
    access: &'a RegistryAccess,
    reference: &'a OciReference,
    login: Option<&'a Login>,
    authorization: Option<String>,
}

impl Session<'_> {
    /// 401 despite what was sent: no login, or a refused one.
    fn refusal(&self, challenge: &str) -> OciError {
        match self.login {
            Some(login) => OciError::Refused {
                reference: self.reference.to_string(),
                registry: self.reference.registry.clone(),
                username: login.username.clone(),
            },
            None => OciError::NoCredentials {
                reference: self.reference.to_string(),
                registry: self.reference.registry.clone(),
                challenge: challenge.split(' ').next().unwrap_or_default().to_string(),
            },
        }
    }

    /// The `Authorization` value answering `challenge`.
    async fn answer(&self, challenge: &str) -> Result<String, OciError> {
        match Challenge::parse(challenge) {
            Some(Challenge::Basic) => self
                .login
                .map(Login::basic_authorization)
                .ok_or_else(|| self.refusal(challenge)),
            Some(Challenge::Bearer { realm, query }) => {
                let url = Challenge::token_url(&realm, &query);
                let login = match self.login {
                    Some(_) if !RegistryAccess::may_send_login_to(&url) => {
                        return Err(OciError::Http {
                            url: realm,
                            message: "the token realm is plain HTTP on a host that is not loopback: the registry login is not sent there".into(),
                        })
                    }
                    login => login.map(Login::basic_authorization),
                };
                let reply = get(&self.access.trust, &url, "application/json", login.as_deref()).await?;
                if reply.status == StatusCode::UNAUTHORIZED {
                    return Err(self.refusal(challenge));
                }
                if !reply.status.is_success() {
                    return Err(OciError::Status {
                        url,
                        status: reply.status,
                    });
                }
                let doc: serde_json::Value =
                    serde_json::from_slice(&reply.body).map_err(|e| OciError::Http {
                        url: url.clone(),
                        message: format!("token answer: {e}"),
                    })?;
                doc.get("token")
                    .or_else(|| doc.get("access_token"))
                    .and_then(|t| t.as_str())
                    .map(|token| format!("Bearer {token}"))
                    .ok_or(OciError::Http {
                        url,
                        message: "no token in the answer".into(),
                    })
            }
            None => Err(OciError::Http {
                url: self.reference.to_string(),
                message: format!(
                    "the registry answered 401 with a challenge that is neither Basic nor Bearer: {challenge:?}"
                ),
            }),
        }
    }

    /// GET with the registry's auth: anonymous first, then what its
    /// challenge asks for.
    async fn get(&mut self, url: &str, accept: &str) -> Result<Bytes, OciError> {
        let trust = &self.access.trust;
        let mut reply = get(trust, url, accept, self.authorization.as_deref()).await?;
        let challenge = |reply: &Reply| {
            reply
                .headers
                .get(http::header::WWW_AUTHENTICATE)
                .and_then(|c| c.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        if reply.status == StatusCode::UNAUTHORIZED && self.authorization.is_none() {
            self.authorization = Some(self.answer(&challenge(&reply)).await?);
            reply = get(trust, url, accept, self.authorization.as_deref()).await?;
        }
        if reply.status == StatusCode::UNAUTHORIZED {
            return Err(self.refusal(&challenge(&reply)));
        }
        if !reply.status.is_success() {
            return Err(OciError::Status {
                url: url.into(),
                status: reply.status,
            });
        }
        Ok(reply.body)
    }
}

fn verify(what: &str, bytes: &[u8], expected: &str) -> Result<(), OciError> {
    let actual = sha256(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(OciError::DigestMismatch {
            what: what.into(),
            expected: expected.into(),
            actual,
        })
    }
}

/// The digest of the manifest's wasm layer.
fn wasm_layer(reference: &OciReference, manifest: &[u8]) -> Result<String, OciError> {
    let bad = |message: String| OciError::Manifest(reference.to_string(), message);
    let doc: serde_json::Value =
        serde_json::from_slice(manifest).map_err(|e| bad(e.to_string()))?;
    let layers = doc
        .get("layers")
        .and_then(|l| l.as_array())
        .ok_or_else(|| bad("no layers".into()))?;
    let layer = layers
        .iter()
        .find(|l| {
            l.get("mediaType")
                .and_then(|m| m.as_str())
                .is_some_and(|m| WASM_LAYERS.contains(&m))
        })
        .ok_or_else(|| {
            let types: Vec<&str> = layers
                .iter()
                .filter_map(|l| l.get("mediaType").and_then(|m| m.as_str()))
                .collect();
            bad(format!(
                "no wasm layer: its layers are {types:?}, a provider module's is one of {WASM_LAYERS:?} (not a provider module artifact)"
            ))
        })?;
    layer
        .get("digest")
        .and_then(|d| d.as_str())
        .filter(|d| d.starts_with("sha256:"))
        .map(str::to_string)
        .ok_or_else(|| bad("its wasm layer has no sha256 digest".into()))
}

/// Write `bytes` to `path` through a temporary file beside it, so a reader
/// sees the whole file or none.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    let temporary = path.with_extension("partial");
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            OciError::Cache(path.into(), e)
        })
}

/// The module `reference` pins: from `cache_dir` when pulled before (and
/// still matching), else from the registry as `access` says.
pub async fn pull(
    reference: &OciReference,
    cache_dir: &Path,
    access: &RegistryAccess,
) -> Result<Vec<u8>, OciError> {
    let cached = cache_dir.join(format!("{}.wasm", reference.digest.replace(':', "-")));
    let base = reference.base(access.scheme(&reference.registry));
    let manifest_url = format!("{base}/manifests/{}", reference.digest);
    // The cache is keyed by the manifest digest; the file holds the layer,
    // checked against the layer digest recorded next to it.
    let layer_note = cached.with_extension("layer");
    if let (Ok(bytes), Ok(layer)) = (std::fs::read(&cached), std::fs::read_to_string(&layer_note)) {
        if verify("cached module", &bytes, layer.trim()).is_ok() {
            return Ok(bytes);
        }
    }
    let mut session = Session {
        access,
        reference,
        login: access.logins.for_registry(&reference.registry),
        authorization: None,
    };
    let manifest = match session.get(&manifest_url, MANIFEST_TYPES).await {
        Err(OciError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            return Err(OciError::ManifestUnknown {
                reference: reference.to_string(),
                registry: reference.registry.clone(),
            })
        }
        other => other?,
    };
    verify(&manifest_url, &manifest, &reference.digest)?;
    let layer_digest = wasm_layer(reference, &manifest)?;
    let blob_url = format!("{base}/blobs/{layer_digest}");
    let module = session.get(&blob_url, "application/octet-stream").await?;
    verify(&blob_url, &module, &layer_digest)?;
    ipam_provider_module::ModuleInfo::read(&module).map_err(|e| OciError::NotAComponent {
        reference: reference.to_string(),
        layer: layer_digest.clone(),
        message: e.to_string(),
    })?;
    std::fs::create_dir_all(cache_dir).map_err(|e| OciError::Cache(cache_dir.into(), e))?;
    write_whole(&layer_note, layer_digest.as_bytes())?;
    write_whole(&cached, &module)?;
    Ok(module.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_must_be_pinned_to_a_digest() {
        let r: OciReference = format!("oci://ghcr.io/acme/providers/aws@sha256:{HEX}")
            .parse()
            .unwrap();
        assert_eq!(r.registry, "ghcr.io");
        assert_eq!(r.repository, "acme/providers/aws");
        assert_eq!(
            r.to_string(),
            format!("oci://ghcr.io/acme/providers/aws@sha256:{HEX}")
        );
        assert!(matches!(
            "oci://ghcr.io/acme/aws:1.0".parse::<OciReference>(),
            Err(OciError::NotPinned(_))
        ));
        assert!(matches!(
            "oci://ghcr.io/acme/aws@sha256:beef".parse::<OciReference>(),
            Err(OciError::Syntax(_))
        ));
        assert!("ghcr.io/acme/aws".parse::<OciReference>().is_err());
    }

    #[test]
    fn https_everywhere_but_named_loopback_registries() {
        let access = RegistryAccess::new(TrustRoots::webpki())
            .with_plain_http(&[
                "127.0.0.1:5000".into(),
                "[::1]:5000".into(),
                "localhost".into(),
            ])
            .unwrap();
        assert_eq!(access.scheme("127.0.0.1:5000"), "http");
        assert_eq!(access.scheme("[::1]:5000"), "http");
        assert_eq!(access.scheme("LOCALHOST"), "http");
        assert_eq!(
            access.scheme("127.0.0.1:5001"),
            "https",
            "another port is another registry"
        );
        assert_eq!(access.scheme("ghcr.io"), "https");
        for remote in ["ghcr.io", "10.0.0.1:5000", "registry.localhost.example"] {
            assert!(matches!(
                RegistryAccess::new(TrustRoots::webpki()).with_plain_http(&[remote.into()]),
                Err(OciError::NotLoopback(r)) if r == remote
            ));
        }
    }

    #[test]
    fn a_login_goes_to_https_or_loopback_realms_only() {
        assert!(RegistryAccess::may_send_login_to(
            "https://auth.example/token"
        ));
        assert!(RegistryAccess::may_send_login_to(
            "http://127.0.0.1:8080/token"
        ));
        assert!(!RegistryAccess::may_send_login_to(
            "http://auth.example/token"
        ));
    }
}
