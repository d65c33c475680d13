//! A world for the round's unit tests: one cloud node of four A100s and
//! one SLO job of a model measured on them.

use crate::throughput::ThroughputTables;
use crate::world::{
    Admission, DataSite, JobClass, JobSpec, JobState, LinkTable, NodeKind, NodeSpec, OnInfeasible,
    Progress, WorldSnapshot,
};

pub(super) const H: i64 = 3_600_000;

/// Node c1 (4 × A100 at 3 per GPU-hour); job 1, due 21:00 from 18:00, of
/// model `m` at 6.8 it/s on one worker, 11.8 on two and 18.3 on four.
pub(crate) fn world() -> WorldSnapshot {
    let mut throughput = ThroughputTables::default();
    throughput
        .insert_csv(
            "A100",
            "m",
            "m.csv",
            "global_batch_size,1,2,4\n64,6.8,11.8,18.3\n",
        )
        .unwrap();
    WorldSnapshot {
        nodes: vec![NodeSpec {
            id: "c1".into(),
            class: "A100".into(),
            devices: 4,
            memory_per_device_bytes: 80 << 30,
            online: true,
            kind: NodeKind::Cloud {
                price_per_gpu_hour: 3.0,
            },
        }],
        links: LinkTable::default(),
        jobs: vec![JobState {
            spec: JobSpec {
                id: 1,
                class: JobClass::Slo,
                submitted_ms: 18 * H,
                deadline_ms: 21 * H,
                iterations: 1e9,
                global_batch: 64,
                model: "m".into(),
                model_bytes: 0,
                dataset_bytes: 0,
                dataset_site: DataSite::Cloud,
                min_workers: 1,
                max_workers: 4,
                memory_per_worker_bytes: 1 << 30,
                checkpoint_bytes: 0,
                checkpoint_interval_s: crate::world::DEFAULT_CHECKPOINT_INTERVAL_S,
                on_infeasible: OnInfeasible::Reject,
            },
            admission: Admission::Pending,
            progress: Progress::default(),
            reservation: Vec::new(),
        }],
        throughput,
        constraints: Default::default(),
    }
}
