//! Fixtures the store's unit tests share: a node's hello, reports, a job spec.

use tidemill_proto::{Capabilities, Hello, Report, ReportBody, Sample, TaskEvent, TaskStatus};

use super::{Applied, Store, StoreError};
use crate::job::JobSpec;

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
}

pub(super) fn hello(id: &str) -> Hello {
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
        token: None,
        probe_port: None,
    }
}

pub(super) fn samples(seq: u64, cpu: f32) -> Report {
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
        }),
    }
}

pub(super) fn spec() -> JobSpec {
    JobSpec::from_toml(
        "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"",
        "j",
    )
    .unwrap()
}
