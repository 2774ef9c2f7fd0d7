//! The bearer token, from the host's `get-credentials`: the host resolves
//! Entra tokens (workload identity, managed identity, client secret) and
//! refreshes them before they expire; the guest asks on every request and
//! keeps no copy.

use ipam_provider_sdk::Error;

/// The key under which the host hands the Entra access token for ARM.
pub const ACCESS_TOKEN: &str = "access-token";

/// The token among the host's credential values, unless it has expired by
/// `now` (Unix seconds). Every failure is `unauthorized`, saying why.
pub fn bearer(
    values: &[(String, String)],
    expires_at: Option<u64>,
    now: u64,
) -> Result<String, Error> {
    let token = values
        .iter()
        .find(|(key, _)| key == ACCESS_TOKEN)
        .map(|(_, value)| value.trim())
        .filter(|token| !token.is_empty())
        .ok_or_else(|| {
            Error::Unauthorized(format!(
                "Azure credentials: the host's credentials have no {ACCESS_TOKEN} (is the operator's credentials source Azure's?)"
            ))
        })?;
    if token.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(Error::Unauthorized(
            "Azure credentials: the host's access-token is not a bearer token".to_string(),
        ));
    }
    if expires_at.is_some_and(|at| at <= now) {
        return Err(Error::Unauthorized(
            "Azure credentials: the host's access token has expired".to_string(),
        ));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(result: Result<String, Error>) -> String {
        match result {
            Err(Error::Unauthorized(text)) => text,
            other => panic!("expected unauthorized, got {other:?}"),
        }
    }

    #[test]
    fn the_access_token_is_the_bearer_until_it_expires() {
        let given = values(&[("access-token", "eyJ0eXAi.x.y")]);
        assert_eq!(bearer(&given, Some(100), 99).unwrap(), "eyJ0eXAi.x.y");
        assert_eq!(bearer(&given, None, 99).unwrap(), "eyJ0eXAi.x.y");
        assert!(refused(bearer(&given, Some(100), 100)).contains("expired"));
    }

    #[test]
    fn no_token_or_a_bad_one_is_unauthorized() {
        assert!(
            refused(bearer(&values(&[("access-key-id", "AKID")]), None, 0))
                .contains("no access-token")
        );
        assert!(
            refused(bearer(&values(&[("access-token", " ")]), None, 0)).contains("no access-token")
        );
        assert!(refused(bearer(
            &values(&[("access-token", "a\r\nX-Evil: 1")]),
            None,
            0
        ))
        .contains("not a bearer token"));
    }
}
