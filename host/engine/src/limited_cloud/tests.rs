//! The middleware against a scripted fake cloud, in tokio's paused time.

use std::sync::Mutex;

use ipam_cloud::rate::{BucketConfig, RetryPolicy};
use ipam_cloud::ProviderError;

use super::*;

/// Records each call's operation and (virtual) time; fails calls as scripted.
struct FakeCloud {
    info: ProviderInfo,
    calls: Mutex<Vec<(Operation, Instant)>>,
    failures: Mutex<Vec<(Operation, ProviderError)>>,
}

impl FakeCloud {
    fn new(failures: Vec<(Operation, ProviderError)>) -> Self {
        let info = ProviderInfo {
            name: "fake".into(),
            version: "0.0.0".into(),
            capabilities: Default::default(),
            max_concurrency: 1,
            rate_model: None,
        };
        Self {
            info,
            calls: Mutex::new(Vec::new()),
            failures: Mutex::new(failures),
        }
    }

    fn called(&self, operation: Operation) -> Result<(), CloudError> {
        self.calls.lock().unwrap().push((operation, Instant::now()));
        let mut failures = self.failures.lock().unwrap();
        match failures.iter().position(|(op, _)| *op == operation) {
            Some(at) => Err(CloudError::Provider {
                provider: "fake".into(),
                error: failures.remove(at).1,
            }),
            None => Ok(()),
        }
    }

    fn times(&self, operation: Operation) -> Vec<Duration> {
        let calls = self.calls.lock().unwrap();
        let start = calls.first().map(|(_, t)| *t).unwrap_or_else(Instant::now);
        calls
            .iter()
            .filter(|(op, _)| *op == operation)
            .map(|(_, t)| *t - start)
            .collect()
    }
}

#[async_trait]
impl CloudApi for FakeCloud {
    fn info(&self) -> &ProviderInfo {
        &self.info
    }
    async fn get_vpcs(&self) -> Result<Vec<Vpc>, CloudError> {
        self.called(Operation::GetVpcs).map(|()| Vec::new())
    }
    async fn get_subnets(&self) -> Result<Vec<Subnet>, CloudError> {
        self.called(Operation::GetSubnets).map(|()| Vec::new())
    }
    async fn get_security_groups(&self) -> Result<Vec<SecurityGroup>, CloudError> {
        self.called(Operation::GetSecurityGroups)
            .map(|()| Vec::new())
    }
    async fn get_instances(&self, _ids: &[String]) -> Result<Vec<Instance>, CloudError> {
        self.called(Operation::GetInstances).map(|()| Vec::new())
    }
    async fn get_detached_interfaces(
        &self,
        _tags: &[Tag],
    ) -> Result<Vec<NetworkInterface>, CloudError> {
        self.called(Operation::GetDetachedInterfaces)
            .map(|()| Vec::new())
    }
    async fn get_instance_limits(&self, _t: &str) -> Result<InstanceLimits, CloudError> {
        self.called(Operation::GetInstanceLimits)
            .map(|()| InstanceLimits {
                max_interfaces: 1,
                ipv4_per_interface: 1,
                ipv6_per_interface: 0,
                prefix_delegation: false,
            })
    }
    async fn create_interface(
        &self,
        r: &CreateInterfaceRequest,
    ) -> Result<NetworkInterface, CloudError> {
        self.called(Operation::CreateInterface)
            .map(|()| NetworkInterface {
                id: "eni".into(),
                mac: String::new(),
                index: r.index,
                subnet_id: r.subnet_id.clone(),
                vpc_id: String::new(),
                primary_ip: std::net::Ipv4Addr::UNSPECIFIED,
                addresses: Vec::new(),
                prefixes: Vec::new(),
                security_groups: Vec::new(),
                tags: Vec::new(),
                instance_id: None,
            })
    }
    async fn delete_interface(&self, _id: &str) -> Result<(), CloudError> {
        self.called(Operation::DeleteInterface)
    }
    async fn assign_ips(&self, _id: &str, _r: IpRequest) -> Result<Assigned, CloudError> {
        self.called(Operation::AssignIps)
            .map(|()| Assigned::default())
    }
    async fn unassign_ips(
        &self,
        _id: &str,
        _a: &[std::net::Ipv4Addr],
        _p: &[ipam_cloud::Ipv4Net],
    ) -> Result<(), CloudError> {
        self.called(Operation::UnassignIps)
    }
}

/// Three buckets as EC2 has them: reads, mutations, and attach/detach, with
/// create-interface taking two mutations (create, modify) and an attach.
fn config(describe: (f64, f64), mutate: (f64, f64), attach: (f64, f64)) -> RateLimits {
    let bucket = |(burst, per_second)| BucketConfig { burst, per_second };
    let mut limits = RateLimits::new([
        ("describe", bucket(describe)),
        ("mutate", bucket(mutate)),
        ("attach", bucket(attach)),
    ])
    .with_retry(RetryPolicy {
        max_attempts: 4,
        base: Duration::from_millis(100),
        cap: Duration::from_secs(2),
    });
    for operation in Operation::ALL {
        let cost: &[(&str, f64)] = match operation {
            Operation::CreateInterface => &[("mutate", 2.0), ("attach", 1.0)],
            Operation::DeleteInterface => &[("mutate", 1.0), ("attach", 1.0)],
            Operation::AssignIps | Operation::UnassignIps => &[("mutate", 1.0)],
            _ => &[("describe", 1.0)],
        };
        limits = limits.with_cost(operation, cost).expect("declared buckets");
    }
    limits
}

fn request() -> CreateInterfaceRequest {
    CreateInterfaceRequest {
        instance_id: "i".into(),
        index: 1,
        subnet_id: "s".into(),
        security_groups: Vec::new(),
        description: String::new(),
        tags: Vec::new(),
        delete_on_termination: true,
        ipv4_count: 0,
        use_prefixes: false,
    }
}

fn ms(durations: &[Duration]) -> Vec<u128> {
    durations.iter().map(Duration::as_millis).collect()
}

#[tokio::test(start_paused = true)]
async fn describe_calls_burst_then_keep_to_the_rate() {
    let cloud = LimitedCloud::new(
        FakeCloud::new(Vec::new()),
        config((3.0, 10.0), (1.0, 1.0), (1.0, 1.0)),
    );
    for _ in 0..5 {
        cloud.get_subnets().await.unwrap();
    }
    assert_eq!(
        ms(&cloud.inner().times(Operation::GetSubnets)),
        vec![0, 0, 0, 100, 200]
    );
}

#[tokio::test(start_paused = true)]
async fn kinds_have_separate_buckets() {
    // Mutating calls are exhausted; reads still go at once.
    let cloud = LimitedCloud::new(
        FakeCloud::new(Vec::new()),
        config((10.0, 10.0), (1.0, 1.0), (10.0, 10.0)),
    );
    cloud
        .assign_ips("eni", IpRequest::Addresses(1))
        .await
        .unwrap();
    cloud.get_vpcs().await.unwrap();
    cloud
        .assign_ips("eni", IpRequest::Addresses(1))
        .await
        .unwrap();
    assert_eq!(ms(&cloud.inner().times(Operation::GetVpcs)), vec![0]);
    assert_eq!(
        ms(&cloud.inner().times(Operation::AssignIps)),
        vec![0, 1000]
    );
}

#[tokio::test(start_paused = true)]
async fn create_interface_costs_two_mutations_and_an_attach() {
    let cloud = LimitedCloud::new(
        FakeCloud::new(Vec::new()),
        config((10.0, 10.0), (2.0, 2.0), (5.0, 5.0)),
    );
    cloud.create_interface(&request()).await.unwrap();
    cloud.create_interface(&request()).await.unwrap();
    assert_eq!(
        ms(&cloud.inner().times(Operation::CreateInterface)),
        vec![0, 1000],
        "the second waits for two mutate tokens"
    );
}

#[tokio::test(start_paused = true)]
async fn the_attach_bucket_alone_holds_creates_and_deletes_back() {
    // Mutations are plentiful; one attach token, one more a second.
    let cloud = LimitedCloud::new(
        FakeCloud::new(Vec::new()),
        config((10.0, 10.0), (100.0, 100.0), (1.0, 1.0)),
    );
    cloud.create_interface(&request()).await.unwrap();
    cloud.delete_interface("eni").await.unwrap();
    cloud.create_interface(&request()).await.unwrap();
    cloud
        .assign_ips("eni", IpRequest::Addresses(1))
        .await
        .unwrap();
    assert_eq!(
        ms(&cloud.inner().times(Operation::CreateInterface)),
        vec![0, 2000],
        "each create takes an attach token"
    );
    assert_eq!(
        ms(&cloud.inner().times(Operation::DeleteInterface)),
        vec![1000],
        "a delete (detach) takes one too"
    );
    assert_eq!(
        ms(&cloud.inner().times(Operation::AssignIps)),
        vec![2000],
        "an assign takes none: it went as soon as the create before it"
    );
}

#[tokio::test(start_paused = true)]
async fn throttled_calls_are_retried_no_sooner_than_retry_after() {
    let throttled = ProviderError::Throttled(Duration::from_millis(1500));
    let failures = vec![
        (Operation::AssignIps, throttled.clone()),
        (Operation::AssignIps, throttled),
    ];
    let cloud = LimitedCloud::new(
        FakeCloud::new(failures),
        config((10.0, 10.0), (10.0, 10.0), (10.0, 10.0)),
    );
    cloud
        .assign_ips("eni", IpRequest::Addresses(1))
        .await
        .expect("succeeds on the third attempt");
    let times = cloud.inner().times(Operation::AssignIps);
    assert_eq!(times.len(), 3);
    assert!(
        times[1] >= Duration::from_millis(1500)
            && times[2] - times[1] >= Duration::from_millis(1500),
        "{times:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_only_where_repeating_is_safe() {
    let transient = || ProviderError::Transient("503".into());
    let failures = vec![
        (Operation::CreateInterface, transient()),
        (Operation::DeleteInterface, transient()),
    ];
    let cloud = LimitedCloud::new(
        FakeCloud::new(failures),
        config((10.0, 10.0), (10.0, 10.0), (10.0, 10.0)),
    );
    let error = cloud.create_interface(&request()).await.unwrap_err();
    assert!(
        matches!(error.provider_error(), Some(ProviderError::Transient(_))),
        "may have happened: not repeated"
    );
    assert_eq!(cloud.inner().times(Operation::CreateInterface).len(), 1);
    cloud
        .delete_interface("eni")
        .await
        .expect("idempotent: repeated");
    assert_eq!(cloud.inner().times(Operation::DeleteInterface).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_after_the_last_attempt_and_other_errors_are_not_retried() {
    let throttled = || (Operation::GetVpcs, ProviderError::Throttled(Duration::ZERO));
    let failures = vec![
        throttled(),
        throttled(),
        throttled(),
        throttled(),
        (Operation::GetSubnets, ProviderError::NotFound("x".into())),
    ];
    let cloud = LimitedCloud::new(
        FakeCloud::new(failures),
        config((10.0, 10.0), (10.0, 10.0), (10.0, 10.0)),
    );
    assert!(cloud.get_vpcs().await.is_err());
    assert_eq!(
        cloud.inner().times(Operation::GetVpcs).len(),
        4,
        "max_attempts in all"
    );
    assert!(cloud.get_subnets().await.is_err());
    assert_eq!(cloud.inner().times(Operation::GetSubnets).len(), 1);
}

#[test]
fn backoff_doubles_within_jitter_and_the_cap() {
    let cloud = LimitedCloud::new(
        FakeCloud::new(Vec::new()),
        config((1.0, 1.0), (1.0, 1.0), (1.0, 1.0)),
    );
    let transient = CloudError::Provider {
        provider: "fake".into(),
        error: ProviderError::Transient(String::new()),
    };
    for attempt in 0..8 {
        let expected = Duration::from_millis(100)
            .saturating_mul(1 << attempt)
            .min(Duration::from_secs(2));
        let backoff = cloud.backoff(attempt, &transient);
        assert!(
            backoff >= expected / 2 && backoff <= expected,
            "attempt {attempt}: {backoff:?} vs {expected:?}"
        );
    }
}
