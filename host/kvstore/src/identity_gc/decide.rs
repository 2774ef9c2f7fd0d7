//! The identity GC's decisions, pure: which master keys are this cluster's
//! to judge, and what to do with one given what the previous round saw.

use crate::layout::IDENTITY_ID_PREFIX;
use crate::mesh::ClusterMesh;
use crate::KeyValue;

/// The identities one cluster allocates, both ends included: cluster N
/// owns the N-th block of 2^16 identities in a mesh of 255 clusters, of
/// 2^15 in one of 511 (Cilium's `max-connected-clusters`); cluster 0's
/// block starts at 256 (below are Cilium's reserved identities, never in
/// the kvstore).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub first: u64,
    pub last: u64,
}

impl IdRange {
    pub fn of_cluster(mesh: ClusterMesh) -> Self {
        let n = u64::from(mesh.cluster_id());
        let shift = mesh.max_connected_clusters().cluster_id_shift();
        Self {
            first: (n << shift).max(256),
            last: ((n + 1) << shift) - 1,
        }
    }

    pub fn contains(&self, id: u64) -> bool {
        (self.first..=self.last).contains(&id)
    }
}

/// Why a master key is not one the GC can judge. Such a key is skipped,
/// never deleted: it is not what Cilium writes, so nothing says what uses
/// it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MasterKeyProblem {
    #[error("the key is not under {IDENTITY_ID_PREFIX}")]
    NotAMasterKey,
    #[error("{0:?} is not a decimal identity")]
    NotAnId(String),
    #[error("its value (the labels key) is not UTF-8")]
    LabelsNotUtf8,
    #[error("its value (the labels key) is empty")]
    NoLabels,
}

/// A master key in this cluster's range, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterKey<'a> {
    pub key: &'a str,
    /// The id as the key spells it (the lock path is built from it).
    pub id_text: &'a str,
    pub id: u64,
    /// The labels key its users' value keys are under.
    pub labels: &'a str,
    pub mod_revision: i64,
}

/// A listed master key, sorted out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified<'a> {
    /// This cluster's: to judge.
    InRange(MasterKey<'a>),
    /// Another cluster's identity (or a reserved one): not ours to judge.
    OutOfRange {
        id: u64,
    },
    Malformed(MasterKeyProblem),
}

/// Read a listed master key and tell whether `range` is its cluster's.
pub fn classify(kv: &KeyValue, range: IdRange) -> Classified<'_> {
    let Some(id_text) = kv.key.strip_prefix(IDENTITY_ID_PREFIX) else {
        return Classified::Malformed(MasterKeyProblem::NotAMasterKey);
    };
    // Digits only: `u64::from_str` would also take `+42`, which Cilium
    // never writes.
    let id = match id_text.parse::<u64>() {
        Ok(id) if id_text.bytes().all(|b| b.is_ascii_digit()) => id,
        _ => {
            return Classified::Malformed(MasterKeyProblem::NotAnId(id_text.to_string()));
        }
    };
    if !range.contains(id) {
        return Classified::OutOfRange { id };
    }
    let labels = match std::str::from_utf8(&kv.value) {
        Ok("") => return Classified::Malformed(MasterKeyProblem::NoLabels),
        Ok(labels) => labels,
        Err(_) => return Classified::Malformed(MasterKeyProblem::LabelsNotUtf8),
    };
    Classified::InRange(MasterKey {
        key: &kv.key,
        id_text,
        id,
        labels,
        mod_revision: kv.mod_revision,
    })
}

/// What to do with a master key of this cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A node uses it: keep it, and forget any mark.
    KeepUsed,
    /// Unused, first seen so (or re-used since it was marked): keep it this
    /// round and remember this mod revision. An agent creates the master
    /// key before its value key, so one unused sighting may be an
    /// allocation half done; a round later it is not.
    Mark { mod_revision: i64 },
    /// Unused on two rounds in a row and not written in between: delete it
    /// (if still unwritten, under its lock).
    Delete,
}

/// The verdict on a master key at `mod_revision`, given the mod revision
/// the previous round remembered for it (if it marked it) and whether a
/// value key of its labels exists now.
pub fn decide(remembered: Option<i64>, mod_revision: i64, used: bool) -> Verdict {
    if used {
        Verdict::KeepUsed
    } else if remembered == Some(mod_revision) {
        Verdict::Delete
    } else {
        Verdict::Mark { mod_revision }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ranges() {
        use crate::mesh::MaxConnectedClusters::{Clusters255, Clusters511};
        let cases = [
            (0, Clusters255, 256, 65535),
            (1, Clusters255, 65536, 131071),
            (2, Clusters255, 131072, 196607),
            (255, Clusters255, 16_711_680, 16_777_215),
            (0, Clusters511, 256, 32767),
            (1, Clusters511, 32768, 65535),
            (300, Clusters511, 9_830_400, 9_863_167),
            (511, Clusters511, 16_744_448, 16_777_215),
        ];
        for (cluster, max, first, last) in cases {
            let range = IdRange::of_cluster(ClusterMesh::new(cluster, max).unwrap());
            assert_eq!(
                (range.first, range.last),
                (first, last),
                "cluster {cluster} of {max}"
            );
            assert!(range.contains(first) && range.contains(last));
            assert!(!range.contains(first - 1) && !range.contains(last + 1));
        }
    }

    fn master(key: &str, value: &[u8]) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: value.to_vec(),
            create_revision: 3,
            mod_revision: 7,
            lease: 0,
        }
    }

    #[test]
    fn classify_table() {
        let range = IdRange::of_cluster(ClusterMesh::new(1, Default::default()).unwrap());
        let id = |n: &str| format!("{IDENTITY_ID_PREFIX}{n}");
        let not_an_id = |t: &str| Classified::Malformed(MasterKeyProblem::NotAnId(t.into()));
        let rows: Vec<(String, &[u8], Classified)> = vec![
            (
                id("65536"),
                b"k8s:app=foo;",
                Classified::InRange(MasterKey {
                    key: "cilium/state/identities/v1/id/65536",
                    id_text: "65536",
                    id: 65536,
                    labels: "k8s:app=foo;",
                    mod_revision: 7,
                }),
            ),
            (
                id("300"),
                b"k8s:app=foo;",
                Classified::OutOfRange { id: 300 },
            ),
            (
                id("131072"),
                b"k8s:app=foo;",
                Classified::OutOfRange { id: 131072 },
            ),
            // Out of range first: another cluster's odd value is not ours to report.
            (id("131072"), b"", Classified::OutOfRange { id: 131072 }),
            (id("abc"), b"k8s:app=foo;", not_an_id("abc")),
            (id("+65536"), b"k8s:app=foo;", not_an_id("+65536")),
            (id(""), b"k8s:app=foo;", not_an_id("")),
            (id("65536/x"), b"k8s:app=foo;", not_an_id("65536/x")),
            (
                id("99999999999999999999999"),
                b"k",
                not_an_id("99999999999999999999999"),
            ),
            (
                id("65536"),
                b"",
                Classified::Malformed(MasterKeyProblem::NoLabels),
            ),
            (
                id("65536"),
                b"\xff\xfe",
                Classified::Malformed(MasterKeyProblem::LabelsNotUtf8),
            ),
            (
                "cilium/state/identities/v1/value/x".into(),
                b"1",
                Classified::Malformed(MasterKeyProblem::NotAMasterKey),
            ),
        ];
        for (key, value, expected) in rows {
            let kv = master(&key, value);
            assert_eq!(classify(&kv, range), expected, "{key}");
        }
    }

    #[test]
    fn decide_table() {
        // (remembered, mod revision now, used) -> verdict
        let rows = [
            (None, 7, false, Verdict::Mark { mod_revision: 7 }),
            (Some(7), 7, false, Verdict::Delete),
            // Written since it was marked: re-used, a fresh mark.
            (Some(5), 7, false, Verdict::Mark { mod_revision: 7 }),
            (None, 7, true, Verdict::KeepUsed),
            (Some(7), 7, true, Verdict::KeepUsed),
            (Some(5), 7, true, Verdict::KeepUsed),
        ];
        for (remembered, now, used, verdict) in rows {
            assert_eq!(
                decide(remembered, now, used),
                verdict,
                "remembered {remembered:?}, now {now}, used {used}"
            );
        }
    }
}
