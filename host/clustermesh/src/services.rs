//! The services store: every global, shared Service of this cluster as a
//! [`ClusterService`](crate::service::ClusterService) at
//! `cilium/state/services/v1/<cluster>/<namespace>/<name>`, on the
//! operator's session lease, for clustermesh peers to merge into their own
//! Services.
//!
//! Two halves:
//! - [`ServicesView`] keeps the cluster's Services and EndpointSlices as
//!   watch events bring them, whether or not this replica leads (so a new
//!   leader starts from a synced cache), and tells subscribers which
//!   Service changed. [`ServicesView::follow`] feeds it from the API
//!   server; tests feed [`ServicesView::service_event`] and
//!   [`ServicesView::slice_event`] directly.
//! - [`ServicesStore`] is the `services-store` duty: each round is one full
//!   sync (list this cluster's prefix, write what differs, delete what no
//!   exported Service accounts for, then the synced marker), followed by
//!   the view's changes applied one Service at a time as they come, until
//!   the resync interval ends and the next round starts with a full sync.
//!   A failed kvstore operation makes the round full-sync again after the
//!   retry interval instead of waiting for the next round.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::sync::{broadcast, watch};

use ipam_duty::{Duty, RoundReport};
use ipam_kvstore::{KeyValue, KvError, SharedStore};

use crate::cluster::{keys, ClusterInfo};
use crate::convert::{cluster_service, SERVICE_NAME_LABEL};
use crate::round::{round, Heard, Incremental};

/// A Service's (or an EndpointSlice's) namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub namespace: String,
    pub name: String,
}

impl ObjectId {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn of(meta: &ObjectMeta) -> Option<Self> {
        Some(Self::new(meta.namespace.as_deref()?, meta.name.as_deref()?))
    }
}

/// What changed in a [`ServicesView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceChange {
    /// This Service or one of its EndpointSlices.
    One(ObjectId),
    /// Anything: a watch was relisted.
    All,
}

#[derive(Default)]
struct Objects {
    services: BTreeMap<ObjectId, Service>,
    /// Service -> its slices by slice name (so a Service's slices come in
    /// name order, which the conversion relies on).
    slices: BTreeMap<ObjectId, BTreeMap<String, EndpointSlice>>,
    /// Slice -> the Service it belongs to, to find it again on a delete or
    /// a label change.
    owners: BTreeMap<ObjectId, ObjectId>,
    /// A relist in progress.
    relisted_services: Option<BTreeMap<ObjectId, Service>>,
    relisted_slices: Option<Vec<EndpointSlice>>,
    services_listed: bool,
    slices_listed: bool,
}

impl Objects {
    fn remove_slice(&mut self, slice: &ObjectId) -> Option<ObjectId> {
        let owner = self.owners.remove(slice)?;
        if let Some(slices) = self.slices.get_mut(&owner) {
            slices.remove(&slice.name);
            if slices.is_empty() {
                self.slices.remove(&owner);
            }
        }
        Some(owner)
    }

    /// Insert or replace a slice; the Services whose slices changed.
    fn put_slice(&mut self, slice: EndpointSlice) -> Vec<ObjectId> {
        let Some(id) = ObjectId::of(&slice.metadata) else {
            return Vec::new();
        };
        let mut touched: Vec<ObjectId> = self.remove_slice(&id).into_iter().collect();
        let owner = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .map(|service| ObjectId::new(&id.namespace, service));
        if let Some(owner) = owner {
            self.owners.insert(id.clone(), owner.clone());
            self.slices
                .entry(owner.clone())
                .or_default()
                .insert(id.name, slice);
            touched.push(owner);
        }
        touched.dedup();
        touched
    }
}

/// Drop what the conversion never reads and a cache should not hold twice
/// (managed fields are often the bulk of an object).
fn trimmed(mut meta: ObjectMeta) -> ObjectMeta {
    meta.managed_fields = None;
    meta
}

/// The cluster's Services and EndpointSlices, as watches report them.
pub struct ServicesView {
    objects: Mutex<Objects>,
    changes: broadcast::Sender<ServiceChange>,
    synced: watch::Sender<bool>,
}

impl Default for ServicesView {
    fn default() -> Self {
        Self::new()
    }
}

impl ServicesView {
    pub fn new() -> Self {
        // A subscriber that falls this far behind full-syncs instead.
        let (changes, _) = broadcast::channel(4096);
        Self {
            objects: Mutex::new(Objects::default()),
            changes,
            synced: watch::Sender::new(false),
        }
    }

    fn objects(&self) -> MutexGuard<'_, Objects> {
        // A panic while holding the lock leaves the maps whole (every
        // update is one insert or remove), so keep going.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, change: ServiceChange) {
        // No subscriber (no duty running) is fine: a duty starts with a
        // full sync.
        let _ = self.changes.send(change);
    }

    /// True once both Services and EndpointSlices have been listed.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ServiceChange> {
        self.changes.subscribe()
    }

    fn mark_listed(&self, objects: &Objects) {
        if objects.services_listed && objects.slices_listed {
            self.synced.send_replace(true);
        }
    }

    /// A Service watch event.
    pub fn service_event(&self, event: Event<Service>) {
        let mut objects = self.objects();
        match event {
            Event::Apply(mut service) => {
                let Some(id) = ObjectId::of(&service.metadata) else {
                    tracing::warn!("skipping a Service without a namespace or name");
                    return;
                };
                service.metadata = trimmed(service.metadata);
                objects.services.insert(id.clone(), service);
                self.publish(ServiceChange::One(id));
            }
            Event::Delete(service) => {
                if let Some(id) = ObjectId::of(&service.metadata) {
                    objects.services.remove(&id);
                    self.publish(ServiceChange::One(id));
                }
            }
            Event::Init => objects.relisted_services = Some(BTreeMap::new()),
            Event::InitApply(mut service) => {
                let id = ObjectId::of(&service.metadata);
                if let (Some(list), Some(id)) = (objects.relisted_services.as_mut(), id) {
                    service.metadata = trimmed(service.metadata);
                    list.insert(id, service);
                }
            }
            Event::InitDone => {
                objects.services = objects.relisted_services.take().unwrap_or_default();
                objects.services_listed = true;
                self.mark_listed(&objects);
                self.publish(ServiceChange::All);
            }
        }
    }

    /// An EndpointSlice watch event. Slices without the
    /// `kubernetes.io/service-name` label belong to no Service and are
    /// not kept.
    pub fn slice_event(&self, event: Event<EndpointSlice>) {
        let mut objects = self.objects();
        match event {
            Event::Apply(mut slice) => {
                slice.metadata = trimmed(slice.metadata);
                for service in objects.put_slice(slice) {
                    self.publish(ServiceChange::One(service));
                }
            }
            Event::Delete(slice) => {
                let owner = ObjectId::of(&slice.metadata).and_then(|id| objects.remove_slice(&id));
                if let Some(service) = owner {
                    self.publish(ServiceChange::One(service));
                }
            }
            Event::Init => objects.relisted_slices = Some(Vec::new()),
            Event::InitApply(mut slice) => {
                if let Some(list) = objects.relisted_slices.as_mut() {
                    slice.metadata = trimmed(slice.metadata);
                    list.push(slice);
                }
            }
            Event::InitDone => {
                let listed = objects.relisted_slices.take().unwrap_or_default();
                objects.slices.clear();
                objects.owners.clear();
                for slice in listed {
                    objects.put_slice(slice);
                }
                objects.slices_listed = true;
                self.mark_listed(&objects);
                self.publish(ServiceChange::All);
            }
        }
    }

    /// The value every exported Service should have, by key.
    fn desired(&self, cluster: &ClusterInfo) -> BTreeMap<String, Vec<u8>> {
        let objects = self.objects();
        objects
            .services
            .iter()
            .filter_map(|(id, service)| {
                let slices = objects.slices.get(id).into_iter().flat_map(|s| s.values());
                cluster_service(cluster, service, slices).map(|v| (v.key(), v.to_json()))
            })
            .collect()
    }

    /// One Service's key, and its value if it is exported.
    fn desired_one(&self, cluster: &ClusterInfo, id: &ObjectId) -> (String, Option<Vec<u8>>) {
        let objects = self.objects();
        let key = keys::service(cluster.name(), &id.namespace, &id.name);
        let value = objects.services.get(id).and_then(|service| {
            let slices = objects.slices.get(id).into_iter().flat_map(|s| s.values());
            cluster_service(cluster, service, slices).map(|v| v.to_json())
        });
        (key, value)
    }

    /// Follow the cluster's Services and EndpointSlices until the client is
    /// dropped. Watch errors are logged and retried with backoff.
    pub async fn follow(self: Arc<Self>, client: Client) {
        let config = watcher::Config::default().any_semantic();
        let services = watcher::watcher(Api::<Service>::all(client.clone()), config.clone());
        // The API server filters on the label where it can; the view
        // checks it again.
        let slices = watcher::watcher(
            Api::<EndpointSlice>::all(client),
            config.labels(SERVICE_NAME_LABEL),
        );
        tokio::join!(
            forward(services, "Service", |e| self.service_event(e)),
            forward(slices, "EndpointSlice", |e| self.slice_event(e)),
        );
    }
}

/// Hand a watch's events to `apply`, logging its errors; the backoff keeps
/// a failing API server from being asked in a tight loop.
pub(crate) async fn forward<K>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    what: &'static str,
    apply: impl Fn(Event<K>),
) {
    let stream = stream.default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => apply(event),
            Err(error) => tracing::warn!(%error, kind = what, "watch failed; retrying"),
        }
    }
}

/// How the services store runs.
#[derive(Debug, Clone)]
pub struct ServicesSettings {
    pub cluster: ClusterInfo,
    /// Time between full syncs (one round); default 5 minutes.
    pub resync_interval: Duration,
    /// How soon a failed kvstore operation is followed by a full sync;
    /// default 5 seconds.
    pub retry_interval: Duration,
}

impl ServicesSettings {
    pub fn new(cluster: ClusterInfo) -> Self {
        Self {
            cluster,
            resync_interval: Duration::from_secs(300),
            retry_interval: Duration::from_secs(5),
        }
    }
}

/// The writes and deletes a full sync makes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct SyncPlan {
    pub puts: Vec<(String, Vec<u8>)>,
    pub deletes: Vec<String>,
}

/// A full sync's plan. A key is left alone only if the kvstore holds the
/// desired bytes and this incarnation wrote them: a value a previous
/// leader wrote sits on that leader's lease and would vanish when it
/// expires, so it is written again on ours. Everything listed that no
/// exported Service accounts for is deleted.
pub(crate) fn sync_plan(
    desired: &BTreeMap<String, Vec<u8>>,
    listed: &[KeyValue],
    written: &BTreeMap<String, Vec<u8>>,
) -> SyncPlan {
    let stored: BTreeMap<&str, &[u8]> = listed
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_slice()))
        .collect();
    let puts = desired
        .iter()
        .filter(|(key, value)| {
            let in_store = stored.get(key.as_str()) == Some(&value.as_slice());
            let ours = written.get(*key) == Some(*value);
            !(in_store && ours)
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let deletes = listed
        .iter()
        .filter(|kv| !desired.contains_key(&kv.key))
        .map(|kv| kv.key.clone())
        .collect();
    SyncPlan { puts, deletes }
}

/// What one Service's change needs, given what this incarnation last
/// wrote at its key (after a full sync, exactly what the kvstore holds).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyWrite {
    Put(Vec<u8>),
    Delete,
    Nothing,
}

pub(crate) fn key_write(desired: Option<Vec<u8>>, written: Option<&Vec<u8>>) -> KeyWrite {
    match (desired, written) {
        (Some(value), Some(old)) if value == *old => KeyWrite::Nothing,
        (Some(value), _) => KeyWrite::Put(value),
        (None, Some(_)) => KeyWrite::Delete,
        (None, None) => KeyWrite::Nothing,
    }
}

/// The synced marker's value: the time, in RFC 3339 (seconds, UTC), as
/// Cilium writes it.
fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The `services-store` duty.
pub struct ServicesStore {
    settings: ServicesSettings,
    view: Arc<ServicesView>,
    store: Arc<dyn SharedStore>,
    changes: broadcast::Receiver<ServiceChange>,
    /// Key -> the bytes this incarnation wrote there.
    written: BTreeMap<String, Vec<u8>>,
    /// Whether this incarnation wrote the synced marker.
    marked: bool,
    /// Keys deleted in this round.
    deletions: u64,
}

impl ServicesStore {
    /// A duty writing `view`'s exported Services to `store` (on its
    /// session lease). Made anew each time this replica leads.
    pub fn new(
        settings: ServicesSettings,
        view: Arc<ServicesView>,
        store: Arc<dyn SharedStore>,
    ) -> Self {
        let changes = view.subscribe();
        Self {
            settings,
            view,
            store,
            changes,
            written: BTreeMap::new(),
            marked: false,
            deletions: 0,
        }
    }

    fn cluster(&self) -> &ClusterInfo {
        &self.settings.cluster
    }

    /// Make the kvstore's prefix what the view says, then (the first time,
    /// or if it is gone) the synced marker.
    async fn full_sync(&mut self) -> Result<(), KvError> {
        // Changes queued until now are in the view this sync reads.
        while self.changes.try_recv().is_ok() {}
        let desired = self.view.desired(self.cluster());
        let prefix = keys::services_of(self.cluster().name());
        let listed = self.store.list_prefix(&prefix).await?;
        let plan = sync_plan(&desired, &listed, &self.written);
        for (key, value) in plan.puts {
            self.store.put_leased(&key, value.clone()).await?;
            self.written.insert(key, value);
        }
        for key in plan.deletes {
            if self.store.delete(&key).await? {
                self.deletions += 1;
            }
        }
        self.written.retain(|key, _| desired.contains_key(key));
        let marker = keys::services_synced(self.cluster().name());
        if !self.marked || self.store.get(&marker).await?.is_none() {
            self.store
                .put_leased(&marker, now_rfc3339().into_bytes())
                .await?;
            self.marked = true;
        }
        Ok(())
    }

    /// Bring one Service's key up to date.
    async fn apply(&mut self, id: &ObjectId) -> Result<(), KvError> {
        let (key, desired) = self.view.desired_one(self.cluster(), id);
        match key_write(desired, self.written.get(&key)) {
            KeyWrite::Put(value) => {
                self.store.put_leased(&key, value.clone()).await?;
                self.written.insert(key, value);
            }
            KeyWrite::Delete => {
                if self.store.delete(&key).await? {
                    self.deletions += 1;
                }
                self.written.remove(&key);
            }
            KeyWrite::Nothing => {}
        }
        Ok(())
    }
}

#[async_trait]
impl Incremental for ServicesStore {
    type Change = ObjectId;
    const WHAT: &'static str = "services store";

    async fn full(&mut self) -> Result<(), KvError> {
        self.full_sync().await
    }

    async fn one(&mut self, id: &ObjectId) -> Result<(), KvError> {
        self.apply(id).await
    }

    async fn next(&mut self) -> Heard<ObjectId> {
        match self.changes.recv().await {
            Ok(ServiceChange::One(id)) => Heard::One(id),
            Ok(ServiceChange::All) | Err(broadcast::error::RecvError::Lagged(_)) => {
                Heard::Everything
            }
            Err(broadcast::error::RecvError::Closed) => Heard::Closed,
        }
    }
}

#[async_trait]
impl Duty for ServicesStore {
    fn name(&self) -> &'static str {
        "services-store"
    }

    fn interval(&self) -> Duration {
        self.settings.resync_interval
    }

    async fn ready(&mut self) {
        let mut synced = self.view.synced();
        // The sender lives in the view, which this duty holds.
        let _ = synced.wait_for(|s| *s).await;
    }

    /// One full sync, then changes as they come until the interval ends.
    async fn round(&mut self) -> Result<RoundReport, String> {
        let ended = round(
            self,
            self.settings.resync_interval,
            self.settings.retry_interval,
        )
        .await;
        let deletions = std::mem::take(&mut self.deletions);
        ended.map(|()| RoundReport { deletions })
    }
}

#[cfg(test)]
mod tests;
