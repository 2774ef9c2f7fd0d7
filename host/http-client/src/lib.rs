//! The host's own HTTP client (not the guests'): OCI pulls, credential
//! endpoints (Entra ID, STS, IMDS, container credentials). Also the TLS
//! connector the provider runtime's pinned sender uses for guest egress.
//! Both verify https servers against [`TrustRoots`]: the webpki roots, plus
//! the extra CAs the operator configured (`--egress-ca-file`), one setting
//! for the guests' egress and the host's own calls; each caller passes the
//! roots it was configured with. One request per fresh HTTP/1.1 connection,
//! a size cap on the answer.

mod request;
mod trust;

pub use request::{request, HttpError, Reply};
pub use trust::{TrustError, TrustRoots};
#[cfg(feature = "testing")]
pub mod testing;
