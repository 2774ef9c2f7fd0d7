//! The plugin's decisions, free of I/O: the agent request an invocation
//! makes, and what the agent's answer means for stdout and the exit code.
//! The binary does the reading, asking and printing around these.

use crate::config::NetworkConfig;
use crate::env::Invocation;
use crate::protocol::{AgentRequest, AgentResponse, Attachment};
use crate::result::{code, CniError, IpamResult};

/// The request for an invocation; VERSION asks the agent nothing.
pub fn request_for(invocation: &Invocation, config: &NetworkConfig) -> Option<AgentRequest> {
    Some(match invocation {
        Invocation::Add(attach) => AgentRequest::Add {
            attachment: Attachment::of(&attach.container_id, &attach.ifname),
            netns: attach.netns.clone(),
            pod: attach.args.pod(),
        },
        Invocation::Check(attach) => AgentRequest::Check {
            attachment: Attachment::of(&attach.container_id, &attach.ifname),
        },
        Invocation::Del(detach) => AgentRequest::Del {
            attachment: Attachment::of(&detach.container_id, &detach.ifname),
        },
        Invocation::Gc => AgentRequest::Gc {
            valid: config.valid_attachments.clone().unwrap_or_default(),
        },
        Invocation::Status => AgentRequest::Status,
        Invocation::Version => return None,
    })
}

/// What the agent's answer to `request` prints: ADD's result, nothing for
/// the other commands, or the error.
///
/// CHECK fails with code 101 when `prevResult` does not hold the address
/// the agent has for the attachment (addresses compare without their
/// prefix length, which the main plugin may present differently).
pub fn answer(
    request: &AgentRequest,
    config: &NetworkConfig,
    response: AgentResponse,
) -> Result<Option<IpamResult>, CniError> {
    match (request, response) {
        (_, AgentResponse::Failed(error)) => Err(error),
        (AgentRequest::Add { .. }, AgentResponse::Allocated(allocation)) => Ok(Some(
            IpamResult::from_allocation(config.cni_version, &allocation),
        )),
        (AgentRequest::Check { attachment }, AgentResponse::Allocated(allocation)) => {
            let prev = config.prev_result_ips.as_deref().unwrap_or_default();
            if prev.iter().any(|ip| ip.addr() == allocation.address.addr()) {
                Ok(None)
            } else {
                Err(CniError::new(
                    code::CHECK_MISMATCH,
                    "prevResult does not hold the agent's address",
                    format!(
                        "the agent has {} for {}/{}; prevResult holds {:?}",
                        allocation.address,
                        attachment.container_id,
                        attachment.ifname,
                        prev.iter().map(ToString::to_string).collect::<Vec<_>>()
                    ),
                ))
            }
        }
        (
            AgentRequest::Del { .. } | AgentRequest::Gc { .. } | AgentRequest::Status,
            AgentResponse::Done,
        ) => Ok(None),
        (request, response) => Err(out_of_protocol(request, &response)),
    }
}

/// The error for an answer that does not fit its request (of either step).
pub(crate) fn out_of_protocol(request: &AgentRequest, response: &AgentResponse) -> CniError {
    CniError::new(
        code::AGENT_PROTOCOL,
        "ipam agent answered out of protocol",
        format!("answer {response:?} does not fit request {request:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IpamConfig, DEFAULT_TIMEOUT};
    use crate::env::{Attach, CniArgs, Detach};
    use crate::protocol::{Allocation, PodRef};
    use crate::version::CniVersion;

    fn config(prev: Option<&[&str]>) -> NetworkConfig {
        NetworkConfig {
            cni_version: CniVersion::V1_0_0,
            ipam: IpamConfig {
                socket: "/run/a.sock".into(),
                timeout: DEFAULT_TIMEOUT,
            },
            prev_result_ips: prev.map(|ips| ips.iter().map(|ip| ip.parse().unwrap()).collect()),
            valid_attachments: None,
        }
    }

    fn attachment() -> Attachment {
        Attachment {
            container_id: "c1".to_owned().try_into().unwrap(),
            ifname: "eth0".to_owned().try_into().unwrap(),
        }
    }

    fn allocated(address: &str) -> AgentResponse {
        AgentResponse::Allocated(Allocation {
            address: address.parse().unwrap(),
            gateway: None,
            routes: vec![],
        })
    }

    #[test]
    fn requests() {
        let attach = Attach {
            container_id: attachment().container_id,
            netns: "/run/netns/c1".into(),
            ifname: attachment().ifname,
            args: CniArgs::parse("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p").unwrap(),
        };
        let detach = Detach {
            container_id: attachment().container_id,
            netns: None,
            ifname: attachment().ifname,
            args: CniArgs::default(),
        };
        let mut gc_config = config(None);
        gc_config.valid_attachments = Some(vec![attachment()]);
        let table = [
            (
                Invocation::Add(attach.clone()),
                config(None),
                Some(AgentRequest::Add {
                    attachment: attachment(),
                    netns: "/run/netns/c1".into(),
                    pod: Some(PodRef {
                        namespace: "ns".into(),
                        name: "p".into(),
                    }),
                }),
            ),
            (
                Invocation::Check(attach),
                config(None),
                Some(AgentRequest::Check {
                    attachment: attachment(),
                }),
            ),
            (
                Invocation::Del(detach),
                config(None),
                Some(AgentRequest::Del {
                    attachment: attachment(),
                }),
            ),
            (
                Invocation::Gc,
                gc_config,
                Some(AgentRequest::Gc {
                    valid: vec![attachment()],
                }),
            ),
            (Invocation::Status, config(None), Some(AgentRequest::Status)),
            (Invocation::Version, config(None), None),
        ];
        for (invocation, config, want) in table {
            assert_eq!(request_for(&invocation, &config), want, "{invocation:?}");
        }
    }

    #[test]
    fn answers() {
        let add = AgentRequest::Add {
            attachment: attachment(),
            netns: "/n".into(),
            pod: None,
        };
        let check = AgentRequest::Check {
            attachment: attachment(),
        };
        let del = AgentRequest::Del {
            attachment: attachment(),
        };
        let gc = AgentRequest::Gc { valid: vec![] };
        let failed = || AgentResponse::Failed(CniError::new(11, "pool empty", ""));
        // (request, prevResult, response, Ok(prints a result?) or Err(code))
        type Row<'a> = (
            &'a AgentRequest,
            Option<&'a [&'a str]>,
            AgentResponse,
            Result<bool, u32>,
        );
        let table: Vec<Row> = vec![
            (&add, None, allocated("10.0.1.5/32"), Ok(true)),
            (&add, None, AgentResponse::Done, Err(100)),
            (&add, None, failed(), Err(11)),
            (&del, None, AgentResponse::Done, Ok(false)),
            (&del, None, allocated("10.0.1.5/32"), Err(100)),
            (&del, None, failed(), Err(11)),
            (&AgentRequest::Status, None, AgentResponse::Done, Ok(false)),
            (&gc, None, AgentResponse::Done, Ok(false)),
            (
                &check,
                Some(&["10.0.1.5/32"]),
                allocated("10.0.1.5/32"),
                Ok(false),
            ),
            (
                &check,
                Some(&["fd00::1/128", "10.0.1.5/24"]),
                allocated("10.0.1.5/32"),
                Ok(false),
            ),
            (
                &check,
                Some(&["10.0.1.6/32"]),
                allocated("10.0.1.5/32"),
                Err(101),
            ),
            (&check, Some(&[]), allocated("10.0.1.5/32"), Err(101)),
            (
                &check,
                Some(&["10.0.1.5/32"]),
                AgentResponse::Failed(CniError::new(3, "unknown", "")),
                Err(3),
            ),
            (
                &check,
                Some(&["10.0.1.5/32"]),
                AgentResponse::Done,
                Err(100),
            ),
        ];
        for (request, prev, response, want) in table {
            let got = answer(request, &config(prev), response.clone())
                .map(|r| r.is_some())
                .map_err(|e| e.code);
            assert_eq!(got, want, "{request:?} {prev:?} {response:?}");
        }
    }

    #[test]
    fn add_result_is_in_the_configured_version() {
        let add = AgentRequest::Add {
            attachment: attachment(),
            netns: "/n".into(),
            pod: None,
        };
        let result = answer(&add, &config(None), allocated("10.0.1.5/32"))
            .unwrap()
            .unwrap();
        assert_eq!(result.cni_version, CniVersion::V1_0_0);
        assert_eq!(result.ips[0].address.to_string(), "10.0.1.5/32");
    }
}
