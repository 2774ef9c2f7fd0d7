//! The etcd client every duty shares: one connection (endpoints, TLS,
//! username and password), each request under the operator's rate limit
//! and a timeout, answers turned into [`KeyValue`]s and [`KvError`]s.
//! Prefix listings are paged at one revision, so a listing of 100,000 keys
//! is one consistent snapshot without one answer larger than gRPC allows.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, Identity,
    PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp,
};

use crate::config::EtcdConfig;
use crate::limiter::RateLimiter;
use crate::{KeyValue, KvError};

/// Keys per page of a prefix listing.
const PAGE: i64 = 2_000;

#[derive(Clone)]
pub struct EtcdClient {
    client: Client,
    limiter: Arc<RateLimiter>,
    timeout: Duration,
    /// Requests sent (each page of a listing is one).
    requests: Arc<AtomicU64>,
}

/// One listing: the keys and the revision they were read at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub keys: Vec<KeyValue>,
    pub revision: i64,
}

fn etcd_error(operation: &'static str, key: &str, error: etcd_client::Error) -> KvError {
    KvError::Etcd {
        operation,
        key: key.to_string(),
        message: error.to_string(),
    }
}

/// A key as the layout reads it: keys are text; one that is not UTF-8 is
/// malformed (nothing in Cilium's layout writes one).
pub fn key_value(kv: &etcd_client::KeyValue) -> Result<KeyValue, KvError> {
    let key = std::str::from_utf8(kv.key()).map_err(|_| KvError::Malformed {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        problem: "the key is not UTF-8".into(),
    })?;
    Ok(KeyValue {
        key: key.to_string(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    })
}

/// The end of the range of keys starting with `prefix` (etcd's prefix end:
/// the last byte below 0xff incremented, the rest dropped).
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff (or empty): to the end of the keyspace.
    vec![0]
}

async fn read_file(path: &std::path::Path) -> Result<Vec<u8>, KvError> {
    tokio::task::spawn_blocking({
        let path = path.to_path_buf();
        move || std::fs::read(&path)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()))
    .map_err(|message| KvError::Etcd {
        operation: "read TLS file",
        key: path.display().to_string(),
        message,
    })
}

impl EtcdClient {
    /// Connect to the endpoints of `config` (validated first).
    pub async fn connect(config: &EtcdConfig) -> Result<Self, KvError> {
        config.validate().map_err(|e| KvError::Etcd {
            operation: "configure",
            key: String::new(),
            message: e.to_string(),
        })?;
        let mut options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_timeout(config.request_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        if let Some(tls) = &config.tls {
            let mut tls_options = TlsOptions::new();
            if let Some(ca) = &tls.ca {
                tls_options =
                    tls_options.ca_certificate(Certificate::from_pem(read_file(ca).await?));
            }
            if let Some((cert, key)) = &tls.client {
                tls_options = tls_options.identity(Identity::from_pem(
                    read_file(cert).await?,
                    read_file(key).await?,
                ));
            }
            options = options.with_tls(tls_options);
        }
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            options = options.with_user(user.clone(), password.clone());
        }
        let endpoints = config.endpoints.join(",");
        let client = tokio::time::timeout(
            config.connect_timeout,
            Client::connect(&config.endpoints, Some(options)),
        )
        .await
        .map_err(|_| KvError::Timeout {
            operation: "connect",
            key: endpoints.clone(),
            seconds: config.connect_timeout.as_secs(),
        })?
        .map_err(|e| etcd_error("connect", &endpoints, e))?;
        Ok(Self {
            client,
            limiter: Arc::new(RateLimiter::new(config.qps, config.burst)),
            timeout: config.request_timeout,
            requests: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The underlying client, for watches and leases (their streams are
    /// not single requests; the callers pace them).
    pub fn raw(&self) -> Client {
        self.client.clone()
    }

    /// Requests sent so far through this client and its clones (watches
    /// and keep-alives, which are streams, not counted).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// One request: waits for a token, then runs under the timeout.
    async fn request<T, F, Fut>(
        &self,
        operation: &'static str,
        key: &str,
        call: F,
    ) -> Result<T, KvError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.limiter.acquire().await;
        self.requests.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, call(self.client.clone())).await {
            Ok(answer) => answer.map_err(|e| etcd_error(operation, key, e)),
            Err(_) => Err(KvError::Timeout {
                operation,
                key: key.to_string(),
                seconds: self.timeout.as_secs(),
            }),
        }
    }

    /// Every key under `prefix` at one revision (the current one), paged.
    pub async fn list(&self, prefix: &str) -> Result<Listing, KvError> {
        let mut keys = Vec::new();
        let revision = self
            .pages(prefix, false, &mut |page| keys.extend(page))
            .await?;
        Ok(Listing { keys, revision })
    }

    /// The names of the keys under `prefix` at one revision, a page at a
    /// time (values left out by etcd).
    pub async fn visit_keys(
        &self,
        prefix: &str,
        visit: &mut (dyn FnMut(&str) + Send),
    ) -> Result<i64, KvError> {
        self.pages(prefix, true, &mut |page| {
            for kv in page {
                visit(&kv.key);
            }
        })
        .await
    }

    /// The keys under `prefix`, a page at a time, all at the revision of
    /// the first page; that revision.
    async fn pages(
        &self,
        prefix: &str,
        keys_only: bool,
        take: &mut (dyn FnMut(Vec<KeyValue>) + Send),
    ) -> Result<i64, KvError> {
        let end = prefix_end(prefix);
        let mut revision = 0;
        let mut from = prefix.as_bytes().to_vec();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(PAGE)
                .with_revision(revision);
            if keys_only {
                options = options.with_keys_only();
            }
            let start = from.clone();
            let answer = self
                .request("list", prefix, |mut c| async move {
                    c.get(start, Some(options)).await
                })
                .await?;
            if revision == 0 {
                revision = answer.header().map_or(0, |h| h.revision());
            }
            let page = answer
                .kvs()
                .iter()
                .map(key_value)
                .collect::<Result<Vec<_>, _>>()?;
            take(page);
            match answer.kvs().last() {
                Some(last) if answer.more() => {
                    from = last.key().to_vec();
                    // The next key after `last`.
                    from.push(0);
                }
                _ => return Ok(revision),
            }
        }
    }

    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        let k = key.to_string();
        let answer = self
            .request("get", key, |mut c| async move { c.get(k, None).await })
            .await?;
        answer.kvs().first().map(key_value).transpose()
    }

    /// Write `value` at `key`, on `lease` (0: none).
    pub async fn put(&self, key: &str, value: Vec<u8>, lease: i64) -> Result<(), KvError> {
        let k = key.to_string();
        let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
        self.request(
            "put",
            key,
            |mut c| async move { c.put(k, value, options).await },
        )
        .await
        .map(drop)
    }

    /// Delete `key`; whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool, KvError> {
        let k = key.to_string();
        let answer = self
            .request("delete", key, |mut c| async move {
                c.delete(k, None::<DeleteOptions>).await
            })
            .await?;
        Ok(answer.deleted() > 0)
    }

    /// Run `then` if every comparison holds, else `otherwise`; whether
    /// they held.
    pub async fn txn(
        &self,
        key: &str,
        when: Vec<Compare>,
        then: Vec<TxnOp>,
        otherwise: Vec<TxnOp>,
    ) -> Result<bool, KvError> {
        let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
        let answer = self
            .request("txn", key, |mut c| async move { c.txn(txn).await })
            .await?;
        Ok(answer.succeeded())
    }

    /// Delete `key` if its last write is `mod_revision`.
    pub async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError> {
        self.txn(
            key,
            vec![Compare::mod_revision(key, CompareOp::Equal, mod_revision)],
            vec![TxnOp::delete(key, None)],
            Vec::new(),
        )
        .await
    }

    /// Create `key` on `lease` if no key is there, and read in the same
    /// transaction (one request, one revision) the smallest create revision
    /// under `owners` and, when `list` is given, the names of the keys
    /// under it, up to a page: an etcd mutex taken (`owners` is the lock
    /// path with its `/`) and, when no one was ahead, read under it.
    pub async fn create_and_read(
        &self,
        key: &str,
        lease: i64,
        owners: &str,
        list: Option<&str>,
    ) -> Result<Created, KvError> {
        // etcd's Mutex reads its owner the same way (`WithFirstCreate`).
        let first = TxnOp::get(
            owners,
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1)
                    .with_keys_only(),
            ),
        );
        let mut reads = vec![first];
        if let Some(prefix) = list {
            reads.push(TxnOp::get(
                prefix,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_limit(PAGE),
                ),
            ));
        }
        let mut then = vec![TxnOp::put(
            key,
            Vec::new(),
            Some(PutOptions::new().with_lease(lease)),
        )];
        then.extend(reads.iter().cloned());
        let mut otherwise = vec![TxnOp::get(key, None)];
        otherwise.extend(reads);
        let txn = Txn::new()
            .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then(then)
            .or_else(otherwise);
        let answer = self
            .request("create", key, |mut c| async move { c.txn(txn).await })
            .await?;
        let malformed = |problem: &str| KvError::Malformed {
            key: key.to_string(),
            problem: problem.into(),
        };
        let mut gets = answer
            .op_responses()
            .into_iter()
            .filter_map(|response| match response {
                etcd_client::TxnOpResponse::Get(get) => Some(get),
                _ => None,
            });
        let create_revision = if answer.succeeded() {
            answer.header().map_or(0, |h| h.revision())
        } else {
            gets.next()
                .and_then(|get| get.kvs().first().map(|kv| kv.create_revision()))
                .ok_or_else(|| malformed("neither created nor found"))?
        };
        let first = gets
            .next()
            .and_then(|get| get.kvs().first().map(|kv| kv.create_revision()))
            .ok_or_else(|| malformed("no key under its lock path after creating it"))?;
        let (listed, more) = match (list, gets.next()) {
            (None, _) => (Vec::new(), false),
            (Some(_), Some(get)) => (
                get.kvs()
                    .iter()
                    .map(|kv| key_value(kv).map(|kv| kv.key))
                    .collect::<Result<Vec<_>, _>>()?,
                get.more(),
            ),
            (Some(_), None) => return Err(malformed("the listing is missing from the answer")),
        };
        Ok(Created {
            create_revision,
            first,
            listed,
            more,
        })
    }
}

/// What [`EtcdClient::create_and_read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The key's create revision (ours, or the existing key's).
    pub create_revision: i64,
    /// The smallest create revision under the owners' prefix: the lock's
    /// holder (ours when equal to `create_revision`).
    pub first: i64,
    /// The names of the keys under the listed prefix (none if not asked).
    pub listed: Vec<String>,
    /// More keys are under the listed prefix than a page.
    pub more: bool,
}
