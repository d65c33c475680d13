//! One emulated edge of the twin: a box of the scenario (or a cloud node)
//! that speaks the real protocol through [`crate::edge_link`], replays its
//! box's utilisation from the scenario's trace on the accelerated clock,
//! feeds it to the real forecaster and reports samples and forecasts as
//! `tidemill-edge` does, runs the tasks it is assigned in emulation
//! ([`super::tasks`]), reporting Started, Resumed, Progress and the task's
//! end as a real edge does, and answers the coordinator's probe requests
//! with the scenario's links ([`super::probes`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_edge::executor::PROGRESS_EVERY_MS;
use tidemill_forecast::{ForecastConfig, LoadSample, NodeForecaster};
use tidemill_proto::{
    Accelerator, AcceleratorKind, CLOUD_PEER, Capabilities, CloudMsg, Command, EdgeMsg, ErrorCode,
    Hello, ReportBody, Sample, TaskEvent, TaskProgress, TaskResume, TaskStatus, WireError,
};
use tidemill_runtime::backoff::Backoff;
use tidemill_runtime::clock::SharedClock;
use tidemill_runtime::frames;

use super::probes::ModelLinks;
use super::tasks::{Refusal, Registry, Task, TideLoad};
use crate::edge_link::{Dialer, Outbox, drain};

/// The probe port an emulated edge announces, so the coordinator names it
/// among the peers to probe. Nothing listens there: the probes are emulated
/// ([`ModelLinks`]), and no twin edge dials the address it is given.
const PROBE_PORT: u16 = 9;

/// How long an emulated edge waits for the coordinator to name the peers
/// to probe (wall time); without an answer it probes no peer this round.
const PEERS_PATIENCE: Duration = Duration::from_secs(30);

/// Device memory an emulated accelerator reports: large, because the
/// simulator's nodes have no memory limit either.
const DEVICE_MEM_BYTES: u64 = 1 << 40;

/// What every emulated edge shares.
pub(crate) struct Shared {
    /// The tasks of every edge.
    pub(crate) registry: Registry,
    /// The scenario's edge load on the tide clock.
    pub(crate) load: TideLoad,
    /// The accelerated clock the coordinator runs on.
    pub(crate) clock: SharedClock,
    /// Tide ms between an edge's samples.
    pub(crate) sample_ms: i64,
    /// Tide ms between an edge's forecasts.
    pub(crate) refresh_ms: i64,
    /// The forecaster's settings, as `simulate` gives them.
    pub(crate) forecast: ForecastConfig,
    /// Tide ms between an edge's probe rounds (`[probe] interval_secs` of
    /// tidemill-edge's defaults).
    pub(crate) probe_ms: i64,
    /// The scenario's links, which the emulated probes read.
    pub(crate) links: ModelLinks,
    /// Reports journaled by all edges.
    pub(crate) reports: AtomicU64,
}

/// One emulated node.
pub(crate) struct Edge {
    /// Its index among the cost model's nodes.
    pub(crate) node: u32,
    /// Its id, the cost model's.
    pub(crate) node_id: String,
    /// Its box in the edge world; `None` for a cloud node.
    box_ix: Option<usize>,
    class: String,
    devices: u32,
    site: Option<String>,
    dialer: Dialer,
    outbox: Mutex<Outbox>,
    wake: tokio::sync::Notify,
    forecaster: Option<Mutex<NodeForecaster>>,
    shared: Arc<Shared>,
}

impl Edge {
    /// Node `node` of the model, primed with its box's load up to now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        node: u32,
        node_id: String,
        box_ix: Option<usize>,
        class: String,
        devices: u32,
        site: Option<String>,
        dialer: Dialer,
        shared: Arc<Shared>,
    ) -> Edge {
        let forecaster = box_ix.map(|e| {
            let mut f = NodeForecaster::new(shared.forecast.clone())
                .expect("simulate validated the forecast config");
            let now = shared.clock.now_ms() - shared.load.offset_ms;
            let bin = shared.load.edges.bin_ms.max(1);
            let mut t = shared.load.edges.origin_ms;
            while t < now {
                let _ = f.update(&load_sample(
                    shared.load.edges.load(e, t),
                    t + shared.load.offset_ms,
                ));
                t += bin;
            }
            Mutex::new(f)
        });
        Edge {
            node,
            node_id,
            box_ix,
            class,
            devices,
            site,
            dialer,
            outbox: Mutex::new(Outbox::new()),
            wake: tokio::sync::Notify::new(),
            forecaster,
            shared,
        }
    }

    /// Journals `body` and wakes the link.
    pub(crate) fn journal(&self, body: ReportBody) {
        self.outbox.lock().unwrap().append(body);
        self.shared.reports.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Journals a change in `task`'s life, now.
    pub(crate) fn task_event(&self, task: &Task, event: TaskEvent) {
        self.task_event_at(task, event, self.shared.clock.now_ms());
    }

    /// Journals a change in `task`'s life at tide ms `t_ms`.
    pub(crate) fn task_event_at(&self, task: &Task, event: TaskEvent, t_ms: i64) {
        self.journal(ReportBody::Task(TaskStatus {
            task_id: task.task_id,
            job_id: task.job_id,
            t_ms,
            event,
            output_tail: Vec::new(),
            checkpoint: None,
        }));
    }

    /// Samples the box every sample interval of tide: a sample report, a
    /// forecast every refresh, its tasks' progress as often as a real edge
    /// reports it, and a yield of every task when the box's own load has
    /// come back.
    pub(crate) async fn sample(self: Arc<Self>) {
        let s = &self.shared;
        let mut last_forecast: Option<i64> = None;
        let mut last_progress: Option<i64> = None;
        loop {
            s.clock
                .sleep(Duration::from_millis(s.sample_ms as u64))
                .await;
            let now = s.clock.now_ms();
            let trace_t = now - s.load.offset_ms;
            let load = self.box_ix.map_or(0.0, |e| s.load.edges.load(e, trace_t));
            self.journal(ReportBody::Samples(vec![Sample {
                t_ms: now,
                cpu_pct: load as f32,
                per_core_pct: vec![load as f32],
                mem_pct: 30.0,
                net_rx_bytes: 0,
                net_tx_bytes: 0,
                gpu_pct: None,
            }]));
            if let Some(f) = &self.forecaster {
                let mut f = f.lock().unwrap();
                let _ = f.update(&load_sample(load, now));
                if last_forecast.is_none_or(|at| now - at >= s.refresh_ms) {
                    let forecast = f.forecast(now);
                    drop(f);
                    self.journal(ReportBody::Forecast(Box::new(forecast)));
                    last_forecast = Some(now);
                }
            }
            let busy = self.box_ix.is_some_and(|e| !s.load.edges.idle(e, trace_t));
            // Progress goes at most as often as a real edge lets it through.
            let progress_due = last_progress.is_none_or(|at| now - at >= PROGRESS_EVERY_MS);
            if progress_due {
                last_progress = Some(now);
            }
            for task in s.registry.on_node(self.node) {
                if busy {
                    if let Some(t) = s.registry.stop(task.task_id, false, now, &s.load) {
                        self.task_event(
                            &t,
                            TaskEvent::Yielded {
                                exit_code: None,
                                signal: Some(libc::SIGTERM),
                                reason: format!(
                                    "the box's own load came back ({load:.0} %, emulated); the task lost what it trained since its last checkpoint"
                                ),
                            },
                        );
                    }
                } else if let Some(done) = s.registry.done(task.job_id).filter(|_| progress_due) {
                    self.journal(ReportBody::Progress(TaskProgress {
                        task_id: task.task_id,
                        job_id: task.job_id,
                        t_ms: now,
                        iterations: done.floor() as u64,
                    }));
                }
            }
        }
    }

    /// Connects, sends what is pending, and reconnects with backoff when the
    /// session ends.
    pub(crate) async fn link(self: Arc<Self>) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        let mut rng: rand::rngs::StdRng = rand::make_rng();
        loop {
            if let Err(e) = self.clone().session(&mut backoff).await {
                let delay = backoff.next_delay(&mut rng);
                tracing::debug!(node_id = %self.node_id, error = %e, retry_in_ms = delay.as_millis() as u64, "twin edge link down");
                tokio::time::sleep(delay).await;
            }
        }
    }

    async fn session(self: Arc<Self>, backoff: &mut Backoff) -> Result<(), String> {
        let accelerators = (0..self.devices)
            .map(|_| Accelerator {
                kind: AcceleratorKind::NvidiaGpu,
                model: self.class.clone(),
                mem_bytes: Some(DEVICE_MEM_BYTES),
            })
            .collect();
        let hello = Hello {
            node_id: self.node_id.clone(),
            capabilities: Capabilities {
                cpu_cores: 8,
                mem_bytes: 64 << 30,
                accelerators,
                os: "linux".into(),
                arch: "x86_64".into(),
                daemon_version: env!("CARGO_PKG_VERSION").into(),
            },
            probe_port: Some(PROBE_PORT),
            site: self.site.clone(),
        };
        let (conn, acked) = self.dialer.open(hello).await?;
        self.outbox.lock().unwrap().ack(acked);
        backoff.reset();
        let commands = tokio::spawn(self.clone().serve_commands(conn.clone()));
        let probes = tokio::spawn(self.clone().probe(conn.clone()));
        let result = drain(&conn, &self.outbox, &self.wake, &|_| {}).await;
        commands.abort();
        probes.abort();
        conn.close(0u32.into(), b"twin edge reconnects");
        result
    }

    /// A probe round every probe interval for the life of the connection, as
    /// tidemill-edge runs them: the coordinator link (an edge box's only),
    /// then the peers the coordinator names, measured off the scenario's
    /// link model and journaled as one `Links` report.
    async fn probe(self: Arc<Self>, conn: quinn::Connection) {
        let s = &self.shared;
        loop {
            let ask = frames::request(&conn, &EdgeMsg::PeersRequest);
            let peers = match tokio::time::timeout(PEERS_PATIENCE, ask).await {
                Ok(Ok(CloudMsg::Peers(peers))) => peers,
                _ => Vec::new(),
            };
            let names = std::iter::once(CLOUD_PEER).chain(peers.iter().map(|p| p.node_id.as_str()));
            let measured = s.links.measure(self.node as usize, names, s.clock.now_ms());
            if !measured.is_empty() {
                self.journal(ReportBody::Links(measured));
            }
            s.clock
                .sleep(Duration::from_millis(s.probe_ms as u64))
                .await;
        }
    }

    /// Answers the coordinator's commands for the life of the connection.
    async fn serve_commands(self: Arc<Self>, conn: quinn::Connection) {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let edge = self.clone();
            tokio::spawn(async move {
                let reply = match frames::read_msg::<CloudMsg>(&mut recv).await {
                    Ok(Some(CloudMsg::Command(cmd))) => edge.command(cmd),
                    Ok(Some(other)) => wire_error(
                        ErrorCode::UnexpectedMessage,
                        format!("expected a command, got {other:?}"),
                    ),
                    Ok(None) => return,
                    Err(e) => wire_error(ErrorCode::MalformedFrame, e.to_string()),
                };
                let _ = frames::write_msg(&mut send, &reply).await;
                let _ = send.finish();
            });
        }
    }

    /// Takes on or stops a task; the answer acknowledges the command.
    pub(crate) fn command(&self, cmd: Command) -> EdgeMsg {
        let s = &self.shared;
        match cmd {
            Command::Assign(a) => match s.registry.assign(self.node, &a, s.clock.now_ms()) {
                Ok(Some(step)) => {
                    let task = Task {
                        task_id: a.task_id,
                        job_id: a.job_id,
                        node: self.node,
                        workers: 0,
                    };
                    self.task_event(
                        &task,
                        TaskEvent::Started {
                            pid: (a.task_id % u64::from(u32::MAX)) as u32,
                        },
                    );
                    if step > 0 {
                        self.journal(ReportBody::Resumed(TaskResume {
                            task_id: a.task_id,
                            job_id: a.job_id,
                            t_ms: s.clock.now_ms(),
                            step,
                            transfer: None,
                        }));
                    }
                    EdgeMsg::CommandAck { task_id: a.task_id }
                }
                Ok(None) => EdgeMsg::CommandAck { task_id: a.task_id },
                Err(Refusal::UnknownJob(job)) => wire_error(
                    ErrorCode::UnexpectedMessage,
                    format!(
                        "job {job} was not submitted by this twin (yet); resend the assignment later"
                    ),
                ),
            },
            Command::Cancel { task_id } => {
                if let Some(t) = s.registry.stop(task_id, true, s.clock.now_ms(), &s.load) {
                    self.task_event(
                        &t,
                        TaskEvent::Exited {
                            exit_code: None,
                            signal: Some(libc::SIGTERM),
                            cancelled: true,
                        },
                    );
                }
                EdgeMsg::CommandAck { task_id }
            }
        }
    }
}

/// A forecaster sample of `load` percent at `t_ms`.
fn load_sample(load: f64, t_ms: i64) -> LoadSample {
    LoadSample {
        t_ms,
        cpu_pct: Some(load),
        mem_pct: Some(30.0),
        gpu_pct: None,
    }
}

fn wire_error(code: ErrorCode, message: String) -> EdgeMsg {
    EdgeMsg::Error(WireError { code, message })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tidemill_proto::TaskAssignment;
    use tidemill_runtime::quic::{self, Timing};

    use super::*;
    use crate::twin::tasks::{no_load, test_model};

    /// Cloud node 0 of the test model, dialing nowhere, and the registry
    /// knowing job 7 only.
    fn edge() -> Edge {
        let shared = Arc::new(Shared {
            registry: Registry::new(test_model()),
            load: no_load(),
            clock: tidemill_runtime::clock::for_speed(1.0, None),
            sample_ms: 300_000,
            refresh_ms: 3_600_000,
            forecast: ForecastConfig::default(),
            probe_ms: 3_600_000,
            links: ModelLinks::new(&test_model()),
            reports: AtomicU64::new(0),
        });
        let spec = crate::simulate::testkit::job("m").spec;
        shared.registry.submitted(7, spec);
        let token: tidemill_runtime::identity::JoinToken =
            format!("K10{}::id.secret", "0".repeat(64)).parse().unwrap();
        let joiner = quic::joiner_config(&token.ca_sha256, Timing::default()).unwrap();
        let dialer = Dialer::new(
            quic::bare_client().unwrap(),
            "127.0.0.1:9".parse().unwrap(),
            "localhost".into(),
            Arc::new((token, joiner)),
        );
        Edge::new(0, "c0".into(), None, "A100".into(), 1, None, dialer, shared)
    }

    fn assign(task_id: u64, job_id: u64) -> Command {
        Command::Assign(TaskAssignment {
            task_id,
            job_id,
            command: vec!["emulated".into()],
            env: BTreeMap::new(),
            memory_bytes: None,
            checkpoint_interval_s: None,
        })
    }

    fn journaled(e: &Edge) -> Vec<ReportBody> {
        let o = e.outbox.lock().unwrap();
        o.pending.iter().map(|(r, _)| r.body.clone()).collect()
    }

    #[test]
    fn an_assignment_for_a_job_the_twin_never_submitted_is_refused_with_the_reason() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in_rt = rt.enter();
        let e = edge();
        match e.command(assign(1, 99)) {
            EdgeMsg::Error(w) => {
                assert_eq!(w.code, ErrorCode::UnexpectedMessage);
                assert!(w.message.contains("job 99"), "{}", w.message);
            }
            other => panic!("{other:?}"),
        }
        assert!(journaled(&e).is_empty());
    }

    #[test]
    fn assignments_are_idempotent_and_a_cancel_of_an_unknown_task_is_acknowledged() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in_rt = rt.enter();
        let e = edge();
        assert_eq!(e.command(assign(1, 7)), EdgeMsg::CommandAck { task_id: 1 });
        assert_eq!(e.command(assign(1, 7)), EdgeMsg::CommandAck { task_id: 1 });
        let started = journaled(&e)
            .iter()
            .filter(|b| matches!(b, ReportBody::Task(s) if matches!(s.event, TaskEvent::Started { .. })))
            .count();
        assert_eq!(started, 1, "one start for a repeated assignment");
        assert_eq!(
            e.command(Command::Cancel { task_id: 42 }),
            EdgeMsg::CommandAck { task_id: 42 }
        );
        assert_eq!(
            journaled(&e).len(),
            1,
            "nothing to report for a task it never ran"
        );
        assert_eq!(
            e.command(Command::Cancel { task_id: 1 }),
            EdgeMsg::CommandAck { task_id: 1 }
        );
        assert!(matches!(
            journaled(&e).last(),
            Some(ReportBody::Task(TaskStatus {
                event: TaskEvent::Exited {
                    cancelled: true,
                    ..
                },
                ..
            }))
        ));
    }
}
