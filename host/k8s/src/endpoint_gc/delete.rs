//! Deleting one CiliumEndpoint, only if it is still the one the GC judged:
//! the delete carries the uid it saw as a precondition, so an endpoint
//! deleted and re-created under the same name since is not touched.

use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use kube::Client;

use super::decide::Endpoint;
use super::read;

/// What a delete came to.
#[derive(Debug)]
pub enum Outcome {
    Deleted,
    /// Already gone (404): someone else deleted it.
    Gone,
    /// The name now belongs to another endpoint (409 on the uid
    /// precondition): it was re-created since the caches saw it.
    Replaced,
    Failed(kube::Error),
}

pub async fn delete(client: &Client, endpoint: &Endpoint) -> Outcome {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &endpoint.namespace, &read::api_resource());
    let params = DeleteParams::default().preconditions(Preconditions {
        uid: Some(endpoint.uid.clone()),
        resource_version: None,
    });
    outcome(api.delete(&endpoint.name, &params).await.map(|_| ()))
}

fn outcome(result: Result<(), kube::Error>) -> Outcome {
    match result {
        Ok(()) => Outcome::Deleted,
        Err(kube::Error::Api(status)) if status.code == 404 => Outcome::Gone,
        Err(kube::Error::Api(status)) if status.code == 409 => Outcome::Replaced,
        Err(error) => Outcome::Failed(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> Result<(), kube::Error> {
        Err(kube::Error::Api(Box::new(
            Status::failure("refused", "Refused").with_code(code),
        )))
    }

    #[test]
    fn not_found_and_conflict_are_not_failures() {
        assert!(matches!(outcome(Ok(())), Outcome::Deleted));
        assert!(matches!(outcome(api_error(404)), Outcome::Gone));
        assert!(matches!(outcome(api_error(409)), Outcome::Replaced));
        assert!(matches!(outcome(api_error(403)), Outcome::Failed(_)));
        assert!(matches!(outcome(api_error(500)), Outcome::Failed(_)));
    }
}
