//! An error and its causes as one line for the user. Many error types say
//! their cause in their own message and also return it as their source
//! (`#[error("starting the provider: {0}")]` with `#[from]`), so printing
//! the whole chain (`{:#}`) would say the cause twice; a cause the line
//! already says is left out.

pub fn chain(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("invalid argument: unknown field `bogus`")]
    struct Inner;

    #[derive(Debug, thiserror::Error)]
    #[error("starting the provider: {0}")]
    struct SaysItsSource(#[from] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("starting the provider")]
    struct LeavesItToTheChain(#[source] Inner);

    #[test]
    fn a_cause_is_said_once() {
        let said = anyhow::Error::from(SaysItsSource(Inner)).context("loading mock.wasm");
        assert_eq!(
            chain(&said),
            "loading mock.wasm: starting the provider: invalid argument: unknown field `bogus`"
        );
        let chained = anyhow::Error::from(LeavesItToTheChain(Inner)).context("loading mock.wasm");
        assert_eq!(
            chain(&chained),
            "loading mock.wasm: starting the provider: invalid argument: unknown field `bogus`"
        );
    }
}
