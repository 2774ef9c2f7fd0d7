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

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_ec2::operation::assign_private_ip_addresses::AssignPrivateIpAddressesError;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;

    use super::*;

    /// The WIT case of an error, as the engine sees it.
    fn case(error: &Error) -> &'static str {
        match error {
            Error::Throttled(_) => "throttled",
            Error::SubnetFull(_) => "subnet-full",
            Error::InsufficientPrefixes(_) => "insufficient-prefixes",
            Error::AddressLimit(_) => "address-limit",
            Error::InterfaceLimit(_) => "interface-limit",
            Error::Unauthorized(_) => "unauthorized",
            Error::NotFound(_) => "not-found",
            Error::Conflict(_) => "conflict",
            Error::InvalidArgument(_) => "invalid-argument",
            Error::Transient(_) => "transient",
            Error::Other(_) => "other",
        }
    }

    fn text(error: &Error) -> &str {
        match error {
            Error::Throttled(_) => "",
            Error::SubnetFull(t)
            | Error::InsufficientPrefixes(t)
            | Error::AddressLimit(t)
            | Error::InterfaceLimit(t)
            | Error::Unauthorized(t)
            | Error::NotFound(t)
            | Error::Conflict(t)
            | Error::InvalidArgument(t)
            | Error::Transient(t)
            | Error::Other(t) => t,
        }
    }

    #[test]
    fn every_documented_code_maps_to_its_case() {
        let table = [
            ("RequestLimitExceeded", "throttled"),
            ("Throttling", "throttled"),
            ("ThrottlingException", "throttled"),
            ("RequestThrottled", "throttled"),
            ("SlowDown", "throttled"),
            ("InsufficientFreeAddressesInSubnet", "subnet-full"),
            ("InsufficientCidrBlocks", "insufficient-prefixes"),
            ("PrivateIpAddressLimitExceeded", "address-limit"),
            ("AttachmentLimitExceeded", "interface-limit"),
            ("UnauthorizedOperation", "unauthorized"),
            ("AuthFailure", "unauthorized"),
            ("InvalidClientTokenId", "unauthorized"),
            ("OptInRequired", "unauthorized"),
            ("SignatureDoesNotMatch", "unauthorized"),
            ("ExpiredToken", "unauthorized"),
            ("Blocked", "unauthorized"),
            ("AccessDenied", "unauthorized"),
            ("AccessDeniedException", "unauthorized"),
            ("InvalidInstanceType", "not-found"),
            ("InvalidInstanceID.NotFound", "not-found"),
            ("InvalidNetworkInterfaceID.NotFound", "not-found"),
            ("InvalidSubnetID.NotFound", "not-found"),
            ("InvalidNetworkInterface.InUse", "conflict"),
            ("IncorrectState", "conflict"),
            ("IncorrectInstanceState", "conflict"),
            ("InvalidParameterValue", "invalid-argument"),
            ("InvalidParameterCombination", "invalid-argument"),
            ("InvalidParameter", "invalid-argument"),
            ("MissingParameter", "invalid-argument"),
            ("UnknownParameter", "invalid-argument"),
            ("InvalidAction", "invalid-argument"),
            ("InvalidNetworkInterfaceID.Malformed", "invalid-argument"),
            ("InternalError", "transient"),
            ("InternalFailure", "transient"),
            ("ServiceUnavailable", "transient"),
            ("Unavailable", "transient"),
            ("RequestExpired", "transient"),
            ("RequestTimeout", "transient"),
        ];
        for (code, want) in table {
            let error = from_code(code, "as EC2 words it", Some(400));
            assert_eq!(case(&error), want, "{code}: {error:?}");
            if want != "throttled" {
                assert_eq!(text(&error), format!("{code}: as EC2 words it"));
            }
        }
    }

    #[test]
    fn throttling_leaves_the_wait_to_the_engine() {
        assert!(matches!(
            from_code("RequestLimitExceeded", "slow down", Some(503)),
            Error::Throttled(0)
        ));
    }

    #[test]
    fn an_empty_message_leaves_the_code_alone() {
        assert_eq!(
            text(&from_code("IncorrectState", "", Some(400))),
            "IncorrectState"
        );
    }

    #[test]
    fn a_taken_device_index_is_a_conflict_and_other_bad_values_are_not() {
        let taken = from_code(
            "InvalidParameterValue",
            "Instance 'i-1' already has an interface attached at device index '1'.",
            Some(400),
        );
        assert_eq!(case(&taken), "conflict", "{taken:?}");
        let other = from_code("InvalidParameterValue", "Invalid subnet", Some(400));
        assert_eq!(case(&other), "invalid-argument", "{other:?}");
    }

    #[test]
    fn an_unknown_code_is_transient_only_with_a_server_error_status() {
        for (status, want) in [(Some(500), "transient"), (Some(503), "transient")] {
            let error = from_code("SomethingNew", "", status);
            assert_eq!(case(&error), want, "{status:?}");
        }
        for status in [Some(400), Some(499), None] {
            let error = from_code("SomethingNew", "", status);
            assert_eq!(case(&error), "other", "{status:?}");
            assert_eq!(text(&error), "SomethingNew");
        }
    }

    #[test]
    fn not_assigned_is_recognised_only_as_invalid_argument() {
        let refused = from_code(
            "InvalidParameterValue",
            "Some of the specified addresses are not assigned to interface eni-1",
            Some(400),
        );
        assert!(is_not_assigned(&refused));
        assert!(!is_not_assigned(&from_code(
            "InvalidParameterValue",
            "Invalid subnet",
            Some(400)
        )));
        assert!(!is_not_assigned(&Error::Other("not assigned".to_string())));
    }

    type AssignError = SdkError<AssignPrivateIpAddressesError, Response>;

    fn raw(status: u16, body: &str) -> Response {
        let status = StatusCode::try_from(status).expect("a valid status");
        Response::new(status, SdkBody::from(body))
    }

    fn service(code: Option<&str>, status: u16) -> AssignError {
        let mut metadata = ErrorMetadata::builder().message("as EC2 words it");
        if let Some(code) = code {
            metadata = metadata.code(code);
        }
        SdkError::service_error(
            AssignPrivateIpAddressesError::generic(metadata.build()),
            raw(status, "<Response/>"),
        )
    }

    #[test]
    fn a_service_error_maps_by_its_code_and_status() {
        let limit = from_sdk(
            "AssignPrivateIpAddresses",
            service(Some("PrivateIpAddressLimitExceeded"), 400),
        );
        assert_eq!(case(&limit), "address-limit", "{limit:?}");
        assert_eq!(
            text(&limit),
            "PrivateIpAddressLimitExceeded: as EC2 words it"
        );
        let unknown = from_sdk(
            "AssignPrivateIpAddresses",
            service(Some("SomethingNew"), 502),
        );
        assert_eq!(case(&unknown), "transient", "{unknown:?}");
    }

    #[test]
    fn an_answer_without_an_ec2_code_is_transient_only_from_a_server_error() {
        let gateway = from_sdk("DescribeSubnets", service(None, 502));
        assert_eq!(case(&gateway), "transient", "{gateway:?}");
        assert!(
            text(&gateway).starts_with("DescribeSubnets: "),
            "{gateway:?}"
        );
        let refused = from_sdk("DescribeSubnets", service(None, 404));
        assert_eq!(case(&refused), "other", "{refused:?}");
        assert!(
            text(&refused).starts_with("DescribeSubnets: "),
            "{refused:?}"
        );
    }

    #[test]
    fn a_malformed_answer_is_transient_and_says_it_was_unreadable() {
        let error: AssignError = SdkError::response_error(
            "invalid XML: unexpected end of stream",
            raw(200, "<AssignPrivateIpAddressesResponse"),
        );
        let mapped = from_sdk("AssignPrivateIpAddresses", error);
        assert_eq!(case(&mapped), "transient", "{mapped:?}");
        let said = text(&mapped);
        assert!(
            said.starts_with("AssignPrivateIpAddresses: unreadable response")
                && said.contains("unexpected end of stream"),
            "{said}"
        );
    }

    #[test]
    fn a_timeout_is_transient_and_names_the_operation() {
        let error: AssignError = SdkError::timeout_error("deadline");
        let mapped = from_sdk("AttachNetworkInterface", error);
        assert_eq!(case(&mapped), "transient");
        assert_eq!(text(&mapped), "AttachNetworkInterface: timed out");
    }

    #[test]
    fn a_request_the_egress_policy_denied_is_unauthorized_and_other_failures_transient() {
        let denied: AssignError = SdkError::dispatch_failure(ConnectorError::other(
            "wasi:http: HttpRequestDenied".into(),
            None,
        ));
        let mapped = from_sdk("DescribeVpcs", denied);
        assert_eq!(case(&mapped), "unauthorized", "{mapped:?}");
        assert!(text(&mapped).contains("egress allow-list"), "{mapped:?}");
        let refused: AssignError =
            SdkError::dispatch_failure(ConnectorError::io("connection refused".into()));
        let mapped = from_sdk("DescribeVpcs", refused);
        assert_eq!(case(&mapped), "transient", "{mapped:?}");
        assert!(text(&mapped).contains("connection refused"), "{mapped:?}");
    }

    #[test]
    fn a_request_the_sdk_could_not_build_is_invalid_argument() {
        let error: AssignError = SdkError::construction_failure("no network interface id");
        let mapped = from_sdk("AssignPrivateIpAddresses", error);
        assert_eq!(case(&mapped), "invalid-argument", "{mapped:?}");
        assert!(
            text(&mapped).contains("no network interface id"),
            "{mapped:?}"
        );
    }
}
