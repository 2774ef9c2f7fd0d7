//! The wasi:http send hook: every outgoing request of a guest passes the
//! provider's [`EgressPolicy`] twice (origin, then resolved addresses) before
//! it is sent. A refusal is recorded so the call that made it can be reported
//! as egress denied rather than as whatever the guest made of the error.

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use super::egress::{EgressError, EgressPolicy, Origin};

/// Denials seen during the current call, shared between the hook (which runs
/// in a spawned future) and the store that reads them after the call.
#[derive(Clone, Default)]
pub struct DenialLog(Arc<Mutex<Vec<(String, EgressError)>>>);

impl DenialLog {
    fn record(&self, destination: String, error: EgressError) {
        tracing::warn!(%destination, %error, "provider egress denied");
        if let Ok(mut log) = self.0.lock() {
            log.push((destination, error));
        }
    }

    /// Take the first denial recorded since the last call.
    pub fn take_first(&self) -> Option<(String, EgressError)> {
        let mut log = self.0.lock().ok()?;
        let first = (!log.is_empty()).then(|| log.remove(0));
        log.clear();
        first
    }
}

pub struct EgressHooks {
    pub policy: Arc<EgressPolicy>,
    pub denials: DenialLog,
}

type SendResult = wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
)>;

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let policy = self.policy.clone();
        let denials = self.denials.clone();
        Box::new(async move {
            let uri = request.uri().clone();
            let destination = uri.to_string();
            let origin = uri
                .authority()
                .and_then(|a| {
                    Origin::new(uri.scheme_str().unwrap_or("https"), a.host(), a.port_u16())
                })
                .ok_or(wasmtime_wasi_http::Error::HttpRequestUriInvalid)?;
            if let Err(error) = check(&policy, &origin).await {
                denials.record(destination, error);
                return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
            }
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

async fn check(policy: &EgressPolicy, origin: &Origin) -> Result<(), EgressError> {
    policy.check_origin(origin)?;
    let resolved: Vec<IpAddr> = tokio::net::lookup_host((origin.host.as_str(), origin.port))
        .await
        .map_err(|e| EgressError::Resolution {
            host: origin.host.clone(),
            message: e.to_string(),
        })?
        .map(|a| a.ip())
        .collect();
    EgressPolicy::check_resolved(&resolved)
}
