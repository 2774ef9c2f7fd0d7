//! Injected failures: an operation fails a chosen number of times with a
//! chosen error, after a chosen number of successes. The host's fake cloud
//! arms these at run time ([`Faults::arm`]) for its injected failures.

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
#[derive(Debug)]
pub struct Injected {
    pub error: Error,
    pub leak: bool,
}

/// The operations a fault can name: the WIT operations, and
/// `attach-interface` (the attach step inside create-interface).
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

    /// Add a fault after those already armed, as if it had been the last of
    /// the settings' `faults`; its `after` counts the calls that reach it from now on.
    pub fn arm(&mut self, spec: FaultSpec) -> Result<(), String> {
        let mut armed = Self::new(vec![spec])?;
        self.faults.append(&mut armed.faults);
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(operation: &str, error: &str, times: u32) -> FaultSpec {
        FaultSpec {
            operation: operation.into(),
            error: error.into(),
            times,
            after: 0,
            retry_after_ms: 5,
            leak: false,
        }
    }

    #[test]
    fn armed_faults_fire_after_the_configured_ones() {
        let mut faults = Faults::new(vec![spec("assign-ips", "throttled", 1)]).unwrap();
        faults.arm(spec("assign-ips", "conflict", 2)).unwrap();
        assert!(faults.arm(spec("no-such-call", "conflict", 1)).is_err());
        assert!(faults.arm(spec("assign-ips", "no-such-error", 1)).is_err());
        let fired: Vec<_> = (0..4)
            .map(|_| faults.check("assign-ips").map(|i| format!("{:?}", i.error)))
            .collect();
        assert_eq!(
            fired,
            [
                Some("Error::Throttled(5)".to_string()),
                Some("Error::Conflict(\"injected fault on assign-ips\")".to_string()),
                Some("Error::Conflict(\"injected fault on assign-ips\")".to_string()),
                None
            ]
        );
        assert!(faults.check("get-vpcs").is_none());
    }
}
