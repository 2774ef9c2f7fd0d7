//! The ARM client: GET a resource, list one following `nextLink`, and PUT
//! one with `If-Match` and wait for its long-running operation by polling
//! `Azure-AsyncOperation` (or `Location`), honouring Retry-After. No
//! retries: the host's rate limiter and the engine retry what fails.

use std::time::Duration;

use ipam_provider_sdk::Error;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::errors;
use crate::models::{OperationStatus, Page};
use crate::transport::{Request, Response, Transport};

/// Why a PUT did not end well.
#[derive(Debug)]
pub enum PutError {
    /// ARM took the write and its long-running operation ended `Failed`:
    /// part of the write may be on the resource.
    OperationFailed(Error),
    /// Anything else: the PUT refused, not sent, its operation canceled or
    /// not followed to its end.
    Other(Error),
}

impl From<Error> for PutError {
    fn from(error: Error) -> Self {
        PutError::Other(error)
    }
}

impl From<PutError> for Error {
    fn from(error: PutError) -> Self {
        match error {
            PutError::OperationFailed(error) | PutError::Other(error) => error,
        }
    }
}

pub struct Arm<T> {
    pub transport: T,
    /// `http[s]://host[:port]`, no trailing slash.
    pub endpoint: String,
    /// The longest a write waits for its operation, waits added up.
    pub operation_timeout: Duration,
    /// The wait between polls when ARM sends no Retry-After.
    pub poll_interval: Duration,
}

impl<T: Transport> Arm<T> {
    /// The URL of `path` (which may carry a query already) at `api_version`.
    pub fn url(&self, path: &str, api_version: &str) -> String {
        let join = if path.contains('?') { '&' } else { '?' };
        format!("{}{path}{join}api-version={api_version}", self.endpoint)
    }

    /// A URL ARM handed back (next page, operation status) is followed only
    /// on the endpoint it was configured with.
    fn ours(&self, url: &str) -> Result<(), Error> {
        let rest = url.strip_prefix(&self.endpoint).unwrap_or("x");
        if rest.starts_with('/') {
            Ok(())
        } else {
            Err(Error::Other(format!(
                "ARM handed back {url}, which is not on {}",
                self.endpoint
            )))
        }
    }

    fn send(&self, request: Request) -> Result<Response, Error> {
        let response = self.transport.send(&request)?;
        if (200..300).contains(&response.status) {
            Ok(response)
        } else {
            Err(errors::from_response(
                response.status,
                response.header("retry-after").as_deref(),
                &response.body,
            ))
        }
    }

    fn get_response(&self, url: &str) -> Result<Response, Error> {
        self.send(Request {
            method: "GET",
            url: url.to_string(),
            if_match: None,
            body: None,
        })
    }

    pub fn get<R: DeserializeOwned>(&self, url: &str) -> Result<R, Error> {
        let response = self.get_response(url)?;
        parse(url, &response.body)
    }

    /// Every item of a list, page after page.
    pub fn list<R: DeserializeOwned>(&self, url: &str) -> Result<Vec<R>, Error> {
        let mut items = Vec::new();
        let mut next = Some(url.to_string());
        while let Some(url) = next.take() {
            let page: Page<R> = self.get(&url)?;
            items.extend(page.value);
            if let Some(link) = page.next_link.filter(|l| !l.is_empty()) {
                self.ours(&link)?;
                next = Some(link);
            }
        }
        Ok(items)
    }

    /// PUT `body` to `url` if the resource still has `etag`, and wait until
    /// ARM has applied it.
    pub fn put<B: Serialize>(
        &self,
        url: &str,
        body: &B,
        etag: Option<&str>,
    ) -> Result<(), PutError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::Other(format!("encoding the PUT of {url}: {e}")))?;
        let response = self.send(Request {
            method: "PUT",
            url: url.to_string(),
            if_match: etag.map(str::to_string),
            body: Some(body),
        })?;
        self.wait(url, &response)
    }

    fn wait(&self, url: &str, response: &Response) -> Result<(), PutError> {
        let mut waited = Duration::ZERO;
        let mut retry_after = response.header("retry-after");
        let status_url = response.header("azure-asyncoperation");
        let location = response
            .header("location")
            .filter(|_| response.status == 202);
        let (poll_url, async_operation) = match (status_url, location) {
            (Some(url), _) => (url, true),
            (None, Some(url)) => (url, false),
            (None, None) => return Ok(()),
        };
        self.ours(&poll_url)?;
        loop {
            let wait = errors::retry_after_ms(retry_after.as_deref())
                .map(Duration::from_millis)
                .unwrap_or(self.poll_interval);
            if waited + wait > self.operation_timeout {
                return Err(PutError::Other(Error::Transient(format!(
                    "the PUT of {url} had not finished after {} ms of polling; the next call sees where it got",
                    waited.as_millis()
                ))));
            }
            self.transport.sleep(wait);
            waited += wait;
            let polled = self.get_response(&poll_url)?;
            retry_after = polled.header("retry-after");
            if !async_operation {
                if polled.status != 202 {
                    return Ok(());
                }
                continue;
            }
            let status: OperationStatus = parse(&poll_url, &polled.body)?;
            match status.status.as_str() {
                "Succeeded" => return Ok(()),
                "Failed" => {
                    return Err(PutError::OperationFailed(errors::from_operation(
                        &status.status,
                        status.error.as_ref(),
                    )))
                }
                "Canceled" => {
                    return Err(PutError::Other(errors::from_operation(
                        &status.status,
                        status.error.as_ref(),
                    )))
                }
                _ => {}
            }
        }
    }
}

fn parse<R: DeserializeOwned>(url: &str, body: &[u8]) -> Result<R, Error> {
    serde_json::from_slice(body).map_err(|e| {
        Error::Other(format!(
            "ARM's answer to {url} is not what its reference says: {e}"
        ))
    })
}

#[cfg(test)]
pub mod scripted {
    //! A transport that answers from a script and records what it was sent.

    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;
    use std::time::Duration;

    use ipam_provider_sdk::Error;

    use crate::transport::{Request, Response, Transport};

    #[derive(Default)]
    pub struct Scripted {
        pub answers: RefCell<VecDeque<Response>>,
        pub sent: RefCell<Vec<Request>>,
        pub slept: RefCell<Vec<Duration>>,
        /// What `now` answers; sleeping moves it on, and so may a test.
        pub clock: Cell<Duration>,
    }

    pub fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        Response {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    impl Scripted {
        pub fn new(answers: Vec<Response>) -> Self {
            Scripted {
                answers: RefCell::new(answers.into()),
                ..Default::default()
            }
        }

        pub fn urls(&self) -> Vec<String> {
            self.sent
                .borrow()
                .iter()
                .map(|r| format!("{} {}", r.method, r.url))
                .collect()
        }
    }

    impl Transport for Scripted {
        fn send(&self, request: &Request) -> Result<Response, Error> {
            self.sent.borrow_mut().push(request.clone());
            self.answers
                .borrow_mut()
                .pop_front()
                .ok_or_else(|| Error::Other(format!("the script has no answer to {}", request.url)))
        }

        fn sleep(&self, wait: Duration) {
            self.slept.borrow_mut().push(wait);
            self.clock.set(self.clock.get() + wait);
        }

        fn now(&self) -> Duration {
            self.clock.get()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::scripted::{answer, Scripted};
    use super::*;
    use crate::models::SubResource;

    const ARM: &str = "http://127.0.0.1:1";

    fn arm(answers: Vec<Response>) -> Arm<Scripted> {
        Arm {
            transport: Scripted::new(answers),
            endpoint: ARM.into(),
            operation_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(500),
        }
    }

    #[test]
    fn urls_carry_the_api_version_after_any_query() {
        let arm = arm(vec![]);
        assert_eq!(
            arm.url("/a/b", "2024-03-01"),
            format!("{ARM}/a/b?api-version=2024-03-01")
        );
        assert_eq!(
            arm.url("/skus?$filter=x", "v"),
            format!("{ARM}/skus?$filter=x&api-version=v")
        );
    }

    #[test]
    fn a_list_follows_next_link_on_the_endpoint_only() {
        let arm = arm(vec![
            answer(
                200,
                &[],
                &format!(r#"{{"value": [{{"id": "a"}}], "nextLink": "{ARM}/page2"}}"#),
            ),
            answer(200, &[], r#"{"value": [{"id": "b"}]}"#),
        ]);
        let items: Vec<SubResource> = arm.list(&format!("{ARM}/list")).unwrap();
        assert_eq!(
            items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            arm.transport.urls(),
            [format!("GET {ARM}/list"), format!("GET {ARM}/page2")]
        );

        let elsewhere = arm_with_next("http://10.0.0.1/page2");
        let refused = elsewhere.list::<SubResource>(&format!("{ARM}/list"));
        assert!(matches!(refused, Err(Error::Other(m)) if m.contains("not on")));
    }

    fn arm_with_next(next: &str) -> Arm<Scripted> {
        arm(vec![answer(
            200,
            &[],
            &format!(r#"{{"value": [], "nextLink": "{next}"}}"#),
        )])
    }

    #[test]
    fn an_error_status_is_mapped_and_bad_json_is_other() {
        let arm = arm(vec![
            answer(429, &[("Retry-After", "4")], ""),
            answer(200, &[], "{not json"),
        ]);
        assert_eq!(
            arm.get::<SubResource>(&format!("{ARM}/x")),
            Err(Error::Throttled(4000))
        );
        assert!(
            matches!(arm.get::<SubResource>(&format!("{ARM}/x")), Err(Error::Other(m)) if m.contains("not what its reference says"))
        );
    }

    #[test]
    fn a_put_sends_if_match_and_polls_the_async_operation_honouring_retry_after() {
        let status = format!("{ARM}/operations/1");
        let arm = arm(vec![
            answer(
                201,
                &[("Azure-AsyncOperation", &status), ("Retry-After", "2")],
                "{}",
            ),
            answer(200, &[("Retry-After", "1")], r#"{"status": "InProgress"}"#),
            answer(200, &[], r#"{"status": "Succeeded"}"#),
        ]);
        arm.put(
            &format!("{ARM}/nic"),
            &SubResource { id: "n".into() },
            Some("W/\"3\""),
        )
        .unwrap();
        let sent = arm.transport.sent.borrow();
        assert_eq!(sent[0].method, "PUT");
        assert_eq!(sent[0].if_match.as_deref(), Some("W/\"3\""));
        assert_eq!(sent[0].body.as_deref(), Some(&br#"{"id":"n"}"#[..]));
        assert_eq!(sent[1].url, status);
        assert_eq!(
            *arm.transport.slept.borrow(),
            [Duration::from_secs(2), Duration::from_secs(1)]
        );
    }

    #[test]
    fn a_failed_operation_is_told_apart_and_mapped_by_its_code() {
        let status = format!("{ARM}/operations/1");
        let arm = arm(vec![
            answer(200, &[("Azure-AsyncOperation", &status)], "{}"),
            answer(
                200,
                &[],
                r#"{"status": "Failed", "error": {"code": "SubnetIsFull", "message": "full"}}"#,
            ),
        ]);
        let result = arm.put(&format!("{ARM}/nic"), &SubResource { id: "n".into() }, None);
        assert!(
            matches!(result, Err(PutError::OperationFailed(Error::SubnetFull(m))) if m.contains("full"))
        );
        assert_eq!(*arm.transport.slept.borrow(), [Duration::from_millis(500)]);
    }

    #[test]
    fn a_canceled_operation_is_not_a_failed_one() {
        let status = format!("{ARM}/operations/1");
        let arm = arm(vec![
            answer(200, &[("Azure-AsyncOperation", &status)], "{}"),
            answer(200, &[], r#"{"status": "Canceled"}"#),
        ]);
        let result = arm.put(&format!("{ARM}/nic"), &SubResource { id: "n".into() }, None);
        assert!(matches!(result, Err(PutError::Other(Error::Other(m))) if m.contains("Canceled")));
    }

    #[test]
    fn a_location_is_polled_until_it_stops_answering_202() {
        let location = format!("{ARM}/operationResults/1");
        let arm = arm(vec![
            answer(202, &[("Location", &location)], ""),
            answer(202, &[], ""),
            answer(200, &[], "{}"),
        ]);
        arm.put(&format!("{ARM}/vm"), &SubResource { id: "v".into() }, None)
            .unwrap();
        assert_eq!(arm.transport.sent.borrow().len(), 3);
    }

    #[test]
    fn a_put_answered_without_an_operation_is_done() {
        let arm = arm(vec![answer(200, &[], "{}")]);
        arm.put(&format!("{ARM}/nic"), &SubResource { id: "n".into() }, None)
            .unwrap();
        assert!(arm.transport.slept.borrow().is_empty());
    }

    #[test]
    fn polling_stops_at_the_operation_timeout_as_transient() {
        let status = format!("{ARM}/operations/1");
        let mut answers = vec![answer(201, &[("Azure-AsyncOperation", &status)], "{}")];
        for _ in 0..30 {
            answers.push(answer(200, &[], r#"{"status": "InProgress"}"#));
        }
        let arm = arm(answers);
        let result = arm.put(&format!("{ARM}/nic"), &SubResource { id: "n".into() }, None);
        assert!(
            matches!(result, Err(PutError::Other(Error::Transient(m))) if m.contains("had not finished"))
        );
        // 10 s of 500 ms waits.
        assert_eq!(arm.transport.slept.borrow().len(), 20);
    }

    #[test]
    fn an_operation_url_off_the_endpoint_is_not_polled() {
        let arm = arm(vec![answer(
            201,
            &[("Azure-AsyncOperation", "http://169.254.169.254/x")],
            "{}",
        )]);
        let result = arm.put(&format!("{ARM}/nic"), &SubResource { id: "n".into() }, None);
        assert!(matches!(result, Err(PutError::Other(Error::Other(m))) if m.contains("not on")));
        assert_eq!(arm.transport.sent.borrow().len(), 1);
    }
}
