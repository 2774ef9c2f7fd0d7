//! Injected failures: an operation fails a chosen number of times with a
//! chosen error, after a chosen number of successes.

use ipam_provider_sdk::Error;

use crate::settings::FaultSpec;

#[derive(Debug, Clone)]
struct Fault {
    spec: FaultSpec,
    seen: u32,
    fired: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Faults {
    faults: Vec<Fault>,
}

/// What a firing fault says to do.
pub struct Injected {
    pub error: Error,
    pub leak: bool,
}

pub const OPERATIONS: &[&str] = &[
    "get-vpcs",
    "get-subnets",
    "get-security-groups",
    "get-instances",
    "get-detached-interfaces",
    "get-instance-limits",
    "create-interface",
    "attach-interface",
    "delete-interface",
    "assign-ips",
    "unassign-ips",
];

impl Faults {
    pub fn new(specs: Vec<FaultSpec>) -> Result<Self, String> {
        for spec in &specs {
            if !OPERATIONS.contains(&spec.operation.as_str()) {
                return Err(format!("fault: unknown operation {:?}", spec.operation));
            }
            error_of(spec)?;
        }
        Ok(Self {
            faults: specs
                .into_iter()
                .map(|spec| Fault {
                    spec,
                    seen: 0,
                    fired: 0,
                })
                .collect(),
        })
    }

    /// Count a call of `operation`; the first fault due for it fires.
    pub fn check(&mut self, operation: &str) -> Option<Injected> {
        for fault in self
            .faults
            .iter_mut()
            .filter(|f| f.spec.operation == operation)
        {
            fault.seen += 1;
            if fault.seen > fault.spec.after && fault.fired < fault.spec.times {
                fault.fired += 1;
                let error = error_of(&fault.spec).ok()?;
                return Some(Injected {
                    error,
                    leak: fault.spec.leak,
                });
            }
        }
        None
    }
}

fn error_of(spec: &FaultSpec) -> Result<Error, String> {
    let message = format!("injected fault on {}", spec.operation);
    Ok(match spec.error.as_str() {
        "throttled" => Error::Throttled(spec.retry_after_ms),
        "not-found" => Error::NotFound(message),
        "interface-limit" => Error::InterfaceLimit(message),
        "address-limit" => Error::AddressLimit(message),
        "subnet-full" => Error::SubnetFull(message),
        "insufficient-prefixes" => Error::InsufficientPrefixes(message),
        "conflict" => Error::Conflict(message),
        "invalid-argument" => Error::InvalidArgument(message),
        "unauthorized" => Error::Unauthorized(message),
        "transient" => Error::Transient(message),
        "other" => Error::Other(message),
        other => return Err(format!("fault: unknown error {other:?}")),
    })
}
