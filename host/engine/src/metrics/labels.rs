//! The label sets of the engine's metric families.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub target_node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubnetLabel {
    pub subnet_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubnetZoneLabel {
    pub subnet_id: String,
    pub availability_zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiCallLabel {
    pub operation: &'static str,
    /// `ok`, or the error's kind (`throttled`, `transient`, `timeout`, ...).
    pub response_code: &'static str,
}

/// An operation as Cilium's cloud API families label it: the cloud's own
/// call names where the provider declares them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudOperationLabel {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabel {
    pub operation: String,
    /// `OK` or `Failed`, as Cilium's Azure client (and its EC2 client when
    /// no HTTP status is at hand) writes it.
    pub response_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabel {
    pub provider: String,
    /// What was over (`entries`, `bytes`, `header-set`).
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabel {
    pub provider: String,
}

/// A Kubernetes field manager (or `cilium-operator` for Cilium's operator
/// seen through its Lease).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabel {
    pub manager: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabel {
    pub provider: String,
    pub operation: &'static str,
    /// What was wrong (`outside-network`, `duplicate-address`, ...).
    pub problem: &'static str,
}

/// Cilium's labels of an allocation or a release.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabel {
    /// `allocateIP`, `createInterfaceAndAllocateIP`, `releaseIP` (Cilium's),
    /// or `deleteInterface` (an interface freed whole; Cilium frees none).
    pub r#type: &'static str,
    /// `success`, `failed`, or, for a failed interface creation, the
    /// error's response code (Cilium: an error condition).
    pub status: &'static str,
    pub subnet_id: String,
}
