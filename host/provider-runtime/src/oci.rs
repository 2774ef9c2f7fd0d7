//! Provider modules from an OCI registry, pinned to a digest:
//! `oci://REGISTRY/REPOSITORY@sha256:HEX`. The manifest is fetched by that
//! digest and checked against it, its wasm layer is fetched and checked
//! against the layer digest, so what runs is exactly what was pinned (a tag
//! is refused: it can move). Anonymous pulls, with the registry's bearer
//! token challenge answered (public registries such as ghcr.io). Pulled
//! modules are kept under the cache directory by digest. `localhost` and
//! `127.0.0.1` registries are spoken to over plain HTTP, as docker does;
//! any other over https verified against the caller's trust roots (the
//! operator's, with its `--egress-ca-file`: a registry behind a private CA),
//! redirects to blob storage and the token endpoint too.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use bytes::Bytes;
use http::{Method, StatusCode, Uri};

use ipam_http_client::{request, Reply, TrustRoots};

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
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url}: the registry answered {status}")]
    Status { url: String, status: StatusCode },
    #[error("{what}: digest is {actual}, expected {expected}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("manifest {0}: {1}")]
    Manifest(String, String),
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

impl OciReference {
    fn base(&self) -> String {
        let host = self.registry.split(':').next().unwrap_or_default();
        let scheme = if host == "localhost" || host == "127.0.0.1" {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", self.registry, self.repository)
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", ipam_provider_module::sha256_hex(bytes))
}

/// GET following redirects (blob downloads go to storage); the token is
/// only sent to the registry itself.
async fn get(
    trust: &TrustRoots,
    url: &str,
    accept: &str,
    token: Option<&str>,
) -> Result<Reply, OciError> {
    let origin = |u: &str| u.parse::<Uri>().ok().and_then(|u| u.authority().cloned());
    let registry = origin(url);
    let mut url = url.to_string();
    for _ in 0..5 {
        let mut headers = vec![("accept", accept.to_string())];
        if let Some(token) = token.filter(|_| origin(&url) == registry) {
            headers.push(("authorization", format!("Bearer {token}")));
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

/// The bearer challenge's token endpoint, with its service and scope.
fn token_url(challenge: &str) -> Option<String> {
    let params = challenge.strip_prefix("Bearer ")?;
    let mut realm = None;
    let mut query = Vec::new();
    for part in params.split(',') {
        let (key, value) = part.trim().split_once('=')?;
        let value = value.trim_matches('"');
        match key {
            "realm" => realm = Some(value.to_string()),
            "service" | "scope" => query.push(format!("{key}={value}")),
            _ => {}
        }
    }
    let realm = realm?;
    Some(if query.is_empty() {
        realm
    } else {
        format!("{realm}?{}", query.join("&"))
    })
}

async fn anonymous_token(trust: &TrustRoots, challenge: &str) -> Result<String, OciError> {
    let url = token_url(challenge).ok_or_else(|| OciError::Http {
        url: challenge.into(),
        message: "unreadable bearer challenge".into(),
    })?;
    let reply = get(trust, &url, "application/json", None).await?;
    if !reply.status.is_success() {
        return Err(OciError::Status {
            url,
            status: reply.status,
        });
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&reply.body).map_err(|e| OciError::Http {
            url: url.clone(),
            message: format!("token: {e}"),
        })?;
    doc.get("token")
        .or_else(|| doc.get("access_token"))
        .and_then(|t| t.as_str())
        .map(str::to_string)
        .ok_or(OciError::Http {
            url,
            message: "no token in the answer".into(),
        })
}

/// GET with the registry's auth: anonymous first, then the bearer token the
/// challenge asks for.
async fn registry_get(
    trust: &TrustRoots,
    url: &str,
    accept: &str,
    token: &mut Option<String>,
) -> Result<Bytes, OciError> {
    let mut reply = get(trust, url, accept, token.as_deref()).await?;
    if reply.status == StatusCode::UNAUTHORIZED && token.is_none() {
        let challenge = reply
            .headers
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|c| c.to_str().ok())
            .unwrap_or_default()
            .to_string();
        *token = Some(anonymous_token(trust, &challenge).await?);
        reply = get(trust, url, accept, token.as_deref()).await?;
    }
    if !reply.status.is_success() {
        return Err(OciError::Status {
            url: url.into(),
            status: reply.status,
        });
    }
    Ok(reply.body)
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

/// The module `reference` pins: from `cache_dir` when pulled before (and
/// still matching), else from the registry, whose https certificate must
/// chain to `trust`.
pub async fn pull(
    reference: &OciReference,
    cache_dir: &Path,
    trust: &TrustRoots,
) -> Result<Vec<u8>, OciError> {
    let cached = cache_dir.join(format!("{}.wasm", reference.digest.replace(':', "-")));
    let base = reference.base();
    let manifest_url = format!("{base}/manifests/{}", reference.digest);
    // The cache is keyed by the manifest digest; the file holds the layer,
    // checked against the layer digest recorded next to it.
    let layer_note = cached.with_extension("layer");
    if let (Ok(bytes), Ok(layer)) = (std::fs::read(&cached), std::fs::read_to_string(&layer_note)) {
        if verify("cached module", &bytes, layer.trim()).is_ok() {
            return Ok(bytes);
        }
    }
    let mut token = None;
    let manifest = registry_get(trust, &manifest_url, MANIFEST_TYPES, &mut token).await?;
    verify(&manifest_url, &manifest, &reference.digest)?;
    let doc: serde_json::Value = serde_json::from_slice(&manifest)
        .map_err(|e| OciError::Manifest(reference.digest.clone(), e.to_string()))?;
    let layers = doc
        .get("layers")
        .and_then(|l| l.as_array())
        .ok_or_else(|| OciError::Manifest(reference.digest.clone(), "no layers".into()))?;
    let layer = layers
        .iter()
        .find(|l| {
            l.get("mediaType")
                .and_then(|m| m.as_str())
                .is_some_and(|m| WASM_LAYERS.contains(&m))
        })
        .or_else(|| (layers.len() == 1).then(|| &layers[0]))
        .ok_or_else(|| {
            OciError::Manifest(
                reference.digest.clone(),
                format!("no wasm layer (media types {WASM_LAYERS:?})"),
            )
        })?;
    let layer_digest = layer
        .get("digest")
        .and_then(|d| d.as_str())
        .ok_or_else(|| {
            OciError::Manifest(reference.digest.clone(), "a layer without a digest".into())
        })?
        .to_string();
    let blob_url = format!("{base}/blobs/{layer_digest}");
    let module = registry_get(trust, &blob_url, "application/octet-stream", &mut token).await?;
    verify(&blob_url, &module, &layer_digest)?;
    std::fs::create_dir_all(cache_dir).map_err(|e| OciError::Cache(cache_dir.into(), e))?;
    std::fs::write(&cached, &module).map_err(|e| OciError::Cache(cached.clone(), e))?;
    std::fs::write(&layer_note, &layer_digest).map_err(|e| OciError::Cache(layer_note, e))?;
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
        assert_eq!(r.base(), "https://ghcr.io/v2/acme/providers/aws");
        let local: OciReference = format!("oci://127.0.0.1:5000/p@sha256:{HEX}")
            .parse()
            .unwrap();
        assert_eq!(local.base(), "http://127.0.0.1:5000/v2/p");
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
    fn bearer_challenges_become_token_urls() {
        assert_eq!(
            token_url(
                r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:acme/aws:pull""#
            ),
            Some("https://ghcr.io/token?service=ghcr.io&scope=repository:acme/aws:pull".into())
        );
        assert_eq!(token_url("Basic realm=x"), None);
    }
}
