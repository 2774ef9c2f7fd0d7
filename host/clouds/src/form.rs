//! Percent-encoding for the form bodies and queries the token endpoints
//! (STS, Entra ID, IMDS) are sent.

/// `value` percent-encoded, RFC 3986's unreserved characters kept.
pub fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
