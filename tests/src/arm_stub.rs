//! An Azure Resource Manager stub on 127.0.0.1, written from ARM's REST API
//! reference, for the Azure component's tests: one subscription and
//! resource group holding a virtual network with a subnet, an NSG on it, a
//! scale set with one VM and a standalone VM, each with one NIC, and the
//! region's Resource SKUs.
//!
//! It keeps state like ARM: a PUT of a NIC allocates an address to each new
//! Dynamic IP configuration; a PUT of a scale-set VM's model makes its NIC
//! match it; every write bumps the resource's etag and answers with an
//! `Azure-AsyncOperation` to poll (InProgress, then Succeeded or Failed); an
//! `If-Match` that is not the current etag is 412. It refuses a scale-set
//! VM PUT that still carries a Compute Gallery image reference (ARM answers
//! that with a permission error: Cilium #19695), a request without the
//! bearer token, a PUT without Content-Length (411, as servers that need a
//! body's length answer a chunked one), and a list of scale-set NICs at any
//! api-version but 2018-10-01. Tests queue faults (429 with Retry-After,
//! 409 AnotherOperationInProgress, an etag changed behind the writer's
//! back, a NIC operation that ends Failed and leaves its new configurations
//! in state Failed), add a second NIC to the standalone VM or a Failed
//! configuration to a NIC, and read every request it saw.

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::StubRequest;

pub const SUBSCRIPTION: &str = "00000000-1111-2222-3333-444444444444";
pub const GROUP: &str = "rg";
pub const LOCATION: &str = "eastus";
/// The bearer token the host hands the guest in these tests.
pub const TOKEN: &str = "entra-token-from-the-host";
pub const SCALE_SET: &str = "pool";
pub const SCALE_SET_NIC: &str = "pool-nic";
pub const VM: &str = "vm1";
pub const VM_NIC: &str = "vm1-nic";
pub const SUBNET_CIDR: &str = "10.0.0.0/24";
pub const SCALE_SET_VM_SIZE: &str = "Standard_D2s_v3";
pub const VM_SIZE: &str = "Standard_D4s_v3";

pub fn group_path() -> String {
    format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}")
}

pub fn vnet_id() -> String {
    format!(
        "{}/providers/Microsoft.Network/virtualNetworks/vnet",
        group_path()
    )
}

pub fn subnet_id() -> String {
    format!("{}/subnets/nodes", vnet_id())
}

pub fn scale_set_vm_id() -> String {
    format!(
        "{}/providers/Microsoft.Compute/virtualMachineScaleSets/{SCALE_SET}/virtualMachines/0",
        group_path()
    )
}

pub fn scale_set_nic_id() -> String {
    format!("{}/networkInterfaces/{SCALE_SET_NIC}", scale_set_vm_id())
}

pub fn vm_id() -> String {
    format!(
        "{}/providers/Microsoft.Compute/virtualMachines/{VM}",
        group_path()
    )
}

pub fn vm_nic_id() -> String {
    format!(
        "{}/providers/Microsoft.Network/networkInterfaces/{VM_NIC}",
        group_path()
    )
}

/// One request as the stub saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub if_match: Option<String>,
    pub authorization: Option<String>,
}

impl Seen {
    /// `GET /path` (no query), for comparing call sequences.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A fault the next matching request meets.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status and ARM error code, with Retry-After when
    /// given.
    Status {
        method: Method,
        status: u16,
        code: &'static str,
        retry_after: Option<u64>,
    },
    /// Another writer changes the resource just before the next PUT lands:
    /// the PUT's If-Match no longer matches.
    ChangedBeforePut,
}

#[derive(Default)]
struct State {
    nics: BTreeMap<String, Value>,
    scale_set_vm: Value,
    etags: BTreeMap<String, u64>,
    /// Operation id -> polls left before it ends, and its failure if any.
    operations: BTreeMap<u64, (u32, Option<&'static str>)>,
    next_operation: u64,
    faults: VecDeque<Fault>,
    seen: Vec<Seen>,
    /// The failure the next scale-set VM operation ends with.
    fail_next_operation: Option<&'static str>,
    /// The failure the next standalone NIC operation ends with; its new
    /// configurations stay on the NIC in state Failed, as ARM leaves them.
    fail_next_nic_operation: Option<&'static str>,
}

pub struct ArmStub {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

fn reply(status: u16, headers: &[(&str, String)], body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).expect("a status"))
        .header("content-type", "application/json; charset=utf-8");
    for (name, value) in headers {
        response = response.header(*name, value);
    }
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    response.body(Full::new(body)).expect("stub response")
}

fn error(status: u16, code: &str, message: &str) -> Response<Full<Bytes>> {
    reply(
        status,
        &[],
        json!({"error": {"code": code, "message": message}}),
    )
}

fn ip_configuration(nic_id: &str, name: &str, address: &str, primary: bool) -> Value {
    json!({
        "name": name,
        "id": format!("{nic_id}/ipConfigurations/{name}"),
        "etag": "W/\"1\"",
        "properties": {
            "provisioningState": "Succeeded",
            "privateIPAddress": address,
            "privateIPAllocationMethod": "Dynamic",
            "subnet": {"id": subnet_id()},
            "primary": primary,
            "privateIPAddressVersion": "IPv4",
            "applicationSecurityGroups": [{"id": format!("{}/providers/Microsoft.Network/applicationSecurityGroups/nodes", group_path())}]
        }
    })
}

fn nic(id: &str, mac: &str, vm: &str, address: &str) -> Value {
    json!({
        "name": id.rsplit('/').next(),
        "id": id,
        "etag": "W/\"1\"",
        "location": LOCATION,
        "type": "Microsoft.Network/networkInterfaces",
        "tags": {"pool": "nodes"},
        "properties": {
            "provisioningState": "Succeeded",
            "macAddress": mac,
            "primary": true,
            "enableAcceleratedNetworking": true,
            "virtualMachine": {"id": vm},
            "networkSecurityGroup": {"id": format!("{}/providers/Microsoft.Network/networkSecurityGroups/nodes-nsg", group_path())},
            "ipConfigurations": [ip_configuration(id, "ipconfig1", address, true)]
        }
    })
}

fn scale_set_vm() -> Value {
    json!({
        "name": format!("{SCALE_SET}_0"),
        "id": scale_set_vm_id(),
        "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "instanceId": "0",
        "location": LOCATION,
        "zones": ["1"],
        "etag": "\"1\"",
        "sku": {"name": SCALE_SET_VM_SIZE, "tier": "Standard"},
        "properties": {
            "latestModelApplied": true,
            "provisioningState": "Succeeded",
            "storageProfile": {
                "imageReference": {"id": "/subscriptions/other/resourceGroups/images/providers/Microsoft.Compute/galleries/g/images/node/versions/1.0.0"},
                "osDisk": {"osType": "Linux", "createOption": "FromImage"}
            },
            "networkProfile": {"networkInterfaces": [{"id": scale_set_nic_id(), "properties": {"primary": true}}]},
            "networkProfileConfiguration": {"networkInterfaceConfigurations": [{
                "name": SCALE_SET_NIC,
                "properties": {
                    "primary": true,
                    "enableIPForwarding": true,
                    "ipConfigurations": [{
                        "name": "ipconfig1",
                        "properties": {
                            "subnet": {"id": subnet_id()},
                            "primary": true,
                            "privateIPAddressVersion": "IPv4",
                            "applicationSecurityGroups": [{"id": format!("{}/providers/Microsoft.Network/applicationSecurityGroups/nodes", group_path())}]
                        }
                    }]
                }
            }]}
        }
    })
}

fn key(id: &str) -> String {
    id.to_ascii_lowercase()
}

impl State {
    fn new() -> Self {
        let mut state = State::default();
        for (id, mac, vm, address) in [
            (
                scale_set_nic_id(),
                "00-0D-3A-00-00-01",
                scale_set_vm_id(),
                "10.0.0.4",
            ),
            (vm_nic_id(), "00-0D-3A-00-00-02", vm_id(), "10.0.0.5"),
        ] {
            state.nics.insert(key(&id), nic(&id, mac, &vm, address));
            state.etags.insert(key(&id), 1);
        }
        state.scale_set_vm = scale_set_vm();
        state.etags.insert(key(&scale_set_vm_id()), 1);
        state
    }

    fn addresses_in_use(&self) -> Vec<Ipv4Addr> {
        self.nics
            .values()
            .flat_map(|nic| configurations(nic).iter())
            .filter_map(|c| c["properties"]["privateIPAddress"].as_str()?.parse().ok())
            .collect()
    }

    /// The next free address of the subnet past Azure's reserved ones.
    fn allocate(&self, taken: &[Ipv4Addr]) -> Option<Ipv4Addr> {
        let in_use = self.addresses_in_use();
        (4u8..255)
            .map(|last| Ipv4Addr::new(10, 0, 0, last))
            .find(|a| !in_use.contains(a) && !taken.contains(a))
    }

    fn etag(&self, id: &str) -> String {
        let n = self.etags.get(&key(id)).copied().unwrap_or(1);
        if id.contains("virtualMachineScaleSets") && !id.contains("networkInterfaces") {
            format!("\"{n}\"")
        } else {
            format!("W/\"{n}\"")
        }
    }

    fn bump(&mut self, id: &str) {
        *self.etags.entry(key(id)).or_insert(1) += 1;
    }

    fn with_etag(&self, id: &str, mut resource: Value) -> Value {
        resource["etag"] = json!(self.etag(id));
        resource
    }

    fn start_operation(&mut self, failure: Option<&'static str>) -> u64 {
        self.next_operation += 1;
        self.operations.insert(self.next_operation, (1, failure));
        self.next_operation
    }
}

fn configurations(nic: &Value) -> &Vec<Value> {
    static NONE: Vec<Value> = Vec::new();
    nic["properties"]["ipConfigurations"]
        .as_array()
        .unwrap_or(&NONE)
}

impl ArmStub {
    pub async fn start() -> ArmStub {
        let state = Arc::new(Mutex::new(State::new()));
        let shared = state.clone();
        let endpoint = Arc::new(Mutex::new(String::new()));
        let base = endpoint.clone();
        let address = crate::stub_server(move |request| {
            let base = base.lock().expect("endpoint").clone();
            let mut state = shared.lock().expect("stub state");
            answer(&mut state, &base, request)
        })
        .await;
        let url = format!("http://{address}");
        *endpoint.lock().expect("endpoint") = url.clone();
        ArmStub {
            endpoint: url,
            state,
        }
    }

    /// The settings selecting everything the stub holds.
    pub fn settings(&self) -> serde_json::Value {
        json!({
            "subscription-id": SUBSCRIPTION,
            "resource-group": GROUP,
            "location": LOCATION,
            "arm-endpoint": self.endpoint,
            "poll-interval-ms": 10,
        })
    }

    pub fn fault(&self, fault: Fault) {
        self.state
            .lock()
            .expect("stub state")
            .faults
            .push_back(fault);
    }

    /// The next scale-set VM update's operation ends Failed with `code`.
    pub fn fail_next_operation(&self, code: &'static str) {
        self.state.lock().expect("stub state").fail_next_operation = Some(code);
    }

    /// The next standalone NIC update's operation ends Failed with `code`,
    /// its new configurations left on the NIC in state Failed.
    pub fn fail_next_nic_operation(&self, code: &'static str) {
        self.state
            .lock()
            .expect("stub state")
            .fail_next_nic_operation = Some(code);
    }

    /// Attach a second NIC, `name`, to the standalone VM (not its primary);
    /// its id.
    pub fn add_vm_nic(&self, name: &str) -> String {
        let id = format!(
            "{}/providers/Microsoft.Network/networkInterfaces/{name}",
            group_path()
        );
        let mut state = self.state.lock().expect("stub state");
        let address = state.allocate(&[]).expect("room").to_string();
        let mut second = nic(&id, "00-0D-3A-00-00-0B", &vm_id(), &address);
        second["properties"]["primary"] = json!(false);
        state.nics.insert(key(&id), second);
        state.etags.insert(key(&id), 1);
        id
    }

    /// Put an IP configuration `name` in state Failed on standalone NIC
    /// `nic_id`, holding an address of the subnet, as an operation that
    /// ended Failed leaves it; its address.
    pub fn add_failed_configuration(&self, nic_id: &str, name: &str) -> Ipv4Addr {
        let mut state = self.state.lock().expect("stub state");
        let address = state.allocate(&[]).expect("room");
        let mut config = ip_configuration(nic_id, name, &address.to_string(), false);
        config["properties"]["provisioningState"] = json!("Failed");
        let nic = state.nics.get_mut(&key(nic_id)).expect("a NIC of the stub");
        nic["properties"]["ipConfigurations"]
            .as_array_mut()
            .expect("configurations")
            .push(config);
        address
    }

    /// The NIC's configurations as (name, provisioning state).
    pub fn nic_configurations(&self, nic_id: &str) -> Vec<(String, String)> {
        let state = self.state.lock().expect("stub state");
        state
            .nics
            .get(&key(nic_id))
            .map(|nic| {
                configurations(nic)
                    .iter()
                    .map(|c| {
                        let field = |v: &Value| v.as_str().unwrap_or_default().to_string();
                        (
                            field(&c["name"]),
                            field(&c["properties"]["provisioningState"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().expect("stub state").seen.clone()
    }

    pub fn forget_seen(&self) {
        self.state.lock().expect("stub state").seen.clear();
    }

    /// The addresses the NIC holds, as ARM would list them.
    pub fn nic_addresses(&self, nic_id: &str) -> Vec<Ipv4Addr> {
        let state = self.state.lock().expect("stub state");
        state
            .nics
            .get(&key(nic_id))
            .map(|nic| {
                configurations(nic)
                    .iter()
                    .filter_map(|c| c["properties"]["privateIPAddress"].as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The scale-set VM's model as it now is.
    pub fn scale_set_vm(&self) -> Value {
        self.state.lock().expect("stub state").scale_set_vm.clone()
    }

    /// Fill the subnet with NIC-less reservations until `left` addresses
    /// remain free.
    pub fn fill_subnet(&self, left: usize) {
        let mut state = self.state.lock().expect("stub state");
        let mut n = 0;
        loop {
            let free = (4u8..255)
                .filter(|l| {
                    !state
                        .addresses_in_use()
                        .contains(&Ipv4Addr::new(10, 0, 0, *l))
                })
                .count();
            if free <= left {
                break;
            }
            let id = format!(
                "{}/providers/Microsoft.Network/networkInterfaces/filler-{n}",
                group_path()
            );
            let address = state.allocate(&[]).expect("room").to_string();
            let mut filler = nic(&id, "00-0D-3A-FF-FF-FF", "", &address);
            filler["properties"]
                .as_object_mut()
                .expect("properties")
                .remove("virtualMachine");
            state.nics.insert(key(&id), filler);
            n += 1;
        }
    }
}

fn page(
    base: &str,
    path: &str,
    query: &str,
    items: Vec<Value>,
    page_size: usize,
) -> Response<Full<Bytes>> {
    let skip: usize = query
        .split('&')
        .find_map(|p| p.strip_prefix("$skiptoken="))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let version = query
        .split('&')
        .find(|p| p.starts_with("api-version="))
        .unwrap_or("api-version=");
    let shown: Vec<Value> = items.iter().skip(skip).take(page_size).cloned().collect();
    let mut body = json!({"value": shown});
    if skip + page_size < items.len() {
        body["nextLink"] = json!(format!(
            "{base}{path}?{version}&$skiptoken={}",
            skip + page_size
        ));
    }
    reply(200, &[], body)
}

/// The answer of a GET of the scale-set VM's NIC (with its etag), as
/// `body` puts it; ARM serves scale-set VM NICs at the older api-version
/// only and refuses the others.
fn scale_set_nic(
    state: &State,
    request: &StubRequest,
    body: impl FnOnce(Value) -> Value,
) -> Response<Full<Bytes>> {
    if !request.query.contains("api-version=2018-10-01") {
        return error(
            400,
            "NoRegisteredProviderFound",
            "No registered resource provider found for this api-version.",
        );
    }
    let id = scale_set_nic_id();
    reply(
        200,
        &[],
        body(state.with_etag(&id, state.nics[&key(&id)].clone())),
    )
}

fn answer(state: &mut State, base: &str, request: StubRequest) -> Response<Full<Bytes>> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    state.seen.push(Seen {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        if_match: header("if-match"),
        authorization: header("authorization"),
    });
    if header("authorization").as_deref() != Some(&format!("Bearer {TOKEN}")) {
        return error(
            401,
            "InvalidAuthenticationToken",
            "The access token is invalid.",
        );
    }
    if !request.query.contains("api-version=") {
        return error(
            400,
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        );
    }
    if let Some(at) = state.faults.iter().position(|f| match f {
        Fault::Status { method, .. } => *method == request.method,
        Fault::ChangedBeforePut => request.method == Method::PUT,
    }) {
        match state.faults.remove(at).expect("a fault") {
            Fault::Status {
                status,
                code,
                retry_after,
                ..
            } => {
                let mut response = error(status, code, &format!("injected {code}"));
                if let Some(seconds) = retry_after {
                    response.headers_mut().insert(
                        "retry-after",
                        seconds.to_string().parse().expect("a header"),
                    );
                }
                return response;
            }
            Fault::ChangedBeforePut => {
                let path = request.path.clone();
                state.bump(&path);
            }
        }
    }
    let path = request.path.to_ascii_lowercase();
    let group = key(&group_path());
    let scale_set = key(&format!(
        "{}/providers/Microsoft.Compute/virtualMachineScaleSets/{SCALE_SET}",
        group_path()
    ));
    let operations = |namespace: &str| {
        key(&format!(
            "/subscriptions/{SUBSCRIPTION}/providers/{namespace}/locations/{LOCATION}/operations/"
        ))
    };
    let get = request.method == Method::GET;
    let put = request.method == Method::PUT;
    if put && !request.headers.contains_key(http::header::CONTENT_LENGTH) {
        return error(
            411,
            "LengthRequired",
            "A request body must be sent with Content-Length.",
        );
    }

    if get && path == format!("{group}/providers/microsoft.network/virtualnetworks") {
        let in_use: Vec<Value> = state
            .nics
            .values()
            .flat_map(|nic| configurations(nic).iter())
            .map(|c| json!({"id": c["id"]}))
            .collect();
        let vnet = json!({
            "name": "vnet", "id": vnet_id(), "location": LOCATION, "tags": {"cluster": "test"},
            "etag": "W/\"1\"", "type": "Microsoft.Network/virtualNetworks",
            "properties": {
                "provisioningState": "Succeeded",
                "addressSpace": {"addressPrefixes": ["10.0.0.0/16"]},
                "subnets": [{
                    "name": "nodes", "id": subnet_id(),
                    "properties": {
                        "provisioningState": "Succeeded", "addressPrefix": SUBNET_CIDR,
                        "ipConfigurations": in_use,
                        "networkSecurityGroup": {"id": format!("{}/providers/Microsoft.Network/networkSecurityGroups/nodes-nsg", group_path())}
                    }
                }]
            }
        });
        return reply(200, &[], json!({"value": [vnet]}));
    }
    if get && path == format!("{group}/providers/microsoft.network/networksecuritygroups") {
        let nsg = json!({
            "name": "nodes-nsg",
            "id": format!("{}/providers/Microsoft.Network/networkSecurityGroups/nodes-nsg", group_path()),
            "location": LOCATION, "tags": {"cluster": "test"},
            "properties": {"securityRules": [], "subnets": [{"id": subnet_id()}]}
        });
        return reply(200, &[], json!({"value": [nsg]}));
    }
    if get && path == format!("{group}/providers/microsoft.compute/virtualmachinescalesets") {
        let vmss = json!({
            "name": SCALE_SET, "id": scale_set.clone(), "location": LOCATION, "tags": {"cluster": "test"},
            "sku": {"name": SCALE_SET_VM_SIZE, "tier": "Standard", "capacity": 1},
            "properties": {"orchestrationMode": "Uniform"}
        });
        return reply(200, &[], json!({"value": [vmss]}));
    }
    if get && path == format!("{scale_set}/virtualmachines") {
        let vm = state.with_etag(&scale_set_vm_id(), state.scale_set_vm.clone());
        return reply(200, &[], json!({"value": [vm]}));
    }
    if get && path == format!("{scale_set}/networkinterfaces") {
        return scale_set_nic(state, &request, |nic| json!({"value": [nic]}));
    }
    if path == key(&scale_set_vm_id()) && (get || put) {
        if get {
            let vm = state.with_etag(&scale_set_vm_id(), state.scale_set_vm.clone());
            return reply(200, &[], vm);
        }
        return put_scale_set_vm(state, base, &request, header("if-match"));
    }
    if get && path == key(&scale_set_nic_id()) {
        return scale_set_nic(state, &request, |nic| nic);
    }
    if get && path == format!("{group}/providers/microsoft.compute/virtualmachines") {
        let vm = json!({
            "name": VM, "id": vm_id(), "location": LOCATION, "tags": {"cluster": "test"},
            "properties": {
                "hardwareProfile": {"vmSize": VM_SIZE},
                "networkProfile": {"networkInterfaces": [{"id": vm_nic_id(), "properties": {"primary": true}}]},
                "provisioningState": "Succeeded"
            }
        });
        return reply(200, &[], json!({"value": [vm]}));
    }
    if get && path == format!("{group}/providers/microsoft.network/networkinterfaces") {
        // Standalone NICs only (scale-set NICs are listed under their scale
        // set), a page of one at a time so that paging is exercised.
        let standalone: Vec<Value> = state
            .nics
            .iter()
            .filter(|(id, _)| id.contains("/microsoft.network/networkinterfaces/"))
            .map(|(id, nic)| state.with_etag(id, nic.clone()))
            .collect();
        return page(base, &request.path, &request.query, standalone, 1);
    }
    let standalone_prefix = format!("{group}/providers/microsoft.network/networkinterfaces/");
    if let Some(name) = path
        .strip_prefix(&standalone_prefix)
        .filter(|n| !n.contains('/'))
    {
        let id = format!("{standalone_prefix}{name}");
        let Some(current) = state.nics.get(&id).cloned() else {
            return error(
                404,
                "NotFound",
                &format!("Resource {} not found.", request.path),
            );
        };
        if get {
            return reply(200, &[], state.with_etag(&id, current));
        }
        if put {
            return put_nic(state, base, &id, &request, header("if-match"));
        }
    }
    if get && path == format!("/subscriptions/{SUBSCRIPTION}/providers/microsoft.compute/skus") {
        if !request
            .query
            .contains(&format!("$filter=location%20eq%20%27{LOCATION}%27"))
        {
            return error(400, "InvalidFilter", "expected a location filter");
        }
        let sku = |name: &str, nics: &str| {
            json!({
                "resourceType": "virtualMachines", "name": name, "tier": "Standard",
                "size": name.trim_start_matches("Standard_"), "family": "standardDSv3Family",
                "locations": [LOCATION],
                "capabilities": [
                    {"name": "vCPUs", "value": "2"},
                    {"name": "MaxNetworkInterfaces", "value": nics},
                    {"name": "AcceleratedNetworkingEnabled", "value": "True"}
                ],
                "restrictions": []
            })
        };
        let disk = json!({"resourceType": "disks", "name": "Premium_LRS", "locations": [LOCATION], "capabilities": []});
        return reply(
            200,
            &[],
            json!({"value": [disk, sku(SCALE_SET_VM_SIZE, "2"), sku(VM_SIZE, "4")]}),
        );
    }
    if let Some(id) = ["Microsoft.Network", "Microsoft.Compute"]
        .into_iter()
        .find_map(|namespace| path.strip_prefix(&operations(namespace)))
        .and_then(|n| n.parse::<u64>().ok())
    {
        if get {
            return poll(state, id);
        }
    }
    error(
        404,
        "ResourceNotFound",
        &format!("The resource {} was not found.", request.path),
    )
}

/// Where a write's operation is polled: the resource provider's operations
/// of the region (`Microsoft.Network` for a NIC, `Microsoft.Compute` for a
/// scale-set VM), as ARM answers.
fn async_headers(base: &str, namespace: &str, operation: u64) -> Vec<(&'static str, String)> {
    vec![
        (
            "azure-asyncoperation",
            format!("{base}/subscriptions/{SUBSCRIPTION}/providers/{namespace}/locations/{LOCATION}/operations/{operation}?api-version=2024-03-01"),
        ),
        ("retry-after", "0".to_string()),
    ]
}

fn poll(state: &mut State, id: u64) -> Response<Full<Bytes>> {
    let Some((left, failure)) = state.operations.get_mut(&id) else {
        return error(404, "OperationNotFound", "no such operation");
    };
    if *left > 0 {
        *left -= 1;
        return reply(
            200,
            &[("retry-after", "0".into())],
            json!({"status": "InProgress"}),
        );
    }
    match failure {
        None => reply(200, &[], json!({"status": "Succeeded"})),
        Some(code) => reply(
            200,
            &[],
            json!({"status": "Failed", "error": {"code": code, "message": format!("the operation failed: {code}")}}),
        ),
    }
}

fn check_if_match(
    state: &State,
    id: &str,
    if_match: Option<String>,
) -> Option<Response<Full<Bytes>>> {
    match if_match {
        Some(etag) if etag != state.etag(id) => Some(error(
            412,
            "PreconditionFailed",
            "The condition specified using HTTP conditional header(s) is not met.",
        )),
        _ => None,
    }
}

fn put_nic(
    state: &mut State,
    base: &str,
    id: &str,
    request: &StubRequest,
    if_match: Option<String>,
) -> Response<Full<Bytes>> {
    if let Some(refused) = check_if_match(state, id, if_match) {
        return refused;
    }
    let Ok(mut body) = serde_json::from_slice::<Value>(&request.body) else {
        return error(400, "InvalidRequestFormat", "Cannot parse the request.");
    };
    let Some(configs) = body["properties"]["ipConfigurations"].as_array().cloned() else {
        return error(400, "InvalidRequestFormat", "no ipConfigurations");
    };
    // Addresses held now by other NICs, and new ones as they are allocated.
    let others: Vec<Ipv4Addr> = state
        .nics
        .iter()
        .filter(|(other, _)| other.as_str() != id)
        .flat_map(|(_, nic)| configurations(nic).iter())
        .filter_map(|c| c["properties"]["privateIPAddress"].as_str()?.parse().ok())
        .collect();
    let failure = state.fail_next_nic_operation.take();
    let current = state.nics.get(id).cloned().unwrap_or(Value::Null);
    let mut kept: Vec<Ipv4Addr> = Vec::new();
    let mut updated = Vec::new();
    for mut config in configs {
        let name = config["name"].as_str().unwrap_or_default().to_string();
        // A configuration the NIC already has keeps its state (a Failed one
        // stays Failed); a new one is provisioned, or fails with the
        // operation.
        let state_now = configurations(&current)
            .iter()
            .find(|c| c["name"] == name.as_str())
            .map(|c| c["properties"]["provisioningState"].clone())
            .unwrap_or_else(|| {
                json!(if failure.is_some() {
                    "Failed"
                } else {
                    "Succeeded"
                })
            });
        if let Some(address) = config["properties"]["privateIPAddress"]
            .as_str()
            .and_then(|a| a.parse().ok())
        {
            kept.push(address);
        } else {
            let free = (4u8..255)
                .map(|l| Ipv4Addr::new(10, 0, 0, l))
                .find(|a| !others.contains(a) && !kept.contains(a));
            let Some(address) = free else {
                return error(400, "SubnetIsFull", &format!("Subnet nodes with address prefix {SUBNET_CIDR} does not have enough capacity for 1 IP addresses."));
            };
            kept.push(address);
            config["properties"]["privateIPAddress"] = json!(address.to_string());
        }
        config["id"] = json!(format!("{}/ipConfigurations/{name}", request.path));
        config["properties"]["provisioningState"] = state_now;
        updated.push(config);
    }
    body["properties"]["ipConfigurations"] = json!(updated);
    state.nics.insert(id.to_string(), body.clone());
    state.bump(id);
    let operation = state.start_operation(failure);
    reply(
        200,
        &async_headers(base, "Microsoft.Network", operation),
        state.with_etag(id, body),
    )
}

fn put_scale_set_vm(
    state: &mut State,
    base: &str,
    request: &StubRequest,
    if_match: Option<String>,
) -> Response<Full<Bytes>> {
    let id = scale_set_vm_id();
    if let Some(refused) = check_if_match(state, &id, if_match) {
        return refused;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
        return error(400, "InvalidRequestFormat", "Cannot parse the request.");
    };
    if !body["properties"]["storageProfile"]["imageReference"].is_null() {
        return error(
            403,
            "LinkedAuthorizationFailed",
            "The client has permission to perform action 'Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write', however it does not have permission to perform action 'Microsoft.Compute/galleries/images/versions/read' on the linked scope(s).",
        );
    }
    let Some(wanted) = body["properties"]["networkProfileConfiguration"]
        ["networkInterfaceConfigurations"][0]["properties"]["ipConfigurations"]
        .as_array()
        .cloned()
    else {
        return error(
            400,
            "InvalidRequestFormat",
            "no networkInterfaceConfigurations",
        );
    };
    // The NIC follows the model: configurations kept keep their address,
    // new ones get one, dropped ones are released.
    let nic_key = key(&scale_set_nic_id());
    let current = state.nics[&nic_key].clone();
    let mut configs = Vec::new();
    let mut taken = Vec::new();
    for config in &wanted {
        let name = config["name"].as_str().unwrap_or_default();
        let existing = configurations(&current)
            .iter()
            .find(|c| c["name"] == name)
            .cloned();
        let config = match existing {
            Some(existing) => existing,
            None => {
                let Some(address) = state.allocate(&taken) else {
                    return error(
                        400,
                        "SubnetIsFull",
                        "Subnet nodes does not have enough capacity.",
                    );
                };
                taken.push(address);
                ip_configuration(&scale_set_nic_id(), name, &address.to_string(), false)
            }
        };
        configs.push(config);
    }
    let mut nic = current;
    nic["properties"]["ipConfigurations"] = json!(configs);
    let failure = state.fail_next_operation.take();
    if failure.is_none() {
        state.nics.insert(nic_key, nic);
        // ARM keeps the image reference it was not sent.
        let image = state.scale_set_vm["properties"]["storageProfile"]["imageReference"].clone();
        let mut model = body;
        model["properties"]["storageProfile"]["imageReference"] = image;
        state.scale_set_vm = model;
        state.bump(&id);
    }
    let operation = state.start_operation(failure);
    reply(
        202,
        &async_headers(base, "Microsoft.Compute", operation),
        Value::Null,
    )
}
