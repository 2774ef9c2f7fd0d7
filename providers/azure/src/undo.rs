//! Undoing an assign whose long-running operation ended Failed. ARM may
//! keep the configurations such a write added, in provisioning state
//! Failed: never counted in the pool, they would sit on the NIC for ever.
//! The NIC (for a scale-set NIC, its VM's model) is read again and PUT
//! back without them, with `If-Match` on the fresh etag. The assign's error
//! is returned either way; when the undo fails too, its failure is added to
//! the message, and the next write to the NIC leaves them out, as every
//! write leaves out the NIC's Failed configurations.

use ipam_provider_sdk::{log, Error, LogLevel};

use crate::resource_id::NicId;
use crate::transport::Transport;
use crate::Azure;

impl<T: Transport> Azure<T> {
    /// Take the configurations named `names` off the NIC again, after the
    /// assign that added them ended in `error`; `error`, noting the undo's
    /// own failure.
    pub(crate) fn undo_assign(&self, nic: &NicId, names: &[String], error: Error) -> Error {
        let undone = self.read_nic(nic).and_then(|resource| {
            self.remove_configurations(nic, resource, names)
                .map_err(Error::from)
        });
        match undone {
            Ok(()) => error,
            Err(mut failure) => {
                let said = message(&mut failure)
                    .map(|m| m.clone())
                    .unwrap_or_else(|| format!("{failure:?}"));
                noted(
                    error,
                    &format!(
                        "undoing it failed too ({said}); the next write to the NIC leaves out {} if ARM left them Failed",
                        names.join(", ")
                    ),
                )
            }
        }
    }
}

/// The message an error carries; a throttled one carries none.
fn message(error: &mut Error) -> Option<&mut String> {
    match error {
        Error::Throttled(_) => None,
        Error::NotFound(m)
        | Error::InterfaceLimit(m)
        | Error::AddressLimit(m)
        | Error::SubnetFull(m)
        | Error::InsufficientPrefixes(m)
        | Error::Conflict(m)
        | Error::InvalidArgument(m)
        | Error::Unauthorized(m)
        | Error::Transient(m)
        | Error::Other(m) => Some(m),
    }
}

/// `error` with `note` after its message; a throttled error has none, and
/// the note goes to the log instead.
fn noted(mut error: Error, note: &str) -> Error {
    match message(&mut error) {
        Some(said) => {
            said.push_str("; ");
            said.push_str(note);
        }
        None => log(LogLevel::Warn, note),
    }
    error
}

#[cfg(test)]
mod tests {
    use ipam_provider_sdk::IpRequest;

    use super::*;
    use crate::nic_scripts::{
        accepted, azure, calls, config, counter, names_put, nic, operation, operation_url,
        scale_set_nic, scale_set_vm, standalone_nic, vm, ARM,
    };

    #[test]
    fn a_standalone_assign_whose_operation_failed_takes_its_configurations_off_again() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(&id, "W/\"e1\"", &[]),
            accepted(),
            operation(Some("SubnetIsFull")),
            nic(
                &id,
                "W/\"e2\"",
                &[
                    config("Cilium-1", "10.0.1.77", "Failed"),
                    config("Cilium-2", "10.0.1.78", "Failed"),
                ],
            ),
            accepted(),
            operation(None),
        ]);
        let error = azure
            .assign(&id, IpRequest::Addresses(2), &mut counter())
            .unwrap_err();
        assert_eq!(
            error,
            Error::SubnetFull(
                "the operation ended Failed: SubnetIsFull ARM said SubnetIsFull".into()
            )
        );
        assert_eq!(
            calls(&azure),
            [
                format!("GET {ARM}{id}"),
                format!("PUT {ARM}{id}"),
                format!("GET {}", operation_url()),
                format!("GET {ARM}{id}"),
                format!("PUT {ARM}{id}"),
                format!("GET {}", operation_url()),
            ]
        );
        assert_eq!(names_put(&azure, 4), ["ipconfig1"]);
        assert_eq!(
            azure.arm.transport.sent.borrow()[4].if_match.as_deref(),
            Some("W/\"e2\""),
            "on the etag read after the failure"
        );
    }

    #[test]
    fn a_scale_set_assign_whose_operation_failed_takes_its_configurations_off_the_model() {
        let (vm_id, id) = (scale_set_vm(), scale_set_nic());
        let azure = azure(vec![
            nic(&id, "W/\"n1\"", &[]),
            vm("\"9\"", &[]),
            accepted(),
            operation(Some("InternalServerError")),
            nic(
                &id,
                "W/\"n2\"",
                &[config("Cilium-1", "10.0.1.77", "Failed")],
            ),
            vm("\"10\"", &["Cilium-1"]),
            operation(None),
        ]);
        let error = azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap_err();
        assert!(
            matches!(&error, Error::Transient(m) if !m.contains("undo")),
            "{error:?}"
        );
        assert_eq!(
            calls(&azure)[4..],
            [
                format!("GET {ARM}{id}"),
                format!("GET {ARM}{vm_id}"),
                format!("PUT {ARM}{vm_id}"),
            ]
        );
        assert_eq!(names_put(&azure, 6), ["ipconfig1"]);
        assert_eq!(
            azure.arm.transport.sent.borrow()[6].if_match.as_deref(),
            Some("\"10\"")
        );
    }

    #[test]
    fn an_undo_that_fails_too_is_named_in_the_original_error() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(&id, "W/\"e1\"", &[]),
            accepted(),
            operation(Some("SubnetIsFull")),
            nic(
                &id,
                "W/\"e2\"",
                &[config("Cilium-1", "10.0.1.77", "Failed")],
            ),
            crate::arm::scripted::answer(
                412,
                &[],
                r#"{"error": {"code": "PreconditionFailed", "message": "etag moved"}}"#,
            ),
        ]);
        let error = azure
            .assign(&id, IpRequest::Addresses(1), &mut counter())
            .unwrap_err();
        match error {
            Error::SubnetFull(m) => assert!(
                m.starts_with("the operation ended Failed: SubnetIsFull")
                    && m.contains("undo")
                    && m.contains("412 PreconditionFailed: etag moved"),
                "{m}"
            ),
            other => panic!("expected the original subnet-full, got {other:?}"),
        }
    }

    #[test]
    fn a_note_goes_after_the_message_or_to_the_log_for_a_throttled_error() {
        assert_eq!(
            noted(Error::Conflict("etag moved".into()), "and then"),
            Error::Conflict("etag moved; and then".into())
        );
        assert_eq!(
            noted(Error::Throttled(3000), "and then"),
            Error::Throttled(3000)
        );
    }

    #[test]
    fn nothing_is_written_back_when_arm_kept_none_of_the_new_configurations() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(&id, "W/\"e1\"", &[]),
            accepted(),
            operation(Some("SubnetIsFull")),
            nic(&id, "W/\"e2\"", &[]),
        ]);
        assert!(matches!(
            azure.assign(&id, IpRequest::Addresses(1), &mut counter()),
            Err(Error::SubnetFull(_))
        ));
        assert_eq!(calls(&azure).len(), 4, "the undo read, and no PUT");
    }

    #[test]
    fn a_put_arm_refused_is_not_undone() {
        let id = standalone_nic();
        let azure = azure(vec![
            nic(&id, "W/\"e1\"", &[]),
            crate::arm::scripted::answer(
                400,
                &[],
                r#"{"error": {"code": "SubnetIsFull", "message": "full"}}"#,
            ),
        ]);
        assert!(matches!(
            azure.assign(&id, IpRequest::Addresses(1), &mut counter()),
            Err(Error::SubnetFull(_))
        ));
        assert_eq!(calls(&azure).len(), 2);
    }
}
