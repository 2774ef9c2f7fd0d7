//! A small blocking HTTP client over `wasi:http`, for providers whose cloud SDK
//! does not bring its own. The host enforces the provider's egress allow-list:
//! a request to a host not on it fails with `Error::Unauthorized`. A request
//! body goes out with its `Content-Length` (never chunked), and an empty POST,
//! PUT or PATCH with `Content-Length: 0`.

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;
use crate::Error;

/// The most `blocking-write-and-flush` accepts in one call.
const WRITE_CHUNK: usize = 4096;
const READ_CHUNK: u64 = 64 * 1024;
const CONTENT_LENGTH: &str = "content-length";

/// A response with its whole body read.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Send one request and read the whole response. `url` is
/// `http[s]://host[:port][/path][?query]`. The body goes out with its
/// `Content-Length` (`0` for an empty POST, PUT or PATCH; none for an empty
/// GET, DELETE or HEAD); one given in `headers` must be `body`'s length,
/// else the request is `InvalidArgument` and is not sent.
pub fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, Error> {
    let (scheme, authority, path) = split_url(url)?;
    let method = method_of(method);
    let fields = Fields::new();
    for (name, value) in request_headers(&method, headers, body.len())? {
        fields
            .append(&name, value.as_bytes())
            .map_err(|e| Error::InvalidArgument(format!("header {name}: {e:?}")))?;
    }
    let request = OutgoingRequest::new(fields);
    let bad = |what: &str| Error::InvalidArgument(format!("{what} of {url} is not valid"));
    request.set_method(&method).map_err(|()| bad("method"))?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| bad("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(|()| bad("authority"))?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| bad("path"))?;

    let outgoing_body = request
        .body()
        .map_err(|()| host_error("request body taken twice"))?;
    let future = outgoing_handler::handle(request, None).map_err(request_error)?;
    {
        let stream = outgoing_body
            .write()
            .map_err(|()| host_error("body stream taken twice"))?;
        for chunk in body.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| Error::Transient(format!("writing request body: {e:?}")))?;
        }
    }
    OutgoingBody::finish(outgoing_body, None).map_err(request_error)?;

    future.subscribe().block();
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(request_error(code)),
        Some(Err(())) | None => return Err(host_error("response future polled out of order")),
    };
    let status = response.status();
    let headers = response.headers().entries();
    let incoming = response
        .consume()
        .map_err(|()| host_error("response body taken twice"))?;
    let mut bytes = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| host_error("body stream taken twice"))?;
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(Error::Transient(format!(
                        "reading response: {}",
                        e.to_debug_string()
                    )))
                }
            }
        }
    }
    IncomingBody::finish(incoming);
    Ok(Response {
        status,
        headers,
        body: bytes,
    })
}

/// The request's headers: the caller's, and `Content-Length` when the body
/// has a length to declare. Without it wasi:http sends the body chunked,
/// which some servers answer with 400. An empty body declares `0` only on
/// the methods that carry a body (POST, PUT, PATCH); a GET, DELETE or HEAD
/// without one goes out with no body header at all. A length the caller
/// gives is kept, once, if it is the body's.
fn request_headers(
    method: &Method,
    given: &[(&str, &str)],
    body_length: usize,
) -> Result<Vec<(String, String)>, Error> {
    let mut headers = Vec::with_capacity(given.len() + 1);
    let mut length_given = false;
    for (name, value) in given {
        if name.eq_ignore_ascii_case(CONTENT_LENGTH) {
            if value.trim().parse::<usize>() != Ok(body_length) {
                return Err(Error::InvalidArgument(format!(
                    "header {name}: {value:?} is not the body's {body_length} bytes"
                )));
            }
            length_given = true;
        }
        headers.push((name.to_string(), value.to_string()));
    }
    let carries_body = matches!(method, Method::Post | Method::Put | Method::Patch);
    if !length_given && (body_length > 0 || carries_body) {
        headers.push((CONTENT_LENGTH.to_string(), body_length.to_string()));
    }
    Ok(headers)
}

fn split_url(url: &str) -> Result<(Scheme, &str, &str), Error> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err(Error::InvalidArgument(format!(
            "{url}: only http and https URLs"
        )));
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.is_empty() {
        return Err(Error::InvalidArgument(format!("{url}: no host")));
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

fn method_of(method: &str) -> Method {
    match method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_string()),
    }
}

fn request_error(code: ErrorCode) -> Error {
    match code {
        ErrorCode::HttpRequestDenied => {
            Error::Unauthorized("the host's egress policy refused this request".to_string())
        }
        other => Error::Transient(format!("HTTP request failed: {other:?}")),
    }
}

fn host_error(what: &str) -> Error {
    Error::Other(format!("wasi:http: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme_name(scheme: &Scheme) -> &str {
        match scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Other(other) => other,
        }
    }

    fn split(url: &str) -> (String, String, String) {
        let (scheme, authority, path) = split_url(url).expect("a valid URL");
        (scheme_name(&scheme).into(), authority.into(), path.into())
    }

    fn parts<'a>(scheme: &'a str, authority: &'a str, path: &'a str) -> (String, String, String) {
        (scheme.into(), authority.into(), path.into())
    }

    #[test]
    fn a_url_splits_into_scheme_authority_and_path_with_query() {
        assert_eq!(
            split("https://ec2.us-east-1.amazonaws.com/"),
            parts("https", "ec2.us-east-1.amazonaws.com", "/")
        );
        assert_eq!(
            split("http://127.0.0.1:8080/v1/subnets?page=2"),
            parts("http", "127.0.0.1:8080", "/v1/subnets?page=2")
        );
        assert_eq!(
            split("https://metadata.local?x=1"),
            parts("https", "metadata.local", "?x=1")
        );
    }

    #[test]
    fn a_url_without_a_path_asks_for_the_root() {
        assert_eq!(
            split("http://127.0.0.1:9000"),
            parts("http", "127.0.0.1:9000", "/")
        );
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_are_accepted() {
        for (url, says) in [
            ("ftp://example.com/", "only http and https"),
            ("example.com/path", "only http and https"),
            ("HTTP://example.com/", "only http and https"),
            ("https://", "no host"),
            ("http:///path", "no host"),
        ] {
            match split_url(url) {
                Err(Error::InvalidArgument(text)) => {
                    assert!(
                        text.starts_with(url) && text.contains(says),
                        "{url}: {text}"
                    )
                }
                Err(other) => panic!("{url}: expected invalid-argument, got {other:?}"),
                Ok((scheme, authority, path)) => panic!(
                    "{url} was accepted as {} {authority} {path}",
                    scheme_name(&scheme)
                ),
            }
        }
    }

    fn method_name(method: &Method) -> String {
        match method {
            Method::Get => "GET".into(),
            Method::Head => "HEAD".into(),
            Method::Post => "POST".into(),
            Method::Put => "PUT".into(),
            Method::Delete => "DELETE".into(),
            Method::Connect => "CONNECT".into(),
            Method::Options => "OPTIONS".into(),
            Method::Trace => "TRACE".into(),
            Method::Patch => "PATCH".into(),
            Method::Other(other) => format!("other {other}"),
        }
    }

    #[test]
    fn methods_are_wasi_http_methods_whatever_their_case() {
        for (given, want) in [
            ("GET", "GET"),
            ("get", "GET"),
            ("Head", "HEAD"),
            ("post", "POST"),
            ("PUT", "PUT"),
            ("delete", "DELETE"),
            ("PATCH", "PATCH"),
            ("options", "OPTIONS"),
            ("propfind", "other PROPFIND"),
        ] {
            assert_eq!(method_name(&method_of(given)), want, "{given}");
        }
    }

    /// The Content-Length values among a request's headers.
    fn lengths(method: &str, given: &[(&str, &str)], body: &[u8]) -> Vec<String> {
        request_headers(&method_of(method), given, body.len())
            .expect("headers")
            .into_iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .map(|(_, value)| value)
            .collect()
    }

    #[test]
    fn a_body_goes_out_with_its_length_and_the_callers_headers() {
        let given = [("content-type", "application/json"), ("if-match", "\"3\"")];
        let headers = request_headers(&Method::Put, &given, 12).expect("headers");
        assert_eq!(
            headers,
            [
                ("content-type".to_string(), "application/json".to_string()),
                ("if-match".to_string(), "\"3\"".to_string()),
                ("content-length".to_string(), "12".to_string()),
            ]
        );
        assert_eq!(lengths("GET", &[], b"odd"), ["3"]);
        assert_eq!(lengths("post", &[], &[b'x'; 5000]), ["5000"]);
    }

    #[test]
    fn an_empty_body_is_length_zero_only_on_methods_that_carry_a_body() {
        for method in ["POST", "put", "Patch"] {
            assert_eq!(lengths(method, &[], b""), ["0"], "{method}");
        }
        for method in ["GET", "delete", "HEAD"] {
            assert!(lengths(method, &[], b"").is_empty(), "{method}");
        }
    }

    #[test]
    fn a_callers_content_length_of_the_bodys_length_is_sent_once() {
        assert_eq!(
            lengths("PUT", &[("Content-Length", "3")], b"abc"),
            ["3"],
            "not doubled"
        );
        assert_eq!(lengths("POST", &[("content-length", "0")], b""), ["0"]);
    }

    #[test]
    fn a_callers_content_length_that_is_not_the_bodys_is_refused_by_name() {
        for given in ["4", "three", ""] {
            match request_headers(&Method::Post, &[("Content-Length", given)], 3) {
                Err(Error::InvalidArgument(text)) => assert!(
                    text.contains("Content-Length") && text.contains("3 bytes"),
                    "{given}: {text}"
                ),
                other => panic!("{given:?}: expected invalid-argument, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_request_the_egress_policy_denied_is_unauthorized() {
        match request_error(ErrorCode::HttpRequestDenied) {
            Error::Unauthorized(text) => assert!(text.contains("egress policy"), "{text}"),
            other => panic!("expected unauthorized, got {other:?}"),
        }
    }

    #[test]
    fn other_request_failures_are_transient_and_say_which() {
        for (code, says) in [
            (ErrorCode::ConnectionRefused, "ConnectionRefused"),
            (ErrorCode::ConnectionTimeout, "ConnectionTimeout"),
            (ErrorCode::HttpResponseIncomplete, "HttpResponseIncomplete"),
        ] {
            match request_error(code) {
                Error::Transient(text) => assert!(
                    text.starts_with("HTTP request failed") && text.contains(says),
                    "{text}"
                ),
                other => panic!("{says}: expected transient, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_host_misbehaving_is_other_and_says_wasi_http() {
        match host_error("body stream taken twice") {
            Error::Other(text) => assert_eq!(text, "wasi:http: body stream taken twice"),
            other => panic!("expected other, got {other:?}"),
        }
    }
}
