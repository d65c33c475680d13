//! The messages. Each stream carries frames of one direction's enum: [`EdgeMsg`]
//! from an edge, [`CloudMsg`] from the coordinator.
//!
//! * The edge opens one connection and, on its first bidirectional stream, sends
//!   [`EdgeMsg::Hello`] and receives [`CloudMsg::Welcome`].
//! * Journaled [`Report`]s travel in batches, each batch on a fresh bidirectional
//!   stream opened by the edge, and are answered by [`CloudMsg::Ack`]. Reports carry a per-node sequence number, so
//!   the edge can resend whatever was not acknowledged and the coordinator can drop
//!   duplicates.
//! * Each [`Command`] travels on a fresh bidirectional stream opened by the
//!   coordinator and is answered by [`EdgeMsg::CommandAck`].
//! * Any stream may be answered by [`CloudMsg::Error`] or [`EdgeMsg::Error`]
//!   when its frame cannot be accepted.

mod commands;
mod reports;

use serde::{Deserialize, Serialize};

use crate::checkpoint::Manifest;

pub use commands::{Command, TaskAssignment};
pub use reports::{
    CheckpointState, Report, ReportBody, Sample, TaskEvent, TaskProgress, TaskResume, TaskStatus,
    Transfer,
};

/// What an edge sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum EdgeMsg {
    /// Registration, first on every connection that carries a node
    /// certificate; the node id must be the certificate's.
    Hello(Hello),
    /// The only frame a connection without a node certificate may send:
    /// asks for a certificate, answered by [`CloudMsg::Joined`].
    Join(Join),
    /// Durable reports from the edge's journal, oldest first, acknowledged
    /// together.
    Reports(Vec<Report>),
    /// The edge has taken a command and journaled what it will do about it.
    CommandAck {
        /// The task the command named.
        task_id: u64,
    },
    /// The edge refuses a frame it was sent.
    Error(WireError),
    /// A link probe: the receiver counts the payload and answers
    /// [`CloudMsg::ProbeAck`], so the sender can time the transfer.
    Probe {
        /// Filler bytes; only their number matters.
        payload: Vec<u8>,
        /// The packet train sent just before this frame as QUIC datagrams,
        /// whose arrival times the receiver reports back, if any.
        train: Option<u64>,
    },
    /// Asks the coordinator which peers this edge should probe.
    PeersRequest,
    /// Asks for a new certificate for this connection's node over a new key,
    /// before the current one expires; answered by [`CloudMsg::Renewed`].
    Renew {
        /// The new ECDSA P-256 public key (the uncompressed point).
        public_key: Vec<u8>,
    },
    /// Asks the coordinator's wall-clock time, in place of a hello on a
    /// connection that only checks the link (`tidemill-edge doctor`);
    /// answered by [`CloudMsg::Clock`].
    ClockRequest,
    /// Offers the coordinator a complete checkpoint of the job of `task_id`
    /// (a task of this node), to keep for the job's next start elsewhere;
    /// answered by [`CloudMsg::CheckpointMissing`].
    CheckpointOffer {
        /// The task whose checkpoint dir it was read from.
        task_id: u64,
        /// What it holds.
        manifest: Manifest,
    },
    /// One chunk of an offered checkpoint; answered by
    /// [`CloudMsg::CheckpointChunkStored`] once its hash matched.
    CheckpointChunk {
        /// The job.
        job_id: u64,
        /// The offered manifest's id (`tidemill_runtime::checkpoint::manifest_id`).
        manifest_id: String,
        /// The chunk's number across the manifest's files.
        index: u32,
        /// Its bytes.
        #[serde(with = "crate::checkpoint::bin")]
        data: Vec<u8>,
    },
    /// Every chunk of an offered checkpoint was sent; answered by
    /// [`CloudMsg::CheckpointStored`] once the whole verified.
    CheckpointCommit {
        /// The job.
        job_id: u64,
        /// The manifest's id.
        manifest_id: String,
    },
    /// Asks for the latest complete checkpoint the coordinator keeps for the
    /// job of `task_id`, a task assigned to this node; answered by
    /// [`CloudMsg::CheckpointLatest`].
    CheckpointLatest {
        /// The task about to start.
        task_id: u64,
        /// Its job.
        job_id: u64,
    },
    /// Asks for one chunk of a kept checkpoint; answered by
    /// [`CloudMsg::CheckpointChunk`].
    CheckpointFetch {
        /// The task about to start.
        task_id: u64,
        /// Its job.
        job_id: u64,
        /// The manifest's id.
        manifest_id: String,
        /// The chunk's number.
        index: u32,
    },
    /// Tells the coordinator that this edge put a complete checkpoint of the
    /// job of `task_id` (a task of this node) in the operators' shared
    /// store (`[checkpoint] backend = "shared"`), so that it learns its size
    /// and step as if it had been sent; no chunk goes through the
    /// coordinator. Answered by [`CloudMsg::CheckpointStored`].
    CheckpointShared {
        /// The task whose checkpoint dir it was read from.
        task_id: u64,
        /// What it holds.
        manifest: Manifest,
        /// How the put went.
        transfer: Transfer,
    },
}

/// What the coordinator sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CloudMsg {
    /// Accepts a [`Hello`].
    Welcome(Welcome),
    /// Accepts a [`Join`]: the node's certificate and the CA that signed it,
    /// both DER.
    Joined(Issued),
    /// Answers [`EdgeMsg::Renew`], as [`CloudMsg::Joined`] answers a join.
    Renewed(Issued),
    /// Acknowledges every report of this node up to and including `seq`.
    Ack {
        /// The highest sequence number the coordinator has durably stored.
        seq: u64,
    },
    /// Work for the edge.
    Command(Command),
    /// The coordinator refuses a frame it was sent.
    Error(WireError),
    /// Answers [`EdgeMsg::Probe`] (edge probe responders send it too).
    ProbeAck {
        /// Payload bytes received.
        bytes: u64,
        /// How the probe's packet train arrived, if one was named and any of
        /// it arrived.
        train: Option<TrainArrival>,
    },
    /// Answers [`EdgeMsg::PeersRequest`]: the edges to probe.
    Peers(Vec<Peer>),
    /// Answers [`EdgeMsg::ClockRequest`].
    Clock {
        /// The coordinator's wall clock, Unix ms (never an accelerated one).
        now_ms: i64,
    },
    /// Answers [`EdgeMsg::CheckpointOffer`]: the chunks still to send (none
    /// when a complete copy is kept already; a resumed offer lists only what
    /// did not arrive before).
    CheckpointMissing {
        /// The manifest's id, as the coordinator computed it.
        manifest_id: String,
        /// Chunk numbers to send.
        missing: Vec<u32>,
    },
    /// Answers [`EdgeMsg::CheckpointChunk`]: the chunk matched and is kept.
    CheckpointChunkStored {
        /// The chunk's number.
        index: u32,
    },
    /// Answers [`EdgeMsg::CheckpointCommit`]: the checkpoint is complete.
    CheckpointStored {
        /// The step it holds.
        step: u64,
        /// Its bytes.
        bytes: u64,
    },
    /// Answers [`EdgeMsg::CheckpointLatest`]: the newest complete checkpoint
    /// of the job, if the coordinator keeps one.
    CheckpointLatest(Option<Manifest>),
    /// Answers [`EdgeMsg::CheckpointFetch`].
    CheckpointChunk {
        /// The chunk's number.
        index: u32,
        /// Its bytes; the edge checks them against the manifest's hash.
        #[serde(with = "crate::checkpoint::bin")]
        data: Vec<u8>,
    },
}

/// How a packet train arrived at the receiver, for the sender to work out the
/// bottleneck rate that spaced it (see `tidemill_runtime::probe::train_rate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainArrival {
    /// Microseconds from the first arrival to each arrival, in arrival order;
    /// the receiver keeps at most `tidemill_runtime::probe::MAX_ARRIVALS`.
    pub arrivals_us: Vec<u64>,
}

/// An edge another edge may probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    /// The peer's node id.
    pub node_id: String,
    /// Its probe responder's UDP address.
    pub addr: std::net::SocketAddr,
    /// SHA-256 of the certificate it connected to the coordinator with, which
    /// its responder presents: the prober accepts no other.
    pub cert_sha256: String,
}

/// The name under which an edge reports its link to the coordinator.
pub const CLOUD_PEER: &str = "cloud";

/// The name under which a checkpoint transfer to or from the operators'
/// shared store (`[checkpoint] backend = "shared"`) is recorded.
pub const SHARED_STORE_PEER: &str = "shared-store";

/// One measurement of a link from the reporting node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSample {
    /// The other end: a node id, or `cloud` for the coordinator.
    pub peer: String,
    /// When it was measured, Unix ms.
    pub t_ms: i64,
    /// Round-trip time, ms, as QUIC estimates it.
    pub rtt_ms: f64,
    /// Throughput of the probe transfer, bytes per second.
    pub bandwidth_bps: f64,
    /// Share of packets lost on the connection so far (0-1).
    pub loss: f64,
    /// UDP payload bytes this edge sent to measure the link (handshake,
    /// packet trains, transfer, acknowledgements), as QUIC counts them; zero
    /// for a passive sample read off the report connection. Absent (zero)
    /// from edges older than this field.
    #[serde(default)]
    pub probe_sent_bytes: u64,
    /// UDP payload bytes the other end sent for the measurement: its share of
    /// the probe, which the coordinator charges to the other end.
    #[serde(default)]
    pub probe_received_bytes: u64,
}

/// Registration. Sent again after every reconnect, so capabilities stay current.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The node's stable identity, chosen by the operator.
    pub node_id: String,
    /// What the node offers.
    pub capabilities: Capabilities,
    /// The UDP port of the edge's probe responder, if it runs one; peers reach
    /// it at the address the coordinator sees the edge connect from.
    pub probe_port: Option<u16>,
    /// The site the operator installed the node at (`site` in its config):
    /// boxes of one site share a tide, so a new box's forecast starts from its
    /// site peers' ([`Welcome::prior`]). It chooses nothing else; labels that
    /// jobs require are an admin's. Absent from older edges.
    #[serde(default)]
    pub site: Option<String>,
}

/// Longest site name, in bytes.
pub const MAX_SITE: usize = 64;

/// Why `site` cannot name a site, if it cannot: 1 to [`MAX_SITE`] lower-case
/// letters, digits, '.', '_' or '-'. The edge checks its config with it and
/// the coordinator every hello.
pub fn site_problem(site: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
    (site.is_empty() || site.len() > MAX_SITE || !site.chars().all(ok)).then(|| {
        format!(
            "site {site:?} is invalid: use 1 to {MAX_SITE} lower-case letters, digits, '.', '_' or '-', e.g. \"mec-07\" (the edge's `site` key)"
        )
    })
}

/// A certificate the coordinator issued to a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    /// The node's client certificate, DER.
    pub cert: Vec<u8>,
    /// The CA certificates (DER) the node should trust: the coordinator's CA,
    /// and the next one while a CA rotation is under way.
    pub ca: Vec<Vec<u8>>,
    /// SHA-256 (hex) of the CA that signed `cert`.
    pub issuer_sha256: String,
    /// When `cert` expires, Unix ms.
    pub not_after_ms: i64,
}

/// A request for a node certificate, authorised by a join token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Join {
    /// The join token's id.
    pub token_id: String,
    /// The join token's secret.
    pub secret: String,
    /// The node id the certificate will carry.
    pub node_id: String,
    /// The node's ECDSA P-256 public key (the uncompressed point); its
    /// private key never leaves the node.
    pub public_key: Vec<u8>,
}

/// Never prints the secret.
impl std::fmt::Debug for Join {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Join")
            .field("token_id", &self.token_id)
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

/// The coordinator's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The highest report sequence number stored for this node (0 for none): the
    /// edge resends every journaled report above it.
    pub acked_seq: u64,
    /// The coordinator's build version, for operators reading logs.
    pub coordinator_version: String,
    /// SHA-256 (hex) of the CA that signs node certificates now: a node whose
    /// certificate another CA signed renews it (a CA rotation is under way).
    pub issuing_ca_sha256: String,
    /// For a node whose own history is still short, the daily tide of its
    /// peers (site, else class, else fleet) for its forecaster to start from;
    /// `None` once its history stands alone, or when no peer has a forecast.
    #[serde(default)]
    pub prior: Option<tidemill_forecast::Prior>,
}

/// A node's hardware and software, as registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Logical CPU cores.
    pub cpu_cores: u32,
    /// Physical memory in bytes.
    pub mem_bytes: u64,
    /// GPUs and NPUs the node can offer.
    pub accelerators: Vec<Accelerator>,
    /// Operating system, for example `linux`.
    pub os: String,
    /// CPU architecture, for example `x86_64`.
    pub arch: String,
    /// The tidemill-edge version.
    pub daemon_version: String,
}

/// One accelerator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// How the accelerator was found and is read.
    pub kind: AcceleratorKind,
    /// Model name, for example `Tesla T4`; the scheduler maps it to a device class.
    pub model: String,
    /// Device memory in bytes, where known.
    pub mem_bytes: Option<u64>,
}

/// How an accelerator is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcceleratorKind {
    /// An NVIDIA GPU read through NVML (`nvidia-smi`).
    NvidiaGpu,
    /// An SoC GPU or NPU read through a sysfs load file.
    SocLoad,
}

/// A refusal, sent in place of the expected reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireError {
    /// What kind of refusal.
    pub code: ErrorCode,
    /// A sentence for the operator: what was wrong and how to fix it.
    pub message: String,
}

/// Kinds of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The frame's declared length is over the cap.
    FrameTooLarge,
    /// The frame could not be decoded.
    MalformedFrame,
    /// The message was valid but not expected here, for example a report before
    /// a hello.
    UnexpectedMessage,
    /// The receiver failed to handle a valid message; the sender should retry.
    Internal,
    /// The sender is not allowed to do this: no, a revoked or an unknown
    /// certificate, or a bad join token. The message says which.
    Unauthorized,
    /// A checkpoint chunk's bytes did not match its hash: send it again.
    Corrupt,
}
