//! Tiny simulated worlds for unit tests: a job, a cloud node, an edge box and
//! a world around them, with every field a test does not vary set once here.

use tidemill_sched::{DataSite, JobClass, JobSpec, LinkTable, OnInfeasible, ThroughputTables};

use super::edges::EdgeWorld;
use super::engine::World;
use super::jobs::TraceJob;
use super::placement::{CostModel, CostNode};

/// A one-GPU SLO job of `model` (id 0): one iteration at batch 64, due at
/// 1 ms, with a 1-byte model, checkpoint and dataset in the cloud.
pub(crate) fn job(model: &str) -> TraceJob {
    TraceJob {
        name: model.into(),
        requested_gpus: 1,
        spec: JobSpec {
            id: 0,
            class: JobClass::Slo,
            submitted_ms: 0,
            deadline_ms: 1,
            iterations: 1.0,
            global_batch: 64,
            model: model.into(),
            model_bytes: 1,
            dataset_bytes: 1,
            dataset_site: DataSite::Cloud,
            min_workers: 1,
            max_workers: 1,
            memory_per_worker_bytes: 0,
            checkpoint_bytes: 1,
            checkpoint_interval_s: tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S,
            on_infeasible: OnInfeasible::Reject,
        },
    }
}

/// A cloud node of `devices` GPUs of `class` at 3 per GPU-hour.
pub(crate) fn cloud_node(id: &str, class: &str, devices: u32) -> CostNode {
    CostNode {
        id: id.into(),
        class: class.into(),
        devices,
        price_per_gpu_hour: Some(3.0),
        edge: None,
        site: None,
    }
}

/// An edge box of one `class` device, box `edge` of the edge world.
pub(crate) fn edge_node(id: &str, class: &str, edge: usize) -> CostNode {
    CostNode {
        id: id.into(),
        class: class.into(),
        devices: 1,
        price_per_gpu_hour: None,
        edge: Some(edge),
        site: None,
    }
}

/// `jobs` on `nodes` measured by `tables`, edge load `edges`, measured and
/// run from 0 to `end_ms` in 60-s slots; default links, γ = 2, 30-s restarts.
pub(crate) fn world(
    jobs: Vec<TraceJob>,
    nodes: Vec<CostNode>,
    tables: ThroughputTables,
    edges: EdgeWorld,
    end_ms: i64,
) -> World {
    World {
        jobs,
        model: CostModel::new(nodes, tables, LinkTable::default(), 2.0, 30.0),
        edges,
        slot_ms: 60_000,
        window: (0, end_ms),
        end_ms,
    }
}
