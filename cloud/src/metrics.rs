//! The coordinator's metrics: what `GET /metrics` exposes (Prometheus text
//! format 0.0.4), the instruments the ingest, the rounds and dispatch feed,
//! and the gauges read from the store at each scrape. Every label value is
//! bounded: states and traffic kinds are fixed sets, and per-node series stop
//! at `[metrics] max_node_series`.

use std::sync::Mutex;

use tidemill_proto::{CloudMsg, EdgeMsg};
use tidemill_runtime::frames::FrameError;
use tidemill_runtime::metrics::prometheus::{
    GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};
use tidemill_runtime::metrics::{self as exposition, register};

use crate::store::{Store, StoreError};

/// Buckets of `tidemill_report_to_decision_seconds`, coordinator-clock
/// seconds: a report's lag plus the wait for a round, from seconds to an hour.
const DECISION_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// What a frame on an edge connection is for: the `kind` label of
/// `tidemill_wan_bytes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Reports from edges and the acks that answer them.
    Report,
    /// Commands to edges and their acknowledgements.
    Command,
    /// Link probes, their answers, and the peers an edge should probe.
    Probe,
    /// Registration, joins, renewals and refusals.
    Control,
    /// Checkpoints moving with their jobs, both ways.
    Checkpoint,
}

impl Traffic {
    const ALL: [Traffic; 5] = [
        Traffic::Report,
        Traffic::Command,
        Traffic::Probe,
        Traffic::Control,
        Traffic::Checkpoint,
    ];

    fn label(self) -> &'static str {
        match self {
            Traffic::Report => "report",
            Traffic::Command => "command",
            Traffic::Probe => "probe",
            Traffic::Control => "control",
            Traffic::Checkpoint => "checkpoint",
        }
    }
}

/// A protocol message whose traffic kind is known.
pub trait Classified {
    /// What the message is for.
    fn traffic(&self) -> Traffic;
}

impl Classified for EdgeMsg {
    fn traffic(&self) -> Traffic {
        match self {
            EdgeMsg::Reports(_) => Traffic::Report,
            EdgeMsg::CommandAck { .. } => Traffic::Command,
            EdgeMsg::Probe { .. } | EdgeMsg::PeersRequest => Traffic::Probe,
            EdgeMsg::Hello(_)
            | EdgeMsg::Join(_)
            | EdgeMsg::Renew { .. }
            | EdgeMsg::Error(_)
            | EdgeMsg::ClockRequest => Traffic::Control,
            EdgeMsg::CheckpointOffer { .. }
            | EdgeMsg::CheckpointChunk { .. }
            | EdgeMsg::CheckpointCommit { .. }
            | EdgeMsg::CheckpointLatest { .. }
            | EdgeMsg::CheckpointFetch { .. }
            | EdgeMsg::CheckpointShared { .. } => Traffic::Checkpoint,
        }
    }
}

impl Classified for CloudMsg {
    fn traffic(&self) -> Traffic {
        match self {
            CloudMsg::Ack { .. } => Traffic::Report,
            CloudMsg::Command(_) => Traffic::Command,
            CloudMsg::ProbeAck { .. } | CloudMsg::Peers(_) => Traffic::Probe,
            CloudMsg::Welcome(_)
            | CloudMsg::Joined(_)
            | CloudMsg::Renewed(_)
            | CloudMsg::Error(_)
            | CloudMsg::Clock { .. } => Traffic::Control,
            CloudMsg::CheckpointMissing { .. }
            | CloudMsg::CheckpointChunkStored { .. }
            | CloudMsg::CheckpointStored { .. }
            | CloudMsg::CheckpointLatest(_)
            | CloudMsg::CheckpointChunk { .. } => Traffic::Checkpoint,
        }
    }
}

/// The coordinator's instruments and the registry they are exposed from.
pub struct Metrics {
    registry: Registry,
    /// Connections refused during or right after the handshake.
    pub refused_connections: IntCounter,
    /// Frames refused as oversized, malformed or unexpected.
    pub refused_frames: IntCounter,
    /// Connections refused for identity: no, an unknown or a revoked
    /// certificate, a node id not the certificate's, or a bad join token.
    pub refused_identity: IntCounter,
    /// Certificates issued to joining nodes.
    pub joins: IntCounter,
    /// Connections refused before their handshake, over a `[quic]` cap.
    pub refused_admission: IntCounter,
    /// Second connections of a node whose first one still answers.
    pub refused_duplicates: IntCounter,
    /// Report batches refused over their node's `[ingest]` budget.
    pub reports_over_budget: IntCounter,
    /// Renewals refused over `[ingest] renewals_per_hour`.
    pub refused_renewals: IntCounter,
    /// Hellos refused for claiming more than the node joined with.
    pub refused_claims: IntCounter,
    /// Report values dropped as out of range, by field.
    pub dropped_values: IntCounterVec,
    /// Assignments acknowledged and not started in time, taken back.
    pub unstarted_assignments: IntCounter,
    /// Nodes cordoned for assignments they did not start.
    pub trust_cordons: IntCounter,
    /// Scheduling rounds' wall time, failed ones included.
    pub round_seconds: Histogram,
    /// Time to store a report batch, from its queueing for a commit.
    pub ingest_seconds: Histogram,
    /// Commits that stored report batches (batches queued together share one).
    pub report_commits: IntCounter,
    /// Time from a report batch's arrival to its ack written to the stream.
    pub ack_seconds: Histogram,
    /// Coordinator-clock time from a node's newest sample to the first
    /// round that planned with it.
    pub report_to_decision_seconds: Histogram,
    wan_bytes: IntCounterVec,
    nodes: IntGaugeVec,
    nodes_connected: IntGauge,
    jobs: IntGaugeVec,
    reports_stored: IntGauge,
    last_seen: GaugeVec,
    last_seen_dropped: IntGauge,
    edge_probe_bytes: IntCounterVec,
    node_probe_bytes: IntCounterVec,
    max_node_series: usize,
    /// One scrape at a time: a scrape resets the store-backed families before
    /// it refills them.
    scrape: Mutex<()>,
}

impl Metrics {
    /// Every instrument, at zero, with at most `max_node_series` per-node
    /// series in a scrape.
    pub fn new(max_node_series: usize) -> Self {
        let registry = exposition::registry(env!("CARGO_PKG_VERSION"));
        let counter = |name: &str, help: &str| {
            register(
                &registry,
                IntCounter::new(name, help).expect("a valid metric name"),
            )
        };
        let gauge = |name: &str, help: &str| {
            register(
                &registry,
                IntGauge::new(name, help).expect("a valid metric name"),
            )
        };
        let wan_bytes = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "tidemill_wan_bytes_total",
                    "Frame bytes on edge connections by direction (received, sent) and kind (report, command, probe, control); QUIC and UDP overhead and probe packet trains are not included.",
                ),
                &["direction", "kind"],
            )
            .expect("a valid metric name"),
        );
        for direction in ["received", "sent"] {
            for kind in Traffic::ALL {
                wan_bytes.with_label_values(&[direction, kind.label()]);
            }
        }
        Metrics {
            refused_connections: counter(
                "tidemill_refused_connections_total",
                "Connections refused in or after the handshake.",
            ),
            refused_frames: counter(
                "tidemill_refused_frames_total",
                "Frames refused as oversized, malformed or unexpected.",
            ),
            refused_identity: counter(
                "tidemill_refused_identity_total",
                "Connections refused for identity: no, an unknown or a revoked certificate, another node's id, or a bad join token.",
            ),
            joins: counter(
                "tidemill_joins_total",
                "Certificates issued to joining nodes.",
            ),
            refused_admission: counter(
                "tidemill_refused_admission_total",
                "QUIC connections refused before their handshake, over a [quic] cap on connections.",
            ),
            refused_duplicates: counter(
                "tidemill_refused_duplicates_total",
                "Connections refused because their node is connected already and its connection answers (a second process with the same credentials).",
            ),
            reports_over_budget: counter(
                "tidemill_reports_over_budget_total",
                "Report batches refused because their node was over its [ingest] budget for the hour.",
            ),
            refused_renewals: counter(
                "tidemill_refused_renewals_total",
                "Certificate renewals refused over [ingest] renewals_per_hour.",
            ),
            refused_claims: counter(
                "tidemill_refused_capability_claims_total",
                "Hellos refused for claiming more cores, memory or accelerators than the node joined with.",
            ),
            dropped_values: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "tidemill_report_values_dropped_total",
                        "Report values dropped as out of range (utilisation outside 0-100, RTT or bandwidth not positive and finite, loss outside 0-1, timestamp beyond the skew bound), by field.",
                    ),
                    &["field"],
                )
                .expect("a valid metric name"),
            ),
            unstarted_assignments: counter(
                "tidemill_unstarted_assignments_total",
                "Assignments an edge acknowledged and did not start within [trust] start_timeout_secs, taken back.",
            ),
            trust_cordons: counter(
                "tidemill_trust_cordons_total",
                "Nodes cordoned after [trust] cordon_after_unstarted assignments they did not start.",
            ),
            round_seconds: exposition::latency(
                &registry,
                "tidemill_round_duration_seconds",
                "Wall time of scheduling rounds, failed ones included.",
            ),
            ingest_seconds: exposition::latency(
                &registry,
                "tidemill_report_ingest_seconds",
                "Time to store one report batch in the database, from its queueing for a commit (batches queued together share one).",
            ),
            report_commits: counter(
                "tidemill_report_commits_total",
                "Database commits that stored report batches; batches queued during a commit share the next one.",
            ),
            ack_seconds: exposition::latency(
                &registry,
                "tidemill_report_ack_seconds",
                "Time from a report batch's arrival to its ack written to the edge's stream.",
            ),
            report_to_decision_seconds: register(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "tidemill_report_to_decision_seconds",
                        "Coordinator-clock seconds from a node's newest sample to the first scheduling round that planned jobs with it, once per node and round.",
                    )
                    .buckets(DECISION_BUCKETS.to_vec()),
                )
                .expect("a valid metric name"),
            ),
            wan_bytes,
            nodes: register(
                &registry,
                IntGaugeVec::new(
                    Opts::new("tidemill_nodes", "Registered nodes by state."),
                    &["state"],
                )
                .expect("a valid metric name"),
            ),
            nodes_connected: gauge(
                "tidemill_nodes_connected",
                "Nodes with a live connection now.",
            ),
            jobs: register(
                &registry,
                IntGaugeVec::new(Opts::new("tidemill_jobs", "Jobs by state."), &["state"])
                    .expect("a valid metric name"),
            ),
            reports_stored: gauge("tidemill_reports_stored", "Reports in the ledger."),
            last_seen: register(
                &registry,
                GaugeVec::new(
                    Opts::new(
                        "tidemill_node_last_seen_seconds",
                        "When each node was last heard from, Unix seconds on the coordinator's clock; at most [metrics] max_node_series nodes, in node id order.",
                    ),
                    &["node_id"],
                )
                .expect("a valid metric name"),
            ),
            last_seen_dropped: gauge(
                "tidemill_node_series_dropped",
                "Nodes left out of tidemill_node_last_seen_seconds at the last scrape, past [metrics] max_node_series.",
            ),
            edge_probe_bytes: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "tidemill_edge_probe_bytes_total",
                        "Link probe bytes the edges reported sending and receiving (UDP payload), all nodes together, as the store holds them.",
                    ),
                    &["direction"],
                )
                .expect("a valid metric name"),
            ),
            node_probe_bytes: register(
                &registry,
                IntCounterVec::new(
                    Opts::new(
                        "tidemill_node_probe_bytes_total",
                        "Link probe bytes each node reported sending and receiving, for the nodes with a tidemill_node_last_seen_seconds series.",
                    ),
                    &["node_id", "direction"],
                )
                .expect("a valid metric name"),
            ),
            max_node_series,
            registry,
            scrape: Mutex::new(()),
        }
    }

    /// Counts the frame bytes of a message read from an edge, passing the
    /// read through.
    pub fn received<T: Classified>(
        &self,
        read: Result<Option<(T, usize)>, FrameError>,
    ) -> Result<Option<T>, FrameError> {
        read.map(|read| {
            read.map(|(msg, bytes)| {
                self.count(&msg, "received", bytes);
                msg
            })
        })
    }

    /// Counts the frame bytes of `msg`, written to an edge, passing the
    /// write's outcome through.
    pub fn sent<T: Classified>(
        &self,
        msg: &T,
        written: Result<usize, FrameError>,
    ) -> Result<(), FrameError> {
        written.map(|bytes| self.count(msg, "sent", bytes))
    }

    /// Counts `bytes` of `msg`'s kind in `direction`.
    pub fn count<T: Classified>(&self, msg: &T, direction: &str, bytes: usize) {
        self.wan_bytes
            .with_label_values(&[direction, msg.traffic().label()])
            .inc_by(bytes as u64);
    }

    /// The text exposition: the instruments as they stand, and the gauges
    /// read from `store` now, with `connected` live connections.
    pub fn scrape(&self, store: &Store, connected: usize) -> Result<String, StoreError> {
        let _one = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        let counts = store.counts()?;
        let seen = store.last_seen(self.max_node_series)?;
        self.nodes
            .with_label_values(&["online"])
            .set(counts.nodes_online as i64);
        self.nodes
            .with_label_values(&["offline"])
            .set(counts.nodes_offline as i64);
        self.nodes_connected.set(connected as i64);
        self.jobs.reset();
        for (state, n) in &counts.jobs {
            self.jobs.with_label_values(&[state]).set(*n as i64);
        }
        self.reports_stored.set(counts.reports as i64);
        self.last_seen.reset();
        for (node_id, ms) in &seen {
            self.last_seen
                .with_label_values(&[node_id])
                .set(*ms as f64 / 1000.0);
        }
        // Counters read from the store: reset, then set to the stored sums.
        let probes = store.probe_bytes()?;
        let with_series: std::collections::HashSet<&str> =
            seen.iter().map(|(id, _)| id.as_str()).collect();
        self.edge_probe_bytes.reset();
        self.node_probe_bytes.reset();
        for direction in ["sent", "received"] {
            self.edge_probe_bytes.with_label_values(&[direction]);
        }
        for p in &probes {
            for (direction, bytes) in [("sent", p.sent), ("received", p.received)] {
                self.edge_probe_bytes
                    .with_label_values(&[direction])
                    .inc_by(bytes);
                if with_series.contains(p.node_id.as_str()) {
                    self.node_probe_bytes
                        .with_label_values(&[&p.node_id, direction])
                        .inc_by(bytes);
                }
            }
        }
        let nodes = counts.nodes_online + counts.nodes_offline;
        self.last_seen_dropped
            .set(nodes.saturating_sub(seen.len() as u64) as i64);
        Ok(exposition::encode(&self.registry))
    }
}
