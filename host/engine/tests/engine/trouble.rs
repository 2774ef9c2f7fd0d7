//! Cloud trouble a cluster operator must see: each is a warning Event on
//! the node being worked on, once per node per distinct trouble until a pass
//! succeeds, and a `/readyz` line until its operation succeeds; throttling
//! is told at info level at most once a minute per operation.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ipam_cloud::answer::{BadField, Problem};
use ipam_cloud::rate::{BucketConfig, RateLimits, RetryPolicy};
use ipam_cloud::{CloudApi, CloudError, Operation, ProviderError};
use ipam_engine::{CloudProblems, LimitedCloud, MemoryNodeStore, Metrics};
use ipam_fake_cloud::FakeCloud;
use tokio::time::Instant;

use crate::steered::SteeredCloud;
use crate::support::{maintainer, node, settings};

const NODE: &str = "n1";

struct Setup {
    fake: Arc<FakeCloud>,
    steered: Arc<SteeredCloud>,
    store: Arc<MemoryNodeStore>,
    metrics: Arc<Metrics>,
    problems: Arc<CloudProblems>,
    maintainer: ipam_engine::Maintainer,
}

/// One node of the standard cloud behind a `LimitedCloud` with `retry`,
/// recording Cilium's EC2 families and the problems.
async fn setup(retry: RetryPolicy) -> Setup {
    let _ = ipam_engine::clock::unix_now();
    let fake = Arc::new(FakeCloud::standard(1));
    let steered = Arc::new(SteeredCloud::new(fake.clone(), Duration::ZERO));
    let metrics = Arc::new(Metrics::with_cloud_api("ec2"));
    let problems = Arc::new(CloudProblems::default());
    let limits = RateLimits::shared_bucket(BucketConfig {
        burst: 10_000.0,
        per_second: 10_000.0,
    })
    .with_retry(retry);
    let cloud: Arc<dyn CloudApi> = Arc::new(
        LimitedCloud::new(steered.clone(), limits)
            .with_metrics(metrics.clone())
            .with_problems(problems.clone()),
    );
    let store = Arc::new(MemoryNodeStore::new());
    store.upsert(node(NODE, "i-0000", 8)).unwrap();
    let maintainer = maintainer(cloud, store.clone(), settings(), metrics.clone());
    let parts = maintainer.parts();
    parts.cache.resync_all(parts.cloud.as_ref()).await.unwrap();
    Setup {
        fake,
        steered,
        store,
        metrics,
        problems,
        maintainer,
    }
}

impl Setup {
    async fn pass(&self) -> Result<(), String> {
        self.maintainer
            .maintain(NODE, 0)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// The warning reasons announced on the node so far, in order.
    fn warnings(&self) -> Vec<&'static str> {
        self.store
            .announcements()
            .into_iter()
            .filter(|(name, a)| name == NODE && a.warning)
            .map(|(_, a)| a.reason)
            .collect()
    }

    fn readyz(&self) -> Vec<String> {
        self.problems.lines(Instant::now())
    }
}

fn no_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 1,
        ..RetryPolicy::default()
    }
}

fn host_failure(kind: &str) -> CloudError {
    match kind {
        "bad-answer" => CloudError::BadAnswer {
            provider: "fake".into(),
            operation: "assign-ips",
            bad: BadField::new(Problem::NotAsked, "addresses", "asked 8, given 9"),
        },
        "trap" => CloudError::Trap {
            provider: "fake".into(),
            operation: "assign-ips",
            message: "wasm trap: unreachable".into(),
        },
        _ => CloudError::Timeout {
            provider: "fake".into(),
            operation: "assign-ips",
            limit: Duration::from_secs(30),
        },
    }
}

#[tokio::test(start_paused = true)]
async fn each_trouble_is_told_once_per_node_and_listed_until_its_operation_succeeds() {
    let s = setup(no_retries()).await;
    s.fake.fail_next(
        Operation::AssignIps,
        3,
        ProviderError::Unauthorized("denied".into()),
    );
    for _ in 0..3 {
        assert!(s.pass().await.unwrap_err().contains("unauthorized"));
    }
    assert_eq!(s.warnings(), ["CloudUnauthorized"], "once, not every pass");
    let told = s.store.announcements();
    assert_eq!(
        told[0].1.note, "provider fake: unauthorized: injected fault on assign-ips",
        "the error as logged"
    );
    let unauthorized = s
        .problems
        .unauthorized(Instant::now())
        .expect("listed for /readyz");
    assert!(
        unauthorized.starts_with("CloudUnauthorized: assign-ips failed 3 times"),
        "{unauthorized}"
    );

    s.fake.fail_next(
        Operation::AssignIps,
        1,
        ProviderError::InvalidArgument("InvalidParameterValue".into()),
    );
    s.pass().await.unwrap_err();
    for kind in ["bad-answer", "trap", "timeout", "timeout"] {
        s.steered
            .fail_next_with(Operation::AssignIps, host_failure(kind));
        s.pass().await.unwrap_err();
    }
    assert_eq!(
        s.warnings(),
        [
            "CloudUnauthorized",
            "CloudRefused",
            "ProviderAnswerRefused",
            "ProviderFailed",
            "ProviderFailed",
        ],
        "a trap and a timeout are two troubles of one reason; the second \
         timeout is not told again"
    );
    assert_eq!(
        s.readyz()
            .iter()
            .map(|l| l.split(':').next().unwrap())
            .collect::<Vec<_>>(),
        [
            "CloudUnauthorized",
            "CloudRefused",
            "ProviderAnswerRefused",
            "ProviderFailed"
        ]
    );
    let text = s.metrics.encode();
    assert!(
        text.contains(
            "cilium_operator_ec2_api_duration_seconds_count{operation=\"AssignPrivateIpAddresses\",response_code=\"Failed\"} 8"
        ),
        "{text}"
    );
    assert!(text.contains(
        "cilium_operator_ipam_allocation_duration_seconds_count{type=\"allocateIP\",status=\"failed\",subnet_id=\"subnet-a\"} 8"
    ));

    // The cloud answers again: the node is satisfied, the problems of
    // assign-ips are over, and the next trouble is told afresh.
    s.pass().await.unwrap();
    assert!(s.readyz().is_empty(), "{:?}", s.readyz());
    assert_eq!(s.problems.unauthorized(Instant::now()), None);
    assert!(s
        .metrics
        .encode()
        .contains("cilium_operator_ec2_api_duration_seconds_count{operation=\"AssignPrivateIpAddresses\",response_code=\"OK\"} 1"));
    s.store
        .agent_update(NODE, |n| {
            for ip in n.spec.ipam.pool.keys().take(4).cloned().collect::<Vec<_>>() {
                n.status.ipam.used.insert(ip, Default::default());
            }
        })
        .unwrap();
    s.fake.fail_next(
        Operation::AssignIps,
        1,
        ProviderError::Unauthorized("denied again".into()),
    );
    s.pass().await.unwrap_err();
    assert_eq!(s.warnings().last(), Some(&"CloudUnauthorized"));
    assert_eq!(s.warnings().len(), 6);
}

#[tokio::test(start_paused = true)]
async fn a_failed_create_is_labelled_with_its_error_and_ordinary_weather_is_not_told() {
    let s = setup(no_retries()).await;
    // Fill the primary interface so the next step creates one.
    s.pass().await.unwrap();
    s.store
        .agent_update(NODE, |n| {
            for ip in n.spec.ipam.pool.keys().cloned().collect::<Vec<_>>() {
                n.status.ipam.used.insert(ip, Default::default());
            }
        })
        .unwrap();
    s.fake.fail_next(
        Operation::CreateInterface,
        1,
        ProviderError::SubnetFull("no room".into()),
    );
    s.pass().await.unwrap_err();
    assert!(
        s.warnings().is_empty(),
        "a full subnet is no trouble of the set-up"
    );
    assert!(s.readyz().is_empty());
    let text = s.metrics.encode();
    assert!(
        text.contains(
            "cilium_operator_ipam_allocation_duration_seconds_count{type=\"createInterfaceAndAllocateIP\",status=\"subnet-full\",subnet_id=\"subnet-a\"} 1"
        ),
        "{text}"
    );
}

/// Log lines written while a test runs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn throttling_lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains("throttled"))
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn throttling_past_the_retries_is_told_and_summed_up_at_info_once_a_minute() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let s = setup(RetryPolicy {
        max_attempts: 3,
        base: Duration::from_millis(200),
        cap: Duration::from_secs(2),
    })
    .await;
    s.fake.fail_next(
        Operation::AssignIps,
        3,
        ProviderError::Throttled(Duration::from_secs(1)),
    );
    assert!(s.pass().await.unwrap_err().contains("throttled"));
    assert_eq!(s.warnings(), ["Throttled"]);
    assert_eq!(s.readyz().len(), 1);
    assert!(s.readyz()[0].starts_with("Throttled: assign-ips failed once"));
    let lines = captured.throttling_lines();
    assert_eq!(
        lines.len(),
        1,
        "the first at once, the rest held: {lines:?}"
    );
    assert!(
        lines[0].contains(" INFO ")
            && lines[0].contains("throttled once in the last 1 s, waited 1.0 s")
            && lines[0].contains("operation=assign-ips"),
        "{lines:?}"
    );

    // A minute on, the next call sums up the two held back.
    tokio::time::advance(Duration::from_secs(61)).await;
    s.pass().await.unwrap();
    let lines = captured.throttling_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[1].contains("throttled 2 times in the last 6"),
        "{lines:?}"
    );
    assert!(s.readyz().is_empty(), "assign-ips succeeded since");
}
