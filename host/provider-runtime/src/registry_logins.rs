//! Registry credentials from a Docker config JSON file: what a
//! `kubernetes.io/dockerconfigjson` Secret holds under `.dockerconfigjson`
//! (and what `docker login` writes). Only `auths` is read: each key a
//! registry (`host[:port]`, optionally with a scheme and a path, as
//! `https://index.docker.io/v1/`), each value a base64 `auth` of
//! `user:password`, or `username` and `password`. Credential helpers
//! (`credsStore`, `credHelpers`) and `identitytoken` run or need programs
//! the operator does not have, so they are refused rather than ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine;

#[derive(Debug, thiserror::Error)]
pub enum RegistryLoginsError {
    #[error("reading registry credentials {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: not a Docker config JSON file: {message}")]
    NotJson { origin: String, message: String },
    #[error("{origin}: no \"auths\" map (a Docker config JSON file, as a kubernetes.io/dockerconfigjson Secret's .dockerconfigjson)")]
    NoAuths { origin: String },
    #[error("{origin}: \"{key}\" is not supported: the operator runs no credential helper; write the registry's user and password under \"auths\"")]
    Helper { origin: String, key: &'static str },
    #[error("{origin}: registry {registry}: {problem}")]
    Entry {
        origin: String,
        registry: String,
        problem: String,
    },
}

/// A user and password for one registry. Debug and Display show the user
/// only: the password is never printed or logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    password: String,
}

impl Login {
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The value of an `Authorization: Basic …` header.
    pub fn basic_authorization(&self) -> String {
        let pair = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    }
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Login {{ username: {:?}, password: <redacted> }}",
            self.username
        )
    }
}

/// Logins by registry (`host[:port]`, lowercase).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryLogins(BTreeMap<String, Login>);

/// `https://Registry.example:5000/v1/` → `registry.example:5000`.
fn registry_key(key: &str) -> String {
    let without_scheme = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    without_scheme
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

impl RegistryLogins {
    pub fn new(logins: impl IntoIterator<Item = (String, Login)>) -> Self {
        Self(
            logins
                .into_iter()
                .map(|(registry, login)| (registry_key(&registry), login))
                .collect(),
        )
    }

    /// The file at `path`, parsed.
    pub fn from_file(path: &Path) -> Result<Self, RegistryLoginsError> {
        let bytes = std::fs::read(path).map_err(|source| RegistryLoginsError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&bytes, &path.display().to_string())
    }

    /// A Docker config JSON document; `origin` names it in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Self, RegistryLoginsError> {
        let doc: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| RegistryLoginsError::NotJson {
                origin: origin.into(),
                message: e.to_string(),
            })?;
        let auths = doc.get("auths").and_then(|a| a.as_object());
        for key in ["credsStore", "credHelpers"] {
            if doc.get(key).is_some() && auths.is_none_or(|a| a.is_empty()) {
                return Err(RegistryLoginsError::Helper {
                    origin: origin.into(),
                    key,
                });
            }
        }
        let auths = auths.ok_or_else(|| RegistryLoginsError::NoAuths {
            origin: origin.into(),
        })?;
        let mut logins = BTreeMap::new();
        for (registry, entry) in auths {
            let problem = |problem: &str| RegistryLoginsError::Entry {
                origin: origin.into(),
                registry: registry.clone(),
                problem: problem.into(),
            };
            let key = registry_key(registry);
            if key.is_empty() {
                return Err(problem("not a registry host"));
            }
            let text = |field: &str| entry.get(field).and_then(|v| v.as_str());
            let login = match (text("auth"), text("username"), text("password")) {
                (Some(auth), _, _) if !auth.is_empty() => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| problem("\"auth\" is not base64"))?;
                    let decoded = String::from_utf8(decoded)
                        .map_err(|_| problem("\"auth\" does not decode to text"))?;
                    let (user, password) = decoded
                        .split_once(':')
                        .ok_or_else(|| problem("\"auth\" does not decode to user:password"))?;
                    Login::new(user, password)
                }
                (_, Some(user), Some(password)) if !user.is_empty() => Login::new(user, password),
                _ if text("identitytoken").is_some() => {
                    return Err(problem(
                        "only an \"identitytoken\": the operator needs a user and password (\"auth\", or \"username\" and \"password\")",
                    ))
                }
                _ => {
                    return Err(problem(
                        "neither \"auth\" (base64 user:password) nor \"username\" and \"password\"",
                    ))
                }
            };
            logins.insert(key, login);
        }
        Ok(Self(logins))
    }

    /// The login for `registry` (`host[:port]`, as in an `oci://` reference).
    pub fn for_registry(&self, registry: &str) -> Option<&Login> {
        self.0.get(&registry.to_ascii_lowercase())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The registries there are logins for.
    pub fn registries(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RegistryLogins, RegistryLoginsError> {
        RegistryLogins::parse(text.as_bytes(), "secret.json")
    }

    #[test]
    fn auth_or_username_and_password_give_a_login_per_registry() {
        // "alice:s3cr:et" in base64: the password keeps its colon.
        let logins = parse(
            r#"{"auths": {
                "https://123456789012.dkr.ecr.eu-west-1.amazonaws.com": {"auth": "YWxpY2U6czNjcjpldA=="},
                "Acme.azurecr.io": {"username": "00000000-0000-0000-0000-000000000000", "password": "tok"},
                "https://index.docker.io/v1/": {"auth": "Ym9iOnB3", "email": "x@y"}
            }}"#,
        )
        .unwrap();
        let ecr = logins
            .for_registry("123456789012.dkr.ecr.eu-west-1.amazonaws.com")
            .unwrap();
        assert_eq!(ecr, &Login::new("alice", "s3cr:et"));
        assert_eq!(
            logins.for_registry("acme.azurecr.io").unwrap().username,
            "00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(
            logins.for_registry("index.docker.io").unwrap().username,
            "bob"
        );
        assert!(logins.for_registry("ghcr.io").is_none());
        assert_eq!(
            Login::new("alice", "s3cret").basic_authorization(),
            "Basic YWxpY2U6czNjcmV0"
        );
    }

    #[test]
    fn the_password_never_shows_in_debug_output() {
        let logins =
            parse(r#"{"auths": {"r.example": {"username": "u", "password": "hunter2"}}}"#).unwrap();
        let shown = format!("{logins:?}");
        assert!(
            shown.contains("\"u\"") && !shown.contains("hunter2"),
            "{shown}"
        );
    }

    #[test]
    fn bad_files_are_refused_naming_what_is_wrong() {
        let cases = [
            ("not json", "not a Docker config JSON file"),
            (r#"{"registry": 1}"#, "no \"auths\" map"),
            (
                r#"{"credsStore": "ecr-login"}"#,
                "\"credsStore\" is not supported",
            ),
            (
                r#"{"auths": {"r.example": {"auth": "%%%"}}}"#,
                "r.example: \"auth\" is not base64",
            ),
            // base64 of "nocolon"
            (
                r#"{"auths": {"r.example": {"auth": "bm9jb2xvbg=="}}}"#,
                "does not decode to user:password",
            ),
            (
                r#"{"auths": {"r.example": {"username": "u"}}}"#,
                "neither \"auth\"",
            ),
            (
                r#"{"auths": {"r.example": {"identitytoken": "x"}}}"#,
                "only an \"identitytoken\"",
            ),
            (
                r#"{"auths": {"https://": {"auth": "Ym9iOnB3"}}}"#,
                "not a registry host",
            ),
        ];
        for (text, says) in cases {
            let error = parse(text).expect_err(text).to_string();
            assert!(error.starts_with("secret.json"), "{error}");
            assert!(error.contains(says), "{text}: {error}");
        }
        let missing = RegistryLogins::from_file(Path::new("/nonexistent/config.json"))
            .expect_err("no file")
            .to_string();
        assert!(missing.contains("/nonexistent/config.json"), "{missing}");
    }
}
