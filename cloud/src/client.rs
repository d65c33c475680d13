//! The CLI's client for the operator API.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{ApiError, NewToken, Removed, Submitted, TokenRequest};
use crate::job::{JobFile, JobRecord};
use crate::store::{LinkRecord, NodeRecord, TokenRecord};
use tidemill_proto::NodeForecast;

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The coordinator could not be reached.
    #[error(
        "cannot reach the coordinator API at {url}: {source}; is `tidemill-cloud serve` running with this --api-listen?"
    )]
    Unreachable {
        /// The URL.
        url: String,
        /// The transport error.
        source: ureq::Error,
    },
    /// The coordinator answered with an error.
    #[error("{status}: {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The coordinator's message.
        message: String,
    },
}

/// A client for one coordinator.
pub struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    /// A client for the API at `base`, for example `http://127.0.0.1:7480`.
    pub fn new(base: &str) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent,
        }
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, ClientError> {
        let url = format!("{}{path}", self.base);
        let unreachable = |source| ClientError::Unreachable {
            url: url.clone(),
            source,
        };
        let response = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            (_, Some(b)) => self.agent.post(&url).send_json(b),
            (_, None) => self.agent.post(&url).send_empty(),
        };
        let mut response = response.map_err(unreachable)?;
        let status = response.status().as_u16();
        if status >= 400 {
            let message = response
                .body_mut()
                .read_json::<ApiError>()
                .map(|e| e.error)
                .unwrap_or_else(|_| "the coordinator gave no reason".to_string());
            return Err(ClientError::Api { status, message });
        }
        response.body_mut().read_json::<T>().map_err(unreachable)
    }

    /// Every node.
    pub fn nodes(&self) -> Result<Vec<NodeRecord>, ClientError> {
        self.call("GET", "/v1/nodes", None::<&()>)
    }

    /// The link matrix.
    pub fn links(&self) -> Result<Vec<LinkRecord>, ClientError> {
        self.call("GET", "/v1/links", None::<&()>)
    }

    /// A node's latest forecast.
    pub fn forecast(&self, node_id: &str) -> Result<NodeForecast, ClientError> {
        self.call("GET", &format!("/v1/nodes/{node_id}/forecast"), None::<&()>)
    }

    /// Submits a job; returns its id.
    pub fn submit(&self, spec: &JobFile) -> Result<u64, ClientError> {
        self.call::<Submitted>("POST", "/v1/jobs", Some(spec))
            .map(|s| s.id)
    }

    /// Every job.
    pub fn jobs(&self) -> Result<Vec<JobRecord>, ClientError> {
        self.call("GET", "/v1/jobs", None::<&()>)
    }

    /// One job.
    pub fn job(&self, id: u64) -> Result<JobRecord, ClientError> {
        self.call("GET", &format!("/v1/jobs/{id}"), None::<&()>)
    }

    /// Cancels a job.
    pub fn cancel(&self, id: u64) -> Result<JobRecord, ClientError> {
        self.call("POST", &format!("/v1/jobs/{id}/cancel"), None::<&()>)
    }

    /// Creates a join token.
    pub fn create_token(&self, req: &TokenRequest) -> Result<NewToken, ClientError> {
        self.call("POST", "/v1/tokens", Some(req))
    }

    /// Every join token, without secrets.
    pub fn tokens(&self) -> Result<Vec<TokenRecord>, ClientError> {
        self.call("GET", "/v1/tokens", None::<&()>)
    }

    /// Revokes a join token.
    pub fn revoke_token(&self, id: &str) -> Result<Vec<TokenRecord>, ClientError> {
        self.call("POST", &format!("/v1/tokens/{id}/revoke"), None::<&()>)
    }

    /// Revokes a node's certificates and forgets its forecast and links.
    pub fn remove_node(&self, id: &str) -> Result<Removed, ClientError> {
        self.call("POST", &format!("/v1/nodes/{id}/remove"), None::<&()>)
    }

    /// The Prometheus metrics text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let url = format!("{}/metrics", self.base);
        let unreachable = |source| ClientError::Unreachable {
            url: url.clone(),
            source,
        };
        let mut response = self.agent.get(&url).call().map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(unreachable)?;
        if status >= 400 {
            return Err(ClientError::Api {
                status,
                message: text,
            });
        }
        Ok(text)
    }
}
