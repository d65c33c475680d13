//! Joining: trades a join token for this node's certificate, once, and loads
//! the certificate on every later start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::clock::Clock;

use tidemill_runtime::identity::{
    JoinFailure, JoinToken, NodeIdentity, NodeKeyPair, TokenError, request_certificate,
};
use tidemill_runtime::quic::{self, EndpointError, Timing};
use tidemill_runtime::tls::TlsError;

/// Why this node could not get or load its certificate.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// No certificate in the data dir and no token to get one with.
    #[error(
        "{dir} holds no node certificate; give a join token (`--token-file F`, the TIDEMILL_TOKEN variable, or `token` in the config) from `tidemill-cloud token create`"
    )]
    NoIdentity {
        /// The data dir.
        dir: std::path::PathBuf,
    },
    /// The token is malformed.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The credentials could not be read or written.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The join endpoint could not be made.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The coordinator could not be reached, or it is not the one the token
    /// pins.
    #[error("cannot join through {addr}: {source}")]
    Connect {
        /// The coordinator's address.
        addr: SocketAddr,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Nothing answered at the coordinator's address within [`JOIN_WAIT`].
    #[error(
        "no coordinator answered at {addr} within {} s; check that --coordinator (`coordinator` in the config) names the coordinator's host and its QUIC UDP port (its `quic_listen`, 7400 by default), and that no firewall drops UDP on the way",
        JOIN_WAIT.as_secs()
    )]
    NoAnswer {
        /// The address tried.
        addr: SocketAddr,
    },
    /// The coordinator refused the join.
    #[error("the coordinator refused the join: {0}")]
    Refused(String),
}

/// How long a join waits for the coordinator's first answer: a wrong address
/// or port, or a firewall that drops UDP, is reported this soon, not after
/// the link's longer idle timeout.
pub const JOIN_WAIT: Duration = Duration::from_secs(10);

/// Where this node's credentials come from: its data dir, or a join.
pub struct Joining {
    /// The data dir.
    pub dir: PathBuf,
    /// A CA file to trust instead of the one received at join.
    pub ca: Option<PathBuf>,
    /// The join token, if any.
    pub token: Option<String>,
    /// The node id to join as.
    pub node_id: String,
    /// The coordinator's address and certificate name.
    pub coordinator: (SocketAddr, String),
    /// Connection timing.
    pub timing: Timing,
}

impl Joining {
    /// This node's credentials: loaded from the data dir if a join wrote
    /// them there, otherwise got now with the token.
    pub async fn identity(&self) -> Result<NodeIdentity, JoinError> {
        if !NodeIdentity::present(&self.dir) {
            let token = self.token.as_deref().ok_or_else(|| JoinError::NoIdentity {
                dir: self.dir.clone(),
            })?;
            let (addr, name) = &self.coordinator;
            join(&self.dir, token, &self.node_id, (*addr, name), self.timing).await?;
        }
        Ok(NodeIdentity::load(&self.dir, self.ca.as_deref())?)
    }

    /// [`Joining::identity`], retried with `backoff` while the coordinator
    /// is out of reach; a refusal or a bad token ends it.
    pub async fn retrying(
        &self,
        mut backoff: Backoff,
        clock: &dyn Clock,
    ) -> Result<NodeIdentity, JoinError> {
        let mut rng: rand::rngs::StdRng = rand::make_rng();
        loop {
            match self.identity().await {
                Err(e @ (JoinError::Connect { .. } | JoinError::NoAnswer { .. })) => {
                    let delay = backoff.next_delay(&mut rng);
                    tracing::warn!(node_id = %self.node_id, coordinator = %self.coordinator.0, error = %e, retry_in_ms = delay.as_millis() as u64, "cannot join yet");
                    clock.sleep(delay).await;
                }
                other => return other,
            }
        }
    }
}

/// Joins with `token` as `node_id` and stores the certificate in `dir`.
pub async fn join(
    dir: &Path,
    token: &str,
    node_id: &str,
    (addr, server_name): (SocketAddr, &str),
    timing: Timing,
) -> Result<(), JoinError> {
    let token: JoinToken = token.parse()?;
    let timing = Timing {
        idle_timeout: timing.idle_timeout.min(JOIN_WAIT),
        ..timing
    };
    let endpoint = quic::joiner(&token.ca_sha256, timing)?;
    let connect =
        |source: Box<dyn std::error::Error + Send + Sync>| JoinError::Connect { addr, source };
    let conn = endpoint
        .connect(addr, server_name)
        .map_err(|e| connect(e.into()))?
        .await
        .map_err(|e| match e {
            quinn::ConnectionError::TimedOut => JoinError::NoAnswer { addr },
            e => connect(e.into()),
        })?;
    let key = NodeKeyPair::generate()?;
    let exchanged = request_certificate(&conn, &token, node_id, &key).await;
    conn.close(0u32.into(), b"joined");
    match exchanged {
        Ok(issued) => {
            key.store(dir, &issued)?;
            tracing::info!(node_id, dir = %dir.display(), token_id = %token.id, "joined; certificate stored");
            Ok(())
        }
        Err(JoinFailure::Refused(why)) => Err(JoinError::Refused(why)),
        Err(JoinFailure::Frame(e)) => Err(connect(e.into())),
    }
}
