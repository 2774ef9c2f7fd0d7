//! What the host knows of AWS: its credential chain, the instance metadata
//! service, the AWS provider's default egress, and EC2's rate model.

pub mod credentials;
pub mod egress;
pub mod imds;
