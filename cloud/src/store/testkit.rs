//! Fixtures the store's unit tests share: a node's hello, reports, a job
//! spec, a tidal start decision.

use tidemill_proto::{
    Accelerator, AcceleratorKind, Capabilities, Hello, Report, ReportBody, Sample, TaskEvent,
    TaskStatus,
};
use tidemill_sched::{Action, Assignment, Explanation, JobDecision, Shape, Verdict};

use super::db::Query;
use super::{Applied, Store, StoreError};
use crate::config::{StoreBackend, StoreConfig};
use crate::job::JobFile;

/// A database for one test, on either back end: the data dir (the secrets
/// key) and the store's settings, so that a test can open it again.
pub(crate) struct TestDb {
    /// The data dir.
    pub(crate) dir: tempfile::TempDir,
    /// The store's settings.
    pub(crate) cfg: StoreConfig,
}

impl TestDb {
    /// A fresh SQLite database.
    pub(crate) fn sqlite() -> Self {
        TestDb {
            dir: tempfile::tempdir().unwrap(),
            cfg: StoreConfig::default(),
        }
    }

    /// A fresh database on the throwaway PostgreSQL cluster; `None` (the
    /// test then passes, SKIPPED printed) where PostgreSQL is not installed.
    pub(crate) fn postgres() -> Option<Self> {
        Some(TestDb {
            dir: tempfile::tempdir().unwrap(),
            cfg: StoreConfig {
                backend: StoreBackend::Postgres,
                url: super::pg_cluster::database()?,
                ..StoreConfig::default()
            },
        })
    }

    /// Opens (again) the store on this database.
    pub(crate) fn open(&self) -> Store {
        self.try_open().unwrap()
    }

    /// [`TestDb::open`], for a test of why it fails.
    pub(crate) fn try_open(&self) -> Result<Store, StoreError> {
        Store::open_with(self.dir.path(), &self.cfg)
    }
}

/// Store tests that run unchanged on both back ends: each `fn name(db)`
/// becomes `name::sqlite` and `name::postgres`, with `db` a [`TestDb`].
macro_rules! on_both_backends {
    ($($(#[$attr:meta])* fn $name:ident($db:ident) $body:block)*) => {$(
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($db: $crate::store::testkit::TestDb) $body

            #[test]
            fn sqlite() {
                run($crate::store::testkit::TestDb::sqlite());
            }

            #[test]
            fn postgres() {
                if let Some(db) = $crate::store::testkit::TestDb::postgres() {
                    run(db);
                }
            }
        }
    )*};
}
pub(crate) use on_both_backends;

impl Store {
    /// Applies one report; see [`Store::apply_reports`].
    pub(super) fn apply_report(
        &mut self,
        node_id: &str,
        report: &Report,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        self.apply_reports(node_id, std::slice::from_ref(report), now_ms)
    }

    /// The open tasks of a job as (node id, workers), by rank.
    pub(super) fn open_tasks(&self, job_id: u64) -> Vec<(String, u32)> {
        self.conn
            .prepare(
                "SELECT node_id, workers FROM tasks WHERE job_id = ?1 AND state != 'done' ORDER BY rank",
            )
            .and_then(|mut s| {
                s.query_map([job_id as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .unwrap()
    }
}

pub(crate) fn hello(id: &str) -> Hello {
    Hello {
        node_id: id.into(),
        capabilities: Capabilities {
            cpu_cores: 8,
            mem_bytes: 1 << 34,
            accelerators: vec![],
            os: "linux".into(),
            arch: "x86_64".into(),
            daemon_version: "0.1.0".into(),
        },
        probe_port: None,
        site: None,
    }
}

/// A node's hello announcing `gpus` accelerators.
pub(super) fn hello_with_gpus(id: &str, gpus: usize) -> Hello {
    let mut h = hello(id);
    h.capabilities.accelerators = vec![
        Accelerator {
            kind: AcceleratorKind::NvidiaGpu,
            model: "Tesla T4".into(),
            mem_bytes: Some(16 << 30),
        };
        gpus
    ];
    h
}

/// A tidal decision to start `job_id` now with `on` (node id, workers),
/// rank 0 first.
pub(super) fn start_on(job_id: u64, on: &[(&str, u32)]) -> JobDecision {
    let on: Vec<Assignment> = on
        .iter()
        .map(|&(node_id, workers)| Assignment {
            node_id: node_id.into(),
            workers,
        })
        .collect();
    JobDecision {
        job_id,
        verdict: Verdict::BestEffort,
        ahead: None,
        explanation: Explanation {
            shape: Shape::Edge,
            nodes: on.iter().map(|a| a.node_id.clone()).collect(),
            expected_start_ms: None,
            expected_finish_ms: None,
            step: None,
            staging_s: 0.0,
            cloud_cost: 0.0,
            reason: "the plan".into(),
            why: Vec::new(),
        },
        action: Action::Start { on },
        segments: Vec::new(),
    }
}

pub(crate) fn samples(seq: u64, cpu: f32) -> Report {
    let s = Sample {
        t_ms: seq as i64 * 1000,
        cpu_pct: cpu,
        per_core_pct: vec![],
        mem_pct: 10.0,
        net_rx_bytes: 0,
        net_tx_bytes: 0,
        gpu_pct: None,
    };
    Report {
        seq,
        body: ReportBody::Samples(vec![s]),
    }
}

pub(super) fn task(seq: u64, task_id: u64, job_id: u64, event: TaskEvent) -> Report {
    Report {
        seq,
        body: ReportBody::Task(TaskStatus {
            task_id,
            job_id,
            t_ms: 5,
            event,
            output_tail: vec!["hi".into()],
            checkpoint: None,
        }),
    }
}

pub(super) fn spec() -> JobFile {
    JobFile::from_toml(
        "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"",
        "j",
    )
    .unwrap()
}
