//! `ipam-cni`: the CNI IPAM plugin. Reads the CNI_* environment and the
//! network configuration, asks the node agent over its unix socket, and
//! prints the CNI result (ADD), VERSION's answer, nothing (DEL, CHECK, GC,
//! STATUS) or a CNI error JSON with exit code 1. Without an `ipam` section
//! it is the chained datapath step (`ipam_cni::datapath_step`). See the
//! crate README.

use ipam_cni::config::{self, peek_version};
use ipam_cni::datapath_step::{self, role, Role};
use ipam_cni::env::Invocation;
use ipam_cni::plugin::{answer, request_for};
use ipam_cni::protocol::ask;
use ipam_cni::result::{code, CniError, ErrorResult, VersionResult};
use ipam_cni::version::CniVersion;
use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    let outcome = match std::io::stdin().read_to_end(&mut stdin) {
        Ok(_) => run(&stdin),
        Err(e) => Err(CniError::new(
            code::IO_FAILURE,
            "cannot read stdin",
            e.to_string(),
        )),
    };
    let (printed, exit) = match outcome {
        Ok(None) => return ExitCode::SUCCESS,
        Ok(Some(json)) => (json, ExitCode::SUCCESS),
        Err(error) => {
            let cni_version = peek_version(&stdin).unwrap_or(CniVersion::LATEST);
            (
                to_json(&ErrorResult { cni_version, error }),
                ExitCode::FAILURE,
            )
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&printed).and_then(|()| stdout.flush()) {
        Ok(()) => exit,
        // Nothing is left to tell the runtime with but the exit code.
        Err(_) => ExitCode::FAILURE,
    }
}

/// The bytes to print on success, or the error to print.
fn run(stdin: &[u8]) -> Result<Option<Vec<u8>>, CniError> {
    let invocation = Invocation::from_env().map_err(|e| e.cni_error())?;
    if let Invocation::Version = invocation {
        return Ok(Some(to_json(&VersionResult::this_plugin())));
    }
    if role(stdin) == Role::Datapath {
        return run_datapath_step(stdin, &invocation);
    }
    let config = config::parse(stdin, invocation.command()).map_err(|e| e.cni_error())?;
    let Some(request) = request_for(&invocation, &config) else {
        return Ok(None);
    };
    let response = ask(&config.ipam.socket, &request, config.ipam.timeout)
        .map_err(|e| e.cni_error(&request))?;
    Ok(answer(&request, &config, response)?.map(|result| to_json(&result)))
}

/// The chained datapath step (no `ipam` section): see the crate README.
fn run_datapath_step(stdin: &[u8], invocation: &Invocation) -> Result<Option<Vec<u8>>, CniError> {
    let config = datapath_step::parse(stdin, invocation.command()).map_err(|e| e.cni_error())?;
    let Some(request) = datapath_step::request_for(invocation, &config) else {
        return Ok(None);
    };
    let response = ask(&config.agent.socket, &request, config.agent.timeout)
        .map_err(|e| e.cni_error(&request))?;
    Ok(datapath_step::answer(&request, &config, response)?.map(|result| to_json(&result)))
}

fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // The printed types hold only strings, numbers and string-keyed structs,
    // which serde_json always serialises.
    let mut json = serde_json::to_vec(value).expect("CNI output always serialises");
    json.push(b'\n');
    json
}
