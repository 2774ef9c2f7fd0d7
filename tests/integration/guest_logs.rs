//! The guest's `log` import lands in the host's tracing output, tagged with
//! the provider's name.

use ipam_tests as common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use ipam_cloud::CloudApi;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn guest_log_lines_carry_the_provider_name() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let config = common::config(r#"{"mode": "behave"}"#);
    let provider = common::runtime()
        .load(&common::component("misbehave"), config)
        .await
        .unwrap();
    provider.get_vpcs().await.unwrap();

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("get-vpcs called"))
        .unwrap_or_else(|| panic!("no guest line in {text}"));
    assert!(
        line.contains("INFO") && line.contains("provider=\"misbehave\""),
        "{line}"
    );
}
