//! The kvstore layer against a real etcd (Debian's etcd-server, started by
//! each test on 127.0.0.1 with a temporary data dir).

use std::sync::Arc;
use std::time::Duration;

use ipam_duty::Duty;
use ipam_kvstore::client::EtcdClient;
use ipam_kvstore::etcd_store::EtcdStore;
use ipam_kvstore::heartbeat::{Heartbeat, HeartbeatSettings};
use ipam_kvstore::identity_gc::{IdentityGc, IdentityGcSettings};
use ipam_kvstore::layout::{identity_lock_path, value_prefix, HEARTBEAT_KEY, IDENTITY_ID_PREFIX};
use ipam_kvstore::lock_sweeper::{LockSweeper, LockSweeperSettings};
use ipam_kvstore::testing::EtcdServer;
use ipam_kvstore::watch::{PrefixWatcher, WatchEvent};
use ipam_kvstore::SharedStore;
use tokio::sync::mpsc;

async fn next(events: &mut mpsc::Receiver<WatchEvent>) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(20), events.recv())
        .await
        .expect("a watch event within 20 s")
        .expect("the watcher runs")
}

/// Events up to and including the next `Synced`.
async fn until_synced(events: &mut mpsc::Receiver<WatchEvent>) -> Vec<WatchEvent> {
    let mut seen = Vec::new();
    loop {
        let event = next(events).await;
        if event == WatchEvent::Synced {
            return seen;
        }
        seen.push(event);
    }
}

async fn ttl_of(client: &EtcdClient, lease: i64) -> i64 {
    client
        .raw()
        .lease_time_to_live(lease, None)
        .await
        .unwrap()
        .ttl()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_is_written_on_the_session_lease_and_refreshed() {
    let etcd = EtcdServer::start().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let mut heartbeat = Heartbeat::new(store.clone(), HeartbeatSettings::default());
    heartbeat.round().await.unwrap();
    let first = store
        .get(HEARTBEAT_KEY)
        .await
        .unwrap()
        .expect("the heartbeat");
    assert_eq!(first.lease, store.session_lease());
    let ttl = ttl_of(store.client(), first.lease).await;
    assert!(
        (14 * 60..=15 * 60).contains(&ttl),
        "the session lease is 15 min: {ttl} s"
    );
    let text = String::from_utf8(first.value.clone()).unwrap();
    text.parse::<jiff::Timestamp>().expect("RFC 3339");

    tokio::time::sleep(Duration::from_millis(1100)).await;
    heartbeat.round().await.unwrap();
    let second = store.get(HEARTBEAT_KEY).await.unwrap().unwrap();
    assert!(second.mod_revision > first.mod_revision, "refreshed");
    assert_ne!(second.value, first.value, "a later time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_lease_is_replaced_and_its_keys_written_again() {
    let etcd = EtcdServer::start().await;
    let store = EtcdStore::connect(&etcd.config()).await.unwrap();
    store
        .put_leased("cilium/state/services/v1/c/ns/a", b"{}".to_vec())
        .await
        .unwrap();
    let old = store.session_lease();
    // Another client revokes it: etcd deletes its keys, the keep-alive
    // learns the lease is gone.
    store.client().raw().lease_revoke(old).await.unwrap();
    assert!(store
        .get("cilium/state/services/v1/c/ns/a")
        .await
        .unwrap()
        .is_none());
    // The next heartbeat's write is refused for want of the lease: a new
    // one is granted, and every key is written again on it.
    store
        .put_leased(HEARTBEAT_KEY, b"now".to_vec())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let kv = store.get("cilium/state/services/v1/c/ns/a").await.unwrap();
        if let Some(kv) = kv.filter(|kv| kv.lease != old) {
            assert_eq!(kv.lease, store.session_lease());
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the key was not written again on a new lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_queue_in_create_order_on_the_lock_lease() {
    let etcd = EtcdServer::start().await;
    let first = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let second = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let path = "cilium/state/identities/v1/locks/id/300.lock";
    let held = first.lock(path).await.unwrap();
    assert_eq!(held.key, format!("{path}/{:x}", held.lease));
    let lock_ttl = ttl_of(first.client(), held.lease).await;
    assert!(
        (20..=25).contains(&lock_ttl),
        "the lock lease is 25 s: {lock_ttl}"
    );
    let waiter = tokio::spawn({
        let second = second.clone();
        async move { second.lock(path).await.unwrap() }
    });
    // The waiter is queued once its own key is under the lock's prefix.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let keys = loop {
        let keys = first.list_prefix(&format!("{path}/")).await.unwrap();
        if keys.len() == 2 || tokio::time::Instant::now() > deadline {
            break keys;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(keys.len(), 2, "the waiter's key is there: {keys:?}");
    assert!(!waiter.is_finished(), "the second waits behind the holder");

    first
        .put("cilium/state/identities/v1/id/300", b"k8s:a=b;".to_vec())
        .await
        .unwrap();
    let master = first
        .get("cilium/state/identities/v1/id/300")
        .await
        .unwrap()
        .unwrap();
    first.unlock(held.clone()).await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !first
            .delete_if_locked(&master.key, master.mod_revision, &held)
            .await
            .unwrap(),
        "a lock given back guards nothing"
    );
    assert!(second
        .delete_if_locked(&master.key, master.mod_revision, &theirs)
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_comes_with_its_listing_and_goes_with_the_delete_one_request_each() {
    let etcd = EtcdServer::start().await;
    let agent = etcd.client().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let path = identity_lock_path("300");
    let prefix = value_prefix("k8s:a=b;");
    let master = format!("{IDENTITY_ID_PREFIX}300");
    agent.put(&master, b"k8s:a=b;".to_vec(), 0).await.unwrap();
    agent
        .put(&format!("{prefix}10.0.0.1"), b"300".to_vec(), 0)
        .await
        .unwrap();
    let revision = agent.get(&master).await.unwrap().unwrap().mod_revision;
    let locks_left = || async { agent.list(&format!("{path}/")).await.unwrap().keys.len() };

    let sent = store.client().requests();
    let (held, listed) = store.lock_and_list_keys(&path, &prefix).await.unwrap();
    assert_eq!(store.client().requests() - sent, 1, "lock and listing");
    assert_eq!(listed, [format!("{prefix}10.0.0.1")]);
    assert!(
        !store
            .delete_if_locked_then_unlock(&master, revision - 1, held)
            .await
            .unwrap(),
        "written since: not deleted"
    );
    assert_eq!(locks_left().await, 0, "the lock is given back all the same");

    // Held by an agent: the listing is read once the agent is done.
    let (_, agents) = agent_lock(&agent, &path).await;
    let waiter = tokio::spawn({
        let (store, path, prefix) = (store.clone(), path.clone(), prefix.clone());
        async move { store.lock_and_list_keys(&path, &prefix).await.unwrap() }
    });
    // Queued once its own key is under the lock's prefix, beside the agent's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while agent.list(&format!("{path}/")).await.unwrap().keys.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's lock key never appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "waits behind the agent");
    agent
        .put(&format!("{prefix}10.0.0.2"), b"300".to_vec(), 0)
        .await
        .unwrap();
    agent.delete(&agents).await.unwrap();
    let (held, listed) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        listed,
        [format!("{prefix}10.0.0.1"), format!("{prefix}10.0.0.2")],
        "what the agent wrote under its lock"
    );
    let sent = store.client().requests();
    assert!(store
        .delete_if_locked_then_unlock(&master, revision, held)
        .await
        .unwrap());
    assert_eq!(store.client().requests() - sent, 1, "delete and unlock");
    assert!(agent.get(&master).await.unwrap().is_none());
    assert_eq!(locks_left().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_revision_was_compacted_relists_without_losing_a_delete() {
    let etcd = EtcdServer::start().await;
    let client = etcd.client().await;
    for key in ["p/a", "p/b", "p/c"] {
        client.put(key, b"1".to_vec(), 0).await.unwrap();
    }
    let stale = client.list("p/").await.unwrap();
    // While nobody watches: b goes, c changes, d comes, and the history
    // that would tell is compacted away.
    client.delete("p/b").await.unwrap();
    client.put("p/c", b"2".to_vec(), 0).await.unwrap();
    client.put("p/d", b"1".to_vec(), 0).await.unwrap();
    let now = client.list("p/").await.unwrap().revision;
    etcd.compact(now).await;

    let watcher = PrefixWatcher::new(client.clone(), "p/");
    let cache = watcher.cache();
    let (tx, mut events) = mpsc::channel(64);
    tokio::spawn(watcher.resume(stale, tx));
    let seen = until_synced(&mut events).await;
    let keys = |kind: &str| -> Vec<String> {
        seen.iter()
            .filter_map(|e| match (e, kind) {
                (WatchEvent::Upsert(kv), "upsert") => Some(kv.key.clone()),
                (WatchEvent::Delete { key }, "delete") => Some(key.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(keys("delete"), ["p/b"], "{seen:?}");
    assert_eq!(keys("upsert"), ["p/c", "p/d"], "{seen:?}");
    assert_eq!(cache.keys(), ["p/a", "p/c", "p/d"]);

    // And it watches on from there.
    client.delete("p/a").await.unwrap();
    assert_eq!(
        next(&mut events).await,
        WatchEvent::Delete { key: "p/a".into() }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_broken_by_an_etcd_crash_relists_and_goes_on() {
    let mut etcd = EtcdServer::start().await;
    let client = etcd.client().await;
    client.put("p/a", b"1".to_vec(), 0).await.unwrap();
    let watcher = PrefixWatcher::new(client.clone(), "p/");
    let cache = watcher.cache();
    let (tx, mut events) = mpsc::channel(64);
    tokio::spawn(watcher.run(tx));
    assert_eq!(until_synced(&mut events).await.len(), 1);

    etcd.kill();
    etcd.restart().await;
    let writer = etcd.client().await;
    writer.put("p/b", b"1".to_vec(), 0).await.unwrap();
    writer.delete("p/a").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while cache.keys() != ["p/b"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cache after the crash: {:?}",
            cache.keys()
        );
        let _ = tokio::time::timeout(Duration::from_secs(1), events.recv()).await;
    }
}

/// An agent's identity lock, as cilium-agent takes it: its own lock lease,
/// the key `<path>/<lease hex>`; the lease id.
async fn agent_lock(client: &EtcdClient, path: &str) -> (i64, String) {
    let lease = client.raw().lease_grant(25, None).await.unwrap().id();
    let key = format!("{path}/{lease:x}");
    client
        .create_and_read(&key, lease, &format!("{path}/"), None)
        .await
        .unwrap();
    (lease, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_lock_holder_goes_on_the_second_sweep_and_a_live_lock_never() {
    let etcd = EtcdServer::start().await;
    let agent = etcd.client().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let mut sweeper = LockSweeper::new(store.clone(), LockSweeperSettings::default());
    let stale_path = identity_lock_path("300");
    let (_, stale) = agent_lock(&agent, &stale_path).await;
    let (_, waiter) = agent_lock(&agent, &stale_path).await;
    // A live allocator: takes and gives back its lock between sweeps.
    let live_path = identity_lock_path("301");
    let (_, live) = agent_lock(&agent, &live_path).await;

    assert_eq!(
        sweeper.sweep().await.unwrap(),
        0,
        "one sighting is not enough"
    );
    agent.delete(&live).await.unwrap();
    let (_, live) = agent_lock(&agent, &live_path).await;
    assert_eq!(sweeper.sweep().await.unwrap(), 1);
    assert!(
        agent.get(&stale).await.unwrap().is_none(),
        "the stale holder goes"
    );
    assert!(
        agent.get(&waiter).await.unwrap().is_some(),
        "a waiter never goes"
    );
    assert!(
        agent.get(&live).await.unwrap().is_some(),
        "a lock re-taken between sweeps stays"
    );
    // The waiter now holds the lock: it goes only after two sweeps of its
    // own; the live allocator takes its lock anew again.
    agent.delete(&live).await.unwrap();
    let (_, live) = agent_lock(&agent, &live_path).await;
    assert_eq!(sweeper.sweep().await.unwrap(), 0);
    assert!(agent.get(&waiter).await.unwrap().is_some());
    assert!(agent.get(&live).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_gc_on_etcd_deletes_an_orphan_on_its_second_round_only() {
    let etcd = EtcdServer::start().await;
    let agent = etcd.client().await;
    let store = Arc::new(EtcdStore::connect(&etcd.config()).await.unwrap());
    let master = |id: &str| format!("{IDENTITY_ID_PREFIX}{id}");
    let agent_lease = agent.raw().lease_grant(900, None).await.unwrap().id();
    for (id, labels) in [
        ("256", "k8s:app=orphan;"),
        ("257", "k8s:app=used;"),
        ("258", "k8s:app=reused;"),
    ] {
        agent
            .put(&master(id), labels.as_bytes().to_vec(), 0)
            .await
            .unwrap();
    }
    // 257 is used by a node; a labels key with `/` whose prefix is 256's
    // does not count for 256.
    agent
        .put(
            &format!("{}10.0.0.1", value_prefix("k8s:app=used;")),
            b"257".to_vec(),
            agent_lease,
        )
        .await
        .unwrap();
    agent
        .put(
            &format!("{}x=y;/10.0.0.1", value_prefix("k8s:app=orphan;")),
            b"999".to_vec(),
            agent_lease,
        )
        .await
        .unwrap();
    let mut gc = IdentityGc::new(store.clone(), IdentityGcSettings::default());

    let first = gc.collect().await.unwrap();
    assert_eq!(
        (first.kept_used, first.marked, first.deleted),
        (1, 2, 0),
        "{first:?}"
    );
    // 258 is taken again between rounds: its master key rewritten.
    agent
        .put(&master("258"), b"k8s:app=reused;".to_vec(), 0)
        .await
        .unwrap();
    let second = gc.collect().await.unwrap();
    assert_eq!(
        (second.kept_used, second.deleted, second.marked),
        (1, 1, 1),
        "{second:?}"
    );
    assert!(
        agent.get(&master("256")).await.unwrap().is_none(),
        "the orphan goes"
    );
    assert!(
        agent.get(&master("257")).await.unwrap().is_some(),
        "the used one stays"
    );
    assert!(
        agent.get(&master("258")).await.unwrap().is_some(),
        "the re-used one stays"
    );
    assert!(
        agent
            .list("cilium/state/identities/v1/locks/")
            .await
            .unwrap()
            .keys
            .is_empty(),
        "every lock given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_client_certificate_and_nothing_less() {
    let etcd = EtcdServer::start_tls().await;
    assert!(etcd.endpoint().starts_with("https://"));
    let store = EtcdStore::connect(&etcd.config()).await.unwrap();
    store.put("cilium/tls-check", b"ok".to_vec()).await.unwrap();
    assert!(store.get("cilium/tls-check").await.unwrap().is_some());

    let mut no_certificate = etcd.config();
    let tls = no_certificate
        .tls
        .as_mut()
        .expect("a TLS etcd's config has TLS");
    assert!(tls.client.is_some(), "the config has a client certificate");
    tls.client = None;
    assert!(
        EtcdStore::connect(&no_certificate).await.is_err(),
        "etcd asks for a client certificate"
    );
    let mut no_ca = etcd.config();
    let tls = no_ca.tls.as_mut().expect("a TLS etcd's config has TLS");
    assert!(tls.ca.is_some(), "the config has the test's CA");
    tls.ca = None;
    assert!(
        EtcdStore::connect(&no_ca).await.is_err(),
        "a server certificate of an unknown CA is refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn username_and_password() {
    let etcd = EtcdServer::start().await;
    etcd.enable_auth("root", "s3cret").await;

    let mut config = etcd.config();
    config.username = Some("root".into());
    config.password = Some("s3cret".into());
    let store = EtcdStore::connect(&config).await.unwrap();
    store
        .put("cilium/auth-check", b"ok".to_vec())
        .await
        .unwrap();

    config.password = Some("wrong".into());
    let refused = EtcdStore::connect(&config).await;
    assert!(refused.is_err(), "a wrong password is refused");
    // etcd grants leases to anyone, so a connection without credentials
    // opens (its session lease); keys need the user.
    let anonymous = EtcdStore::connect(&etcd.config())
        .await
        .expect("a connection without credentials opens");
    let error = anonymous
        .put("cilium/auth-check", b"no".to_vec())
        .await
        .expect_err("no credentials, no write");
    assert!(
        error.to_string().contains("put cilium/auth-check"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_longer_than_a_page_comes_whole_and_in_order() {
    let etcd = EtcdServer::start().await;
    let client = etcd.client().await;
    let prefix = "cilium/state/paged/v1/";
    // More than two pages of 2,000, written eight at a time.
    let count = 4_100;
    let keys: Vec<String> = (0..count).map(|n| format!("{prefix}{n:05}")).collect();
    for chunk in keys.chunks(8) {
        let writes = chunk.iter().map(|key| client.put(key, b"v".to_vec(), 0));
        for written in futures::future::join_all(writes).await {
            written.unwrap();
        }
    }
    let listing = client.list(prefix).await.unwrap();
    let listed: Vec<&str> = listing.keys.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(listed.len(), count, "every key, once");
    assert!(
        listed.iter().zip(&keys).all(|(a, b)| a == b),
        "in key order"
    );
}

/// A store whose leases are short, so their keep-alives (every third of the
/// TTL) come often enough to be watched within a test.
async fn short_lease_store(etcd: &EtcdServer) -> EtcdStore {
    let config = ipam_kvstore::config::EtcdConfig {
        lease_ttl: Duration::from_secs(3),
        lock_ttl: Duration::from_secs(3),
        ..etcd.config()
    };
    EtcdStore::connect(&config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_stream_broken_by_an_etcd_crash_is_reopened_and_the_lease_lives_on() {
    let mut etcd = EtcdServer::start().await;
    let store = short_lease_store(&etcd).await;
    let key = "cilium/state/services/v1/c/ns/a";
    store.put_leased(key, b"{}".to_vec()).await.unwrap();
    let lease = store.session_lease();

    // The keep-alive stream dies with etcd. A restarted etcd gives every
    // lease a full TTL again (3 s): the lease outlives three TTLs after it
    // only if keep-alives reach etcd again over a reopened stream.
    etcd.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    etcd.restart().await;
    let watcher = etcd.client().await;
    let until = tokio::time::Instant::now() + Duration::from_secs(9);
    while tokio::time::Instant::now() < until {
        assert!(
            ttl_of(&watcher, lease).await > 0,
            "the session lease expired after the restart: its keep-alives stopped"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        store.session_lease(),
        lease,
        "the same lease, never replaced"
    );
    let kv = store
        .get(key)
        .await
        .unwrap()
        .expect("the key outlives the crash");
    assert_eq!(kv.lease, lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_gone_without_a_write_brings_back_the_heartbeat_and_every_service_and_the_locks() {
    let etcd = EtcdServer::start().await;
    let store = short_lease_store(&etcd).await;
    let keys = [
        HEARTBEAT_KEY,
        "cilium/state/services/v1/c/ns/a",
        "cilium/state/services/v1/c/ns/b",
        "cilium/state/services/v1/c/other/c",
    ];
    for key in keys {
        store
            .put_leased(key, key.as_bytes().to_vec())
            .await
            .unwrap();
    }
    let old = store.session_lease();
    let old_locks = store
        .lock("cilium/state/identities/v1/locks/x")
        .await
        .unwrap();
    store.unlock(old_locks.clone()).await.unwrap();

    // Both leases vanish behind the store's back (as when they expire while
    // etcd is out of reach), and nothing is written afterwards: the
    // keep-alives alone must notice.
    let other = etcd.client().await;
    other.raw().lease_revoke(old).await.unwrap();
    other.raw().lease_revoke(old_locks.lease).await.unwrap();
    for key in keys {
        assert!(
            store.get(key).await.unwrap().is_none(),
            "{key} went with its lease"
        );
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut back = Vec::new();
        for key in keys {
            if let Some(kv) = store.get(key).await.unwrap() {
                back.push((key, kv.lease, kv.value));
            }
        }
        let new = store.session_lease();
        if new != old
            && back.len() == keys.len()
            && back
                .iter()
                .all(|(key, lease, value)| *lease == new && value == key.as_bytes())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every key came back on a new lease: {back:?} (lease {new:x}, old {old:x})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let lock = store
        .lock("cilium/state/identities/v1/locks/x")
        .await
        .unwrap();
    assert_ne!(
        lock.lease, old_locks.lease,
        "locks are taken on a new lock lease"
    );
    assert!(ttl_of(&other, lock.lease).await > 0);
    store.unlock(lock).await.unwrap();
}
