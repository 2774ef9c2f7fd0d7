//! A small in-memory Kubernetes API server behind kube's mock service
//! (tower-test), shaped like the real one where the operator depends on it:
//! resourceVersions on every write; list, then a streaming watch with a
//! bookmark; 410 Gone on a watch when asked; JSON merge patches on an object
//! (status left alone) and on its status subresource (only status); replace
//! with optimistic concurrency (409 on a stale resourceVersion); create (409
//! when it exists); 409 on the next patches when asked; 500 on every write to
//! a collection while told to fail them (an API server that cannot persist,
//! as a renewal failing past the renew deadline needs); reads of one object
//! held until several have arrived, so concurrent readers see the same
//! resourceVersion (two candidates racing for a Lease). Requests are logged
//! with the status answered, so tests can check who wrote what and who was
//! refused.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use tokio::sync::mpsc;

pub const CILIUMNODES: &str = "/apis/cilium.io/v2/ciliumnodes";
pub const PODS: &str = "/api/v1/pods";

type Body = BoxBody<Bytes, Infallible>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Option<Value>,
    /// The status code answered.
    pub code: u16,
}

/// Reads of one object answered together once `count` have arrived.
struct HeldReads {
    collection: String,
    name: String,
    count: usize,
    /// Each waiting reader's body channel and the body it is owed.
    waiting: Vec<(mpsc::UnboundedSender<Bytes>, Bytes)>,
}

#[derive(Default)]
struct State {
    rv: u64,
    /// collection path -> name -> object
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    watchers: Vec<(String, mpsc::UnboundedSender<Bytes>)>,
    conflicts_on_patch: u32,
    /// collections whose writes are answered 500
    failing_writes: BTreeSet<String>,
    held_reads: Option<HeldReads>,
    /// collection -> watches to refuse with 410 Gone
    gone_on_watch: BTreeMap<String, u32>,
    log: Vec<Logged>,
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

fn kind_of(collection: &str) -> (&'static str, &'static str) {
    if collection.ends_with("/ciliumnodes") {
        ("cilium.io/v2", "CiliumNode")
    } else if collection.ends_with("/leases") {
        ("coordination.k8s.io/v1", "Lease")
    } else {
        ("v1", "Pod")
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
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Full::new(bytes).boxed())
        .expect("response")
}

/// (collection, name, status subresource) of a path.
fn split(path: &str) -> (String, Option<String>, bool) {
    for root in [
        "/ciliumnodes",
        "/pods",
        "/leases",
        "/customresourcedefinitions",
        "/events",
    ] {
        let at = path
            .match_indices(root)
            .map(|(at, _)| at)
            .find(|&at| matches!(path.as_bytes().get(at + root.len()), None | Some(b'/')));
        if let Some(at) = at {
            let collection = path[..at + root.len()].to_string();
            let rest: Vec<&str> = path[at + root.len()..]
                .split('/')
                .filter(|s| !s.is_empty())
                .collect();
            let name = rest.first().map(|s| s.to_string());
            let is_status = rest.get(1) == Some(&"status");
            return (collection, name, is_status);
        }
    }
    (path.to_string(), None, false)
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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
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

    /// Put an object in place (as another client would), notifying watchers.
    pub fn put(&self, collection: &str, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.with(|s| {
            let exists = s
                .objects
                .get(collection)
                .is_some_and(|m| m.contains_key(&name));
            let kind = if exists { "MODIFIED" } else { "ADDED" };
            store(s, collection, name, object, kind);
        });
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.with(|s| s.objects.get(collection).and_then(|m| m.get(name)).cloned())
    }

    pub fn delete(&self, collection: &str, name: &str) {
        self.with(|s| {
            if let Some(object) = s.objects.get_mut(collection).and_then(|m| m.remove(name)) {
                s.rv += 1;
                notify(s, collection, "DELETED", &object);
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
        self.with(|s| {
            let Some(mut object) = s.objects.get(collection).and_then(|m| m.get(name)).cloned()
            else {
                return false;
            };
            let before = object.clone();
            change(&mut object);
            if object != before {
                store(s, collection, name.to_string(), object, "MODIFIED");
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
        self.with(|s| {
            if failing {
                s.failing_writes.insert(collection.to_string());
            } else {
                s.failing_writes.remove(collection);
            }
        });
    }

    /// Hold the next `count` reads of one object: each gets the object as it
    /// was when it asked (or 404), but only once the last of them has asked,
    /// so `count` concurrent readers all decide on the same resourceVersion.
    pub fn hold_reads(&self, collection: &str, name: &str, count: usize) {
        self.with(|s| {
            s.held_reads = Some(HeldReads {
                collection: collection.to_string(),
                name: name.to_string(),
                count,
                waiting: Vec::new(),
            });
        });
    }

    /// In one step: every watch ends, the object is deleted with no watcher
    /// to hear it, and the next watch is refused with 410 Gone, so only a
    /// fresh list can reveal the deletion.
    pub fn lose_watches_and_delete(&self, collection: &str, name: &str) {
        self.with(|s| {
            s.watchers.clear();
            s.gone_on_watch.insert(collection.to_string(), 1);
            if let Some(objects) = s.objects.get_mut(collection) {
                objects.remove(name);
            }
            s.rv += 1;
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
        let mut state = self.state.lock().expect("fake server state");
        let response = route(&mut state, &parts.method, &path, &query, body.clone());
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
) -> Response<Body> {
    let (collection, name, is_status) = split(path);
    let (api_version, kind) = kind_of(&collection);
    let watching = query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1");
    if *method != Method::GET && state.failing_writes.contains(&collection) {
        return respond(
            500,
            &status(500, "InternalError", "the write could not be persisted"),
        );
    }
    match (method, name) {
        (&Method::GET, None) if watching => {
            let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
            let refuse = state.gone_on_watch.get_mut(&collection).filter(|n| **n > 0);
            if let Some(n) = refuse {
                *n -= 1;
                let line = json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
                let _ = sender.send(Bytes::from(format!("{line}\n")));
            } else {
                let bookmark = json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind,
                        "metadata": {"resourceVersion": state.rv.to_string()}}});
                let _ = sender.send(Bytes::from(format!("{bookmark}\n")));
                state.watchers.push((collection, sender));
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
                .get(&collection)
                .map(|m| m.values().cloned().collect())
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
                .is_some_and(|h| h.collection == collection && h.name == name);
            let object = state.objects.get(&collection).and_then(|m| m.get(&name));
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
            let object = body.unwrap_or(Value::Null);
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if state
                .objects
                .get(&collection)
                .is_some_and(|m| m.contains_key(&name))
            {
                return respond(
                    409,
                    &status(409, "AlreadyExists", &format!("{name} exists")),
                );
            }
            let object = store(state, &collection, name, object, "ADDED");
            respond(201, &object)
        }
        (&Method::PUT, Some(name)) => {
            let object = body.unwrap_or(Value::Null);
            let Some(current) = state
                .objects
                .get(&collection)
                .and_then(|m| m.get(&name))
                .cloned()
            else {
                return not_found(&name);
            };
            if object["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return conflict();
            }
            let object = store(state, &collection, name, object, "MODIFIED");
            respond(200, &object)
        }
        (&Method::PATCH, Some(name)) => {
            if state.conflicts_on_patch > 0 {
                state.conflicts_on_patch -= 1;
                return conflict();
            }
            let Some(mut object) = state
                .objects
                .get(&collection)
                .and_then(|m| m.get(&name))
                .cloned()
            else {
                return not_found(&name);
            };
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
            let object = store(state, &collection, name, object, "MODIFIED");
            respond(200, &object)
        }
        (method, _) => respond(
            405,
            &status(405, "MethodNotAllowed", &format!("{method} {path}")),
        ),
    }
}

/// A held read: its head now, its body (`answer`) once the last held reader
/// has asked, when every held body is sent at once.
fn hold_read(state: &mut State, code: u16, answer: &Value) -> Response<Body> {
    let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
    let bytes = Bytes::from(serde_json::to_vec(answer).unwrap_or_default());
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

/// A write: the next resourceVersion, stored, watchers told; the object.
fn store(
    state: &mut State,
    collection: &str,
    name: String,
    mut object: Value,
    kind: &str,
) -> Value {
    state.rv += 1;
    object["metadata"]["resourceVersion"] = json!(state.rv.to_string());
    state
        .objects
        .entry(collection.to_string())
        .or_default()
        .insert(name, object.clone());
    notify(state, collection, kind, &object);
    object
}

fn notify(state: &mut State, collection: &str, kind: &str, object: &Value) {
    let line = Bytes::from(format!("{}\n", json!({"type": kind, "object": object})));
    state
        .watchers
        .retain(|(watched, sender)| watched != collection || sender.send(line.clone()).is_ok());
}

fn tokio_stream_from(
    mut receiver: mpsc::UnboundedReceiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}
