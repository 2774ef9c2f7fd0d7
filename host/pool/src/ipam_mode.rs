//! Which of Cilium's cloud IPAM modes the cluster runs in. It is the
//! operator's setting (Cilium's `--ipam eni|azure`), never read off a node:
//! Cilium's Go agent writes `spec.eni`, `spec.azure` and `spec.alibaba-cloud`
//! as objects in every mode (`omitempty` does not omit a struct value), so an
//! ENI node carries `"azure": {}` and an Azure node `"eni": {}`.

/// Where a node's agent reads its interfaces, and which spec fields apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum IpamMode {
    /// AWS ENI mode: interfaces in `status.eni.enis`; `spec.eni` applies.
    #[default]
    Eni,
    /// Azure mode: interfaces in `status.azure.interfaces`;
    /// `spec.azure.interface-name` picks the interface addresses go on.
    Azure,
}

impl IpamMode {
    /// The name Cilium's `--ipam` flag gives the mode.
    pub fn cilium_name(self) -> &'static str {
        match self {
            IpamMode::Eni => "eni",
            IpamMode::Azure => "azure",
        }
    }
}

impl std::fmt::Display for IpamMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.cilium_name())
    }
}
