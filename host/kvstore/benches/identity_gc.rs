//! The identity GC's cost at scale, printed (not asserted): rounds over
//! 100,000 master keys, half of them orphaned, with each round's wall time
//! and the store calls it made per key (counted by a wrapper store).
//!
//! Run: `cargo bench -p ipam-kvstore --bench identity_gc`
//! (`IDGC_BENCH_MASTER_KEYS=20000` for another size; `cargo test
//! --all-targets` runs it over 2,000 keys).
//!
//! One cluster's range holds at most 65,280 identities (cluster 0:
//! 256..=65535), so 100,000 keys fill cluster 0's range and put the rest in
//! cluster 1's, which the GC (cluster 0) lists and skips: the figures
//! cover both the judged keys and the listing of foreign ones. Every other
//! key is orphaned; a used one has one value key, on its node's lease (250
//! nodes). Pacing is off (the default 2,500 deletions a minute would
//! stretch the deleting round to minutes of waiting, which measures the
//! limit, not the GC). After the deleting round the master keys left are
//! checked: exactly the orphans in cluster 0's range are gone, and no lock
//! is left; a wrong deletion fails the run.
//!
//! The store: in memory by default; `IDGC_BENCH_STORE=etcd` starts a real
//! etcd (Debian's, on 127.0.0.1 with a temporary data dir, as the tests do)
//! and measures the etcd store over it, printing the etcd requests sent
//! (per master key, per key in range and per deletion) besides the store
//! calls. The fill is set-up, not measured: see [`fill_etcd`] for why it
//! writes in transactions.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{PutOptions, TxnOp};
use futures::StreamExt;
use ipam_kvstore::client::EtcdClient;
use ipam_kvstore::etcd_store::EtcdStore;
use ipam_kvstore::identity_gc::{IdentityGc, IdentityGcReport, IdentityGcSettings};
use ipam_kvstore::layout::{IDENTITY_ID_PREFIX, IDENTITY_LOCKS_PREFIX, IDENTITY_VALUE_PREFIX};
use ipam_kvstore::memory::MemoryStore;
use ipam_kvstore::testing::EtcdServer;
use ipam_kvstore::{HeldLock, KeyValue, KvError, SharedStore};

/// The store operations, counted apart.
#[derive(Clone, Copy)]
enum Call {
    Put,
    Delete,
    List,
    Get,
    Lock,
    Unlock,
    DeleteIfLocked,
    VisitKeys,
    LockAndList,
    DeleteThenUnlock,
}

const CALLS: [(Call, &str); 10] = [
    (Call::Put, "put"),
    (Call::Delete, "delete"),
    (Call::List, "list"),
    (Call::Get, "get"),
    (Call::Lock, "lock"),
    (Call::Unlock, "unlock"),
    (Call::DeleteIfLocked, "delete-if-locked"),
    (Call::VisitKeys, "visit-keys"),
    (Call::LockAndList, "lock-and-list"),
    (Call::DeleteThenUnlock, "delete-then-unlock"),
];

/// A store that counts the calls made through it.
struct Counting {
    inner: Arc<dyn SharedStore>,
    calls: [AtomicU64; CALLS.len()],
}

impl Counting {
    fn new(inner: Arc<dyn SharedStore>) -> Self {
        Self {
            inner,
            calls: Default::default(),
        }
    }

    fn count(&self, call: Call) {
        self.calls[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts since the last call, by operation.
    fn take(&self) -> [u64; CALLS.len()] {
        std::array::from_fn(|i| self.calls[i].swap(0, Ordering::Relaxed))
    }
}

#[async_trait]
impl SharedStore for Counting {
    async fn put_leased(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.count(Call::Put);
        self.inner.put_leased(key, value).await
    }
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<(), KvError> {
        self.count(Call::Put);
        self.inner.put(key, value).await
    }
    async fn delete(&self, key: &str) -> Result<bool, KvError> {
        self.count(Call::Delete);
        self.inner.delete(key).await
    }
    async fn delete_if_unchanged(&self, key: &str, mod_revision: i64) -> Result<bool, KvError> {
        self.count(Call::Delete);
        self.inner.delete_if_unchanged(key, mod_revision).await
    }
    async fn list_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, KvError> {
        self.count(Call::List);
        self.inner.list_prefix(prefix).await
    }
    async fn visit_keys(
        &self,
        prefix: &str,
        visit: &mut (dyn for<'k> FnMut(&'k str) + Send),
    ) -> Result<(), KvError> {
        self.count(Call::VisitKeys);
        self.inner.visit_keys(prefix, visit).await
    }
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, KvError> {
        self.count(Call::Get);
        self.inner.get(key).await
    }
    async fn lock(&self, path: &str) -> Result<HeldLock, KvError> {
        self.count(Call::Lock);
        self.inner.lock(path).await
    }
    async fn unlock(&self, lock: HeldLock) -> Result<(), KvError> {
        self.count(Call::Unlock);
        self.inner.unlock(lock).await
    }
    async fn delete_if_locked(
        &self,
        key: &str,
        mod_revision: i64,
        lock: &HeldLock,
    ) -> Result<bool, KvError> {
        self.count(Call::DeleteIfLocked);
        self.inner.delete_if_locked(key, mod_revision, lock).await
    }
    async fn lock_and_list_keys(
        &self,
        path: &str,
        prefix: &str,
    ) -> Result<(HeldLock, Vec<String>), KvError> {
        self.count(Call::LockAndList);
        self.inner.lock_and_list_keys(path, prefix).await
    }
    async fn delete_if_locked_then_unlock(
        &self,
        key: &str,
        mod_revision: i64,
        lock: HeldLock,
    ) -> Result<bool, KvError> {
        self.count(Call::DeleteThenUnlock);
        self.inner
            .delete_if_locked_then_unlock(key, mod_revision, lock)
            .await
    }
}

/// The store to measure, the etcd behind it (kept alive while measuring)
/// and its client (for the request count).
async fn store() -> Result<(Arc<dyn SharedStore>, Option<(EtcdServer, EtcdClient)>), KvError> {
    if std::env::var("IDGC_BENCH_STORE").as_deref() != Ok("etcd") {
        println!("store: MemoryStore (IDGC_BENCH_STORE=etcd for a real etcd)");
        return Ok((Arc::new(MemoryStore::new()), None));
    }
    let server = EtcdServer::start().await;
    let store = EtcdStore::connect(&server.config()).await?;
    let client = store.client().clone();
    println!("store: EtcdStore over etcd at {}", server.endpoint());
    Ok((Arc::new(store), Some((server, client))))
}

/// How the fill spreads the users: `NODES` agents, each with its lease.
const NODES: u64 = 250;

/// Master key `n` (id 256 + `n`), its labels and, every other one, the
/// value key of its user and that node's index.
fn identity(n: u64) -> (String, String, Option<(String, usize)>) {
    let id = 256 + n;
    let labels = format!("k8s:app=bench-{id};k8s:io.kubernetes.pod.namespace=default;");
    let user = (n % 2 == 1).then(|| {
        let node = (n / 2) % NODES;
        (
            format!("{IDENTITY_VALUE_PREFIX}{labels}/10.0.{node}.1"),
            // Below NODES: fits.
            node as usize,
        )
    });
    (format!("{IDENTITY_ID_PREFIX}{id}"), labels, user)
}

/// The ids whose master keys the GC deletes: cluster 0's (up to 65535)
/// with no user.
fn orphaned_in_range(n: u64) -> bool {
    n % 2 == 0 && 256 + n <= 65_535
}

/// Fill the in-memory store through the trait.
async fn fill(store: &dyn SharedStore, count: u64) -> Result<(), KvError> {
    for n in 0..count {
        let (master, labels, user) = identity(n);
        store.put(&master, labels.into_bytes()).await?;
        if let Some((value_key, _)) = user {
            store
                .put_leased(&value_key, (256 + n).to_string().into_bytes())
                .await?;
        }
    }
    Ok(())
}

/// Most operations in one etcd transaction (etcd's `--max-txn-ops`
/// default).
const TXN_OPS: usize = 128;

/// Fill etcd as its agents would have: the value keys on `NODES` agents'
/// leases, not the operator's. Written 128 puts to a transaction, 8
/// transactions in flight: one put per key on a lease is quadratic in etcd
/// 3.4.23, whose auth check of a put on a lease (`checkLeasePuts`) copies
/// every key of that lease even with auth off (etcd issue 15993, fixed in
/// later 3.4 and 3.5 releases); puts inside a transaction skip that check.
async fn fill_etcd(client: &EtcdClient, count: u64) -> Result<(), Box<dyn std::error::Error>> {
    // A day: the run ends long before, and its etcd goes with it.
    let grants = futures::stream::iter(0..NODES)
        .map(|_| async { client.raw().lease_grant(24 * 3600, None).await })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let leases = grants
        .into_iter()
        .map(|granted| granted.map(|lease| lease.id()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut puts = Vec::new();
    for n in 0..count {
        let (master, labels, user) = identity(n);
        puts.push(TxnOp::put(master, labels, None));
        if let Some((value_key, node)) = user {
            let lease = PutOptions::new().with_lease(leases[node]);
            puts.push(TxnOp::put(value_key, (256 + n).to_string(), Some(lease)));
        }
    }
    let mut writes = futures::stream::iter(puts.chunks(TXN_OPS))
        .map(|batch| client.txn("fill", Vec::new(), batch.to_vec(), Vec::new()))
        .buffer_unordered(8);
    while let Some(written) = writes.next().await {
        written?;
    }
    Ok(())
}

/// After the deleting round: exactly the orphans in range are gone, and no
/// lock is left behind.
async fn check_deletions(store: &dyn SharedStore, count: u64) -> Result<String, String> {
    let left: std::collections::HashSet<String> = store
        .list_prefix(IDENTITY_ID_PREFIX)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    let (mut gone, mut kept) = (0, 0);
    for n in 0..count {
        let (master, _, _) = identity(n);
        match (orphaned_in_range(n), left.contains(&master)) {
            (true, false) => gone += 1,
            (false, true) => kept += 1,
            (true, true) => return Err(format!("{master} is orphaned but still there")),
            (false, false) => {
                return Err(format!(
                    "{master} was deleted, but it is used or not cluster 0's"
                ))
            }
        }
    }
    if left.len() != kept {
        return Err(format!("{} master keys left, {kept} expected", left.len()));
    }
    let locks = store
        .list_prefix(IDENTITY_LOCKS_PREFIX)
        .await
        .map_err(|e| e.to_string())?;
    if !locks.is_empty() {
        return Err(format!("{} lock keys left behind", locks.len()));
    }
    Ok(format!(
        "checked: the {gone} orphans in range are gone, the other {kept} master keys stay, no lock is left"
    ))
}

fn print_round(name: &str, took: Duration, report: &IdentityGcReport, calls: [u64; CALLS.len()]) {
    let total: u64 = calls.iter().sum();
    let per = |n: u64, of: u64| n as f64 / of.max(1) as f64;
    println!(
        "{name}: {:>8.1} ms  scanned {} in-range {} out-of-range {} kept-used {} marked {} deleted {} raced {}",
        took.as_secs_f64() * 1e3,
        report.scanned,
        report.in_range,
        report.out_of_range,
        report.kept_used,
        report.marked,
        report.deleted,
        report.raced,
    );
    let by_call: Vec<String> = CALLS
        .iter()
        .zip(calls)
        .filter(|(_, n)| *n > 0)
        .map(|((_, name), n)| format!("{name} {n}"))
        .collect();
    println!(
        "    store calls {total} ({}); {:.2} per master key, {:.2} per key in range; {:.1} µs per key in range",
        by_call.join(", "),
        per(total, report.scanned),
        per(total, report.in_range),
        took.as_secs_f64() * 1e6 / report.in_range.max(1) as f64,
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo test --all-targets` runs this too, without `--bench`: a small
    // run then checks it works without taking the test suite's time.
    let measuring = std::env::args().any(|a| a == "--bench");
    let count: u64 = match std::env::var("IDGC_BENCH_MASTER_KEYS") {
        Ok(text) => text.parse()?,
        Err(_) if measuring => 100_000,
        Err(_) => 2_000,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (inner, etcd) = store().await?;
        let requests = || etcd.as_ref().map(|(_, client)| client.requests());
        let store = Arc::new(Counting::new(inner));
        let started = Instant::now();
        match &etcd {
            Some((_, client)) => fill_etcd(client, count).await?,
            None => fill(&*store, count).await?,
        }
        store.take();
        println!(
            "filled {count} master keys ({} orphaned) in {:.1} ms",
            count / 2 + count % 2,
            started.elapsed().as_secs_f64() * 1e3
        );
        let mut gc = IdentityGc::new(
            store.clone(),
            IdentityGcSettings {
                deletions_per_minute: NonZeroU32::MAX,
                ..IdentityGcSettings::default()
            },
        );
        for name in ["round 1 (marks)", "round 2 (deletes)", "round 3 (steady)"] {
            let before = requests();
            let started = Instant::now();
            let report = gc.collect().await?;
            print_round(name, started.elapsed(), &report, store.take());
            if let (Some(before), Some(after)) = (before, requests()) {
                let sent = after - before;
                let per_deletion = if report.deleted > 0 {
                    format!(", {:.2} per deletion", sent as f64 / report.deleted as f64)
                } else {
                    String::new()
                };
                println!(
                    "    etcd requests {sent}: {:.3} per master key, {:.3} per key in range{per_deletion}",
                    sent as f64 / report.scanned.max(1) as f64,
                    sent as f64 / report.in_range.max(1) as f64,
                );
            }
            if report.deleted > 0 {
                println!("    {}", check_deletions(&*store, count).await?);
                // The check's listings are not the round's.
                store.take();
            }
        }
        Ok(())
    })
}
