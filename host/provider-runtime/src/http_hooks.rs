//! The wasi:http send hook: every outgoing request of a guest passes the
//! provider's [`EgressPolicy`] twice (origin, then resolved addresses) and is
//! then sent to exactly the addresses that were checked. A refusal is recorded so the call that made it can be reported
//! as egress denied rather than as whatever the guest made of the error.

use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use wasmtime_wasi_http::{RequestOptions, WasiBody, WasiHttpHooks};

use crate::egress::{EgressError, EgressPolicy, Origin};
use crate::pinned_send::{self, ConnectionTask};
use crate::resolve::Resolver;

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
    pub resolver: Arc<dyn Resolver>,
    pub denials: DenialLog,
}

type SendResult = wasmtime_wasi_http::Result<(http::Response<WasiBody>, ConnectionTask)>;

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: ConnectionTask,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let policy = self.policy.clone();
        let resolver = self.resolver.clone();
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
            let addresses = match check(&policy, resolver.as_ref(), &origin).await {
                Ok(addresses) => addresses,
                Err(error) => {
                    denials.record(destination, error);
                    return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
                }
            };
            pinned_send::send(request, &origin, &addresses, options).await
        })
    }
}

/// Check the origin, resolve it, check every address; the addresses to use.
async fn check(
    policy: &EgressPolicy,
    resolver: &dyn Resolver,
    origin: &Origin,
) -> Result<Vec<IpAddr>, EgressError> {
    policy.check_origin(origin)?;
    let resolved = resolver
        .resolve(&origin.host, origin.port)
        .await
        .map_err(|e| EgressError::Resolution {
            host: origin.host.clone(),
            message: e.to_string(),
        })?;
    if resolved.is_empty() {
        return Err(EgressError::Resolution {
            host: origin.host.clone(),
            message: "no addresses".into(),
        });
    }
    EgressPolicy::check_resolved(&resolved)?;
    Ok(resolved)
}
