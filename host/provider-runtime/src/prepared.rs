//! A module compiled (or loaded from the disk cache) and linked against the
//! bindings of the WIT version it declares.

use ipam_provider_module::ModuleInfo;

use crate::compile_cache::Origin;
use crate::wit::BindingsPre;

/// A module compiled (or loaded from cache) and linked, ready to instantiate.
pub struct PreparedModule {
    pub info: ModuleInfo,
    pub origin: Origin,
    pub(crate) pre: BindingsPre,
}
