//! The CLI's client for the operator API.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{
    ApiError, ApiTokenRequest, Cordon, NewApiToken, NewToken, Removed, Submitted, TokenRequest,
};
use crate::api_trust::Labels;
use crate::job::{JobFile, JobRecord};
use crate::store::{Acceptance, ApiTokenRecord, LinkRecord, NodeRecord, TokenRecord};
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

/// `--api` (or TIDEMILL_API) as a base URL: a bare `HOST:PORT` means
/// `http://HOST:PORT`, as it does to the coordinator's `api_listen`; any
/// other scheme than http and https is refused with the fix.
pub fn api_base(value: &str) -> Result<String, String> {
    match value.split_once("://") {
        None if !value.trim().is_empty() => Ok(format!("http://{value}")),
        Some((scheme, rest))
            if !rest.is_empty()
                && (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) =>
        {
            Ok(value.to_string())
        }
        _ => Err("give the coordinator's API as HOST:PORT or http://HOST:PORT (https://HOST:PORT where [api] tls = true)".to_string()),
    }
}

/// A client for one coordinator.
pub struct Client {
    base: String,
    agent: ureq::Agent,
    token: Option<String>,
    /// Why the client has no token, told when the API asks for one.
    no_token_because: Option<String>,
}

impl Client {
    /// A client for the API at `base`, for example `http://127.0.0.1:7480`,
    /// that sends `token`.
    pub fn new(base: &str, token: &str) -> Self {
        Client::with_auth(base, Some(token), None).expect("a client without a CA file")
    }

    /// The same client, told why it has no token: a 401 then says where the
    /// CLI looked for one.
    pub fn without_token_because(mut self, why: String) -> Self {
        self.no_token_because = Some(why);
        self
    }

    /// A client that sends `token` and checks an `https://` API against the
    /// CA in `ca`.
    pub fn with_auth(
        base: &str,
        token: Option<&str>,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, ClientError> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)));
        if let Some(ca) = ca {
            let certs = tidemill_runtime::tls::read_certs(ca).map_err(|e| ClientError::Api {
                status: 0,
                message: format!("--api-ca: {e}"),
            })?;
            let roots: Vec<ureq::tls::Certificate<'static>> = certs
                .iter()
                .map(|c| ureq::tls::Certificate::from_der(c).to_owned())
                .collect();
            let tls = ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
                .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .build();
            config = config.tls_config(tls);
        }
        Ok(Client {
            base: base.trim_end_matches('/').to_string(),
            agent: config.build().into(),
            token: token.map(str::to_string),
            no_token_because: None,
        })
    }

    /// `req` with this client's API token, if it has one.
    fn authorized<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
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
            ("GET", _) => self.authorized(self.agent.get(&url)).call(),
            (_, Some(b)) => self.authorized(self.agent.post(&url)).send_json(b),
            (_, None) => self.authorized(self.agent.post(&url)).send_empty(),
        };
        let mut response = response.map_err(unreachable)?;
        let status = response.status().as_u16();
        if status >= 400 {
            let message = response
                .body_mut()
                .read_json::<ApiError>()
                .map(|e| e.error)
                .unwrap_or_else(|_| "the coordinator gave no reason".to_string());
            return Err(self.refused(status, message));
        }
        response.body_mut().read_json::<T>().map_err(unreachable)
    }

    /// The error for an answer with `status`: a 401 to a client without a
    /// token also says why it has none.
    fn refused(&self, status: u16, message: String) -> ClientError {
        let message = match &self.no_token_because {
            Some(why) if status == 401 => format!(
                "{}; no token was given (--api-token, TIDEMILL_API_TOKEN), and {why}",
                message.trim_end()
            ),
            _ => message,
        };
        ClientError::Api { status, message }
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

    /// Accepts the capabilities a node's refused hello claimed.
    pub fn accept_capabilities(&self, id: &str) -> Result<Acceptance, ClientError> {
        self.call(
            "POST",
            &format!("/v1/nodes/{id}/accept-capabilities"),
            None::<&()>,
        )
    }

    /// Gives a node a label (`on`) or takes it away.
    pub fn label(&self, id: &str, label: &str, on: bool) -> Result<Labels, ClientError> {
        let verb = if on { "label" } else { "unlabel" };
        self.call(
            "POST",
            &format!("/v1/nodes/{id}/{verb}/{label}"),
            None::<&()>,
        )
    }

    /// Drains a node (`drain`) or lets the scheduler use it again.
    pub fn cordon(&self, id: &str, drain: bool) -> Result<Cordon, ClientError> {
        let verb = if drain { "drain" } else { "uncordon" };
        self.call("POST", &format!("/v1/nodes/{id}/{verb}"), None::<&()>)
    }

    /// The Prometheus metrics text.
    pub fn metrics(&self) -> Result<String, ClientError> {
        let url = format!("{}/metrics", self.base);
        let unreachable = |source| ClientError::Unreachable {
            url: url.clone(),
            source,
        };
        let mut response = self
            .authorized(self.agent.get(&url))
            .call()
            .map_err(unreachable)?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(unreachable)?;
        if status >= 400 {
            return Err(self.refused(status, text));
        }
        Ok(text)
    }

    /// Creates an API token.
    pub fn create_api_token(&self, req: &ApiTokenRequest) -> Result<NewApiToken, ClientError> {
        self.call("POST", "/v1/api-tokens", Some(req))
    }

    /// Every API token, without secrets.
    pub fn api_tokens(&self) -> Result<Vec<ApiTokenRecord>, ClientError> {
        self.call("GET", "/v1/api-tokens", None::<&()>)
    }

    /// Revokes an API token.
    pub fn revoke_api_token(&self, id: &str) -> Result<Vec<ApiTokenRecord>, ClientError> {
        self.call("POST", &format!("/v1/api-tokens/{id}/revoke"), None::<&()>)
    }

    /// Where the CA stands.
    pub fn ca_status(&self) -> Result<crate::rotation::CaStatus, ClientError> {
        self.call("GET", "/v1/ca", None::<&()>)
    }

    /// Takes a CA rotation step.
    pub fn rotate_ca(
        &self,
        req: &crate::api::RotateRequest,
    ) -> Result<crate::rotation::CaStatus, ClientError> {
        self.call("POST", "/v1/ca/rotate", Some(req))
    }
}

#[cfg(test)]
mod tests {
    use super::api_base;

    #[test]
    fn a_bare_host_and_port_is_http_and_other_schemes_are_refused() {
        assert_eq!(api_base("127.0.0.1:8080").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(api_base("[::1]:7480").unwrap(), "http://[::1]:7480");
        assert_eq!(
            api_base("https://c.example:7480").unwrap(),
            "https://c.example:7480"
        );
        assert_eq!(
            api_base("HTTP://10.0.0.1:7480").unwrap(),
            "HTTP://10.0.0.1:7480"
        );
        for bad in ["ftp://10.0.0.1:7480", "http://", ""] {
            assert!(api_base(bad).unwrap_err().contains("HOST:PORT"), "{bad}");
        }
    }
}
