//! How many clusters a mesh may hold (Cilium's `--max-connected-clusters`,
//! 255 or 511) and this cluster's id in it: together they fix the cluster
//! config peers read and the identities this cluster allocates (a cluster
//! id takes 8 bits of a 24-bit identity at 255, 9 at 511).

/// Cilium's `--max-connected-clusters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MaxConnectedClusters {
    /// Cilium's default: identities of 16 bits per cluster.
    #[default]
    Clusters255,
    /// Identities of 15 bits per cluster.
    Clusters511,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeshError {
    #[error("max connected clusters {0:?}: Cilium takes 255 or 511")]
    MaxConnectedClusters(String),
    #[error(
        "cluster id {id} is above the mesh's {max} connected clusters: set the \
         max connected clusters to 511 (as every agent of the mesh has it) or take \
         an id of at most {max}"
    )]
    ClusterId { id: u32, max: u32 },
}

impl std::str::FromStr for MaxConnectedClusters {
    type Err = MeshError;

    fn from_str(text: &str) -> Result<Self, MeshError> {
        match text.trim() {
            "255" => Ok(Self::Clusters255),
            "511" => Ok(Self::Clusters511),
            _ => Err(MeshError::MaxConnectedClusters(text.into())),
        }
    }
}

impl std::fmt::Display for MaxConnectedClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.value())
    }
}

impl MaxConnectedClusters {
    pub fn value(self) -> u32 {
        match self {
            Self::Clusters255 => 255,
            Self::Clusters511 => 511,
        }
    }

    /// The bits of an identity below the cluster id (Cilium's
    /// `GetClusterIDShift`).
    pub fn cluster_id_shift(self) -> u32 {
        match self {
            Self::Clusters255 => 16,
            Self::Clusters511 => 15,
        }
    }
}

/// This cluster's id, checked against the mesh's size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterMesh {
    cluster_id: u32,
    max: MaxConnectedClusters,
}

impl ClusterMesh {
    pub fn new(cluster_id: u32, max: MaxConnectedClusters) -> Result<Self, MeshError> {
        if cluster_id > max.value() {
            return Err(MeshError::ClusterId {
                id: cluster_id,
                max: max.value(),
            });
        }
        Ok(Self { cluster_id, max })
    }

    pub fn cluster_id(self) -> u32 {
        self.cluster_id
    }

    pub fn max_connected_clusters(self) -> MaxConnectedClusters {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_up_to_the_mesh_size() {
        use MaxConnectedClusters::*;
        for (id, max, ok) in [
            (0, Clusters255, true),
            (255, Clusters255, true),
            (256, Clusters255, false),
            (300, Clusters511, true),
            (511, Clusters511, true),
            (512, Clusters511, false),
        ] {
            assert_eq!(ClusterMesh::new(id, max).is_ok(), ok, "{id} of {max}");
        }
        let error = ClusterMesh::new(300, Clusters255).unwrap_err();
        assert!(error.to_string().contains("511"), "{error}");
    }

    #[test]
    fn only_cilium_s_two_sizes() {
        assert_eq!("255".parse(), Ok(MaxConnectedClusters::Clusters255));
        assert_eq!("511".parse(), Ok(MaxConnectedClusters::Clusters511));
        for bad in ["256", "0", "", "1023"] {
            assert!(bad.parse::<MaxConnectedClusters>().is_err(), "{bad}");
        }
    }
}
