//! The instance's facts for the registration: from EC2's IMDSv2 or Azure's
//! instance metadata service (`ipam-clouds`' clients, shared with the
//! operator's credential chain), with every fact a flag names taking its
//! place. Without a metadata service (`--cloud=none`), or when it gives no
//! answer, the instance id comes from `--instance-id`, else from the Node's
//! `spec.providerID` (`provider_id`), and the zone and instance type from
//! the Node too (the provider id's zone, the well-known labels the cloud
//! controller manager sets). Which source applies is decided by
//! [`from_node`], a plain function; [`gather`] does the reading.

use ipam_clouds::aws::imds::Imds;
use ipam_clouds::aws::instance_facts::read as read_aws;
use ipam_clouds::azure::AzureImds;
use ipam_clouds::{InstanceFacts, TrustRoots};

use crate::cli::{Cli, CloudArg};
use crate::kube_node::NodeClient;
use crate::provider_id::{ProviderCloud, ProviderId, ProviderIdError};
use crate::register::NodeFacts;

/// What the agent reads of its Node for the facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    /// spec.providerID; None until the kubelet or the cloud controller
    /// manager sets it.
    pub provider_id: Option<String>,
    /// The `node.kubernetes.io/instance-type` label.
    pub instance_type: Option<String>,
    /// The `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error(
        "no instance id for Node {node}: --instance-id is unset, {no_metadata}, and the Node \
         has no spec.providerID yet (the kubelet or the cloud controller manager sets it)"
    )]
    NoInstanceId { node: String, no_metadata: String },
    #[error("Node {node}'s spec.providerID: {source}")]
    ProviderId {
        node: String,
        source: ProviderIdError,
    },
    #[error("Node {node}'s spec.providerID {id:?} names an {found} instance, and the agent runs with --cloud={cloud}")]
    WrongCloud {
        node: String,
        id: String,
        found: ProviderCloud,
        cloud: &'static str,
    },
    #[error("reading Node {node} for its provider id: {reason}")]
    Node { node: String, reason: String },
}

/// Where the instance id came from, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactsSource {
    /// The cloud's instance metadata service.
    MetadataService,
    /// The Node's spec.providerID.
    ProviderId,
    /// `--instance-id`.
    Flags,
}

impl FactsSource {
    pub fn as_str(self) -> &'static str {
        match self {
            FactsSource::MetadataService => "metadata service",
            FactsSource::ProviderId => "Node spec.providerID",
            FactsSource::Flags => "--instance-id",
        }
    }
}

fn cloud_name(cloud: CloudArg) -> &'static str {
    match cloud {
        CloudArg::Aws => "aws",
        CloudArg::Azure => "azure",
        CloudArg::None => "none",
    }
}

fn from_instance(facts: InstanceFacts, azure: bool) -> NodeFacts {
    NodeFacts {
        instance_id: facts.instance_id,
        instance_type: facts.instance_type,
        availability_zone: facts.zone.unwrap_or_default(),
        vpc_id: facts.vpc_id.unwrap_or_default(),
        node_subnet_id: facts.node_subnet_id.unwrap_or_default(),
        azure,
    }
}

/// Facts named by flags replace the others.
fn overridden(mut facts: NodeFacts, cli: &Cli) -> NodeFacts {
    let set = |field: &mut String, flag: &Option<String>| {
        if let Some(value) = flag {
            field.clone_from(value);
        }
    };
    set(&mut facts.instance_id, &cli.instance_id);
    set(&mut facts.instance_type, &cli.instance_type);
    set(&mut facts.availability_zone, &cli.availability_zone);
    set(&mut facts.vpc_id, &cli.vpc_id);
    set(&mut facts.node_subnet_id, &cli.node_subnet_id);
    facts
}

/// The facts from the Node, when the metadata service gave none
/// (`no_metadata` says why, for the error). The provider id must be of
/// `cloud` (any of the two with `none`); its instance id is the one the
/// operator's provider knows. The spec the facts go in (spec.eni or
/// spec.azure) stays the cloud flag's.
pub fn from_node(
    cloud: CloudArg,
    node: &NodeIdentity,
    no_metadata: &str,
) -> Result<NodeFacts, FactsError> {
    let Some(text) = node.provider_id.as_deref().filter(|id| !id.is_empty()) else {
        return Err(FactsError::NoInstanceId {
            node: node.name.clone(),
            no_metadata: no_metadata.to_string(),
        });
    };
    let id = ProviderId::parse(text).map_err(|source| FactsError::ProviderId {
        node: node.name.clone(),
        source,
    })?;
    let wanted = match cloud {
        CloudArg::Aws => Some(ProviderCloud::Aws),
        CloudArg::Azure => Some(ProviderCloud::Azure),
        CloudArg::None => None,
    };
    if wanted.is_some_and(|wanted| wanted != id.cloud()) {
        return Err(FactsError::WrongCloud {
            node: node.name.clone(),
            id: text.to_string(),
            found: id.cloud(),
            cloud: cloud_name(cloud),
        });
    }
    Ok(NodeFacts {
        instance_id: id.instance_id(),
        instance_type: node.instance_type.clone().unwrap_or_default(),
        availability_zone: id
            .zone()
            .map(str::to_string)
            .or_else(|| node.zone.clone())
            .unwrap_or_default(),
        vpc_id: String::new(),
        node_subnet_id: String::new(),
        azure: cloud == CloudArg::Azure,
    })
}

/// Read the facts for `cli`'s cloud: the metadata service's, else (none,
/// or no answer) `--instance-id`'s, else the Node's.
pub async fn gather(cli: &Cli, nodes: &NodeClient) -> Result<(NodeFacts, FactsSource), FactsError> {
    // The agent has no CA flag: an https metadata endpoint must chain to
    // the webpki roots (IMDS itself is plain http).
    let metadata = match cli.cloud {
        CloudArg::Aws => Some(
            read_aws(&Imds::new(&cli.imds_endpoint, TrustRoots::webpki()))
                .await
                .map(|aws| from_instance(aws.into(), false))
                .map_err(|e| format!("EC2 instance metadata: {e}")),
        ),
        CloudArg::Azure => Some(
            AzureImds::new(&cli.imds_endpoint, TrustRoots::webpki())
                .instance_facts()
                .await
                .map(|azure| from_instance(azure.into(), true))
                .map_err(|e| format!("Azure instance metadata: {e}")),
        ),
        CloudArg::None => None,
    };
    let no_metadata = match metadata {
        Some(Ok(facts)) => return Ok((overridden(facts, cli), FactsSource::MetadataService)),
        Some(Err(error)) => {
            tracing::debug!(%error, "no instance facts from the metadata service");
            format!("the metadata service gave none ({error})")
        }
        None => "--cloud=none reads no metadata service".to_string(),
    };
    if cli.instance_id.is_some() {
        let facts = NodeFacts {
            azure: cli.cloud == CloudArg::Azure,
            ..NodeFacts::default()
        };
        return Ok((overridden(facts, cli), FactsSource::Flags));
    }
    let node = nodes.identity().await.map_err(|e| FactsError::Node {
        node: cli.node_name.clone(),
        reason: e.to_string(),
    })?;
    let facts = from_node(cli.cloud, &node, &no_metadata)?;
    Ok((overridden(facts, cli), FactsSource::ProviderId))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(provider_id: Option<&str>) -> NodeIdentity {
        NodeIdentity {
            name: "n1".into(),
            provider_id: provider_id.map(str::to_string),
            instance_type: Some("m5.large".into()),
            zone: Some("us-east-1b".into()),
        }
    }

    const AWS_ID: &str = "aws:///us-east-1a/i-0123456789abcdef0";
    const AZURE_ID: &str =
        "azure:///subscriptions/s/resourceGroups/RG/providers/Microsoft.Compute/virtualMachines/VM-1";

    #[test]
    fn the_node_gives_the_instance_id_zone_and_type() {
        let facts = from_node(CloudArg::None, &node(Some(AWS_ID)), "none").unwrap();
        assert_eq!(
            facts,
            NodeFacts {
                instance_id: "i-0123456789abcdef0".into(),
                instance_type: "m5.large".into(),
                availability_zone: "us-east-1a".into(),
                azure: false,
                ..NodeFacts::default()
            },
            "the provider id's zone before the label's"
        );
        let facts = from_node(CloudArg::Azure, &node(Some(AZURE_ID)), "none").unwrap();
        assert_eq!(
            facts.instance_id,
            "/subscriptions/s/resourcegroups/rg/providers/microsoft.compute/virtualmachines/vm-1"
        );
        assert!(facts.azure);
        assert_eq!(facts.availability_zone, "us-east-1b", "the label's");
        let facts = from_node(CloudArg::None, &node(Some(AZURE_ID)), "none").unwrap();
        assert!(!facts.azure, "the spec stays the cloud flag's");
    }

    #[test]
    fn a_missing_bad_or_foreign_provider_id_is_named() {
        let error = from_node(
            CloudArg::None,
            &node(None),
            "--cloud=none reads no metadata service",
        )
        .unwrap_err();
        assert!(matches!(error, FactsError::NoInstanceId { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("n1")
                && text.contains("spec.providerID")
                && text.contains("--cloud=none"),
            "{text}"
        );
        assert!(matches!(
            from_node(CloudArg::None, &node(Some("")), "x"),
            Err(FactsError::NoInstanceId { .. })
        ));
        assert!(matches!(
            from_node(CloudArg::None, &node(Some("kind://docker/kind/w")), "x"),
            Err(FactsError::ProviderId {
                source: ProviderIdError::UnknownScheme { .. },
                ..
            })
        ));
        let error = from_node(CloudArg::Aws, &node(Some(AZURE_ID)), "x").unwrap_err();
        assert!(
            matches!(
                error,
                FactsError::WrongCloud {
                    found: ProviderCloud::Azure,
                    cloud: "aws",
                    ..
                }
            ),
            "{error}"
        );
        assert!(matches!(
            from_node(CloudArg::Azure, &node(Some(AWS_ID)), "x"),
            Err(FactsError::WrongCloud { .. })
        ));
    }
}
