//! `labelSelector` on lists and watches: equality and existence terms
//! (`k8s-app=cilium`, `tier==node`, `tier!=edge`, `kubernetes.io/service-name`,
//! `!canary`), which is what the project's clients send. A set-based term
//! (`in (...)`, `notin (...)`) is refused with 400 rather than ignored, so a
//! test never passes on a selector the fake did not apply. An object whose labels stop matching
//! is not reported to a watch as deleted (the API server does that).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

fn is_label_text(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}

impl Term {
    fn holds(&self, labels: &Value) -> bool {
        let value = |key: &str| labels[key].as_str();
        match self {
            Self::Equals(key, want) => value(key) == Some(want.as_str()),
            Self::NotEquals(key, want) => value(key) != Some(want.as_str()),
            Self::Exists(key) => value(key).is_some(),
            Self::Absent(key) => value(key).is_none(),
        }
    }

    fn parse(term: &str) -> Option<Self> {
        let pair = |(key, value): (&str, &str)| {
            let (key, value) = (key.trim(), value.trim());
            (is_label_text(key) && is_label_text(value))
                .then(|| (key.to_string(), value.to_string()))
        };
        if let Some(split) = term.split_once("!=") {
            return pair(split).map(|(k, v)| Self::NotEquals(k, v));
        }
        if let Some(split) = term.split_once("==").or_else(|| term.split_once('=')) {
            return pair(split).map(|(k, v)| Self::Equals(k, v));
        }
        match term.trim().strip_prefix('!') {
            Some(key) => is_label_text(key.trim()).then(|| Self::Absent(key.trim().into())),
            None => is_label_text(term.trim()).then(|| Self::Exists(term.trim().into())),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Term>);

/// Undo the query's percent-encoding (`%3D` for `=`, `+` for a space).
pub(crate) fn decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl LabelSelector {
    /// The query's `labelSelector`, if any; `Err` names a term this fake
    /// cannot apply.
    pub(crate) fn of_query(query: &str) -> Result<Self, String> {
        let Some(raw) = query
            .split('&')
            .find_map(|p| p.strip_prefix("labelSelector="))
        else {
            return Ok(Self::default());
        };
        let text = decoded(raw);
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            terms.push(Term::parse(term).ok_or_else(|| {
                format!(
                    "label selector term {term:?}: only key=value, key==value, key!=value, \
                     key and !key are supported here"
                )
            })?);
        }
        Ok(Self(terms))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object's labels hold every term.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|term| term.holds(labels))
    }

    /// Whether a watch event line (`{"type":..,"object":..}`) is about an
    /// object this selector matches.
    pub(crate) fn matches_line(&self, line: &[u8]) -> bool {
        self.is_empty()
            || serde_json::from_slice::<Value>(line)
                .is_ok_and(|event| self.matches(&event["object"]))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equality_and_existence_terms_percent_encoded() {
        let selector =
            LabelSelector::of_query("watch=true&labelSelector=k8s-app%3Dcilium%2Ctier%3D%3Dnode")
                .unwrap();
        let pod = |labels: Value| json!({"metadata": {"labels": labels}});
        assert!(selector.matches(&pod(json!({"k8s-app": "cilium", "tier": "node", "x": "y"}))));
        assert!(!selector.matches(&pod(json!({"k8s-app": "cilium"}))));
        assert!(!selector.matches(&json!({"metadata": {}})));
        assert!(LabelSelector::of_query("watch=true").unwrap().is_empty());
        let existence = LabelSelector::of_query(
            "labelSelector=kubernetes.io%2Fservice-name%2C%21canary%2Ctier%21%3Dedge",
        )
        .unwrap();
        for (labels, selected) in [
            (json!({"kubernetes.io/service-name": "cart"}), true),
            (
                json!({"kubernetes.io/service-name": "cart", "tier": "node"}),
                true,
            ),
            (
                json!({"kubernetes.io/service-name": "cart", "tier": "edge"}),
                false,
            ),
            (
                json!({"kubernetes.io/service-name": "cart", "canary": "1"}),
                false,
            ),
            (json!({"app": "cart"}), false),
        ] {
            assert_eq!(
                existence.matches(&pod(labels.clone())),
                selected,
                "{labels}"
            );
        }
        for bad in [
            "labelSelector=a+in+(b)",
            "labelSelector=a%3D",
            "labelSelector=%21",
        ] {
            assert!(LabelSelector::of_query(bad).is_err(), "{bad}");
        }
    }
}
