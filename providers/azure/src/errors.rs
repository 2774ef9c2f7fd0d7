//! ARM's errors as the WIT variants the engine acts on (the table in
//! `README.md`): from an HTTP status, ARM's error code and the Retry-After
//! header, or from a long-running operation that ended `Failed`.

use ipam_provider_sdk::Error;

use crate::models::{ErrorDetail, ErrorResponse};

/// Codes of a write refused because another one on the resource has not
/// finished: it will, so wait and send it again.
const ANOTHER_OPERATION: &[&str] = &[
    "AnotherOperationInProgress",
    "RetryableErrorDueToAnotherOperation",
    "OperationNotAllowedOnResourceInTransition",
];

const SUBNET_FULL: &[&str] = &["SubnetIsFull", "InsufficientSubnetSize"];

const NOT_FOUND: &[&str] = &[
    "ResourceNotFound",
    "NotFound",
    "ResourceGroupNotFound",
    "SubscriptionNotFound",
    "ParentResourceNotFound",
];

const UNAUTHORIZED: &[&str] = &[
    "AuthorizationFailed",
    "AuthenticationFailed",
    "InvalidAuthenticationToken",
    "InvalidAuthenticationTokenTenant",
    "ExpiredAuthenticationToken",
    "LinkedAuthorizationFailed",
];

fn one_of(code: &str, codes: &[&str]) -> bool {
    codes.iter().any(|c| c.eq_ignore_ascii_case(code))
}

/// A code about too many IP configurations on a NIC or a VM. ARM's codes
/// for these limits are not listed in its reference; they all name IP
/// configurations and a limit or a count.
fn is_configuration_limit(code: &str) -> bool {
    let code = code.to_ascii_lowercase();
    code.contains("ipconfiguration")
        && (code.contains("limit") || code.contains("count") || code.contains("exceed"))
}

/// Retry-After as milliseconds: ARM sends whole seconds (an HTTP date is
/// allowed by HTTP but ARM does not send one; it counts as unknown).
pub fn retry_after_ms(header: Option<&str>) -> Option<u64> {
    header?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|s| s.saturating_mul(1000))
}

/// The error of a response with a status outside 2xx.
pub fn from_response(status: u16, retry_after: Option<&str>, body: &[u8]) -> Error {
    let detail = serde_json::from_slice::<ErrorResponse>(body)
        .map(|e| e.error)
        .unwrap_or_default();
    let said = if detail.code.is_empty() {
        format!(
            "ARM answered {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    } else {
        format!("ARM answered {status} {}: {}", detail.code, detail.message)
    };
    let wait = retry_after_ms(retry_after).unwrap_or(0);
    match status {
        429 => Error::Throttled(wait),
        409 if one_of(&detail.code, ANOTHER_OPERATION) => Error::Throttled(wait),
        409 | 412 => Error::Conflict(said),
        401 | 403 => Error::Unauthorized(said),
        404 => Error::NotFound(said),
        500..=599 => Error::Transient(said),
        _ => from_code(&detail, said),
    }
}

/// The error of a long-running operation that ended `Failed` or
/// `Canceled`, from the code it carries.
pub fn from_operation(status: &str, detail: Option<&ErrorDetail>) -> Error {
    let detail = detail.cloned().unwrap_or_default();
    let said = format!(
        "the operation ended {status}: {} {}",
        detail.code, detail.message
    );
    if one_of(&detail.code, ANOTHER_OPERATION) {
        return Error::Throttled(0);
    }
    from_code(&detail, said)
}

fn from_code(detail: &ErrorDetail, said: String) -> Error {
    let code = detail.code.as_str();
    if one_of(code, SUBNET_FULL) {
        Error::SubnetFull(said)
    } else if is_configuration_limit(code) {
        Error::AddressLimit(said)
    } else if one_of(code, NOT_FOUND) {
        Error::NotFound(said)
    } else if one_of(code, UNAUTHORIZED) {
        Error::Unauthorized(said)
    } else if one_of(code, &["PreconditionFailed", "Conflict"]) {
        Error::Conflict(said)
    } else if one_of(
        code,
        &[
            "InternalServerError",
            "ServiceUnavailable",
            "GatewayTimeout",
        ],
    ) {
        Error::Transient(said)
    } else if one_of(
        code,
        &[
            "InvalidParameter",
            "InvalidRequestFormat",
            "InvalidApiVersionParameter",
            "BadRequest",
        ],
    ) {
        Error::InvalidArgument(said)
    } else {
        Error::Other(said)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(code: &str) -> Vec<u8> {
        format!(r#"{{"error": {{"code": "{code}", "message": "said {code}"}}}}"#).into_bytes()
    }

    fn variant(error: &Error) -> &'static str {
        match error {
            Error::Throttled(_) => "throttled",
            Error::NotFound(_) => "not-found",
            Error::InterfaceLimit(_) => "interface-limit",
            Error::AddressLimit(_) => "address-limit",
            Error::SubnetFull(_) => "subnet-full",
            Error::InsufficientPrefixes(_) => "insufficient-prefixes",
            Error::Conflict(_) => "conflict",
            Error::InvalidArgument(_) => "invalid-argument",
            Error::Unauthorized(_) => "unauthorized",
            Error::Transient(_) => "transient",
            Error::Other(_) => "other",
        }
    }

    #[test]
    fn every_row_of_the_readme_table() {
        let table: &[(u16, &str, &str)] = &[
            (429, "TooManyRequests", "throttled"),
            (409, "AnotherOperationInProgress", "throttled"),
            (409, "RetryableErrorDueToAnotherOperation", "throttled"),
            (409, "Conflict", "conflict"),
            (412, "PreconditionFailed", "conflict"),
            (400, "SubnetIsFull", "subnet-full"),
            (400, "InsufficientSubnetSize", "subnet-full"),
            (
                400,
                "MaxIpConfigurationsPerNicLimitReached",
                "address-limit",
            ),
            (400, "IpConfigurationCountExceedsLimit", "address-limit"),
            (401, "InvalidAuthenticationToken", "unauthorized"),
            (403, "AuthorizationFailed", "unauthorized"),
            (404, "ResourceNotFound", "not-found"),
            (500, "InternalServerError", "transient"),
            (503, "ServiceUnavailable", "transient"),
            (400, "InvalidParameter", "invalid-argument"),
            (400, "SomethingElse", "other"),
        ];
        for (status, code, want) in table {
            let error = from_response(*status, None, &body(code));
            assert_eq!(variant(&error), *want, "{status} {code}: {error:?}");
        }
    }

    #[test]
    fn throttling_carries_retry_after_in_milliseconds() {
        assert_eq!(
            from_response(429, Some("17"), b""),
            Error::Throttled(17_000)
        );
        assert_eq!(
            from_response(409, Some("3"), &body("AnotherOperationInProgress")),
            Error::Throttled(3_000)
        );
        assert_eq!(
            from_response(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), b""),
            Error::Throttled(0)
        );
        assert_eq!(from_response(429, None, b""), Error::Throttled(0));
    }

    #[test]
    fn the_message_names_status_code_and_what_arm_said() {
        assert_eq!(
            from_response(412, None, &body("PreconditionFailed")),
            Error::Conflict("ARM answered 412 PreconditionFailed: said PreconditionFailed".into())
        );
        assert_eq!(
            from_response(502, None, b"<html>bad gateway</html>"),
            Error::Transient("ARM answered 502: <html>bad gateway</html>".into())
        );
    }

    #[test]
    fn a_failed_operation_is_mapped_by_its_code() {
        let detail = |code: &str| ErrorDetail {
            code: code.into(),
            message: "m".into(),
        };
        assert_eq!(
            variant(&from_operation("Failed", Some(&detail("SubnetIsFull")))),
            "subnet-full"
        );
        assert_eq!(
            from_operation(
                "Failed",
                Some(&detail("RetryableErrorDueToAnotherOperation"))
            ),
            Error::Throttled(0)
        );
        assert_eq!(variant(&from_operation("Canceled", None)), "other");
    }
}
