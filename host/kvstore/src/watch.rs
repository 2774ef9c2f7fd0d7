//! List-then-watch of a prefix that never misses an event: list at revision
//! R, watch from R+1. A watch etcd cancels (its start revision was
//! compacted away, or it fell behind) or a broken stream leads to a fresh
//! list, compared with the local cache: keys that vanished meanwhile are
//! announced as deletes (synthesized; the watch never saw them), changed
//! ones as upserts. The cache is the prefix as of the last event handed on.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use tokio::sync::mpsc;

use crate::client::{key_value, EtcdClient, Listing};
use crate::KeyValue;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    Upsert(KeyValue),
    Delete {
        key: String,
    },
    /// The cache holds the whole prefix as of a list (sent after each full
    /// list's differences).
    Synced,
}

/// The local copy of one watched prefix.
#[derive(Clone, Default)]
pub struct PrefixCache {
    keys: Arc<RwLock<BTreeMap<String, KeyValue>>>,
}

impl PrefixCache {
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.read().get(key).cloned()
    }

    pub fn keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, KeyValue>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, KeyValue>> {
        self.keys.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// The events that turn the cache `before` into `listing` (pure): upserts
/// of new and rewritten keys, deletes of vanished ones, then `Synced`.
pub fn differences(before: &BTreeMap<String, KeyValue>, listing: &[KeyValue]) -> Vec<WatchEvent> {
    let mut events = Vec::new();
    let listed: BTreeMap<&str, &KeyValue> =
        listing.iter().map(|kv| (kv.key.as_str(), kv)).collect();
    for kv in listing {
        if before
            .get(&kv.key)
            .is_none_or(|old| old.mod_revision != kv.mod_revision)
        {
            events.push(WatchEvent::Upsert(kv.clone()));
        }
    }
    for key in before.keys() {
        if !listed.contains_key(key.as_str()) {
            events.push(WatchEvent::Delete { key: key.clone() });
        }
    }
    events.push(WatchEvent::Synced);
    events
}

/// Watches one prefix into a [`PrefixCache`], handing every event on.
pub struct PrefixWatcher {
    client: EtcdClient,
    prefix: String,
    cache: PrefixCache,
}

/// Why a watch ended and a relist is due.
#[derive(Debug)]
enum Relist {
    Compacted(i64),
    Canceled(String),
    Broken(String),
}

impl std::fmt::Display for Relist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Relist::Compacted(revision) => write!(f, "compacted up to revision {revision}"),
            Relist::Canceled(reason) => write!(f, "canceled by etcd: {reason}"),
            Relist::Broken(reason) => write!(f, "broken: {reason}"),
        }
    }
}

impl PrefixWatcher {
    pub fn new(client: EtcdClient, prefix: impl Into<String>) -> Self {
        Self {
            client,
            prefix: prefix.into(),
            cache: PrefixCache::default(),
        }
    }

    pub fn cache(&self) -> PrefixCache {
        self.cache.clone()
    }

    fn apply(&self, event: &WatchEvent) {
        match event {
            WatchEvent::Upsert(kv) => {
                self.cache.write().insert(kv.key.clone(), kv.clone());
            }
            WatchEvent::Delete { key } => {
                self.cache.write().remove(key);
            }
            WatchEvent::Synced => {}
        }
    }

    /// Hand on `events`, applied to the cache first; false once nobody
    /// listens.
    async fn emit(&self, events: Vec<WatchEvent>, out: &mpsc::Sender<WatchEvent>) -> bool {
        for event in events {
            self.apply(&event);
            if out.send(event).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Run until `out` is closed: list, watch, and list again whenever the
    /// watch ends. Failed lists are retried with a growing pause (to 30 s).
    pub async fn run(self, out: mpsc::Sender<WatchEvent>) {
        self.run_from(None, out).await;
    }

    /// As [`PrefixWatcher::run`], for a caller that already holds `listing`
    /// (read earlier, or saved): the cache starts as it, and the first
    /// watch starts just after it; if that revision was compacted away
    /// meanwhile, the relist announces what changed since, deletes
    /// included.
    pub async fn resume(self, listing: Listing, out: mpsc::Sender<WatchEvent>) {
        *self.cache.write() = listing
            .keys
            .iter()
            .map(|kv| (kv.key.clone(), kv.clone()))
            .collect();
        self.run_from(Some(listing), out).await;
    }

    async fn run_from(self, mut listed: Option<Listing>, out: mpsc::Sender<WatchEvent>) {
        let mut pause = Duration::from_millis(200);
        loop {
            let listing = match listed.take() {
                Some(listing) => listing,
                None => match self.client.list(&self.prefix).await {
                    Ok(listing) => {
                        pause = Duration::from_millis(200);
                        let events = differences(&self.cache.read(), &listing.keys);
                        if !self.emit(events, &out).await {
                            return;
                        }
                        listing
                    }
                    Err(error) => {
                        tracing::warn!(prefix = %self.prefix, %error, "kvstore list failed; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(30));
                        continue;
                    }
                },
            };
            match self.watch_from(&listing, &out).await {
                Ok(reason) => {
                    tracing::info!(prefix = %self.prefix, %reason, "kvstore watch ended; listing again")
                }
                Err(()) => return,
            }
        }
    }

    /// Watch from just after `listing`; why it ended, or Err once nobody
    /// listens.
    async fn watch_from(
        &self,
        listing: &Listing,
        out: &mpsc::Sender<WatchEvent>,
    ) -> Result<Relist, ()> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(listing.revision + 1);
        let mut raw = self.client.raw();
        let mut stream = match raw.watch(self.prefix.clone(), Some(options)).await {
            Ok(stream) => stream,
            Err(e) => return Ok(Relist::Broken(e.to_string())),
        };
        loop {
            let answer = match stream.message().await {
                Ok(Some(answer)) => answer,
                Ok(None) => return Ok(Relist::Broken("the watch stream ended".into())),
                Err(e) => return Ok(Relist::Broken(e.to_string())),
            };
            if answer.compact_revision() != 0 {
                return Ok(Relist::Compacted(answer.compact_revision()));
            }
            if answer.canceled() {
                return Ok(Relist::Canceled(answer.cancel_reason().to_string()));
            }
            let mut events = Vec::with_capacity(answer.events().len());
            for event in answer.events() {
                let Some(kv) = event.kv() else { continue };
                match event.event_type() {
                    EventType::Put => match key_value(kv) {
                        Ok(kv) => events.push(WatchEvent::Upsert(kv)),
                        Err(error) => {
                            tracing::warn!(prefix = %self.prefix, %error, "kvstore watch: key skipped")
                        }
                    },
                    EventType::Delete => events.push(WatchEvent::Delete {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                    }),
                }
            }
            if !self.emit(events, out).await {
                return Err(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Vec::new(),
            create_revision: 1,
            mod_revision: revision,
            lease: 0,
        }
    }

    #[test]
    fn a_relist_announces_what_changed_and_what_vanished() {
        let before: BTreeMap<String, KeyValue> = [kv("p/a", 2), kv("p/b", 3), kv("p/c", 4)]
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        let events = differences(&before, &[kv("p/a", 2), kv("p/c", 9), kv("p/d", 10)]);
        assert_eq!(
            events,
            [
                WatchEvent::Upsert(kv("p/c", 9)),
                WatchEvent::Upsert(kv("p/d", 10)),
                WatchEvent::Delete { key: "p/b".into() },
                WatchEvent::Synced,
            ]
        );
        assert_eq!(differences(&BTreeMap::new(), &[]), [WatchEvent::Synced]);
    }
}
