//! The agent's allocations in a file, so a restart (or a crash) loses none:
//! written before an ADD or DEL answers, atomically (a temporary file in the
//! same directory, fsync, rename over the old file, fsync the directory), so
//! a crash at any point leaves either the old file or the new one. Read back
//! at start-up before anything is served; every entry is checked and a bad
//! file is an error naming what is wrong, never silently an empty state.
//! The directory is by default under /run (a tmpfs on a node: the file lasts
//! as long as the boot's pod network namespaces, and the fsyncs cost nothing
//! there); on a disk the same save is durable across power loss too.
//!
//! An entry may name the pod's host-side veth (`host-ifname`, written once
//! the datapath is attached there), so a restart that finds its pinned
//! endpoint map re-created can write the endpoint again. The field is
//! optional: files of agents before it read as they are. An agent before it
//! refuses a file that has it (unknown field).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipam_pool::agent::allocator::{Allocation, Allocations, Holder};
use serde::{Deserialize, Serialize};

/// The format written; a file of another version is refused.
const VERSION: u32 = 1;
const FILE_NAME: &str = "allocations.json";

/// The host-side veth of each address the datapath is attached for.
pub type HostVeths = BTreeMap<IpAddr, String>;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    pub allocations: Allocations,
    /// Only for addresses in `allocations`.
    pub host_veths: HostVeths,
}

#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a state file: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{path}: format version {found}, this agent reads {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: entry {index}: {problem}")]
    Entry {
        path: PathBuf,
        index: usize,
        problem: String,
    },
}

/// The file's document. Read with owned strings (`S = String`, and the
/// address as text, checked afterwards); written from borrowed ones and the
/// address itself (`S = &str`, `I = IpAddr`, which serialises as its text
/// without allocating), so a save copies nothing of an allocation before
/// serialising it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Document<S, I = S> {
    version: u32,
    allocations: Vec<Entry<S, I>>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Entry<S, I = S> {
    ip: I,
    container_id: S,
    ifname: S,
    owner: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<S>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host_ifname: Option<S>,
}

/// The state file in the agent's state directory.
#[derive(Debug, Clone)]
pub struct StateFile {
    dir: PathBuf,
    path: PathBuf,
}

impl StateFile {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            path: dir.join(FILE_NAME),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> StateFileError {
        StateFileError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The saved allocations; none when there is no file yet (a first
    /// start). The directory is created if missing.
    pub fn load(&self) -> Result<Saved, StateFileError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Saved::default()),
            Err(e) => return Err(self.io(e)),
        };
        self.parse(&bytes)
    }

    fn parse(&self, bytes: &[u8]) -> Result<Saved, StateFileError> {
        let document: Document<String> =
            serde_json::from_slice(bytes).map_err(|source| StateFileError::Decode {
                path: self.path.clone(),
                source,
            })?;
        if document.version != VERSION {
            return Err(StateFileError::Version {
                path: self.path.clone(),
                found: document.version,
            });
        }
        let mut allocations = Allocations::new();
        let mut host_veths = HostVeths::new();
        let mut attachments = BTreeSet::new();
        for (index, entry) in document.allocations.into_iter().enumerate() {
            let problem = |problem: String| StateFileError::Entry {
                path: self.path.clone(),
                index,
                problem,
            };
            let ip: IpAddr = entry
                .ip
                .parse()
                .map_err(|_| problem(format!("ip {:?} is not an address", entry.ip)))?;
            match entry.host_ifname {
                Some(name) if name.is_empty() || name.len() > 15 || name.contains('/') => {
                    return Err(problem(format!(
                        "host-ifname {name:?} is not an interface name"
                    )));
                }
                Some(name) => {
                    host_veths.insert(ip, name);
                }
                None => {}
            }
            if entry.container_id.is_empty() || entry.ifname.is_empty() || entry.owner.is_empty() {
                return Err(problem(
                    "container-id, ifname and owner must not be empty".into(),
                ));
            }
            if !attachments.insert((entry.container_id.clone(), entry.ifname.clone())) {
                return Err(problem(format!(
                    "attachment {}/{} holds two addresses",
                    entry.container_id, entry.ifname
                )));
            }
            let allocation = Allocation {
                holder: Holder {
                    container_id: entry.container_id,
                    ifname: entry.ifname,
                    owner: entry.owner,
                },
                resource: entry.resource,
            };
            if allocations.insert(ip, allocation).is_some() {
                return Err(problem(format!("{ip} is allocated twice")));
            }
        }
        Ok(Saved {
            allocations,
            host_veths,
        })
    }

    /// Replace the file with `allocations` (and the host veths of those
    /// that have one), durably: [`StateFile::encode`] then
    /// [`StateFile::write`].
    pub fn save(
        &self,
        allocations: &Allocations,
        host_veths: &HostVeths,
    ) -> Result<(), StateFileError> {
        self.write(&Self::encode(allocations, host_veths))
    }

    /// The file's bytes for `allocations` and their host veths.
    fn encode(allocations: &Allocations, host_veths: &HostVeths) -> Vec<u8> {
        let document: Document<&str, IpAddr> = Document {
            version: VERSION,
            allocations: allocations
                .iter()
                .map(|(ip, a)| Entry {
                    ip: *ip,
                    container_id: a.holder.container_id.as_str(),
                    ifname: a.holder.ifname.as_str(),
                    owner: a.holder.owner.as_str(),
                    resource: a.resource.as_deref(),
                    host_ifname: host_veths.get(ip).map(String::as_str),
                })
                .collect(),
        };
        // Sized for the usual entry (64-character container ids), so the
        // buffer is not regrown and copied a dozen times on the way.
        let mut bytes = Vec::with_capacity(64 + allocations.len() * 192);
        // Serialising strings and addresses into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut bytes, &document);
        bytes
    }

    /// Replace the file with `bytes` durably: a temporary file in the same
    /// directory, fsync, rename over the file, fsync of the directory.
    fn write(&self, bytes: &[u8]) -> Result<(), StateFileError> {
        let temporary = self.dir.join(format!(".{FILE_NAME}.tmp"));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .map_err(|e| self.io(e))?;
        file.write_all(bytes).map_err(|e| self.io(e))?;
        file.sync_all().map_err(|e| self.io(e))?;
        drop(file);
        std::fs::rename(&temporary, &self.path).map_err(|e| self.io(e))?;
        // The rename is durable only once the directory is.
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| self.io(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocations() -> Allocations {
        let mut allocations = Allocations::new();
        allocations.insert(
            "10.0.1.5".parse().unwrap(),
            Allocation {
                holder: Holder {
                    container_id: "c1".into(),
                    ifname: "eth0".into(),
                    owner: "default/web".into(),
                },
                resource: Some("eni-1".into()),
            },
        );
        allocations
    }

    #[test]
    fn saved_allocations_load_back_and_no_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::in_dir(&dir.path().join("state"));
        assert_eq!(file.load().unwrap(), Saved::default());
        file.save(&allocations(), &HostVeths::new()).unwrap();
        assert_eq!(file.load().unwrap().allocations, allocations());
        let veths = HostVeths::from([("10.0.1.5".parse().unwrap(), "veth1a2b".to_string())]);
        file.save(&allocations(), &veths).unwrap();
        assert_eq!(
            file.load().unwrap(),
            Saved {
                allocations: allocations(),
                host_veths: veths
            }
        );
        file.save(&Allocations::new(), &HostVeths::new()).unwrap();
        assert_eq!(file.load().unwrap(), Saved::default());
        let names: Vec<_> = std::fs::read_dir(dir.path().join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["allocations.json"], "no temporary file left behind");
    }

    #[test]
    fn a_version_1_file_without_host_veths_reads() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::in_dir(dir.path());
        std::fs::write(
            file.path(),
            r#"{"version":1,"allocations":[{"ip":"10.0.1.5","container-id":"c1","ifname":"eth0","owner":"default/web","resource":"eni-1"}]}"#,
        )
        .unwrap();
        let saved = file.load().unwrap();
        assert_eq!(saved.allocations, allocations());
        assert!(saved.host_veths.is_empty());
    }

    #[test]
    fn bad_files_are_errors_that_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::in_dir(dir.path());
        let entry = |ip: &str, id: &str| {
            format!(r#"{{"ip":"{ip}","container-id":"{id}","ifname":"eth0","owner":"default/p"}}"#)
        };
        let cases = [
            ("{", "not a state file"),
            (r#"{"version":2,"allocations":[]}"#, "format version 2"),
            (
                r#"{"version":1,"allocations":[],"extra":1}"#,
                "unknown field",
            ),
            (
                &format!(
                    r#"{{"version":1,"allocations":[{}]}}"#,
                    entry("10.0.0.300", "a")
                ),
                "entry 0: ip \"10.0.0.300\"",
            ),
            (
                &format!(
                    r#"{{"version":1,"allocations":[{},{}]}}"#,
                    entry("10.0.0.1", "a"),
                    entry("10.0.0.1", "b")
                ),
                "entry 1: 10.0.0.1 is allocated twice",
            ),
            (
                &format!(
                    r#"{{"version":1,"allocations":[{},{}]}}"#,
                    entry("10.0.0.1", "a"),
                    entry("10.0.0.2", "a")
                ),
                "entry 1: attachment a/eth0 holds two addresses",
            ),
            (
                &format!(
                    r#"{{"version":1,"allocations":[{}]}}"#,
                    entry("10.0.0.1", "")
                ),
                "must not be empty",
            ),
            (
                r#"{"version":1,"allocations":[{"ip":"10.0.0.1","container-id":"a","ifname":"eth0","owner":"o","host-ifname":"a/b"}]}"#,
                "entry 0: host-ifname \"a/b\" is not an interface name",
            ),
        ];
        for (text, expected) in cases {
            std::fs::write(file.path(), text).unwrap();
            let error = file.load().unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
