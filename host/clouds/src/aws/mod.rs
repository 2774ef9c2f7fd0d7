//! What the host knows of AWS: its credential chain, the instance metadata
//! service and the instance facts read through it, and the AWS provider's
//! default egress.

pub mod credentials;
pub mod egress;
pub mod imds;
pub mod instance_facts;
