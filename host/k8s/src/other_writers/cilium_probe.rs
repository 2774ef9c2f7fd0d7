//! Reads what [`super::cilium_operator::judge`] needs from the API server:
//! Cilium's operator Lease, and, only while it is held, cilium-config and
//! the cilium-operator Deployment, in Cilium's namespace. An object that is
//! absent reads as `None`; one this operator may not read (403) too, with
//! one warning per object saying which permission is missing.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use serde::de::DeserializeOwned;

use super::cilium_operator::{lease_holder, CiliumView, CONFIG_MAP, DEPLOYMENT, LEASE};

#[derive(Debug, thiserror::Error)]
#[error("reading {kind} {namespace}/{name}: {source}")]
pub struct ProbeError {
    kind: &'static str,
    namespace: String,
    name: &'static str,
    source: kube::Error,
}

pub struct CiliumProbe {
    namespace: String,
    leases: Api<Lease>,
    config_maps: Api<ConfigMap>,
    deployments: Api<Deployment>,
    /// The kinds a 403 was already warned of.
    forbidden: BTreeSet<&'static str>,
}

impl CiliumProbe {
    /// A probe of Cilium's objects in `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            leases: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client.clone(), namespace),
            deployments: Api::namespaced(client, namespace),
            forbidden: BTreeSet::new(),
        }
    }

    /// namespace/name of Cilium's operator Lease.
    pub fn lease(&self) -> String {
        format!("{}/{LEASE}", self.namespace)
    }

    /// The view at `now`.
    pub async fn read(&mut self, now: Timestamp) -> Result<CiliumView, ProbeError> {
        let lease = self.get(&self.leases.clone(), "Lease", LEASE).await?;
        let lease = lease.and_then(|l| l.spec);
        let held = lease.as_ref().and_then(|l| lease_holder(l, now)).is_some();
        if !held {
            return Ok(CiliumView {
                lease,
                ..CiliumView::default()
            });
        }
        let config = self
            .get(&self.config_maps.clone(), "ConfigMap", CONFIG_MAP)
            .await?
            .map(|c| c.data.unwrap_or_default());
        let deployment = self
            .get(&self.deployments.clone(), "Deployment", DEPLOYMENT)
            .await?
            .map(|d| command_lines(&d));
        Ok(CiliumView {
            lease,
            config,
            deployment,
        })
    }

    async fn get<K>(
        &mut self,
        api: &Api<K>,
        kind: &'static str,
        name: &'static str,
    ) -> Result<Option<K>, ProbeError>
    where
        K: Clone + DeserializeOwned + std::fmt::Debug,
    {
        match api.get_opt(name).await {
            Ok(found) => Ok(found),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                if self.forbidden.insert(kind) {
                    tracing::warn!(
                        namespace = %self.namespace,
                        kind,
                        name,
                        "may not read Cilium's {kind} {}/{name} (403): taken as absent, so a \
                         Cilium operator allocating beside this one goes unseen until its \
                         CiliumNode writes show; grant get on it (the chart's and kustomize's \
                         ipam-operator-cilium-reader Role)",
                        self.namespace
                    );
                }
                Ok(None)
            }
            Err(source) => Err(ProbeError {
                kind,
                namespace: self.namespace.clone(),
                name,
                source,
            }),
        }
    }
}

/// Each container's command, then its args, of a Deployment's pod template.
fn command_lines(deployment: &Deployment) -> Vec<Vec<String>> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|pod| {
            pod.containers
                .iter()
                .map(|c| {
                    let command = c.command.iter().flatten();
                    command.chain(c.args.iter().flatten()).cloned().collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipam_fake_apiserver::{in_namespace, FakeApiServer};
    use serde_json::json;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";
    const CONFIG_MAPS: &str = "/api/v1/configmaps";
    const DEPLOYMENTS: &str = "/apis/apps/v1/deployments";

    fn lease(renewed: Timestamp) -> serde_json::Value {
        json!({"metadata": {"name": LEASE},
               "spec": {"holderIdentity": "ip-10-0-1-17-tqg5xlmnbc", "leaseDurationSeconds": 15,
                        "renewTime": renewed.to_string()}})
    }

    /// The objects the probe asked for, by kind path, in order.
    fn reads(server: &FakeApiServer) -> Vec<String> {
        server
            .log()
            .into_iter()
            .map(|l| l.path.rsplit('/').nth(1).unwrap_or_default().to_string())
            .collect()
    }

    #[tokio::test]
    async fn the_config_and_the_deployment_are_read_only_while_the_lease_is_held() {
        let (client, server) = FakeApiServer::start();
        let mut probe = CiliumProbe::new(client, "cilium");
        let now = Timestamp::now();
        assert_eq!(probe.read(now).await.unwrap(), CiliumView::default());
        assert_eq!(reads(&server), ["leases"], "no Lease: nothing else asked");

        let expired = now - std::time::Duration::from_secs(60);
        server.put(&in_namespace(LEASES, "cilium"), lease(expired));
        let view = probe.read(now).await.unwrap();
        assert!(view.lease.is_some() && view.config.is_none() && view.deployment.is_none());
        assert_eq!(reads(&server), ["leases", "leases"]);

        server.put(&in_namespace(LEASES, "cilium"), lease(now));
        server.put(
            &in_namespace(CONFIG_MAPS, "cilium"),
            json!({"metadata": {"name": CONFIG_MAP}, "data": {"ipam": "eni"}}),
        );
        server.put(
            &in_namespace(DEPLOYMENTS, "cilium"),
            json!({"metadata": {"name": DEPLOYMENT},
                   "spec": {"selector": {}, "template": {"spec": {"containers": [
                       {"name": "cilium-operator", "command": ["cilium-operator-generic"],
                        "args": ["--ipam=kubernetes"]}]}}}}),
        );
        let view = probe.read(now).await.unwrap();
        assert_eq!(
            view.config.unwrap().get("ipam").map(String::as_str),
            Some("eni")
        );
        assert_eq!(
            view.deployment.unwrap(),
            [["cilium-operator-generic", "--ipam=kubernetes"].map(String::from)]
        );
        assert_eq!(probe.lease(), "cilium/cilium-operator-resource-lock");
    }

    #[tokio::test]
    async fn a_forbidden_object_reads_as_absent_and_another_failure_is_an_error() {
        let (client, server) = FakeApiServer::start();
        let mut probe = CiliumProbe::new(client, "cilium");
        let now = Timestamp::now();
        server.put(&in_namespace(LEASES, "cilium"), lease(now));
        server.forbid(&in_namespace(CONFIG_MAPS, "cilium"), true);
        server.forbid(&in_namespace(DEPLOYMENTS, "cilium"), true);
        for _ in 0..2 {
            let view = probe.read(now).await.expect("403 is no error");
            assert!(view.lease.is_some());
            assert_eq!((view.config, view.deployment), (None, None));
        }
        assert_eq!(
            probe.forbidden,
            BTreeSet::from(["ConfigMap", "Deployment"]),
            "each warned of once"
        );
        // A Lease that cannot be decoded: an error, so the last judgement
        // stands.
        server.put(
            &in_namespace(LEASES, "cilium"),
            json!({"metadata": {"name": LEASE}, "spec": {"leaseDurationSeconds": "fifteen"}}),
        );
        let error = probe.read(now).await.expect_err("an unreadable Lease");
        assert!(
            error
                .to_string()
                .starts_with("reading Lease cilium/cilium-operator-resource-lock: "),
            "{error}"
        );
    }
}
