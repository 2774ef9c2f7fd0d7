//! A registry's `WWW-Authenticate` challenge (RFC 7235), as the
//! distribution registry, ECR, ACR and ghcr.io send it: `Basic realm="…"`
//! (answer with the user and password) or `Bearer realm="…",service="…",
//! scope="…"` (ask the realm for a token, with the user and password when
//! there are some, and answer with the token).

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        /// `service` and `scope`, in the challenge's order: the token
        /// request's query.
        query: Vec<(String, String)>,
    },
}

/// `key="value", key=token, …`; commas inside quotes stay in the value
/// (a scope such as `repository:a/b:pull,push`).
fn parameters(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        out.push((key, value));
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

impl Challenge {
    /// The challenge of a `WWW-Authenticate` value; None when it is neither
    /// Basic nor a Bearer with a realm.
    pub fn parse(header: &str) -> Option<Self> {
        let header = header.trim();
        let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Challenge::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = parameters(params)?;
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .filter(|r| !r.is_empty())?;
        let query = params
            .into_iter()
            .filter(|(k, _)| k == "service" || k == "scope")
            .collect();
        Some(Challenge::Bearer { realm, query })
    }

    /// The token request's URL: the realm with `service` and `scope`.
    pub fn token_url(realm: &str, query: &[(String, String)]) -> String {
        if query.is_empty() {
            return realm.to_string();
        }
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", escape(v)))
            .collect();
        let joiner = if realm.contains('?') { '&' } else { '?' };
        format!("{realm}{joiner}{}", query.join("&"))
    }
}

/// Percent-encoding of a query value, keeping what scopes and services are
/// written with (`repository:a/b:pull,push`, `registry.example:5000`).
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => out.push(byte as char),
            b'-' | b'.' | b'_' | b'~' | b':' | b'/' | b',' => out.push(byte as char),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_become_token_urls() {
        let challenge = Challenge::parse(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:acme/aws:pull,push""#,
        )
        .unwrap();
        let Challenge::Bearer { realm, query } = challenge else {
            panic!("a bearer challenge");
        };
        assert_eq!(
            Challenge::token_url(&realm, &query),
            "https://ghcr.io/token?service=ghcr.io&scope=repository:acme/aws:pull,push"
        );
        assert_eq!(
            Challenge::token_url(
                "https://r.example/oauth2/token?x=1",
                &[("scope".into(), "a b".into())]
            ),
            "https://r.example/oauth2/token?x=1&scope=a%20b"
        );
    }

    #[test]
    fn basic_and_unknown_challenges() {
        assert_eq!(
            Challenge::parse(r#"Basic realm="test""#),
            Some(Challenge::Basic)
        );
        assert_eq!(Challenge::parse("basic"), Some(Challenge::Basic));
        assert_eq!(Challenge::parse(r#"Negotiate abc"#), None);
        assert_eq!(Challenge::parse(r#"Bearer service="x""#), None, "no realm");
        assert_eq!(Challenge::parse(r#"Bearer realm="unterminated"#), None);
        assert_eq!(Challenge::parse(""), None);
    }
}
