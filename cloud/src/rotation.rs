//! CA rotation, in two steps an operator takes. `begin` makes a new CA that
//! signs every node certificate from then on, while certificates of both CAs
//! are accepted and the server keeps its certificate from the old one; each
//! node renews onto the new CA on its next connection, which the step forces
//! (one reconnect). `finish` makes the new CA sign the server certificate and
//! be the only one trusted, and forces one more reconnect. A node that has not
//! renewed by then must join again, so `finish` refuses until every node has,
//! unless forced.

use serde::{Deserialize, Serialize};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::identity::{Authority, sha256_hex};
use tidemill_runtime::quic::{self, Clients, Timing};
use tidemill_runtime::tls::{self, TlsError};

use crate::coordinator::Coordinator;
use crate::store::StoreError;

/// A step of a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// A new CA signs from now on.
    Begin,
    /// The new CA is the only one.
    Finish,
}

/// Where the CA stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaStatus {
    /// Whether a rotation is under way.
    pub rotating: bool,
    /// SHA-256 of the CA the server presents (join tokens pin it).
    pub ca_sha256: String,
    /// SHA-256 of the CA that signs node certificates now.
    pub issuing_sha256: String,
    /// Nodes with a live certificate.
    pub nodes: u64,
    /// Of those, nodes holding a certificate from the issuing CA.
    pub nodes_on_issuing: u64,
}

/// Why a rotation step failed.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// Nodes would be locked out.
    #[error(
        "{waiting} of {nodes} nodes still hold only a certificate from the old CA; wait for them to reconnect (`ca status`), or finish with --force and have them join again"
    )]
    NodesWaiting {
        /// Nodes not yet renewed.
        waiting: u64,
        /// Nodes in all.
        nodes: u64,
    },
    /// No rotation is under way.
    #[error("no CA rotation is under way; run `tidemill-cloud ca rotate begin` first")]
    NotRotating,
    /// The PKI files could not be changed.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The QUIC server could not take the new configuration.
    #[error(transparent)]
    Endpoint(#[from] quic::EndpointError),
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the CA stands now.
pub fn status(coord: &Coordinator) -> Result<CaStatus, StoreError> {
    let authority = coord.authority();
    let issuing = authority.issuing_pin();
    let (nodes, nodes_on_issuing) = coord
        .store
        .lock()
        .unwrap()
        .rotation_progress(&issuing, SystemClock.now_ms())?;
    Ok(CaStatus {
        rotating: tls::rotating(&coord.cfg.data_dir),
        ca_sha256: sha256_hex(&authority.ca),
        issuing_sha256: issuing,
        nodes,
        nodes_on_issuing,
    })
}

/// Takes a step; `force` finishes even with nodes not yet renewed.
pub fn step(coord: &Coordinator, step: Step, force: bool) -> Result<CaStatus, RotationError> {
    let dir = &coord.cfg.data_dir;
    let now = SystemClock.now_ms();
    match step {
        Step::Begin => tls::begin_rotation(dir, now)?,
        Step::Finish => {
            if !tls::rotating(dir) {
                return Err(RotationError::NotRotating);
            }
            let s = status(coord)?;
            if s.nodes_on_issuing < s.nodes && !force {
                return Err(RotationError::NodesWaiting {
                    waiting: s.nodes - s.nodes_on_issuing,
                    nodes: s.nodes,
                });
            }
            tls::finish_rotation(dir, &coord.cfg.tls_names, now)?;
        }
    }
    coord.set_authority(Authority::load(dir)?);
    if let Some(endpoint) = coord.endpoint.get() {
        let identity = tls::load_or_create(dir, &coord.cfg.tls_names, now)?;
        let timing = Timing {
            keep_alive: std::time::Duration::from_secs(coord.cfg.link.keep_alive_secs),
            idle_timeout: std::time::Duration::from_secs(coord.cfg.link.idle_timeout_secs),
        };
        endpoint.set_server_config(Some(quic::server_config(
            identity,
            Clients::CertifiedOrJoining,
            timing,
        )?));
    }
    coord.drop_sessions("the CA rotation moved on; reconnect");
    tracing::info!(
        ?step,
        force,
        "CA rotation step taken; every edge reconnects once"
    );
    Ok(status(coord)?)
}
