//! The origin (`scheme://host[:port]`) of an endpoint URL, as the provider
//! runtime's egress allow-list names them.

/// `scheme://authority` of an http(s) URL, its path and query dropped; `None`
/// for anything else.
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_of_urls() {
        let table = [
            (
                "https://management.azure.com",
                Some("https://management.azure.com"),
            ),
            (
                "https://management.azure.com/",
                Some("https://management.azure.com"),
            ),
            ("http://127.0.0.1:5000/x?y", Some("http://127.0.0.1:5000")),
            ("ftp://host", None),
            ("management.azure.com", None),
            ("https://", None),
        ];
        for (url, want) in table {
            assert_eq!(origin(url).as_deref(), want, "{url}");
        }
    }
}
