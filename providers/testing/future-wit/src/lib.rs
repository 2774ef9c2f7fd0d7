//! A component built for `ipam:provider@0.9.0`, a version no host serves yet.

wit_bindgen::generate!({ path: "wit", world: "ipam-provider" });

// Stamped the way the SDK stamps, with the future version.
#[used]
#[link_section = "ipam-provider-wit-version"]
static WIT_VERSION_STAMP: [u8; 5] = *b"0.9.0";

struct Future;

impl exports::ipam::provider::provider::Guest for Future {
    fn info() -> String {
        "future".into()
    }
}

export!(Future);
