//! The budget of what one instance holds on the host's side, outside its
//! linear memory: the entries of its resource table (capped by the table
//! itself) and the bytes those entries hold (header sets, URLs, buffered
//! bodies), weighed here whenever a guest asks for more.
//!
//! The wasi:http functions through which a guest grows what the host holds
//! (`fields.from-list`, `set`, `append`, `clone`, `outgoing-request`'s
//! `set-method`, `set-path-with-query`, `set-authority`, `body` and
//! `headers`, `incoming-response.headers`) are linked over
//! wasmtime-wasi-http's own: each first weighs the table, and past the budget
//! answers the error WASI has for it (`header-error.forbidden`, the request
//! setters' error) or, for `clone` and `headers` which have none, traps.
//! Every other way to make an entry (pollables, streams, futures, requests)
//! ends at the table's entry cap, which traps. Either way the call is
//! reported, the instance replaced, and the provider's [`crate::BudgetSink`]
//! told; and once the budget refused a call something, the call sends no
//! more requests (one would go out without what was refused).
//!
//! `set-authority` also refuses an authority longer than any host name and
//! port ([`crate::egress::AUTHORITY_BYTES`]), within the budget or not.

use wasmtime::component::{Linker, Resource, ResourceTable, ResourceTableError};
use wasmtime_wasi_http::p2::bindings::http::types::{
    HeaderError, HostFields, HostIncomingResponse as IncomingResponseApi, HostOutgoingRequest,
    Method,
};
use wasmtime_wasi_http::p2::body::HostOutgoingBody;
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest as OutgoingRequest,
};
use wasmtime_wasi_http::{FieldMap, WasiHttpView};

use crate::egress::AUTHORITY_BYTES;
use crate::state::StoreState;

/// The wasi:http version wasmtime-wasi-http links; its functions are
/// re-linked here under the same name.
const HTTP_TYPES: &str = "wasi:http/types@0.2.12";

/// What one header name or value costs besides its bytes (the map's own
/// bookkeeping).
const FIELD_OVERHEAD: usize = 64;
/// What one table entry costs however small it is.
pub const ENTRY_BYTES: usize = 256;
/// The most one write to an outgoing body's stream carries
/// (wasi:http's `p2_outgoing_body_chunk_size`).
pub const BODY_CHUNK_BYTES: usize = 64 * 1024;
/// What an outgoing body may hold buffered: the channel's two chunks and the
/// one being written.
const BODY_BUFFER_BYTES: usize = 3 * BODY_CHUNK_BYTES;
/// The most one header set may hold, however much budget is left (HTTP
/// servers refuse far less).
pub const HEADER_SET_BYTES: usize = 64 * 1024;

/// Which part of the budget a guest went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// The resource table's entry cap.
    Entries,
    /// The bytes the entries hold.
    Bytes,
    /// One header set over [`HEADER_SET_BYTES`].
    HeaderSet,
}

impl OverBudget {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            OverBudget::Entries => "entries",
            OverBudget::Bytes => "bytes",
            OverBudget::HeaderSet => "header-set",
        }
    }
}

/// One instance's budget and whether the current call went over it.
#[derive(Debug, Clone)]
pub struct HostBudget {
    pub entries: usize,
    pub bytes: usize,
    pub exceeded: Option<OverBudget>,
}

impl HostBudget {
    pub fn new(entries: usize, bytes: usize) -> Self {
        Self {
            entries,
            bytes,
            exceeded: None,
        }
    }

    /// Whether `adding` more bytes fits; remembers the refusal if not.
    fn admit(&mut self, table: &mut ResourceTable, adding: usize) -> bool {
        let held = weigh(table);
        if held.saturating_add(adding) > self.bytes {
            self.exceeded = Some(OverBudget::Bytes);
            return false;
        }
        true
    }

    /// Whether a header set holding `holding` bytes may take `adding` more.
    fn admit_header(&mut self, table: &mut ResourceTable, holding: usize, adding: usize) -> bool {
        if holding.saturating_add(adding) > HEADER_SET_BYTES {
            self.exceeded = Some(OverBudget::HeaderSet);
            return false;
        }
        self.admit(table, adding)
    }

    /// After a trap: whether it was the entry cap that caused it.
    pub fn note_trap(&mut self, error: &wasmtime::Error) {
        let table_full = error
            .chain()
            .any(|cause| matches!(cause.downcast_ref(), Some(ResourceTableError::Full)));
        if table_full && self.exceeded.is_none() {
            self.exceeded = Some(OverBudget::Entries);
        }
    }
}

fn name_bytes(name: &str) -> usize {
    name.len() + FIELD_OVERHEAD
}

fn value_bytes(value: &[u8]) -> usize {
    value.len() + FIELD_OVERHEAD
}

/// A custom method is a string of the guest's, of any length.
fn method_bytes(method: &Method) -> usize {
    match method {
        Method::Other(text) => text.len(),
        _ => 0,
    }
}

/// The bytes a header set holds, as this budget counts them.
pub fn header_bytes(map: &http::HeaderMap) -> usize {
    map.iter()
        .map(|(name, value)| name_bytes(name.as_str()) + value_bytes(value.as_bytes()))
        .sum()
}

/// What the table's entries hold: header sets, URLs, buffered bodies, and
/// [`ENTRY_BYTES`] for each entry.
pub fn weigh(table: &mut ResourceTable) -> usize {
    table
        .iter_mut()
        .map(|entry| {
            let held = if let Some(fields) = entry.downcast_ref::<FieldMap>() {
                header_bytes(fields)
            } else if let Some(request) = entry.downcast_ref::<OutgoingRequest>() {
                header_bytes(&request.headers)
                    + method_bytes(&request.method)
                    + request.path_with_query.as_ref().map_or(0, String::len)
                    + request.authority.as_ref().map_or(0, String::len)
                    + if request.body.is_some() {
                        BODY_BUFFER_BYTES
                    } else {
                        0
                    }
            } else if entry.is::<HostOutgoingBody>() {
                BODY_BUFFER_BYTES
            } else if let Some(response) = entry.downcast_ref::<HostIncomingResponse>() {
                header_bytes(&response.headers)
            } else if let Some(HostFutureIncomingResponse::Ready(Ok((response, _)))) =
                entry.downcast_ref::<HostFutureIncomingResponse>()
            {
                header_bytes(response.headers())
            } else {
                0
            };
            held + ENTRY_BYTES
        })
        .sum()
}

/// A header error for the guest, or the trap it was.
fn header_result<T>(
    outcome: Result<T, wasmtime_wasi_http::p2::HeaderError>,
) -> wasmtime::Result<(Result<T, HeaderError>,)> {
    match outcome {
        Ok(value) => Ok((Ok(value),)),
        Err(error) => Ok((Err(error.downcast()?),)),
    }
}

fn entries_bytes(entries: &[(String, Vec<u8>)]) -> usize {
    entries
        .iter()
        .map(|(name, value)| name_bytes(name) + value_bytes(value))
        .sum()
}

/// Link the budgeted functions over wasmtime-wasi-http's (which must be
/// linked first: shadowing is turned on for these names only).
pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(HTTP_TYPES)?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let state = store.data_mut();
            if !state.admit_header_bytes(0, entries_bytes(&entries)) {
                return Ok((Err(HeaderError::Forbidden),));
            }
            header_result(HostFields::from_list(&mut state.http(), entries))
        },
    )?;
    types.func_wrap(
        "[method]fields.set",
        |mut store, (fields, name, values): (Resource<FieldMap>, String, Vec<Vec<u8>>)| {
            let state = store.data_mut();
            let adding = name_bytes(&name) + values.iter().map(|v| value_bytes(v)).sum::<usize>();
            if !state.admit_into_fields(&fields, adding)? {
                return Ok((Err(HeaderError::Forbidden),));
            }
            header_result(HostFields::set(&mut state.http(), fields, name, values))
        },
    )?;
    types.func_wrap(
        "[method]fields.append",
        |mut store, (fields, name, value): (Resource<FieldMap>, String, Vec<u8>)| {
            let state = store.data_mut();
            let adding = name_bytes(&name) + value_bytes(&value);
            if !state.admit_into_fields(&fields, adding)? {
                return Ok((Err(HeaderError::Forbidden),));
            }
            header_result(HostFields::append(&mut state.http(), fields, name, value))
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store, (fields,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let adding = state.fields_bytes(&fields)?;
            if !state.admit_header_bytes(0, adding) {
                wasmtime::bail!("fields.clone: the provider's host-resource budget is spent");
            }
            Ok((HostFields::clone(&mut state.http(), fields)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store, (request, method): (Resource<OutgoingRequest>, Method)| {
            let state = store.data_mut();
            if !state.admit_bytes(method_bytes(&method)) {
                return Ok((Err(()),));
            }
            Ok((HostOutgoingRequest::set_method(
                &mut state.http(),
                request,
                method,
            )?,))
        },
    )?;
    for setter in ["set-path-with-query", "set-authority"] {
        types.func_wrap(
            &format!("[method]outgoing-request.{setter}"),
            move |mut store, (request, text): (Resource<OutgoingRequest>, Option<String>)| {
                let state = store.data_mut();
                let length = text.as_ref().map_or(0, String::len);
                if setter == "set-authority" && length > AUTHORITY_BYTES {
                    return Ok((Err(()),));
                }
                if !state.admit_bytes(length) {
                    return Ok((Err(()),));
                }
                let mut view = state.http();
                let outcome = if setter == "set-authority" {
                    HostOutgoingRequest::set_authority(&mut view, request, text)?
                } else {
                    HostOutgoingRequest::set_path_with_query(&mut view, request, text)?
                };
                Ok((outcome,))
            },
        )?;
    }
    types.func_wrap(
        "[method]outgoing-request.body",
        |mut store, (request,): (Resource<OutgoingRequest>,)| {
            let state = store.data_mut();
            if !state.admit_bytes(BODY_BUFFER_BYTES) {
                return Ok((Err(()),));
            }
            Ok((HostOutgoingRequest::body(&mut state.http(), request)?,))
        },
    )?;
    // Each handle on a header set is weighed as a copy of it (the copy
    // shares the map today; the budget does not count on that), and the
    // call that takes one too many pays, not the next.
    types.func_wrap(
        "[method]outgoing-request.headers",
        |mut store, (request,): (Resource<OutgoingRequest>,)| {
            let state = store.data_mut();
            let adding = {
                let (_, table) = state.budget_and_table();
                header_bytes(&table.get(&request)?.headers)
            };
            if !state.admit_bytes(adding) {
                wasmtime::bail!(
                    "outgoing-request.headers: the provider's host-resource budget is spent"
                );
            }
            Ok((HostOutgoingRequest::headers(&mut state.http(), request)?,))
        },
    )?;
    types.func_wrap(
        "[method]incoming-response.headers",
        |mut store, (response,): (Resource<HostIncomingResponse>,)| {
            let state = store.data_mut();
            let adding = {
                let (_, table) = state.budget_and_table();
                header_bytes(&table.get(&response)?.headers)
            };
            if !state.admit_bytes(adding) {
                wasmtime::bail!(
                    "incoming-response.headers: the provider's host-resource budget is spent"
                );
            }
            Ok((IncomingResponseApi::headers(&mut state.http(), response)?,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

impl StoreState {
    fn admit_bytes(&mut self, adding: usize) -> bool {
        let (budget, table) = self.budget_and_table();
        let admitted = budget.admit(table, adding);
        self.refuse_sends_unless(admitted)
    }

    fn admit_header_bytes(&mut self, holding: usize, adding: usize) -> bool {
        let (budget, table) = self.budget_and_table();
        let admitted = budget.admit_header(table, holding, adding);
        self.refuse_sends_unless(admitted)
    }

    /// After a refusal the call sends nothing more: the request the refused
    /// header or URL was for must not go out without it.
    fn refuse_sends_unless(&mut self, admitted: bool) -> bool {
        if !admitted {
            self.hooks_mut().sends_refused = true;
        }
        admitted
    }

    fn fields_bytes(&mut self, fields: &Resource<FieldMap>) -> wasmtime::Result<usize> {
        let (_, table) = self.budget_and_table();
        Ok(header_bytes(table.get(fields)?))
    }

    fn admit_into_fields(
        &mut self,
        fields: &Resource<FieldMap>,
        adding: usize,
    ) -> wasmtime::Result<bool> {
        let holding = self.fields_bytes(fields)?;
        Ok(self.admit_header_bytes(holding, adding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(entries: &[(&str, usize)]) -> FieldMap {
        let mut map = http::HeaderMap::new();
        for (name, len) in entries {
            let name: http::HeaderName = name.parse().unwrap();
            map.append(
                name,
                http::HeaderValue::from_bytes(&vec![b'x'; *len]).unwrap(),
            );
        }
        let mut fields = FieldMap::new_mutable(usize::MAX);
        for (name, value) in &map {
            fields
                .append_raw(name.clone(), value.clone())
                .expect("within the limit");
        }
        fields
    }

    #[test]
    fn the_table_weighs_its_header_sets_and_entries() {
        let mut table = ResourceTable::new();
        assert_eq!(weigh(&mut table), 0);
        table.push(fields(&[("x-a", 1000), ("x-b", 10)])).unwrap();
        let header = (3 + 64 + 1000 + 64) + (3 + 64 + 10 + 64);
        assert_eq!(weigh(&mut table), header + ENTRY_BYTES);
        table.push(fields(&[])).unwrap();
        assert_eq!(weigh(&mut table), header + 2 * ENTRY_BYTES);
    }

    #[test]
    fn a_requests_custom_method_is_weighed() {
        let request = |method| OutgoingRequest {
            method,
            scheme: None,
            authority: None,
            path_with_query: None,
            headers: FieldMap::default(),
            body: None,
        };
        let mut table = ResourceTable::new();
        table.push(request(Method::Get)).unwrap();
        assert_eq!(weigh(&mut table), ENTRY_BYTES);
        table
            .push(request(Method::Other("M".repeat(4 << 20))))
            .unwrap();
        assert_eq!(weigh(&mut table), 2 * ENTRY_BYTES + (4 << 20));
    }

    #[test]
    fn growth_past_the_budget_is_refused_and_remembered() {
        let mut table = ResourceTable::new();
        table.push(fields(&[("x-a", 4000)])).unwrap();
        let mut budget = HostBudget::new(100, 8000);
        assert!(budget.admit(&mut table, 3000));
        assert_eq!(budget.exceeded, None);
        assert!(!budget.admit(&mut table, 4000));
        assert_eq!(budget.exceeded, Some(OverBudget::Bytes));

        let mut budget = HostBudget::new(100, usize::MAX);
        assert!(budget.admit_header(&mut table, HEADER_SET_BYTES - 10, 10));
        assert!(!budget.admit_header(&mut table, HEADER_SET_BYTES - 10, 11));
        assert_eq!(budget.exceeded, Some(OverBudget::HeaderSet));
    }

    #[test]
    fn a_full_table_is_recognised_in_a_trap() {
        let mut table = ResourceTable::new();
        table.set_max_capacity(1);
        table.push(1u32).unwrap();
        let full = table.push(2u32).unwrap_err();
        let trap = wasmtime::Error::from(full).context("[new_fields] pushing fields");
        let mut budget = HostBudget::new(1, 100);
        budget.note_trap(&trap);
        assert_eq!(budget.exceeded, Some(OverBudget::Entries));

        let mut budget = HostBudget::new(1, 100);
        budget.note_trap(&wasmtime::Error::msg("unreachable"));
        assert_eq!(budget.exceeded, None);
    }
}
