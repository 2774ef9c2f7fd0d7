//! A small in-memory Kubernetes API server behind kube's mock service
//! (tower-test) or over HTTP, shaped like the real one where the operator
//! depends on it: cluster-scoped and namespaced resources (a cluster-wide
//! list or watch sees every namespace, a namespaced one its own), each
//! answered with its apiVersion and kind; a uid and resourceVersions on
//! every write; `metadata.managedFields` recorded on every write a client
//! sends (create, replace, patch), the manager taken from `fieldManager` or
//! the User-Agent (`managed_fields` says what is recorded as the real
//! server records it, and what is not; the helpers that write as another
//! client would, [`FakeApiServer::put`] and the like, record nothing); list, then a streaming watch from the list's
//! resourceVersion (what changed since, then a bookmark); 410 Gone on a
//! watch when asked; JSON merge patches on an object (status left alone) and
//! on its status subresource (only status); replace with optimistic
//! concurrency (409 on a stale resourceVersion), of an object (its status
//! kept) or of its status subresource (only status taken); create (409 when it
//! exists); delete of one object with DeleteOptions preconditions (409 when
//! the uid or resourceVersion differs; watchers told DELETED); 409 on the
//! next patches when asked; watch events held back while asked (a lagging
//! cache); 500 on every write to a collection while told to
//! fail them (an API server that cannot persist, as a renewal failing past
//! the renew deadline needs), or on the writes of its status subresource
//! alone; 403 on every request to a collection while told to forbid it; reads of one object held until several have
//! arrived, so concurrent readers see the same resourceVersion (two
//! candidates racing for a Lease). Requests are logged with the status
//! answered, so tests can check who wrote what and who was refused. Label
//! selectors of equality and existence terms are applied to lists and
//! watches (set-based ones are refused with 400); field selectors are ignored: a list or watch
//! sees everything in its scope that its labels select.
//!
//! The helpers taking a `collection` take its path: cluster-wide
//! ([`PODS`]) or in one namespace
//! (`/api/v1/namespaces/default/pods`, see [`in_namespace`]). An object
//! put through a cluster-wide path goes to the namespace in its metadata;
//! one looked up by name through a cluster-wide path is the first of that
//! name in any namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

mod label_selector;
mod managed_fields;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use label_selector::LabelSelector;
use managed_fields::Writer;
use tokio::sync::mpsc;

pub const CILIUMNODES: &str = "/apis/cilium.io/v2/ciliumnodes";
pub const CILIUMENDPOINTS: &str = "/apis/cilium.io/v2/ciliumendpoints";
pub const PODS: &str = "/api/v1/pods";
pub const SERVICES: &str = "/api/v1/services";
pub const ENDPOINTSLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

type Body = BoxBody<Bytes, Infallible>;

/// A kubeconfig at `path` for a fake server serving HTTP at `address`, for
/// a process under test.
pub fn write_kubeconfig(path: &std::path::Path, address: std::net::SocketAddr) {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: 'http://{address}'}}}}]\n\
             users: [{{name: fake, user: {{token: test}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n"
        ),
    )
    .expect("write the kubeconfig");
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Option<Value>,
    /// The status code answered.
    pub code: u16,
}

/// The path of a cluster-wide collection (`/api/v1/pods`) in one namespace
/// (`/api/v1/namespaces/{namespace}/pods`).
pub fn in_namespace(collection: &str, namespace: &str) -> String {
    let parts: Vec<&str> = collection.split('/').filter(|s| !s.is_empty()).collect();
    // The group and version: /api/v1 or /apis/{group}/{version}.
    let root = if parts.first() == Some(&"api") { 2 } else { 3 };
    let (prefix, rest) = parts.split_at(root.min(parts.len()));
    format!(
        "/{}/namespaces/{namespace}/{}",
        prefix.join("/"),
        rest.join("/")
    )
}

/// Which objects a request or a helper is about: one resource (named by its
/// cluster-wide collection path), in one namespace or in all of them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Scope {
    resource: String,
    namespace: Option<String>,
}

impl Scope {
    /// Whether an object of `resource` in `namespace` ("" when cluster
    /// scoped) is within this scope.
    fn covers(&self, resource: &str, namespace: &str) -> bool {
        self.resource == resource && self.namespace.as_deref().is_none_or(|n| n == namespace)
    }

    /// Whether everything in `other` is within this scope.
    fn contains(&self, other: &Scope) -> bool {
        self.resource == other.resource
            && (self.namespace.is_none() || self.namespace == other.namespace)
    }
}

fn toggle(scopes: &mut BTreeSet<Scope>, scope: Scope, on: bool) {
    if on {
        scopes.insert(scope);
    } else {
        scopes.remove(&scope);
    }
}

/// A request path taken apart.
struct Target {
    scope: Scope,
    name: Option<String>,
    /// The status subresource.
    is_status: bool,
}

fn parse(path: &str) -> Target {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let root = if parts.first() == Some(&"api") { 2 } else { 3 };
    let (prefix, rest) = parts.split_at(root.min(parts.len()));
    // namespaces/{ns}/{plural}/... is namespaced; namespaces/{ns} alone is
    // the Namespace object itself.
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
            (Some(namespace.to_string()), rest)
        }
        _ => (None, rest),
    };
    let plural = rest.first().copied().unwrap_or_default();
    Target {
        scope: Scope {
            resource: format!("/{}/{plural}", prefix.join("/")),
            namespace,
        },
        name: rest.get(1).map(|s| s.to_string()),
        is_status: rest.get(2) == Some(&"status"),
    }
}

/// The apiVersion and kind of the objects of a resource.
fn kind_of(resource: &str) -> (String, &'static str) {
    let parts: Vec<&str> = resource.split('/').filter(|s| !s.is_empty()).collect();
    let (group_version, plural) = match parts.as_slice() {
        ["api", version, plural] => (version.to_string(), *plural),
        ["apis", group, version, plural] => (format!("{group}/{version}"), *plural),
        _ => (String::new(), ""),
    };
    let kind = match plural {
        "pods" => "Pod",
        "services" => "Service",
        "endpointslices" => "EndpointSlice",
        "ciliumendpoints" => "CiliumEndpoint",
        "ciliumnodes" => "CiliumNode",
        "leases" => "Lease",
        "configmaps" => "ConfigMap",
        "deployments" => "Deployment",
        "events" => "Event",
        "customresourcedefinitions" => "CustomResourceDefinition",
        "namespaces" => "Namespace",
        _ => "Unknown",
    };
    (group_version, kind)
}

/// Reads of one object answered together once `count` have arrived.
struct HeldReads {
    scope: Scope,
    name: String,
    count: usize,
    /// Each waiting reader's body channel and the body it is owed.
    waiting: Vec<(mpsc::UnboundedSender<Bytes>, Bytes)>,
}

/// Objects of one resource by (namespace, name); the namespace is "" for a
/// cluster-scoped resource.
type Objects = BTreeMap<(String, String), Value>;

#[derive(Default)]
struct State {
    rv: u64,
    /// The last uid handed out.
    uids: u64,
    /// resource -> its objects
    objects: BTreeMap<String, Objects>,
    watchers: Vec<(Scope, LabelSelector, mpsc::UnboundedSender<Bytes>)>,
    /// Every watch event sent: (resourceVersion, resource, namespace,
    /// line), so a watch from a resourceVersion misses nothing written
    /// since (the list it follows).
    history: Vec<(u64, String, String, Bytes)>,
    /// Scopes whose watch events are held back, and those events:
    /// (resourceVersion, resource, namespace, line), in order.
    paused: BTreeSet<Scope>,
    delayed: Vec<(u64, String, String, Bytes)>,
    conflicts_on_patch: u32,
    /// scopes whose writes are answered 500
    failing_writes: BTreeSet<Scope>,
    /// scopes whose status subresource writes are answered 500
    failing_status_writes: BTreeSet<Scope>,
    /// scopes every request to is answered 403 (RBAC says no)
    forbidden: BTreeSet<Scope>,
    held_reads: Option<HeldReads>,
    /// scope -> watches to refuse with 410 Gone
    gone_on_watch: BTreeMap<Scope, u32>,
    log: Vec<Logged>,
}

impl State {
    /// The (namespace, name) key and the object named `name` in `scope`:
    /// in its namespace, or the first of that name in any.
    fn find(&self, scope: &Scope, name: &str) -> Option<((String, String), &Value)> {
        let objects = self.objects.get(&scope.resource)?;
        match &scope.namespace {
            Some(namespace) => {
                let key = (namespace.clone(), name.to_string());
                objects.get(&key).map(|object| (key, object))
            }
            None => objects
                .iter()
                .find(|((_, n), _)| n == name)
                .map(|(key, object)| (key.clone(), object)),
        }
    }
}

#[derive(Clone, Default)]
pub struct FakeApiServer {
    state: Arc<Mutex<State>>,
}

/// RFC 7386: objects merge key by key, null removes, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Value::Object(map) = target {
                for (key, value) in fields {
                    if value.is_null() {
                        map.remove(key);
                    } else {
                        merge(map.entry(key.clone()).or_insert(Value::Null), value);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn not_found(name: &str) -> Response<Body> {
    respond(404, &status(404, "NotFound", &format!("{name} not found")))
}

fn conflict() -> Response<Body> {
    respond(
        409,
        &status(409, "Conflict", "the object has been modified"),
    )
}

fn respond(code: u16, body: &Value) -> Response<Body> {
    respond_json(code, json_bytes(body))
}

/// `value` serialised, for an answer or a watch event.
fn json_bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

/// An answer whose body is already JSON.
fn respond_json(code: u16, bytes: Bytes) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Full::new(bytes).boxed())
        .expect("response")
}

impl FakeApiServer {
    /// A client talking to a new fake server, and the server.
    pub fn start() -> (kube::Client, FakeApiServer) {
        let (service, mut handle) =
            tower_test::mock::pair::<Request<kube::client::Body>, Response<Body>>();
        let server = FakeApiServer::default();
        let serving = server.clone();
        tokio::spawn(async move {
            while let Some((request, reply)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let response = serving.handle(&parts, &bytes);
                reply.send_response(response);
            }
        });
        (kube::Client::new(service, "default"), server)
    }

    /// The same server over HTTP on 127.0.0.1, for a real process to talk
    /// to (through a kubeconfig); its address.
    pub async fn serve_http(&self) -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        self.serve_http_on(listener)
    }

    /// The same, on a listener the caller bound (e.g. inside a test's
    /// network namespace, where the process under test runs); its address.
    /// Must be called within a tokio runtime.
    pub fn serve_http_on(&self, listener: std::net::TcpListener) -> std::net::SocketAddr {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let address = listener.local_addr().expect("address");
        let server = self.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let server = server.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let server = server.clone();
                            async move {
                                let (parts, body) = request.into_parts();
                                let bytes = body
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                Ok::<_, Infallible>(server.handle(&parts, &bytes))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        address
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().expect("fake server state"))
    }

    /// Put an object in place (as another client would), notifying
    /// watchers: in the namespace of `collection`, else in the one of its
    /// metadata. It gets a uid if it has none (the one it replaces, if
    /// any).
    pub fn put(&self, collection: &str, object: Value) {
        let scope = parse(collection).scope;
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = scope
            .namespace
            .clone()
            .or_else(|| object["metadata"]["namespace"].as_str().map(String::from))
            .unwrap_or_default();
        self.with(|s| {
            let exists = s
                .objects
                .get(&scope.resource)
                .is_some_and(|m| m.contains_key(&(namespace.clone(), name.clone())));
            let kind = if exists { "MODIFIED" } else { "ADDED" };
            store(s, &scope.resource, (namespace, name), object, kind);
        });
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        let scope = parse(collection).scope;
        self.with(|s| s.find(&scope, name).map(|(_, object)| object.clone()))
    }

    /// Delete an object (as another client would), notifying watchers.
    pub fn delete(&self, collection: &str, name: &str) {
        let scope = parse(collection).scope;
        self.with(|s| {
            if let Some((key, _)) = s.find(&scope, name) {
                remove(s, &scope.resource, &key);
            }
        });
    }

    /// Another writer (the agent) merges `patch` into an object.
    pub fn patch(&self, collection: &str, name: &str, patch: &Value) {
        assert!(
            self.update(collection, name, |object| merge(object, patch)),
            "no {name} in {collection} to patch"
        );
    }

    /// Another writer changes an object in one step, so no write of the
    /// operator's falls between its read and its write (which would be
    /// lost); watchers are told. A change that leaves the object as it was
    /// writes nothing, as a client that checks before it writes (agents
    /// polling every node would otherwise wake the operator for nothing).
    /// Whether the object exists.
    pub fn update(&self, collection: &str, name: &str, change: impl FnOnce(&mut Value)) -> bool {
        let scope = parse(collection).scope;
        self.with(|s| {
            let Some((key, object)) = s.find(&scope, name) else {
                return false;
            };
            let mut object = object.clone();
            let before = object.clone();
            change(&mut object);
            if object != before {
                store(s, &scope.resource, key, object, "MODIFIED");
            }
            true
        })
    }

    /// Answer the next `n` patches with 409 Conflict.
    pub fn conflict_next_patches(&self, n: u32) {
        self.with(|s| s.conflicts_on_patch = n);
    }

    /// While `failing`, every write (not a read) to `collection` is answered
    /// 500 InternalError and changes nothing.
    pub fn fail_writes(&self, collection: &str, failing: bool) {
        let scope = parse(collection).scope;
        self.with(|s| toggle(&mut s.failing_writes, scope, failing));
    }

    /// While `failing`, every write to the status subresource of an object
    /// in `collection` is answered 500 InternalError; the objects
    /// themselves are still written.
    pub fn fail_status_writes(&self, collection: &str, failing: bool) {
        let scope = parse(collection).scope;
        self.with(|s| toggle(&mut s.failing_status_writes, scope, failing));
    }

    /// While `forbidden`, every request (read or write) to `collection` is
    /// answered 403 Forbidden, as to a client whose RBAC lacks the verb.
    pub fn forbid(&self, collection: &str, forbidden: bool) {
        let scope = parse(collection).scope;
        self.with(|s| toggle(&mut s.forbidden, scope, forbidden));
    }

    /// Hold the next `count` reads of one object: each gets the object as it
    /// was when it asked (or 404), but only once the last of them has asked,
    /// so `count` concurrent readers all decide on the same resourceVersion.
    pub fn hold_reads(&self, collection: &str, name: &str, count: usize) {
        let scope = parse(collection).scope;
        self.with(|s| {
            s.held_reads = Some(HeldReads {
                scope,
                name: name.to_string(),
                count,
                waiting: Vec::new(),
            });
        });
    }

    /// In one step: every watch ends, the object is deleted with no watcher
    /// to hear it, and the next watch of `collection` is refused with 410
    /// Gone, so only a fresh list can reveal the deletion.
    pub fn lose_watches_and_delete(&self, collection: &str, name: &str) {
        let scope = parse(collection).scope;
        self.with(|s| {
            s.watchers.clear();
            if let Some((key, _)) = s.find(&scope, name) {
                if let Some(objects) = s.objects.get_mut(&scope.resource) {
                    objects.remove(&key);
                }
            }
            s.gone_on_watch.insert(scope, 1);
            s.rv += 1;
        });
    }

    /// Hold back the watch events of `collection` (a watcher's cache
    /// lagging the server) until [`Self::resume_watches`], from open
    /// watches and from those opened meanwhile; writes and reads go on.
    pub fn pause_watches(&self, collection: &str) {
        let scope = parse(collection).scope;
        self.with(|s| s.paused.insert(scope));
    }

    /// Send the events held back since [`Self::pause_watches`], in order,
    /// and the next ones as they come.
    pub fn resume_watches(&self, collection: &str) {
        let scope = parse(collection).scope;
        self.with(|s| {
            s.paused.remove(&scope);
            let delayed = std::mem::take(&mut s.delayed);
            for (rv, resource, namespace, line) in delayed {
                if s.paused.iter().any(|p| p.covers(&resource, &namespace)) {
                    s.delayed.push((rv, resource, namespace, line));
                } else {
                    send(s, &resource, &namespace, &line);
                }
            }
        });
    }

    pub fn log(&self) -> Vec<Logged> {
        self.with(|s| s.log.clone())
    }

    pub fn writes(&self) -> Vec<Logged> {
        self.log()
            .into_iter()
            .filter(|l| l.method != Method::GET)
            .collect()
    }

    fn handle(&self, parts: &http::request::Parts, body: &[u8]) -> Response<Body> {
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        let body: Option<Value> = serde_json::from_slice(body).ok();
        let user_agent = parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        let manager = Writer::manager_of(&query, user_agent);
        let mut state = self.state.lock().expect("fake server state");
        let response = route(
            &mut state,
            &parts.method,
            &path,
            &query,
            body.clone(),
            &manager,
        );
        state.log.push(Logged {
            method: parts.method.clone(),
            path,
            query,
            body,
            code: response.status().as_u16(),
        });
        response
    }
}

/// The answer to one request, `state` changed as the real server would.
fn route(
    state: &mut State,
    method: &Method,
    path: &str,
    query: &str,
    body: Option<Value>,
    manager: &str,
) -> Response<Body> {
    let Target {
        scope,
        name,
        is_status,
    } = parse(path);
    let (api_version, kind) = kind_of(&scope.resource);
    let writer = Writer {
        manager: manager.to_string(),
        subresource: is_status.then(|| "status".to_string()),
        api_version: api_version.clone(),
        time: managed_fields::now(),
    };
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    let namespace = scope.namespace.clone().unwrap_or_default();
    let failing = |scopes: &BTreeSet<Scope>| {
        scopes
            .iter()
            .any(|failing| failing.covers(&scope.resource, &namespace))
    };
    if failing(&state.forbidden) {
        return respond(
            403,
            &status(403, "Forbidden", &format!("{method} {path} is forbidden")),
        );
    }
    if *method != Method::GET
        && (failing(&state.failing_writes) || (is_status && failing(&state.failing_status_writes)))
    {
        return respond(
            500,
            &status(500, "InternalError", "the write could not be persisted"),
        );
    }
    let selector = match LabelSelector::of_query(query) {
        Ok(selector) => selector,
        Err(problem) => return respond(400, &status(400, "BadRequest", &problem)),
    };
    match (method, name) {
        (&Method::GET, None) if watching => {
            let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
            let refuse = state
                .gone_on_watch
                .iter_mut()
                .find(|(gone, n)| **n > 0 && gone.contains(&scope))
                .map(|(_, n)| n);
            if let Some(n) = refuse {
                *n -= 1;
                let line = json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
                let _ = sender.send(Bytes::from(format!("{line}\n")));
            } else {
                // What changed since the list this watch follows: without
                // it, a write between the list and the watch would be lost.
                // (Versions start at 1: from 0 is from the start.)
                let since = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("resourceVersion="))
                    .and_then(|rv| rv.parse::<u64>().ok())
                    .unwrap_or(state.rv);
                let delayed: BTreeSet<u64> = state.delayed.iter().map(|d| d.0).collect();
                for (rv, resource, namespace, line) in &state.history {
                    if *rv > since
                        && scope.covers(resource, namespace)
                        && !delayed.contains(rv)
                        && selector.matches_line(line)
                    {
                        let _ = sender.send(line.clone());
                    }
                }
                let bookmark = json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind,
                        "metadata": {"resourceVersion": state.rv.to_string()}}});
                let _ = sender.send(Bytes::from(format!("{bookmark}\n")));
                state.watchers.push((scope, selector, sender));
            }
            let stream =
                tokio_stream_from(receiver).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes)));
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(BodyExt::boxed(StreamBody::new(stream)))
                .expect("watch response")
        }
        (&Method::GET, None) => {
            let items: Vec<Value> = state
                .objects
                .get(&scope.resource)
                .map(|m| {
                    m.iter()
                        .filter(|((namespace, _), object)| {
                            scope.covers(&scope.resource, namespace) && selector.matches(object)
                        })
                        .map(|(_, object)| object.clone())
                        .collect()
                })
                .unwrap_or_default();
            respond(
                200,
                &json!({"apiVersion": api_version, "kind": format!("{kind}List"),
                    "metadata": {"resourceVersion": state.rv.to_string()}, "items": items}),
            )
        }
        (&Method::GET, Some(name)) => {
            let held = state
                .held_reads
                .as_ref()
                .is_some_and(|h| h.scope.contains(&scope) && h.name == name);
            let object = state.find(&scope, &name).map(|(_, object)| object);
            if !held {
                return match object {
                    Some(object) => respond(200, object),
                    None => not_found(&name),
                };
            }
            let (code, answer) = match object {
                Some(object) => (200, object.clone()),
                None => (404, status(404, "NotFound", &format!("{name} not found"))),
            };
            hold_read(state, code, &answer)
        }
        (&Method::POST, None) => {
            let mut object = body.unwrap_or(Value::Null);
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let namespace = scope
                .namespace
                .clone()
                .or_else(|| object["metadata"]["namespace"].as_str().map(String::from))
                .unwrap_or_default();
            let key = (namespace, name);
            if state
                .objects
                .get(&scope.resource)
                .is_some_and(|m| m.contains_key(&key))
            {
                return respond(
                    409,
                    &status(409, "AlreadyExists", &format!("{} exists", key.1)),
                );
            }
            let given = carries_managed_fields(&object);
            managed_fields::record(None, &mut object, &writer, given);
            respond_json(201, store(state, &scope.resource, key, object, "ADDED"))
        }
        (&Method::PUT, Some(name)) => {
            let body = body.unwrap_or(Value::Null);
            let Some((key, current)) = state.find(&scope, &name) else {
                return not_found(&name);
            };
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return conflict();
            }
            let given = carries_managed_fields(&body);
            // The status subresource takes only status (and the entries
            // given); the object everything but status.
            let (mut object, status_from) = match is_status {
                true => {
                    let mut object = current.clone();
                    if given {
                        object["metadata"]["managedFields"] =
                            body["metadata"]["managedFields"].clone();
                    }
                    (object, &body)
                }
                false => (body.clone(), current),
            };
            match (status_from.get("status"), object.as_object_mut()) {
                (Some(status), Some(map)) => {
                    map.insert("status".into(), status.clone());
                }
                (None, Some(map)) => {
                    map.remove("status");
                }
                (_, None) => {}
            }
            let current = current.clone();
            managed_fields::record(Some(&current), &mut object, &writer, given);
            respond_json(200, store(state, &scope.resource, key, object, "MODIFIED"))
        }
        (&Method::PATCH, Some(name)) => {
            if state.conflicts_on_patch > 0 {
                state.conflicts_on_patch -= 1;
                return conflict();
            }
            let Some((key, object)) = state.find(&scope, &name) else {
                return not_found(&name);
            };
            let current = object.clone();
            let mut object = object.clone();
            let mut patch = body.unwrap_or(Value::Null);
            // The status subresource takes only status; the object
            // everything but status.
            if is_status {
                patch = match patch.get("status") {
                    Some(status) => json!({ "status": status }),
                    None => json!({}),
                };
            } else if let Value::Object(map) = &mut patch {
                map.remove("status");
            }
            merge(&mut object, &patch);
            let given = carries_managed_fields(&patch);
            managed_fields::record(Some(&current), &mut object, &writer, given);
            respond_json(200, store(state, &scope.resource, key, object, "MODIFIED"))
        }
        (&Method::DELETE, Some(name)) => {
            let Some((key, current)) = state.find(&scope, &name) else {
                return not_found(&name);
            };
            // DeleteOptions.preconditions: each one given must match, or
            // nothing is deleted.
            let preconditions = body
                .as_ref()
                .and_then(|options| options.get("preconditions"))
                .cloned()
                .unwrap_or(Value::Null);
            for field in ["uid", "resourceVersion"] {
                let Some(wanted) = preconditions.get(field).and_then(Value::as_str) else {
                    continue;
                };
                let actual = current["metadata"][field].as_str().unwrap_or_default();
                if wanted != actual {
                    let message = format!(
                        "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {actual}"
                    );
                    return respond(409, &status(409, "Conflict", &message));
                }
            }
            match remove(state, &scope.resource, &key) {
                Some(object) => respond(200, &object),
                None => not_found(&name),
            }
        }
        (method, _) => respond(
            405,
            &status(405, "MethodNotAllowed", &format!("{method} {path}")),
        ),
    }
}

/// Whether a request's object or patch names metadata.managedFields (they
/// then replace the stored ones before the write is recorded).
fn carries_managed_fields(body: &Value) -> bool {
    body.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some()
}

/// A held read: its head now, its body (`answer`) once the last held reader
/// has asked, when every held body is sent at once.
fn hold_read(state: &mut State, code: u16, answer: &Value) -> Response<Body> {
    let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
    let bytes = json_bytes(answer);
    let all_arrived = state.held_reads.as_mut().is_some_and(|held| {
        held.waiting.push((sender, bytes));
        held.waiting.len() >= held.count
    });
    if all_arrived {
        // Sending and then dropping each sender ends that reader's body.
        for (sender, bytes) in state.held_reads.take().into_iter().flat_map(|h| h.waiting) {
            let _ = sender.send(bytes);
        }
    }
    let stream = tokio_stream_from(receiver).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes)));
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("held read response")
}

/// A write: the next resourceVersion, stored, watchers told; the object as
/// stored, in JSON. What the real server fills in is filled in: apiVersion
/// and kind, the namespace, and the uid (kept from the object replaced, else
/// a new one).
fn store(
    state: &mut State,
    resource: &str,
    key: (String, String),
    mut object: Value,
    kind: &str,
) -> Bytes {
    state.rv += 1;
    if !object.is_object() {
        object = json!({});
    }
    let (api_version, object_kind) = kind_of(resource);
    if object["apiVersion"].is_null() {
        object["apiVersion"] = json!(api_version);
    }
    if object["kind"].is_null() {
        object["kind"] = json!(object_kind);
    }
    if !key.0.is_empty() && object["metadata"]["namespace"].is_null() {
        object["metadata"]["namespace"] = json!(key.0);
    }
    if object["metadata"]["uid"].is_null() {
        let replaced = state
            .objects
            .get(resource)
            .and_then(|m| m.get(&key))
            .map(|old| old["metadata"]["uid"].clone())
            .filter(|uid| !uid.is_null());
        object["metadata"]["uid"] = match replaced {
            Some(uid) => uid,
            None => {
                state.uids += 1;
                json!(format!("00000000-0000-4000-8000-{:012}", state.uids))
            }
        };
    }
    object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    // Serialised once, for the watchers and the answer: with a CiliumNode of
    // a thousand addresses each copy or serialisation is a few hundred
    // kilobytes, on the cores the benchmarks measure.
    let json = json_bytes(&object);
    let namespace = key.0.clone();
    state
        .objects
        .entry(resource.to_string())
        .or_default()
        .insert(key, object);
    notify(state, resource, &namespace, kind, &json);
    json
}

/// A deletion: the next resourceVersion, watchers told; the object as it
/// was last, if it was there.
fn remove(state: &mut State, resource: &str, key: &(String, String)) -> Option<Value> {
    let mut object = state.objects.get_mut(resource)?.remove(key)?;
    state.rv += 1;
    object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    notify(state, resource, &key.0, "DELETED", &json_bytes(&object));
    Some(object)
}

/// A watch event of the object serialised as `json`: one line, type first
/// as the real server writes it.
fn notify(state: &mut State, resource: &str, namespace: &str, kind: &str, json: &[u8]) {
    let kind = serde_json::to_string(kind).unwrap_or_default();
    let line = Bytes::from(
        [
            b"{\"type\":".as_slice(),
            kind.as_bytes(),
            b",\"object\":",
            json,
            b"}\n",
        ]
        .concat(),
    );
    state.history.push((
        state.rv,
        resource.to_string(),
        namespace.to_string(),
        line.clone(),
    ));
    if state.paused.iter().any(|p| p.covers(resource, namespace)) {
        state
            .delayed
            .push((state.rv, resource.to_string(), namespace.to_string(), line));
    } else {
        send(state, resource, namespace, &line);
    }
}

/// A watch event to every watcher it concerns; closed watches are dropped.
fn send(state: &mut State, resource: &str, namespace: &str, line: &Bytes) {
    state.watchers.retain(|(scope, selector, sender)| {
        !scope.covers(resource, namespace)
            || !selector.matches_line(line)
            || sender.send(line.clone()).is_ok()
    });
}

fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Preconditions};
    use kube::core::GroupVersionKind;
    use kube::runtime::watcher::{self, Event};

    fn object(name: &str, namespace: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": namespace}})
    }

    fn endpoints() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cilium.io", "v2", "CiliumEndpoint"),
            "ciliumendpoints",
        )
    }

    fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
        items
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o.meta().namespace.clone().unwrap_or_default(),
                    o.meta().name.clone().unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn paths_name_their_resource_namespace_and_object() {
        let t = parse("/api/v1/namespaces/a/pods/p/status");
        assert_eq!(t.scope.resource, PODS);
        assert_eq!(t.scope.namespace.as_deref(), Some("a"));
        assert_eq!(t.name.as_deref(), Some("p"));
        assert!(t.is_status);
        let t = parse("/apis/cilium.io/v2/ciliumnodes/n1");
        assert_eq!(t.scope.resource, CILIUMNODES);
        assert_eq!(t.scope.namespace, None);
        assert_eq!(t.name.as_deref(), Some("n1"));
        let t = parse("/api/v1/namespaces/a");
        assert_eq!(t.scope.resource, "/api/v1/namespaces");
        assert_eq!(t.name.as_deref(), Some("a"));
        assert_eq!(
            in_namespace(ENDPOINTSLICES, "a"),
            "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices"
        );
        assert_eq!(in_namespace(SERVICES, "a"), "/api/v1/namespaces/a/services");
    }

    #[tokio::test]
    async fn a_cluster_wide_list_sees_every_namespace_a_namespaced_one_its_own() {
        let (client, server) = FakeApiServer::start();
        for namespace in ["a", "b"] {
            server.put(PODS, object("p", namespace));
            server.put(
                &in_namespace(SERVICES, namespace),
                json!({"metadata": {"name": "s"}}),
            );
            let mut slice = object("s-1", namespace);
            slice["addressType"] = json!("IPv4");
            slice["endpoints"] = json!([]);
            server.put(ENDPOINTSLICES, slice);
            server.put(CILIUMENDPOINTS, object("p", namespace));
        }
        let lp = ListParams::default();
        // Typed lists check apiVersion and kind.
        let pods = Api::<Pod>::all(client.clone()).list(&lp).await.unwrap();
        assert_eq!(names(&pods.items), ["a/p", "b/p"]);
        let pods = Api::<Pod>::namespaced(client.clone(), "b")
            .list(&lp)
            .await
            .unwrap();
        assert_eq!(names(&pods.items), ["b/p"]);
        let services = Api::<Service>::all(client.clone()).list(&lp).await.unwrap();
        assert_eq!(names(&services.items), ["a/s", "b/s"]);
        let slices = Api::<EndpointSlice>::namespaced(client.clone(), "a");
        assert_eq!(names(&slices.list(&lp).await.unwrap().items), ["a/s-1"]);
        let ceps = Api::<DynamicObject>::namespaced_with(client.clone(), "a", &endpoints());
        let cep = ceps.get("p").await.unwrap();
        assert_eq!(cep.types.as_ref().unwrap().kind, "CiliumEndpoint");
        assert_eq!(cep.types.as_ref().unwrap().api_version, "cilium.io/v2");
        let all = Api::<DynamicObject>::all_with(client, &endpoints());
        assert_eq!(names(&all.list(&lp).await.unwrap().items), ["a/p", "b/p"]);
        let uid = |namespace| {
            server.get(&in_namespace(PODS, namespace), "p").unwrap()["metadata"]["uid"].clone()
        };
        assert!(uid("a").is_string());
        assert_ne!(uid("a"), uid("b"), "a uid each");
    }

    #[tokio::test]
    async fn failing_status_writes_refuse_the_status_and_still_write_the_object() {
        let (client, server) = FakeApiServer::start();
        server.put(PODS, object("p", "a"));
        let pods = Api::<Pod>::namespaced(client, "a");
        let params = kube::api::PatchParams::default();
        let status = kube::api::Patch::Merge(json!({"status": {"phase": "Running"}}));
        let label = kube::api::Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}}));
        server.fail_status_writes(PODS, true);
        match pods.patch_status("p", &params, &status).await {
            Err(kube::Error::Api(answer)) => assert_eq!(answer.code, 500),
            other => panic!("a refused status write, not {other:?}"),
        }
        pods.patch("p", &params, &label)
            .await
            .expect("the object is still written");
        server.fail_status_writes(PODS, false);
        pods.patch_status("p", &params, &status)
            .await
            .expect("the status is written again");
        let stored = server.get(PODS, "p").expect("the pod");
        assert_eq!(stored["status"]["phase"], "Running");
        assert_eq!(stored["metadata"]["labels"]["x"], "1");
    }

    /// A write as client-go sends it: no fieldManager, its User-Agent.
    async fn write_as_client_go(client: &kube::Client, method: Method, path: &str, body: &Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(
                http::header::USER_AGENT,
                "cilium-operator-aws/v1.16.5 (linux/amd64) kubernetes/0f1e2d3",
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body).unwrap())
            .unwrap();
        client.request_text(request).await.expect("the write");
    }

    #[tokio::test]
    async fn writes_are_recorded_in_managed_fields_by_manager_operation_and_subresource() {
        let (client, server) = FakeApiServer::start();
        server.put(
            CILIUMNODES,
            json!({"metadata": {"name": "n1"}, "spec": {"instance-id": "i-1"},
                   "status": {"ipam": {"used": {}}}}),
        );
        assert!(
            server.get(CILIUMNODES, "n1").unwrap()["metadata"]["managedFields"].is_null(),
            "a helper's write is no client's"
        );
        // Cilium's operator: Update of the object, then UpdateStatus.
        let mut object = server.get(CILIUMNODES, "n1").unwrap();
        object["spec"]["ipam"] = json!({"pool": {"10.0.0.5": {"resource": "eni-1"}}});
        object["status"] = json!({"tampered": true});
        let path = format!("{CILIUMNODES}/n1");
        write_as_client_go(&client, Method::PUT, &path, &object).await;
        let stored = server.get(CILIUMNODES, "n1").unwrap();
        assert_eq!(
            stored["status"],
            json!({"ipam": {"used": {}}}),
            "an update of the object keeps its status"
        );
        let mut object = stored.clone();
        object["status"]["eni"] = json!({"enis": {"eni-1": {"id": "eni-1"}}});
        object["spec"]["instance-id"] = json!("tampered");
        write_as_client_go(&client, Method::PUT, &format!("{path}/status"), &object).await;
        let stored = server.get(CILIUMNODES, "n1").unwrap();
        assert_eq!(
            stored["spec"]["instance-id"], "i-1",
            "an update of the status changes only status"
        );
        // This operator: a merge patch of the status with its field manager.
        let api = kube::Api::<DynamicObject>::all_with(
            client,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("cilium.io", "v2", "CiliumNode"),
                "ciliumnodes",
            ),
        );
        let params = kube::api::PatchParams {
            field_manager: Some("ipam-operator".into()),
            ..Default::default()
        };
        let patch = json!({"status": {"ipam": {"operator-status": {"error": "x"}}}});
        api.patch_status("n1", &params, &kube::api::Patch::Merge(&patch))
            .await
            .expect("the patch");

        let stored = server.get(CILIUMNODES, "n1").unwrap();
        let entries = stored["metadata"]["managedFields"].as_array().unwrap();
        let summary: Vec<(String, Option<String>, Value)> = entries
            .iter()
            .map(|e| {
                assert_eq!(e["operation"], "Update");
                assert_eq!(e["apiVersion"], "cilium.io/v2");
                assert_eq!(e["fieldsType"], "FieldsV1");
                let time = e["time"].as_str().unwrap();
                assert!(
                    time.parse::<jiff::Timestamp>().is_ok() && time.ends_with('Z'),
                    "{time}"
                );
                (
                    e["manager"].as_str().unwrap().to_string(),
                    e["subresource"].as_str().map(String::from),
                    e["fieldsV1"].clone(),
                )
            })
            .collect();
        let find = |manager: &str, subresource: Option<&str>| {
            summary
                .iter()
                .find(|(m, s, _)| m == manager && s.as_deref() == subresource)
                .map(|(_, _, fields)| fields.clone())
                .unwrap_or_else(|| panic!("no entry of {manager} {subresource:?}: {summary:#?}"))
        };
        assert_eq!(summary.len(), 3, "{summary:#?}");
        assert_eq!(
            find("cilium-operator-aws", None),
            json!({"f:spec": {"f:ipam": {".": {}, "f:pool": {".": {},
                "f:10.0.0.5": {".": {}, "f:resource": {}}}}}})
        );
        assert_eq!(
            find("cilium-operator-aws", Some("status")),
            json!({"f:status": {"f:eni": {".": {}, "f:enis": {".": {},
                "f:eni-1": {".": {}, "f:id": {}}}}}})
        );
        assert_eq!(
            find("ipam-operator", Some("status")),
            json!({"f:status": {"f:ipam": {"f:operator-status": {".": {}, "f:error": {}}}}})
        );
    }

    #[tokio::test]
    async fn a_namespaced_watch_hears_only_its_namespace() {
        let (client, server) = FakeApiServer::start();
        let pods = Api::<Pod>::namespaced(client, "b");
        let mut events = std::pin::pin!(watcher::watcher(pods, watcher::Config::default()));
        assert!(matches!(events.next().await, Some(Ok(Event::Init))));
        assert!(matches!(events.next().await, Some(Ok(Event::InitDone))));
        server.put(PODS, object("in-a", "a"));
        server.put(PODS, object("in-b", "b"));
        let Some(Ok(Event::Apply(pod))) = events.next().await else {
            panic!("an applied pod");
        };
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some("in-b"),
            "a's pod is not b's business"
        );
    }

    #[tokio::test]
    async fn a_delete_honours_its_preconditions_and_tells_watchers() {
        let (client, server) = FakeApiServer::start();
        server.put(CILIUMENDPOINTS, object("e", "a"));
        let uid = server.get(CILIUMENDPOINTS, "e").unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string();
        let ceps = Api::<DynamicObject>::namespaced_with(client.clone(), "a", &endpoints());
        let all = Api::<DynamicObject>::all_with(client, &endpoints());
        let mut events = std::pin::pin!(watcher::watcher(all, watcher::Config::default()));
        while !matches!(events.next().await, Some(Ok(Event::InitDone))) {}

        let stale = |uid: &str| {
            DeleteParams::default().preconditions(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            })
        };
        match ceps.delete("e", &stale("another-uid")).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
            other => panic!("a conflict, not {other:?}"),
        }
        assert!(
            server.get(CILIUMENDPOINTS, "e").is_some(),
            "nothing deleted"
        );
        let stale_rv = DeleteParams::default().preconditions(Preconditions {
            uid: None,
            resource_version: Some("0".into()),
        });
        assert!(
            ceps.delete("e", &stale_rv).await.is_err(),
            "a stale resourceVersion"
        );

        let deleted = ceps.delete("e", &stale(&uid)).await.unwrap();
        let deleted = deleted.left().expect("the object");
        assert_eq!(deleted.metadata.uid.as_deref(), Some(uid.as_str()));
        assert!(server.get(CILIUMENDPOINTS, "e").is_none());
        let Some(Ok(Event::Delete(gone))) = events.next().await else {
            panic!("watchers told DELETED, and only that");
        };
        assert_eq!(gone.metadata.name.as_deref(), Some("e"));
        match ceps.delete("e", &DeleteParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
            other => panic!("not found, not {other:?}"),
        }
        let deletes: Vec<(u16, Value)> = server
            .log()
            .into_iter()
            .filter(|l| l.method == Method::DELETE)
            .map(|l| (l.code, l.body.unwrap_or_default()["preconditions"].clone()))
            .collect();
        assert_eq!(
            deletes,
            [
                (409, json!({"uid": "another-uid"})),
                (409, json!({"resourceVersion": "0"})),
                (200, json!({"uid": uid})),
                (404, Value::Null),
            ]
        );
    }
}
