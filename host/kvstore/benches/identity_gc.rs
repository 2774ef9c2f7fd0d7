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
//! key is orphaned; a used one has one value key. Pacing is off (the
//! default 2,500 deletions a minute would stretch the deleting round to
//! minutes of waiting, which measures the limit, not the GC).
//!
//! The store is chosen by [`store`]: the in-memory one. Once the etcd
//! `SharedStore` is on this branch, `store` is where it plugs in when
//! `IPAM_ETCD_ENDPOINTS` is set (a scratch etcd: the bench writes under
//! `cilium/state/identities/v1/` and expects it empty); until then that
//! variable is only reported as ignored.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ipam_kvstore::identity_gc::{IdentityGc, IdentityGcReport, IdentityGcSettings};
use ipam_kvstore::layout::{IDENTITY_ID_PREFIX, IDENTITY_VALUE_PREFIX};
use ipam_kvstore::memory::MemoryStore;
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
}

const CALLS: [(Call, &str); 7] = [
    (Call::Put, "put"),
    (Call::Delete, "delete"),
    (Call::List, "list"),
    (Call::Get, "get"),
    (Call::Lock, "lock"),
    (Call::Unlock, "unlock"),
    (Call::DeleteIfLocked, "delete-if-locked"),
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
}

/// The store to measure: see the crate docs above for etcd.
fn store() -> Arc<dyn SharedStore> {
    if let Ok(endpoints) = std::env::var("IPAM_ETCD_ENDPOINTS") {
        println!("IPAM_ETCD_ENDPOINTS={endpoints} ignored: no etcd SharedStore on this branch yet");
    }
    println!("store: MemoryStore");
    Arc::new(MemoryStore::new())
}

/// Write `count` master keys from id 256 on, every other one used by a
/// node.
async fn fill(store: &dyn SharedStore, count: u64) -> Result<(), KvError> {
    for n in 0..count {
        let id = 256 + n;
        let labels = format!("k8s:app=bench-{id};k8s:io.kubernetes.pod.namespace=default;");
        store
            .put(
                &format!("{IDENTITY_ID_PREFIX}{id}"),
                labels.clone().into_bytes(),
            )
            .await?;
        if n % 2 == 1 {
            let node = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
            store
                .put_leased(
                    &format!("{IDENTITY_VALUE_PREFIX}{labels}/{node}"),
                    id.to_string().into_bytes(),
                )
                .await?;
        }
    }
    Ok(())
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
        let store = Arc::new(Counting::new(store()));
        let started = Instant::now();
        fill(&*store, count).await?;
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
            let started = Instant::now();
            let report = gc.collect().await?;
            print_round(name, started.elapsed(), &report, store.take());
        }
        Ok(())
    })
}
