//! The token server of a registry in `token` auth mode, as ECR, ACR and
//! Docker Hub work: the registry answers `401` with `Bearer
//! realm=…,service=…,scope=…`, and this server, at the realm, hands out a
//! JWT (ES256, its certificate in `x5c`, signed by the registry's CA) for
//! the scope asked: every action asked to the right user and password, no
//! access to an anonymous caller, `401` to wrong credentials.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use ipam_http_client::testing::PrivateCa;
use rcgen::{KeyPair, SigningKey};

use crate::StubRequest;

/// The `service` and `issuer` the registry is configured with.
pub const SERVICE: &str = "ipam-test-registry";
pub const ISSUER: &str = "ipam-test-token-server";

struct Issuer {
    key: KeyPair,
    /// The signing certificate, DER in standard base64 (a JWT's `x5c`).
    certificate: String,
    user: String,
    password: String,
    issued: AtomicU64,
}

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ECDSA signature from ASN.1 DER (`SEQUENCE { INTEGER r, INTEGER s }`)
/// to JWS's fixed-size `r || s` (32 bytes each for P-256).
fn jws_signature(der: &[u8]) -> Vec<u8> {
    let integer = |at: usize| -> (&[u8], usize) {
        assert_eq!(der[at], 0x02, "an INTEGER in the ECDSA signature");
        let length = der[at + 1] as usize;
        (&der[at + 2..at + 2 + length], at + 2 + length)
    };
    assert_eq!(der[0], 0x30, "a SEQUENCE: the ECDSA signature");
    let (r, next) = integer(2);
    let (s, _) = integer(next);
    let mut out = Vec::with_capacity(64);
    for part in [r, s] {
        let trimmed: Vec<u8> = part.iter().copied().skip_while(|b| *b == 0).collect();
        out.extend(std::iter::repeat_n(0u8, 32 - trimmed.len()));
        out.extend(trimmed);
    }
    out
}

/// `repository:NAME:ACTION[,ACTION]` → the claim's access entry.
fn access(scope: &str) -> Option<serde_json::Value> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    let actions: Vec<&str> = actions.split(',').collect();
    Some(serde_json::json!({"type": kind, "name": name, "actions": actions}))
}

impl Issuer {
    fn token(&self, subject: &str, access: Vec<serde_json::Value>) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [self.certificate]});
        let claims = serde_json::json!({
            "iss": ISSUER, "sub": subject, "aud": SERVICE,
            "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": format!("t{}", self.issued.fetch_add(1, Ordering::SeqCst)),
            "access": access,
        });
        let signed = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = self.key.sign(signed.as_bytes()).expect("ES256 signature");
        format!("{signed}.{}", base64url(&jws_signature(&signature)))
    }

    fn answer(&self, request: &StubRequest) -> Response<Full<Bytes>> {
        let login = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let (subject, granted) = match login {
            None => (String::new(), false),
            Some(pair) if pair == format!("{}:{}", self.user, self.password) => {
                (self.user.clone(), true)
            }
            Some(_) => {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .body(Full::new(Bytes::from_static(
                        b"{\"details\":\"bad login\"}",
                    )))
                    .expect("a response")
            }
        };
        let access: Vec<serde_json::Value> = if granted {
            crate::form_params(request.query.as_bytes())
                .into_iter()
                .filter(|(key, _)| key == "scope")
                .flat_map(|(_, value)| value.split(' ').filter_map(access).collect::<Vec<_>>())
                .collect()
        } else {
            Vec::new()
        };
        let body = serde_json::json!({"token": self.token(&subject, access), "expires_in": 300});
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("a response")
    }
}

/// A token server on 127.0.0.1 (plain HTTP: a loopback realm) for `user`
/// with `password`, signing with a certificate of `ca`; its realm URL.
pub async fn start(ca: &PrivateCa, user: &str, password: &str) -> String {
    let (certificate, key) = ca.server_pem(&[ISSUER]);
    let der: String = certificate
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let issuer = Arc::new(Issuer {
        key: KeyPair::from_pem(&key).expect("the signing key"),
        certificate: der,
        user: user.into(),
        password: password.into(),
        issued: AtomicU64::new(0),
    });
    let address = crate::stub_server(move |request| issuer.answer(&request)).await;
    format!("http://{address}/token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_signatures_become_fixed_size() {
        // r with a leading zero (high bit set), s short.
        let mut der = vec![0x30, 0x00, 0x02, 33, 0x00];
        der.extend([0x80; 32]);
        der.extend([0x02, 2, 0x01, 0x02]);
        der[1] = (der.len() - 2) as u8;
        let raw = jws_signature(&der);
        assert_eq!(raw.len(), 64);
        assert_eq!(&raw[..32], &[0x80; 32]);
        assert_eq!(&raw[32..62], &[0; 30]);
        assert_eq!(&raw[62..], &[1, 2]);
    }

    #[test]
    fn scopes_become_access_entries() {
        assert_eq!(
            access("repository:providers/mock:pull,push"),
            Some(
                serde_json::json!({"type": "repository", "name": "providers/mock", "actions": ["pull", "push"]})
            )
        );
        assert_eq!(access("nonsense"), None);
    }
}
