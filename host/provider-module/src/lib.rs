//! What a module file declares, read without compiling it: its digest, the
//! `ipam:provider` WIT version it was built for, and its imports and exports.

use sha2::{Digest, Sha256};
use wasmparser::{Encoding, Parser, Payload};

/// WIT versions of `ipam:provider` this host serves.
pub const SUPPORTED_WIT_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];

/// Custom section the SDK stamps with the WIT version.
pub const WIT_VERSION_SECTION: &str = "ipam-provider-wit-version";

const PROVIDER_INTERFACE: &str = "ipam:provider/provider@";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleError {
    #[error("not a WebAssembly file (no \\0asm header)")]
    NotWasm,
    #[error("a core WebAssembly module, not a component: build it for wasm32-wasip2")]
    NotAComponent,
    #[error("malformed component: {0}")]
    Malformed(String),
    #[error("the component exports no ipam:provider/provider interface and carries no WIT version stamp")]
    NotAProvider,
    #[error("the module was built for ipam:provider@{found}; this host serves {}", SUPPORTED_WIT_VERSIONS.join(", "))]
    UnsupportedWitVersion { found: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// sha256 of the file, hex.
    pub digest: String,
    pub size: usize,
    /// The version stamped by the SDK, else the one in the provider export's name.
    pub wit_version: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

impl ModuleInfo {
    /// Read a module's declarations; fails on anything that is not a component
    /// built for a WIT version this host serves.
    pub fn read(bytes: &[u8]) -> Result<Self, ModuleError> {
        if !bytes.starts_with(b"\0asm") {
            return Err(ModuleError::NotWasm);
        }
        let mut depth = 0usize;
        let mut stamp = None;
        let (mut imports, mut exports) = (Vec::new(), Vec::new());
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.map_err(|e| ModuleError::Malformed(e.to_string()))? {
                Payload::Version { encoding, .. } => {
                    if depth == 0 && encoding == Encoding::Module {
                        return Err(ModuleError::NotAComponent);
                    }
                    depth += 1;
                }
                Payload::End(_) => depth = depth.saturating_sub(1),
                Payload::CustomSection(section) if section.name() == WIT_VERSION_SECTION => {
                    let text = String::from_utf8_lossy(section.data())
                        .trim_end_matches('\0')
                        .to_string();
                    stamp = Some(text);
                }
                Payload::ComponentImportSection(reader) if depth == 1 => {
                    for import in reader {
                        let import = import.map_err(|e| ModuleError::Malformed(e.to_string()))?;
                        imports.push(import.name.name.to_string());
                    }
                }
                Payload::ComponentExportSection(reader) if depth == 1 => {
                    for export in reader {
                        let export = export.map_err(|e| ModuleError::Malformed(e.to_string()))?;
                        exports.push(export.name.name.to_string());
                    }
                }
                _ => {}
            }
        }
        let exported = exports
            .iter()
            .find_map(|e| e.strip_prefix(PROVIDER_INTERFACE))
            .map(str::to_string);
        let wit_version = stamp.or(exported).ok_or(ModuleError::NotAProvider)?;
        if !SUPPORTED_WIT_VERSIONS.contains(&wit_version.as_str()) {
            return Err(ModuleError::UnsupportedWitVersion { found: wit_version });
        }
        Ok(Self {
            digest: sha256_hex(bytes),
            size: bytes.len(),
            wit_version,
            imports,
            exports,
        })
    }
}

/// The sha256 of `bytes`, lowercase hex: a module's digest, what
/// `--provider-sha256` pins and what OCI digests carry after `sha256:`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_component() {
        assert_eq!(ModuleInfo::read(b"hello"), Err(ModuleError::NotWasm));
        assert_eq!(
            ModuleInfo::read(b"\0asm\x01\0\0\0"),
            Err(ModuleError::NotAComponent)
        );
        assert!(matches!(
            ModuleInfo::read(b"\0asm\x0d\0\x01\0\x99"),
            Err(ModuleError::Malformed(_))
        ));
    }

    #[test]
    fn an_empty_component_is_not_a_provider() {
        assert_eq!(
            ModuleInfo::read(b"\0asm\x0d\0\x01\0"),
            Err(ModuleError::NotAProvider)
        );
    }
}
