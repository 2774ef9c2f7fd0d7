//! Why a pass over a node failed.

use ipam_cloud::CloudError;

use crate::node_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum MaintainError {
    #[error(transparent)]
    Cloud(#[from] CloudError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("node {0} does not exist")]
    NoSuchNode(String),
}
