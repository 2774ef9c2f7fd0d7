//! `--ipam-mode`: which of Cilium's cloud IPAM modes the cluster's agents run
//! in, so which status gets each node's interfaces. It is decided here, once,
//! from the flag or the provider's cloud; never from what a node carries
//! (Cilium's Go agent writes `spec.eni` and `spec.azure` in every mode).

use clap::ValueEnum;
use ipam_clouds::Cloud;
use ipam_engine::IpamMode;

/// The `--ipam-mode` values, named as Cilium's `--ipam` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IpamModeArg {
    /// AWS ENI mode: interfaces in status.eni.enis.
    Eni,
    /// Azure mode: interfaces in status.azure.interfaces;
    /// spec.azure.interface-name is honoured.
    Azure,
}

impl From<IpamModeArg> for IpamMode {
    fn from(arg: IpamModeArg) -> Self {
        match arg {
            IpamModeArg::Eni => IpamMode::Eni,
            IpamModeArg::Azure => IpamMode::Azure,
        }
    }
}

/// A mode that cannot go with the cloud.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--ipam-mode={mode} cannot go with --cloud={cloud}: cilium-agent on {cloud} runs in {expected} mode (leave --ipam-mode unset, or use --cloud=generic for a provider of another cloud)"
)]
pub struct ModeMismatch {
    mode: IpamMode,
    cloud: &'static str,
    expected: IpamMode,
}

/// The mode a cloud's agents run in; none for a cloud the host does not know.
fn mode_of(cloud: Cloud) -> Option<(IpamMode, &'static str)> {
    match cloud {
        Cloud::Aws => Some((IpamMode::Eni, "aws")),
        Cloud::Azure => Some((IpamMode::Azure, "azure")),
        Cloud::Generic => None,
    }
}

/// The operator's mode: the flag when given (refused when it contradicts
/// the cloud), else the cloud's, else ENI (the layout this project's agent
/// and most providers use).
pub fn ipam_mode(cloud: Cloud, flag: Option<IpamModeArg>) -> Result<IpamMode, ModeMismatch> {
    let asked = flag.map(IpamMode::from);
    match (asked, mode_of(cloud)) {
        (Some(mode), Some((expected, cloud))) if mode != expected => Err(ModeMismatch {
            mode,
            cloud,
            expected,
        }),
        (Some(mode), _) => Ok(mode),
        (None, Some((expected, _))) => Ok(expected),
        (None, None) => Ok(IpamMode::Eni),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_comes_from_the_flag_or_the_cloud() {
        let table = [
            (Cloud::Aws, None, Ok(IpamMode::Eni)),
            (Cloud::Azure, None, Ok(IpamMode::Azure)),
            (Cloud::Generic, None, Ok(IpamMode::Eni)),
            (
                Cloud::Generic,
                Some(IpamModeArg::Azure),
                Ok(IpamMode::Azure),
            ),
            (Cloud::Aws, Some(IpamModeArg::Eni), Ok(IpamMode::Eni)),
            (Cloud::Azure, Some(IpamModeArg::Azure), Ok(IpamMode::Azure)),
        ];
        for (cloud, flag, want) in table {
            assert_eq!(ipam_mode(cloud, flag), want, "{cloud:?} {flag:?}");
        }
    }

    #[test]
    fn a_mode_against_the_cloud_is_refused_naming_both() {
        let error = ipam_mode(Cloud::Aws, Some(IpamModeArg::Azure)).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("--ipam-mode=azure")
                && text.contains("--cloud=aws")
                && text.contains("eni mode"),
            "{text}"
        );
        assert!(ipam_mode(Cloud::Azure, Some(IpamModeArg::Eni)).is_err());
    }
}
