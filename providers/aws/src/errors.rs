//! EC2 errors to the WIT error variants the operator's engine acts on.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use ipam_provider_sdk::Error;

/// What an EC2 error code means to the engine. Codes are EC2's
/// (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
pub fn from_code(code: &str, message: &str, status: Option<u16>) -> Error {
    let text = if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {message}")
    };
    match code {
        "RequestLimitExceeded"
        | "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "SlowDown" => Error::Throttled(0),
        "InsufficientFreeAddressesInSubnet" => Error::SubnetFull(text),
        "InsufficientCidrBlocks" => Error::InsufficientPrefixes(text),
        "PrivateIpAddressLimitExceeded" => Error::AddressLimit(text),
        "AttachmentLimitExceeded" => Error::InterfaceLimit(text),
        "UnauthorizedOperation"
        | "AuthFailure"
        | "InvalidClientTokenId"
        | "OptInRequired"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "Blocked"
        | "AccessDenied"
        | "AccessDeniedException" => Error::Unauthorized(text),
        "InvalidInstanceType" => Error::NotFound(text),
        _ if code.ends_with(".NotFound") => Error::NotFound(text),
        "InvalidParameterValue" if is_device_index_taken(message) => Error::Conflict(text),
        "InvalidNetworkInterface.InUse" | "IncorrectState" | "IncorrectInstanceState" => {
            Error::Conflict(text)
        }
        "InvalidParameterValue"
        | "InvalidParameterCombination"
        | "InvalidParameter"
        | "MissingParameter"
        | "UnknownParameter"
        | "InvalidAction" => Error::InvalidArgument(text),
        _ if code.ends_with(".Malformed") => Error::InvalidArgument(text),
        "InternalError" | "InternalFailure" | "ServiceUnavailable" | "Unavailable"
        | "RequestExpired" | "RequestTimeout" => Error::Transient(text),
        _ if status.is_some_and(|s| s >= 500) => Error::Transient(text),
        _ => Error::Other(text),
    }
}

/// EC2 answers an attach at a taken device index with InvalidParameterValue
/// "Instance '…' already has an interface attached at device index '1'."
pub fn is_device_index_taken(message: &str) -> bool {
    message.contains("device index")
}

/// EC2 answers an unassign of an address the interface does not have with
/// InvalidParameterValue "Some of the specified addresses are not assigned…".
pub fn is_not_assigned(error: &Error) -> bool {
    matches!(error, Error::InvalidArgument(text) if text.contains("not assigned"))
}

/// An SDK error as a WIT error: EC2's code when EC2 answered, else what went
/// wrong on the way.
pub fn from_sdk<E>(operation: &str, error: SdkError<E>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match &error {
        SdkError::ServiceError(service) => {
            let status = Some(service.raw().status().as_u16());
            let err = service.err();
            match err.code() {
                Some(code) => from_code(code, err.message().unwrap_or_default(), status),
                // Not EC2's XML (a proxy or load balancer answered).
                None if status.is_some_and(|s| s >= 500) => {
                    Error::Transient(format!("{operation}: {}", DisplayErrorContext(&error)))
                }
                None => Error::Other(format!("{operation}: {}", DisplayErrorContext(&error))),
            }
        }
        SdkError::TimeoutError(_) => Error::Transient(format!("{operation}: timed out")),
        SdkError::DispatchFailure(_) => {
            let text = format!("{}", DisplayErrorContext(&error));
            // wasi:http's HttpRequestDenied: the operator's egress allow-list
            // does not have the endpoint.
            if text.contains("HttpRequestDenied") {
                Error::Unauthorized(format!(
                    "{operation}: the operator's egress allow-list refused the EC2 endpoint ({text})"
                ))
            } else {
                Error::Transient(format!("{operation}: {text}"))
            }
        }
        SdkError::ResponseError(_) => Error::Transient(format!(
            "{operation}: unreadable response: {}",
            DisplayErrorContext(&error)
        )),
        SdkError::ConstructionFailure(_) => {
            Error::InvalidArgument(format!("{operation}: {}", DisplayErrorContext(&error)))
        }
        _ => Error::Other(format!("{operation}: {}", DisplayErrorContext(&error))),
    }
}
