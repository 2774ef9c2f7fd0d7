//! Provider modules as OCI artifacts: one OCI image layout per cloud
//! provider component (`target/artifacts/<name>/`), holding a manifest whose
//! one layer is the component (`application/wasm`, config
//! `application/vnd.wasm.config.v0+json`, as wasm-pkg-tools writes them).
//! The operator pulls such a manifest by digest (`oci://…@sha256:…`).
//!
//! Reproducible: nothing in a layout depends on the time or the machine, so
//! the same component, version and revision give the same manifest digest.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::components::components_dir;
use crate::repo_root;

/// The components published as artifacts: the operator's provider modules.
pub const PROVIDERS: &[&str] = &["mock", "aws", "azure"];

pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const WASM_LAYER_TYPE: &str = "application/wasm";
pub const WASM_CONFIG_TYPE: &str = "application/vnd.wasm.config.v0+json";

/// Where the project's source is published: the `source` annotation of
/// every artifact and image (override with `IPAM_IMAGE_SOURCE`).
pub const DEFAULT_SOURCE: &str = "https://github.com/ipam-operator/ipam-operator";

/// One built artifact.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The provider (`mock`, `aws`, `azure`).
    pub name: String,
    /// The OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`).
    pub dir: PathBuf,
    /// The tag the layout's index names it by (`oci:DIR:TAG` for skopeo).
    pub tag: String,
    /// `sha256:HEX` of the manifest: what `oci://REGISTRY/REPO@…` pins.
    pub manifest_digest: String,
    /// Bytes of the wasm layer.
    pub layer_size: u64,
}

/// The OCI annotations every artifact carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub source: String,
    pub version: String,
    pub revision: String,
}

impl Labels {
    /// This checkout's: `IPAM_IMAGE_SOURCE` or [`DEFAULT_SOURCE`], the
    /// providers' workspace version, `git rev-parse HEAD`.
    pub fn of_checkout() -> Result<Self, String> {
        let source = std::env::var("IPAM_IMAGE_SOURCE").unwrap_or_else(|_| DEFAULT_SOURCE.into());
        let manifest = repo_root().join("providers").join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| format!("{}: {e}", manifest.display()))?;
        let version = workspace_version(&text)
            .ok_or_else(|| format!("{}: no [workspace.package] version", manifest.display()))?;
        let output = Command::new("git")
            .arg("-C")
            .arg(repo_root())
            .args(["rev-parse", "HEAD"])
            .output()
            .map_err(|e| format!("git rev-parse HEAD: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "git rev-parse HEAD (the revision annotation): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let revision = String::from_utf8_lossy(&output.stdout).trim().to_string();
        Ok(Self {
            source,
            version,
            revision,
        })
    }
}

/// `version = "X"` under `[workspace.package]` of a Cargo manifest.
fn workspace_version(manifest: &str) -> Option<String> {
    let mut in_section = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_section = line == "[workspace.package]";
        } else if in_section {
            if let Some(value) = line.strip_prefix("version").map(str::trim) {
                let value = value.strip_prefix('=')?.trim().trim_matches('"');
                return Some(value.to_string());
            }
        }
    }
    None
}

pub fn artifacts_dir() -> PathBuf {
    repo_root().join("target").join("artifacts")
}

fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The blobs of one artifact and the index naming its manifest: what an
/// OCI image layout of it holds, computed without touching the disk.
#[derive(Debug)]
pub struct Layout {
    /// (digest, bytes): the config, the layer, the manifest.
    pub blobs: Vec<(String, Vec<u8>)>,
    pub index: Vec<u8>,
    pub manifest_digest: String,
}

/// The layout of `wasm` (file name `title` in the layer's annotations),
/// tagged `labels.version`.
pub fn layout(wasm: &[u8], title: &str, labels: &Labels) -> Layout {
    let layer_digest = sha256(wasm);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .unwrap_or_default();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {
            "mediaType": WASM_CONFIG_TYPE,
            "digest": sha256(&config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER_TYPE,
            "digest": layer_digest,
            "size": wasm.len(),
            "annotations": {"org.opencontainers.image.title": title},
        }],
        "annotations": {
            "org.opencontainers.image.source": labels.source,
            "org.opencontainers.image.version": labels.version,
            "org.opencontainers.image.revision": labels.revision,
        },
    }))
    .unwrap_or_default();
    let manifest_digest = sha256(&manifest);
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_TYPE,
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": labels.version},
        }],
    }))
    .unwrap_or_default();
    Layout {
        blobs: vec![
            (sha256(&config), config),
            (layer_digest, wasm.to_vec()),
            (manifest_digest.clone(), manifest),
        ],
        index,
        manifest_digest,
    }
}

/// One line per artifact: name, manifest digest, size, layout.
pub fn print(artifacts: &[Artifact]) {
    for a in artifacts {
        println!(
            "artifact {}: {} ({} bytes of wasm) in {} (oci:{}:{})",
            a.name,
            a.manifest_digest,
            a.layer_size,
            a.dir.display(),
            a.dir.display(),
            a.tag
        );
    }
}

/// Write `layout` as an OCI image layout into `dir`, replacing what was
/// there (no blob of an older build stays behind).
pub fn write_layout(dir: &Path, layout: &Layout) -> Result<(), String> {
    let io = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    let blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).map_err(|e| io(&blobs, e))?;
    for (digest, bytes) in &layout.blobs {
        let path = blobs.join(digest.trim_start_matches("sha256:"));
        std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
    }
    let marker = dir.join("oci-layout");
    std::fs::write(&marker, br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(|e| io(&marker, e))?;
    let index = dir.join("index.json");
    std::fs::write(&index, &layout.index).map_err(|e| io(&index, e))
}

/// One artifact per provider component of `components` (what `cargo
/// xtask providers` built), under `out`.
pub fn build_from(components: &Path, out: &Path, labels: &Labels) -> Result<Vec<Artifact>, String> {
    let mut built = Vec::new();
    for name in PROVIDERS {
        let title = format!("{name}.wasm");
        let path = components.join(&title);
        let wasm = std::fs::read(&path).map_err(|e| {
            format!(
                "{}: {e} (build the components first: cargo xtask providers)",
                path.display()
            )
        })?;
        let layout = layout(&wasm, &title, labels);
        let dir = out.join(name);
        write_layout(&dir, &layout)?;
        built.push(Artifact {
            name: name.to_string(),
            dir,
            tag: labels.version.clone(),
            manifest_digest: layout.manifest_digest,
            layer_size: wasm.len() as u64,
        });
    }
    Ok(built)
}

/// The artifacts of the built components (`target/components`) under
/// `target/artifacts`, annotated with this checkout's labels. The
/// components must have been built (`components::build`).
pub fn build() -> Result<Vec<Artifact>, String> {
    build_from(&components_dir(), &artifacts_dir(), &Labels::of_checkout()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(revision: &str) -> Labels {
        Labels {
            source: DEFAULT_SOURCE.into(),
            version: "0.1.0".into(),
            revision: revision.into(),
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_manifest_digest() {
        let wasm = b"\0asm\x0d\0\x01\0component";
        let first = layout(wasm, "mock.wasm", &labels("abc"));
        let again = layout(wasm, "mock.wasm", &labels("abc"));
        assert_eq!(first.manifest_digest, again.manifest_digest);
        assert_eq!(first.index, again.index);
        assert_ne!(
            first.manifest_digest,
            layout(wasm, "mock.wasm", &labels("abd")).manifest_digest,
            "the revision is an input"
        );
        assert_ne!(
            first.manifest_digest,
            layout(b"\0asm other", "mock.wasm", &labels("abc")).manifest_digest
        );
    }

    #[test]
    fn the_manifest_names_the_wasm_layer_its_config_and_annotations() {
        let wasm = b"\0asm\x0d\0\x01\0component";
        let built = layout(wasm, "mock.wasm", &labels("abc"));
        let (digest, bytes) = &built.blobs[2];
        assert_eq!(*digest, built.manifest_digest);
        assert_eq!(*digest, sha256(bytes));
        let manifest: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_TYPE);
        assert_eq!(manifest["config"]["digest"], built.blobs[0].0.as_str());
        assert_eq!(manifest["layers"][0]["mediaType"], WASM_LAYER_TYPE);
        assert_eq!(manifest["layers"][0]["digest"], sha256(wasm).as_str());
        assert_eq!(manifest["layers"][0]["size"], wasm.len());
        let annotations = &manifest["annotations"];
        assert_eq!(annotations["org.opencontainers.image.revision"], "abc");
        assert_eq!(annotations["org.opencontainers.image.version"], "0.1.0");
        assert_eq!(
            annotations["org.opencontainers.image.source"],
            DEFAULT_SOURCE
        );
        let index: serde_json::Value = serde_json::from_slice(&built.index).unwrap();
        assert_eq!(index["manifests"][0]["digest"], digest.as_str());
        assert_eq!(
            index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            "0.1.0"
        );
    }

    #[test]
    fn the_workspace_version_is_read_from_its_section() {
        let manifest = "[package]\nversion = \"9\"\n[workspace.package]\nedition = \"2021\"\nversion = \"0.2.0\"\n";
        assert_eq!(workspace_version(manifest).as_deref(), Some("0.2.0"));
        assert_eq!(workspace_version("[package]\nversion = \"1\"\n"), None);
    }
}
