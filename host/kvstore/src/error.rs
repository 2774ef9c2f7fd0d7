//! What can go wrong talking to the kvstore.

/// A kvstore operation that failed, naming the key or prefix it was for.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// etcd answered with an error, or could not be reached.
    #[error("etcd: {operation} {key}: {message}")]
    Etcd {
        operation: &'static str,
        key: String,
        message: String,
    },
    /// The operation did not finish within its timeout.
    #[error("etcd: {operation} {key}: no answer within {seconds} s")]
    Timeout {
        operation: &'static str,
        key: String,
        seconds: u64,
    },
    /// A key or value etcd holds is not what the layout says it is.
    #[error("kvstore key {key}: {problem}")]
    Malformed { key: String, problem: String },
    /// The session lease is gone (expired, revoked) and was not renewed.
    #[error("the kvstore session lease {lease:x} is gone")]
    LeaseLost { lease: i64 },
}
