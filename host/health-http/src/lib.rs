//! The HTTP endpoints of a long-running process: `/healthz` (the process
//! serves), `/readyz` (ready as the process defines it, through a watch
//! channel, with the problems it reports listed either way), `/metrics`
//! (the process's registries with `process_*` metrics read from /proc/self
//! on every scrape, in the Prometheus text format 0.0.4, as a Go process's
//! promhttp handler serves it: [`prometheus_text`]). The operator and the
//! node agent serve the same endpoints through this; [`probe::get`] asks
//! them, as a kubelet's probe would.

pub mod probe;
pub mod prometheus_text;
pub mod startup;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// process_* metrics from /proc/self, read on every scrape.
#[derive(Debug)]
pub struct ProcessCollector;

/// Clock ticks per second of /proc/self/stat; 100 on every Linux the
/// operator ships for.
const TICKS: f64 = 100.0;

fn stat_fields() -> Vec<String> {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.to_string()))
        .map(|rest| rest.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

fn boot_time() -> Option<f64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let fields = stat_fields();
        let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        // After the command: state is 0, utime 11, stime 12, starttime 19.
        let cpu = field(11).unwrap_or(0.0) + field(12).unwrap_or(0.0);
        let cpu = ConstCounter::new(cpu / TICKS);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let rss_kb = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            })
            .unwrap_or(0);
        let rss = ConstGauge::new(rss_kb * 1024);
        rss.encode(encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            None,
            rss.metric_type(),
        )?)?;
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
        let fds = ConstGauge::new(i64::try_from(fds).unwrap_or(i64::MAX));
        fds.encode(encoder.encode_descriptor(
            "process_open_fds",
            "Number of open file descriptors",
            None,
            fds.metric_type(),
        )?)?;
        if let (Some(boot), Some(start)) = (boot_time(), field(19)) {
            let start = ConstGauge::new(boot + start / TICKS);
            start.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the unix epoch, in seconds",
                None,
                start.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Writes a process's registries as prometheus-client's OpenMetrics text,
/// without the final `# EOF` ([`Endpoints`] serves it as 0.0.4 text).
pub type MetricsText = Arc<dyn Fn(&mut String) + Send + Sync>;

/// Why the process is not ready (the body of `/readyz`'s 503), or None
/// when it is; asked on every `/readyz`.
pub type Readiness = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Problems the process reports on `/readyz` whether ready or not (one
/// line each, after the verdict); asked on every `/readyz`.
pub type Problems = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// What the endpoints report.
#[derive(Clone)]
pub struct Endpoints {
    readiness: Readiness,
    problems: Option<Problems>,
    metrics: MetricsText,
    process: Arc<Registry>,
    /// Counter families served without `_total` (full names).
    bare_counters: &'static [&'static str],
}

impl Endpoints {
    /// Ready while `ready` is true (`not ready` otherwise).
    pub fn new(ready: watch::Receiver<bool>, metrics: MetricsText) -> Self {
        Self::with_readiness(
            Arc::new(move || (!*ready.borrow()).then(|| "not ready".to_string())),
            metrics,
        )
    }

    /// Ready when `readiness` says nothing is missing.
    pub fn with_readiness(readiness: Readiness, metrics: MetricsText) -> Self {
        let mut process = Registry::default();
        process.register_collector(Box::new(ProcessCollector));
        Self {
            readiness,
            problems: None,
            metrics,
            process: Arc::new(process),
            bare_counters: &[],
        }
    }

    /// List `problems` on `/readyz` after its verdict.
    pub fn with_problems(mut self, problems: Problems) -> Self {
        self.problems = Some(problems);
        self
    }

    /// Serve these counter families (full names) without `_total`, as the
    /// Go clients that named them do.
    pub fn with_bare_counters(mut self, names: &'static [&'static str]) -> Self {
        self.bare_counters = names;
        self
    }

    /// The metrics page: the process's registries, then `process_*`, in
    /// the Prometheus text format 0.0.4.
    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        (self.metrics)(&mut text);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut text, &self.process);
        prometheus_text::from_openmetrics(&text, self.bare_counters)
    }

    /// The body of `/readyz`: the verdict's line, then one per problem.
    fn readiness_body(&self, verdict: &str) -> String {
        let mut body = format!("{verdict}\n");
        for problem in self.problems.as_ref().map(|p| p()).unwrap_or_default() {
            body.push_str(&problem);
            body.push('\n');
        }
        body
    }

    fn answer(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        let reply = |status: StatusCode, content_type: &str, body: String| {
            Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(Full::new(Bytes::from(body)))
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
        };
        if method != Method::GET {
            return reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "GET only\n".into(),
            );
        }
        match path {
            "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            "/readyz" => match (self.readiness)() {
                None => reply(StatusCode::OK, "text/plain", self.readiness_body("ready")),
                Some(missing) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    self.readiness_body(&missing),
                ),
            },
            "/metrics" => reply(
                StatusCode::OK,
                prometheus_text::CONTENT_TYPE,
                self.metrics_text(),
            ),
            _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }
}

/// Serve until `shutdown`, one task per connection.
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => accepted?,
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = endpoints.answer(request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "metrics connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn endpoints_answer_health_readiness_and_metrics() {
        let (ready_tx, ready) = watch::channel(false);
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("things", "Things done", counter.clone());
        counter.inc();
        let registry = Arc::new(registry);
        let endpoints = Endpoints::new(
            ready,
            Arc::new(move |text: &mut String| {
                let _ = prometheus_client::encoding::text::encode_registry(text, &registry);
            }),
        );
        let status = |path: &str| endpoints.answer(&Method::GET, path).status();
        assert_eq!(status("/healthz"), StatusCode::OK);
        assert_eq!(status("/readyz"), StatusCode::SERVICE_UNAVAILABLE);
        ready_tx.send_replace(true);
        assert_eq!(status("/readyz"), StatusCode::OK);
        let why = Endpoints::with_readiness(
            Arc::new(|| Some("waiting: etcd; failed: -".to_string())),
            Arc::new(|_: &mut String| {}),
        )
        .answer(&Method::GET, "/readyz");
        assert_eq!(why.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status("/nope"), StatusCode::NOT_FOUND);
        assert_eq!(
            endpoints.answer(&Method::POST, "/healthz").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        let text = endpoints.metrics_text();
        assert!(
            text.contains("# TYPE things_total counter\nthings_total 1\n"),
            "{text}"
        );
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
        assert!(text.contains("process_cpu_seconds_total "), "{text}");
        assert!(!text.contains("# EOF"), "0.0.4 has no EOF: {text}");
        let metrics = endpoints.answer(&Method::GET, "/metrics");
        assert_eq!(
            metrics.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let bare = endpoints.clone().with_bare_counters(&["things"]);
        assert!(bare
            .metrics_text()
            .contains("# TYPE things counter\nthings 1\n"));
    }

    #[tokio::test]
    async fn readyz_lists_the_problems_whether_ready_or_not() {
        use http_body_util::BodyExt;
        let (ready_tx, ready) = watch::channel(true);
        let endpoints = Endpoints::new(ready, Arc::new(|_: &mut String| {}))
            .with_problems(Arc::new(|| vec!["Throttled: assign-ips".to_string()]));
        let body = |endpoints: &Endpoints| {
            let response = endpoints.answer(&Method::GET, "/readyz");
            let status = response.status();
            async move {
                let bytes = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8(bytes.to_vec()).unwrap())
            }
        };
        assert_eq!(
            body(&endpoints).await,
            (StatusCode::OK, "ready\nThrottled: assign-ips\n".to_string())
        );
        ready_tx.send_replace(false);
        assert_eq!(
            body(&endpoints).await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready\nThrottled: assign-ips\n".to_string()
            )
        );
    }

    #[tokio::test]
    async fn served_endpoints_answer_a_probe() {
        let (_ready_tx, ready) = watch::channel(false);
        let endpoints = Endpoints::new(ready, Arc::new(|_: &mut String| {}));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, endpoints, async {
            let _ = stopped.await;
        }));
        let probe = |path: &'static str| {
            let address = address.clone();
            tokio::task::spawn_blocking(move || probe::get(&address, path))
        };
        assert_eq!(
            probe("/healthz").await.unwrap().map(|(code, _)| code),
            Some(200)
        );
        assert_eq!(
            probe("/readyz").await.unwrap().map(|(code, _)| code),
            Some(503)
        );
        let _ = stop.send(());
        server.await.unwrap().unwrap();
        assert_eq!(probe("/healthz").await.unwrap(), None, "nothing answers");
    }
}
