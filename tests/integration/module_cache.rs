//! Compiled components come from the disk cache on the second load: proven by
//! the runtime's compile counter, not by timing.

use ipam_tests as common;

use common::component;
use ipam_provider_runtime::{ModuleOrigin, ProviderRuntime, RuntimeConfig};

fn runtime_with_cache(dir: &std::path::Path) -> ProviderRuntime {
    ProviderRuntime::new(RuntimeConfig {
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

#[test]
fn the_second_load_compiles_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = component("mock");

    let first = runtime_with_cache(cache.path());
    assert_eq!(
        first.prepare(&bytes).unwrap().origin,
        ModuleOrigin::Compiled
    );
    assert_eq!(first.compiles(), 1);

    // A new runtime, as after a restart: same engine settings, same cache.
    let second = runtime_with_cache(cache.path());
    let module = second.prepare(&bytes).unwrap();
    assert_eq!(module.origin, ModuleOrigin::DiskCache);
    assert_eq!(second.compiles(), 0, "the second load compiled nothing");
    assert_eq!(module.info.wit_version, "0.2.0");
}

#[test]
fn a_corrupted_cache_entry_is_recompiled_not_loaded() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = component("mock");
    runtime_with_cache(cache.path()).prepare(&bytes).unwrap();
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut file = std::fs::read(&path).unwrap();
        let middle = file.len() / 2;
        file[middle] ^= 0xff;
        std::fs::write(&path, file).unwrap();
    }
    let runtime = runtime_with_cache(cache.path());
    assert_eq!(
        runtime.prepare(&bytes).unwrap().origin,
        ModuleOrigin::Compiled
    );
    assert_eq!(runtime.compiles(), 1);
}

#[test]
fn a_different_module_is_a_different_entry() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = runtime_with_cache(cache.path());
    runtime.prepare(&component("mock")).unwrap();
    assert_eq!(
        runtime.prepare(&component("misbehave")).unwrap().origin,
        ModuleOrigin::Compiled
    );
    assert_eq!(runtime.compiles(), 2);
}
