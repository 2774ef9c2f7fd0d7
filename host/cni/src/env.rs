//! The CNI_* environment a runtime invokes the plugin with, parsed into a
//! typed [`Invocation`]. Every error here is the spec's code 4 (invalid
//! environment variables).
//!
//! Which variables a command needs follows SPEC.md v1.1.0: ADD and CHECK need
//! CNI_CONTAINERID, CNI_NETNS and CNI_IFNAME; DEL needs CNI_CONTAINERID and
//! CNI_IFNAME (CNI_NETNS is optional, the namespace may be gone); VERSION,
//! STATUS and GC need only CNI_COMMAND. CNI_PATH is not read: this plugin
//! delegates to no other plugin.

use crate::names::{ContainerId, IfName, NameError};
use crate::protocol::PodRef;
use crate::result::{code, CniError};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;

/// Why the environment does not make a valid invocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{0} is not valid UTF-8")]
    NotUnicode(&'static str),
    #[error("CNI_COMMAND {0:?} is none of ADD, DEL, CHECK, VERSION, STATUS, GC")]
    UnknownCommand(String),
    #[error("CNI_CONTAINERID: {0}")]
    ContainerId(NameError),
    #[error("CNI_IFNAME: {0}")]
    IfName(NameError),
    #[error("CNI_ARGS: {0:?} is not KEY=VALUE with a key of letters, digits and '_'")]
    ArgsPair(String),
    #[error("CNI_ARGS: {0:?} is given twice")]
    ArgsDuplicate(String),
}

impl EnvError {
    /// The CNI error printed for it: always code 4.
    pub fn cni_error(&self) -> CniError {
        CniError::new(
            code::INVALID_ENVIRONMENT,
            "invalid CNI environment",
            self.to_string(),
        )
    }
}

/// The CNI operation a runtime asks for (CNI_COMMAND).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Status,
    Gc,
}

impl Command {
    pub fn parse(text: &str) -> Result<Command, EnvError> {
        match text {
            "ADD" => Ok(Command::Add),
            "DEL" => Ok(Command::Del),
            "CHECK" => Ok(Command::Check),
            "VERSION" => Ok(Command::Version),
            "STATUS" => Ok(Command::Status),
            "GC" => Ok(Command::Gc),
            other => Err(EnvError::UnknownCommand(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Status => "STATUS",
            Command::Gc => "GC",
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// CNI_ARGS: `KEY=VALUE` pairs separated by `;`, keys unique.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs(BTreeMap<String, String>);

impl CniArgs {
    pub fn parse(text: &str) -> Result<CniArgs, EnvError> {
        let mut pairs = BTreeMap::new();
        for pair in text.split(';').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .filter(|(key, _)| {
                    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                })
                .ok_or_else(|| EnvError::ArgsPair(pair.to_owned()))?;
            if pairs.insert(key.to_owned(), value.to_owned()).is_some() {
                return Err(EnvError::ArgsDuplicate(key.to_owned()));
            }
        }
        Ok(CniArgs(pairs))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The Kubernetes pod the container belongs to, when the runtime names
    /// both K8S_POD_NAMESPACE and K8S_POD_NAME (kubelet's runtimes do).
    pub fn pod(&self) -> Option<PodRef> {
        let namespace = self.get("K8S_POD_NAMESPACE").filter(|s| !s.is_empty())?;
        let name = self.get("K8S_POD_NAME").filter(|s| !s.is_empty())?;
        Some(PodRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// ADD and CHECK: a container's interface in a live network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attach {
    pub container_id: ContainerId,
    pub netns: String,
    pub ifname: IfName,
    pub args: CniArgs,
}

/// DEL: the namespace may already be gone, so it is optional.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detach {
    pub container_id: ContainerId,
    pub netns: Option<String>,
    pub ifname: IfName,
    pub args: CniArgs,
}

/// One invocation of the plugin, with what its command needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Add(Attach),
    Del(Detach),
    Check(Attach),
    Version,
    Status,
    Gc,
}

impl Invocation {
    /// Reads the process environment.
    pub fn from_env() -> Result<Invocation, EnvError> {
        Invocation::from_lookup(|name| std::env::var_os(name))
    }

    /// Parses an environment given as a lookup function (tests pass a table).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Result<Invocation, EnvError> {
        let env = Env(&lookup);
        let command = Command::parse(&env.required("CNI_COMMAND")?)?;
        Ok(match command {
            Command::Add => Invocation::Add(env.attach()?),
            Command::Check => Invocation::Check(env.attach()?),
            Command::Del => Invocation::Del(Detach {
                container_id: env.container_id()?,
                netns: env.optional("CNI_NETNS")?,
                ifname: env.ifname()?,
                args: env.args()?,
            }),
            Command::Version => Invocation::Version,
            Command::Status => Invocation::Status,
            Command::Gc => Invocation::Gc,
        })
    }

    pub fn command(&self) -> Command {
        match self {
            Invocation::Add(_) => Command::Add,
            Invocation::Del(_) => Command::Del,
            Invocation::Check(_) => Command::Check,
            Invocation::Version => Command::Version,
            Invocation::Status => Command::Status,
            Invocation::Gc => Command::Gc,
        }
    }
}

struct Env<'a, F: Fn(&str) -> Option<OsString>>(&'a F);

impl<F: Fn(&str) -> Option<OsString>> Env<'_, F> {
    /// An unset or empty variable is absent: runtimes set unused ones to "".
    fn optional(&self, name: &'static str) -> Result<Option<String>, EnvError> {
        match (self.0)(name) {
            None => Ok(None),
            Some(value) => {
                let value = value
                    .into_string()
                    .map_err(|_| EnvError::NotUnicode(name))?;
                Ok(Some(value).filter(|v| !v.is_empty()))
            }
        }
    }

    fn required(&self, name: &'static str) -> Result<String, EnvError> {
        self.optional(name)?.ok_or(EnvError::Missing(name))
    }

    fn container_id(&self) -> Result<ContainerId, EnvError> {
        ContainerId::try_from(self.required("CNI_CONTAINERID")?).map_err(EnvError::ContainerId)
    }

    fn ifname(&self) -> Result<IfName, EnvError> {
        IfName::try_from(self.required("CNI_IFNAME")?).map_err(EnvError::IfName)
    }

    fn args(&self) -> Result<CniArgs, EnvError> {
        CniArgs::parse(&self.optional("CNI_ARGS")?.unwrap_or_default())
    }

    fn attach(&self) -> Result<Attach, EnvError> {
        Ok(Attach {
            container_id: self.container_id()?,
            netns: self.required("CNI_NETNS")?,
            ifname: self.ifname()?,
            args: self.args()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn parse(vars: &[(&str, &str)]) -> Result<Invocation, EnvError> {
        Invocation::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(*v))
        })
    }

    const ADD: [(&str, &str); 5] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/c1"),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
        ),
    ];

    fn with(
        base: &[(&'static str, &'static str)],
        name: &'static str,
        value: &'static str,
    ) -> Vec<(&'static str, &'static str)> {
        let mut vars: Vec<_> = base.iter().copied().filter(|(k, _)| *k != name).collect();
        vars.push((name, value));
        vars
    }

    fn without(
        base: &[(&'static str, &'static str)],
        name: &str,
    ) -> Vec<(&'static str, &'static str)> {
        base.iter().copied().filter(|(k, _)| *k != name).collect()
    }

    #[test]
    fn add_parses_everything() {
        let Invocation::Add(attach) = parse(&ADD).unwrap() else {
            panic!("not an ADD")
        };
        assert_eq!(attach.container_id.as_str(), "c1");
        assert_eq!(attach.netns, "/run/netns/c1");
        assert_eq!(attach.ifname.as_str(), "eth0");
        assert_eq!(attach.args.get("IgnoreUnknown"), Some("1"));
        assert_eq!(
            attach.args.pod(),
            Some(PodRef {
                namespace: "default".into(),
                name: "web-0".into()
            })
        );
    }

    #[test]
    fn commands_and_what_they_need() {
        let only = |c: &'static str| vec![("CNI_COMMAND", c)];
        type Vars = Vec<(&'static str, &'static str)>;
        let table: Vec<(Vars, Result<Command, EnvError>)> = vec![
            (ADD.to_vec(), Ok(Command::Add)),
            (with(&ADD, "CNI_COMMAND", "CHECK"), Ok(Command::Check)),
            (with(&ADD, "CNI_COMMAND", "DEL"), Ok(Command::Del)),
            (
                without(&with(&ADD, "CNI_COMMAND", "DEL"), "CNI_NETNS"),
                Ok(Command::Del),
            ),
            (only("VERSION"), Ok(Command::Version)),
            (only("STATUS"), Ok(Command::Status)),
            (only("GC"), Ok(Command::Gc)),
            (vec![], Err(EnvError::Missing("CNI_COMMAND"))),
            (only(""), Err(EnvError::Missing("CNI_COMMAND"))),
            (only("add"), Err(EnvError::UnknownCommand("add".into()))),
            (only("FROB"), Err(EnvError::UnknownCommand("FROB".into()))),
            (only("ADD"), Err(EnvError::Missing("CNI_CONTAINERID"))),
            (
                without(&ADD, "CNI_NETNS"),
                Err(EnvError::Missing("CNI_NETNS")),
            ),
            (
                without(&with(&ADD, "CNI_COMMAND", "CHECK"), "CNI_NETNS"),
                Err(EnvError::Missing("CNI_NETNS")),
            ),
            (
                without(&ADD, "CNI_IFNAME"),
                Err(EnvError::Missing("CNI_IFNAME")),
            ),
            (
                without(&with(&ADD, "CNI_COMMAND", "DEL"), "CNI_IFNAME"),
                Err(EnvError::Missing("CNI_IFNAME")),
            ),
            (
                with(&ADD, "CNI_CONTAINERID", "-c1"),
                Err(EnvError::ContainerId(NameError::ContainerId("-c1".into()))),
            ),
            (
                with(&ADD, "CNI_IFNAME", "eth0/x"),
                Err(EnvError::IfName(NameError::IfName("eth0/x".into()))),
            ),
            (
                with(&ADD, "CNI_ARGS", "K8S_POD_NAME"),
                Err(EnvError::ArgsPair("K8S_POD_NAME".into())),
            ),
            (
                with(&ADD, "CNI_ARGS", "=x"),
                Err(EnvError::ArgsPair("=x".into())),
            ),
            (
                with(&ADD, "CNI_ARGS", "A-B=x"),
                Err(EnvError::ArgsPair("A-B=x".into())),
            ),
            (
                with(&ADD, "CNI_ARGS", "A=1;A=2"),
                Err(EnvError::ArgsDuplicate("A".into())),
            ),
            (with(&ADD, "CNI_ARGS", ""), Ok(Command::Add)),
        ];
        for (vars, want) in table {
            assert_eq!(parse(&vars).map(|i| i.command()), want, "{vars:?}");
        }
    }

    #[test]
    fn cni_args() {
        let args = CniArgs::parse("A=1;;B=x=y;C=").unwrap();
        assert_eq!(args.get("A"), Some("1"));
        assert_eq!(args.get("B"), Some("x=y"));
        assert_eq!(args.get("C"), Some(""));
        assert_eq!(args.get("D"), None);
        assert_eq!(args.pod(), None);
        let half = CniArgs::parse("K8S_POD_NAMESPACE=default").unwrap();
        assert_eq!(
            half.pod(),
            None,
            "a pod needs both its namespace and its name"
        );
    }

    #[test]
    fn non_unicode_is_refused() {
        let got = Invocation::from_lookup(|name| match name {
            "CNI_COMMAND" => Some(OsString::from_vec(vec![0x41, 0xff])),
            _ => None,
        });
        assert_eq!(got, Err(EnvError::NotUnicode("CNI_COMMAND")));
    }

    #[test]
    fn every_env_error_is_code_4() {
        for err in [
            EnvError::Missing("CNI_COMMAND"),
            EnvError::UnknownCommand("X".into()),
        ] {
            let cni = err.cni_error();
            assert_eq!(cni.code, 4);
            assert_eq!(cni.details, err.to_string());
        }
    }
}
