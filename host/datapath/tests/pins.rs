//! Pinned maps across loads: reused when their layout is this build's,
//! re-created when it is not. Needs root: fails loudly without it.

mod support;

use agent_ebpf_common::{COUNTERS_MAP, ENDPOINTS_MAP};
use aya::maps::{HashMap, MapData, MapInfo};
use ipam_datapath::{Datapath, EndpointInfo, MapLayout, MapOutcome, PinDir};
use support::*;

/// `BPF_MAP_TYPE_HASH`, from the kernel's uapi.
const BPF_MAP_TYPE_HASH: u32 = 1;

#[test]
fn a_map_pinned_with_another_value_size_is_detected_and_recreated() {
    require_privileges();
    let bpffs = TestBpffs::mount("layout");
    let pins = PinDir::new(bpffs.path());
    std::fs::create_dir_all(pins.path()).expect("making the pin folder");
    // What an older build with a plain hash and a 16-byte endpoint value
    // would have left.
    let expected = MapLayout::ENDPOINTS;
    let mut older: HashMap<MapData, [u8; 20], [u8; 16]> =
        HashMap::create(expected.max_entries, 0).expect("creating the older map");
    older
        .insert([1; 20], [2; 16], 0)
        .expect("writing to the older map");
    older
        .pin(pins.map(ENDPOINTS_MAP))
        .expect("pinning the older map");

    let (mut datapath, report) =
        Datapath::load(&object(), pins.clone()).expect("loading over the older pin");
    let found = MapLayout {
        map_type: BPF_MAP_TYPE_HASH,
        value_size: 16,
        ..expected
    };
    assert_eq!(
        report.maps,
        [
            (ENDPOINTS_MAP, MapOutcome::Recreated { found }),
            (COUNTERS_MAP, MapOutcome::Created),
        ]
    );
    assert_eq!(
        report.recreated().collect::<Vec<_>>(),
        [(ENDPOINTS_MAP, found)]
    );
    let info = MapInfo::from_pin(pins.map(ENDPOINTS_MAP)).expect("reading the new pin");
    assert_eq!(
        (info.key_size(), info.value_size(), info.max_entries()),
        (expected.key_size, expected.value_size, expected.max_entries)
    );
    assert!(
        datapath.endpoints().expect("reading endpoints").is_empty(),
        "the re-created map kept the older map's entries"
    );
    datapath
        .set_endpoint(ip("10.0.0.7"), EndpointInfo::pod(7, 1))
        .expect("writing to the re-created map");
}

#[test]
fn maps_pinned_with_this_layout_are_reused_with_their_entries() {
    require_privileges();
    let bpffs = TestBpffs::mount("reuse");
    let pins = PinDir::new(bpffs.path());
    let (mut first, report) = Datapath::load(&object(), pins.clone()).expect("first load");
    assert_eq!(
        report.maps,
        [
            (ENDPOINTS_MAP, MapOutcome::Created),
            (COUNTERS_MAP, MapOutcome::Created),
        ]
    );
    first
        .set_endpoint(ip("fd00::7"), EndpointInfo::pod(7, 1))
        .expect("writing an endpoint");
    first
        .sync_host_addresses(&[ip("10.0.0.1")])
        .expect("writing host addresses");
    let before = first.endpoints().expect("reading endpoints");
    drop(first);

    let (second, report) = Datapath::load(&object(), pins).expect("second load");
    assert_eq!(
        report.maps,
        [
            (ENDPOINTS_MAP, MapOutcome::Reused),
            (COUNTERS_MAP, MapOutcome::Reused),
        ]
    );
    assert_eq!(report.recreated().count(), 0);
    let mut after = second.endpoints().expect("reading endpoints again");
    let mut before = before;
    before.sort_by_key(|(key, _)| *key);
    after.sort_by_key(|(key, _)| *key);
    assert_eq!(after, before);
    assert_eq!(after.len(), 2);
}
