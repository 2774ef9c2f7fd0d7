//! `labelSelector` on lists and watches, equality terms only
//! (`k8s-app=cilium,tier=node`; `==` too), which is what the project's
//! clients send. A term of another form (`!=`, `in (...)`, `key`) is
//! refused with 400 rather than ignored, so a test never passes on a
//! selector the fake did not apply. An object whose labels stop matching
//! is not reported to a watch as deleted (the API server does that).

use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<(String, String)>);

/// Undo the query's percent-encoding (`%3D` for `=`, `+` for a space).
fn decoded(text: &str) -> String {
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
            let (key, value) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .filter(|(key, _)| !key.ends_with('!'))
                .ok_or_else(|| {
                    format!("label selector term {term:?}: only key=value is supported here")
                })?;
            terms.push((key.trim().to_string(), value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object's labels hold every term.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0
            .iter()
            .all(|(key, value)| labels[key.as_str()].as_str() == Some(value.as_str()))
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
    fn equality_terms_percent_encoded() {
        let selector =
            LabelSelector::of_query("watch=true&labelSelector=k8s-app%3Dcilium%2Ctier%3D%3Dnode")
                .unwrap();
        let pod = |labels: Value| json!({"metadata": {"labels": labels}});
        assert!(selector.matches(&pod(json!({"k8s-app": "cilium", "tier": "node", "x": "y"}))));
        assert!(!selector.matches(&pod(json!({"k8s-app": "cilium"}))));
        assert!(!selector.matches(&json!({"metadata": {}})));
        assert!(LabelSelector::of_query("watch=true").unwrap().is_empty());
        for bad in [
            "labelSelector=a%21%3Db",
            "labelSelector=a",
            "labelSelector=a+in+(b)",
        ] {
            assert!(LabelSelector::of_query(bad).is_err(), "{bad}");
        }
    }
}
