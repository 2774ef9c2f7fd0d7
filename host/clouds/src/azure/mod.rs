//! What the host knows of Azure: Entra ID tokens for the provider
//! ([`credentials`]), the instance metadata service and the VM facts the node
//! agent registers its CiliumNode with, and the Azure provider's default
//! egress.

pub mod credentials;
pub mod egress;
pub mod imds;
pub mod instance_facts;
pub mod vm_id;

pub use imds::{AzureImds, AzureImdsError};
pub use instance_facts::{AzureInstanceFacts, AzureInstanceFactsError, AzureInterface};
pub use vm_id::{AzureVmId, AzureVmIdError};
