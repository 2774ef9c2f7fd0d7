//! Registering the CiliumNode CRD when a cluster has none (`--register-crd`,
//! off by default: Cilium owns the CRD and installs it with a full schema).
//! The definition registered here only makes the API serve CiliumNodes; its
//! schema keeps every field, so Cilium can replace it later.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::Client;

use ipam_ciliumnode::kube::{GROUP, KIND, PLURAL, VERSION};

pub const NAME: &str = "ciliumnodes.cilium.io";

fn definition() -> Result<CustomResourceDefinition, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/managed-by": "ipam-operator"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"kind": KIND, "listKind": "CiliumNodeList", "plural": PLURAL,
                      "singular": "ciliumnode", "shortNames": ["cn", "ciliumn"]},
            "versions": [{
                "name": VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
}

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the CiliumNode CRD: {0}")]
    Api(#[from] kube::Error),
    #[error("the CiliumNode CRD definition: {0}")]
    Definition(#[from] serde_json::Error),
}

/// Create the CRD unless it exists; whether it was created.
pub async fn ensure(client: Client) -> Result<bool, CrdError> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    if api.get_opt(NAME).await?.is_some() {
        return Ok(false);
    }
    match api.create(&PostParams::default(), &definition()?).await {
        Ok(_) => Ok(true),
        // Another replica was first.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error.into()),
    }
}
