//! Compiled components on disk, keyed by the module's digest and the engine's
//! precompile-compatibility hash, so a restart (or a second replica sharing a
//! volume) deserializes instead of compiling.
//!
//! A cache file is `sha256(artifact) || artifact`: the checksum is verified
//! before the artifact is handed to wasmtime, so a torn or corrupted file is
//! recompiled instead of deserialized.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("compiling the component: {0}")]
    Compile(String),
    #[error("cache directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Compiled,
    DiskCache,
}

pub struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

const CHECKSUM_LEN: usize = 32;

impl ComponentCache {
    pub fn new(engine: &Engine, dir: PathBuf) -> Result<Self, CacheError> {
        std::fs::create_dir_all(&dir).map_err(|source| CacheError::Io {
            path: dir.clone(),
            source,
        })?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn path_for(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The component from the cache, else compiled and stored.
    pub fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Component, Origin), CacheError> {
        let path = self.path_for(digest);
        if let Some(component) = self.read(engine, &path) {
            return Ok((component, Origin::DiskCache));
        }
        let component = compile(engine, bytes)?;
        if let Err(error) = self.write(&path, &component) {
            tracing::warn!(%error, "could not store compiled component; the next start compiles again");
        }
        Ok((component, Origin::Compiled))
    }

    fn read(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let file = std::fs::read(path).ok()?;
        if file.len() < CHECKSUM_LEN {
            return None;
        }
        let (checksum, artifact) = file.split_at(CHECKSUM_LEN);
        if Sha256::digest(artifact).as_slice() != checksum {
            tracing::warn!(path = %path.display(), "cached component fails its checksum; recompiling");
            return None;
        }
        // SAFETY: wasmtime requires that deserialized bytes come from
        // `Component::serialize` of a compatible engine. This file was written
        // by `write` below from `serialize`, its name carries this engine's
        // precompile-compatibility hash, and its checksum was just verified,
        // so it is the artifact we wrote, whole.
        match unsafe { Component::deserialize(engine, artifact) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "cached component rejected; recompiling");
                None
            }
        }
    }

    fn write(&self, path: &Path, component: &Component) -> Result<(), CacheError> {
        let io = |source| CacheError::Io {
            path: path.to_path_buf(),
            source,
        };
        let artifact = component
            .serialize()
            .map_err(|e| CacheError::Compile(e.to_string()))?;
        let mut file = Sha256::digest(&artifact).to_vec();
        file.extend_from_slice(&artifact);
        // Write then rename, so a reader never sees a partial file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &file).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Component, CacheError> {
    Component::new(engine, bytes).map_err(|e| CacheError::Compile(format!("{e:#}")))
}
