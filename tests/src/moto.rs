//! A moto_server (PyPI `moto[server]`) on 127.0.0.1 for the AWS provider's
//! tests, seeded through boto3. `cargo xtask test` installs moto when it is
//! missing; here a missing moto fails the test, saying so.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What `support/moto_seed.py` made.
#[derive(Debug, serde::Deserialize)]
pub struct Seeded {
    pub vpc: String,
    pub node_subnet: String,
    pub pod_subnets: Vec<String>,
    pub security_group: String,
    /// m5.large instances tagged `kubernetes.io/cluster/test`, sorted.
    pub instances: Vec<String>,
    /// A t3.small without the cluster tag.
    pub outsider: String,
}

pub struct Moto {
    child: Child,
    pub endpoint: String,
}

/// The Python that has moto: `IPAM_MOTO_PYTHON` (set by `cargo xtask test`
/// when it installed moto into a virtual environment), else `python3`.
fn python() -> String {
    std::env::var("IPAM_MOTO_PYTHON").unwrap_or_else(|_| "python3".into())
}

impl Moto {
    /// Start a moto_server of its own on a free loopback port and wait until
    /// it accepts connections.
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port on 127.0.0.1")
            .port();
        // moto_server, with EC2's one-holder-per-address rule (see the
        // script).
        let server = concat!(env!("CARGO_MANIFEST_DIR"), "/support/moto_server.py");
        let mut child = Command::new(python())
            .args([server, "127.0.0.1", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} {server}: {e}", python()));
        let address: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    use std::io::Read;
                    let _ = pipe.read_to_string(&mut stderr);
                }
                panic!(
                    "moto_server exited ({status}): {stderr}\n\
                     moto is needed: cargo xtask test installs it (pip install 'moto[server]')"
                );
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its log is not needed once it runs; a full pipe must not stall it.
        drop(child.stderr.take());
        Moto {
            child,
            endpoint: format!("http://{address}"),
        }
    }

    /// Make the VPC, subnets, security group and instances of
    /// `support/moto_seed.py` with boto3.
    pub fn seed(&self) -> Seeded {
        self.seed_with(3)
    }

    /// [`Moto::seed`] with `instances` cluster instances.
    pub fn seed_with(&self, instances: usize) -> Seeded {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/support/moto_seed.py");
        let output = Command::new(python())
            .arg(script)
            .arg(&self.endpoint)
            .arg(instances.to_string())
            .output()
            .expect("running moto_seed.py");
        assert!(
            output.status.success(),
            "moto_seed.py: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("moto_seed.py prints JSON")
    }

    /// Run Python `statements` against this server with `ec2`, a boto3 EC2
    /// client, already made (a client nobody in this project wrote); what
    /// they print.
    pub fn boto3(&self, statements: &str) -> String {
        let script = format!(
            "import boto3, json\n\
             ec2 = boto3.client('ec2', region_name='us-east-1', endpoint_url='{}', \
             aws_access_key_id='a', aws_secret_access_key='b')\n{statements}",
            self.endpoint
        );
        let output = Command::new(python())
            .args(["-c", &script])
            .output()
            .expect("running python");
        assert!(
            output.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The AWS provider's settings for this server: cluster `test`, pod
    /// subnets by tag, no retries (tests see the first answer).
    pub fn settings(&self, extra: serde_json::Value) -> String {
        let mut settings = serde_json::json!({
            "region": "us-east-1",
            "endpoint": self.endpoint,
            "cluster-name": "test",
            "max-attempts": 1,
        });
        if let (Some(base), Some(extra)) = (settings.as_object_mut(), extra.as_object()) {
            base.extend(extra.clone());
        }
        settings.to_string()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
