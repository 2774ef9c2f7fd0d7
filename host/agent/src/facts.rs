//! The instance's facts for the registration: from EC2's IMDSv2 or Azure's
//! instance metadata service (`ipam-clouds`' clients, shared with the
//! operator's credential chain), with every fact a flag names taking its
//! place; from the flags alone for other clouds.

use ipam_clouds::aws::imds::Imds;
use ipam_clouds::aws::instance_facts::{read as read_aws, AwsInstanceFactsError};
use ipam_clouds::azure::{AzureImds, AzureImdsError};
use ipam_clouds::{InstanceFacts, TrustRoots};

use crate::cli::{Cli, CloudArg};
use crate::register::NodeFacts;

#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("EC2 instance metadata: {0}")]
    Aws(#[from] AwsInstanceFactsError),
    #[error("Azure instance metadata: {0}")]
    Azure(#[from] AzureImdsError),
    #[error("--cloud=none needs --instance-id")]
    NoInstanceId,
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

/// Facts named by flags replace the metadata service's.
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

/// Read the facts for `cli`'s cloud.
pub async fn gather(cli: &Cli) -> Result<NodeFacts, FactsError> {
    let facts = match cli.cloud {
        CloudArg::Aws => {
            // The agent has no CA flag: an https metadata endpoint must
            // chain to the webpki roots (IMDS itself is plain http).
            let aws = read_aws(&Imds::new(&cli.imds_endpoint, TrustRoots::webpki())).await?;
            from_instance(aws.into(), false)
        }
        CloudArg::Azure => {
            let azure = AzureImds::new(&cli.imds_endpoint, TrustRoots::webpki())
                .instance_facts()
                .await?;
            from_instance(azure.into(), true)
        }
        CloudArg::None => {
            if cli.instance_id.is_none() {
                return Err(FactsError::NoInstanceId);
            }
            NodeFacts::default()
        }
    };
    Ok(overridden(facts, cli))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[tokio::test]
    async fn flags_alone_for_other_clouds_and_an_instance_id_is_required() {
        let cli = Cli::try_parse_from([
            "ipam-agent",
            "--node-name=n1",
            "--instance-id=vm-7",
            "--instance-type=big",
        ])
        .unwrap();
        let facts = gather(&cli).await.unwrap();
        assert_eq!(facts.instance_id, "vm-7");
        assert_eq!(facts.instance_type, "big");
        assert!(!facts.azure);
        let cli = Cli::try_parse_from(["ipam-agent", "--node-name=n1"]).unwrap();
        assert!(matches!(gather(&cli).await, Err(FactsError::NoInstanceId)));
    }
}
