//! Building the `ipam-cni` plugin as it is deployed: statically linked, so
//! the copy the agent's init container puts on the host runs whatever C
//! library the host has (the image's glibc may be newer than the node's),
//! and so each invocation skips the dynamic loader (about 0.4 ms of every
//! CNI call on the test VM).
//!
//! `cargo rustc --target <host> -- -C target-feature=+crt-static`: the flag
//! reaches only the plugin's own link, and the explicit target puts the
//! binary in `<target dir>/<host>/<profile>/`, where a plain `cargo build`
//! never overwrites it with a dynamic one. The result is checked: an ELF
//! with a program interpreter (a dynamic executable) is refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::setup::Toolchain;
use crate::{repo_root, run};

/// The build profile of the plugin.
#[derive(Debug, Clone, Copy)]
pub enum Profile {
    /// For the tests: quick to build.
    Dev,
    /// For the benchmarks and the image.
    Release,
}

/// Builds the static plugin with `cargo` (the host workspace's, target dir
/// set) and returns its path.
pub fn build(mut cargo: Command, target_dir: &Path, profile: Profile) -> Result<PathBuf, String> {
    let host = host_triple()?;
    cargo.args([
        "rustc",
        "--package",
        "ipam-cni",
        "--bin",
        "ipam-cni",
        "--target",
        &host,
    ]);
    if let Profile::Release = profile {
        cargo.arg("--release");
    }
    cargo.args(["--", "-C", "target-feature=+crt-static"]);
    run(&mut cargo)?;
    let dir = match profile {
        Profile::Dev => "debug",
        Profile::Release => "release",
    };
    let plugin = target_dir.join(&host).join(dir).join("ipam-cni");
    check_static(&plugin)?;
    Ok(plugin)
}

/// Refuses a binary that is dynamically linked (names a program
/// interpreter) or that cannot be read as an ELF file.
pub fn check_static(binary: &Path) -> Result<(), String> {
    let bytes = std::fs::read(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    match has_interpreter(&bytes) {
        Ok(false) => Ok(()),
        Ok(true) => Err(format!(
            "{} is dynamically linked (it names a program interpreter); \
             it must be static as deployed",
            binary.display()
        )),
        Err(why) => Err(format!("{}: {why}", binary.display())),
    }
}

/// The host's target triple, as the workspace's rustc reports it.
pub fn host_triple() -> Result<String, String> {
    Toolchain::Rustup
        .rustc_version(&repo_root())?
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(|host| host.trim().to_string())
        .ok_or_else(|| "rustc -vV names no host".to_string())
}

/// Whether a 64-bit little-endian ELF file has a PT_INTERP program
/// header, which only a dynamically linked executable has.
fn has_interpreter(elf: &[u8]) -> Result<bool, String> {
    const PT_INTERP: u32 = 3;
    if elf.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF file".into());
    }
    // EI_CLASS 2 (64-bit), EI_DATA 1 (little-endian): the hosts this builds on.
    if elf.get(4..6) != Some([2u8, 1].as_slice()) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    // Offsets come from the file: every sum and product is checked.
    let bytes_at = |at: usize, len: usize| -> Result<&[u8], String> {
        at.checked_add(len)
            .and_then(|end| elf.get(at..end))
            .ok_or_else(|| format!("truncated at byte {at}"))
    };
    let u16_at = |at: usize| -> Result<usize, String> {
        let b = bytes_at(at, 2)?;
        Ok(usize::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let phoff = bytes_at(32, 8)
        .ok()
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes)
        .ok_or("truncated ELF header")?;
    let phoff = usize::try_from(phoff).map_err(|_| "program header offset out of range")?;
    let (entry_size, count) = (u16_at(54)?, u16_at(56)?);
    for index in 0..count {
        let kind = index
            .checked_mul(entry_size)
            .and_then(|offset| offset.checked_add(phoff))
            .and_then(|at| bytes_at(at, 4).ok())
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| format!("program header {index} is truncated"))?;
        if kind == PT_INTERP {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod unit {
    use super::has_interpreter;

    /// A 64-bit little-endian ELF header with `kinds` as its program
    /// headers (56 bytes each, right after the header).
    fn elf(kinds: &[u32]) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[32..40].copy_from_slice(&64u64.to_le_bytes());
        bytes[54..56].copy_from_slice(&56u16.to_le_bytes());
        bytes[56..58].copy_from_slice(&(kinds.len() as u16).to_le_bytes());
        for kind in kinds {
            let mut header = vec![0u8; 56];
            header[..4].copy_from_slice(&kind.to_le_bytes());
            bytes.extend(header);
        }
        bytes
    }

    #[test]
    fn a_program_interpreter_means_dynamic() {
        // PT_PHDR, PT_INTERP, PT_LOAD: a dynamic executable.
        assert_eq!(has_interpreter(&elf(&[6, 3, 1])), Ok(true));
        // PT_LOAD, PT_DYNAMIC, PT_TLS: a static-pie has no interpreter.
        assert_eq!(has_interpreter(&elf(&[1, 2, 7])), Ok(false));
    }

    #[test]
    fn what_is_not_an_elf_it_can_read_is_an_error() {
        assert!(has_interpreter(b"#!/bin/sh\n").is_err());
        let mut truncated = elf(&[1, 3]);
        truncated.truncate(66);
        assert!(has_interpreter(&truncated)
            .unwrap_err()
            .contains("program header 0"));
        let mut far = elf(&[1]);
        far[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(has_interpreter(&far).is_err());
        let mut big_endian = elf(&[1]);
        big_endian[5] = 2;
        assert!(has_interpreter(&big_endian).is_err());
    }

    #[test]
    fn this_xtask_binary_is_judged_dynamic() {
        // Built by cargo for the host without crt-static: it has one.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(has_interpreter(&me), Ok(true));
    }
}
