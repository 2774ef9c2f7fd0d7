//! The mock provider's component (`target/components/mock.wasm`): the
//! `mock-provider` library's [`MockProvider`](mock_provider::MockProvider)
//! exported as `ipam:provider@0.2.0`. The export lives here, not in the
//! library, so that the library can also be linked into a component of
//! another WIT version (`providers/testing/mock-v0-1-0`) without bringing
//! 0.2.0's exports and version stamp along.

ipam_provider_sdk::export_provider!(mock_provider::MockProvider);
