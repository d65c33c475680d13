//! Builds the tidal scheduler's view of the cluster from what the store holds:
//! nodes with their device class and P90 idle windows, the link matrix over
//! per-class defaults, and the planned jobs with their progress.

use std::collections::HashMap;
use std::sync::Arc;

use tidemill_forecast::{Quantiles, Resource};
use tidemill_proto::NodeForecast;
use tidemill_sched::cost::LinkSpec;
use tidemill_sched::{
    Constraints, EdgeAvailability, JobState, LinkTable, MeasuredLink, ModelTable, NodeKind,
    NodeSpec, Progress, TableSource, ThroughputTables, WorldSnapshot,
};

use crate::config::SchedulerConfig;
use crate::store::{LinkRecord, NodeRecord, PlannedJob, devices};
use crate::trust::TrustConfig;

/// A running job is never credited more than this share of its iterations
/// from estimates alone: it keeps its reservation until its process exits.
const MAX_ESTIMATED_SHARE: f64 = 0.99;

/// Resources whose forecast decides whether an edge is idle.
const IDLE_RESOURCES: [Resource; 2] = [Resource::Cpu, Resource::Gpu];

/// What the round knows of how far each node is trusted: the `[trust]`
/// settings, the hours the coordinator has heard from each node, and the
/// node labels and required labels.
pub struct Trusted<'a> {
    /// `[trust]`.
    pub config: &'a TrustConfig,
    /// Node labels and the labels jobs require.
    pub constraints: Constraints,
    /// The peers' prior each young node was sent (`Store::priors`).
    pub priors: HashMap<String, tidemill_forecast::Prior>,
}

/// The scheduler's input for one round at `now_ms`.
#[allow(clippy::too_many_arguments)]
pub fn snapshot(
    now_ms: i64,
    cfg: &SchedulerConfig,
    tables: &ThroughputTables,
    nodes: &[NodeRecord],
    forecasts: &HashMap<String, Arc<NodeForecast>>,
    links: &[LinkRecord],
    jobs: &[PlannedJob],
    trusted: Trusted<'_>,
) -> WorldSnapshot {
    let mut throughput = tables.clone();
    let nodes: Vec<NodeSpec> = nodes
        .iter()
        .map(|n| {
            let mut spec = node_spec(cfg, n, forecasts.get(&n.id).map(Arc::as_ref), now_ms);
            if let NodeKind::Edge(a) = &mut spec.kind {
                *a = trusted.config.cap(
                    std::mem::take(a),
                    forecasts.get(&n.id).map(Arc::as_ref),
                    trusted.priors.get(&n.id),
                    now_ms,
                );
            }
            spec
        })
        .collect();
    let classes: HashMap<&str, &str> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.class.as_str()))
        .collect();
    let jobs = jobs
        .iter()
        .filter_map(|j| job_state(j, &classes, &mut throughput))
        .collect();
    WorldSnapshot {
        nodes,
        links: link_table(cfg, links),
        jobs,
        throughput,
        constraints: trusted.constraints,
    }
}

fn node_spec(
    cfg: &SchedulerConfig,
    n: &NodeRecord,
    forecast: Option<&NodeForecast>,
    now_ms: i64,
) -> NodeSpec {
    let (class, devices, memory) = match n.accelerators.first() {
        Some(a) => (
            cfg.class_of(&a.model),
            devices(&n.accelerators),
            a.mem_bytes.unwrap_or(0),
        ),
        None => (cfg.cpu_class.clone(), devices(&n.accelerators), n.mem_bytes),
    };
    let kind = match cfg.cloud_nodes.get(&n.id) {
        Some(c) => NodeKind::Cloud {
            price_per_gpu_hour: c.price_per_gpu_hour,
        },
        None => NodeKind::Edge(availability(n, forecast, now_ms)),
    };
    NodeSpec {
        id: n.id.clone(),
        class,
        devices,
        memory_per_device_bytes: memory,
        online: n.online && !n.drained,
        kind,
    }
}

/// Idle windows from the forecast, by the rule both the coordinator and the
/// simulator use ([`EdgeAvailability::from_forecast`]) over the node's CPU and
/// accelerator forecasts. The load now is the highest of the node's latest
/// CPU and accelerator utilisation. A sample that says idle but was taken
/// before the slot in progress began is not used there when the forecast
/// covers that slot (the forecast decides it: the tide may come in as it
/// starts); a forecast issued during the slot starts at the next boundary
/// and says nothing of it, so there the sample is the only word on the
/// present and is kept. A busy one is kept
/// until a newer sample shows the box idle, since a box whose tide came in
/// earlier than its forecast said must not get its task back at the next
/// slot boundary. A window's start waits at most one sample for it.
fn availability(n: &NodeRecord, forecast: Option<&NodeForecast>, now_ms: i64) -> EdgeAvailability {
    let sample = LatestSample {
        utils: [n.cpu_util, n.gpu_util],
        sampled_ms: n.last_sample_at.map(|t| t.timestamp_millis()),
        busy_ms: n.busy_ms,
    };
    edge_availability(&sample, forecast, now_ms)
}

/// What the store holds of a node's latest samples, for callers without a
/// [`NodeRecord`] (the store, when a job starts).
pub(crate) struct LatestSample {
    /// The latest CPU and accelerator utilisation, percent.
    pub(crate) utils: [Option<f32>; 2],
    /// When they were sampled, Unix ms.
    pub(crate) sampled_ms: Option<i64>,
    /// When the node was last sampled at or over its idle threshold, Unix ms.
    pub(crate) busy_ms: Option<i64>,
}

/// [`availability`] from a node's [`LatestSample`]. A node whose latest
/// sample says idle has been so since its last busy sample (`idle_since_ms`,
/// for the likely grade's dwell), even where that sample is too old to judge
/// the slot in progress: the dwell counts from the last busy sample all the
/// same. One never seen busy has no such time.
pub(crate) fn edge_availability(
    sample: &LatestSample,
    forecast: Option<&NodeForecast>,
    now_ms: i64,
) -> EdgeAvailability {
    let sampled_ms = sample.sampled_ms;
    let latest = sample
        .utils
        .into_iter()
        .flatten()
        .map(f64::from)
        .reduce(f64::max);
    let mut util_now = latest;
    if let (Some(f), Some(at)) = (forecast, sampled_ms) {
        let slot_ms = i64::from(f.slot_len_s).max(1) * 1000;
        let slot_start = f.start_ms + (now_ms - f.start_ms).div_euclid(slot_ms) * slot_ms;
        let forecast_decides = slot_start >= f.start_ms;
        if at < slot_start && forecast_decides && util_now.is_some_and(|u| u < f.idle_threshold_pct)
        {
            util_now = None;
        }
    }
    let Some(f) = forecast else {
        return EdgeAvailability {
            windows: Vec::new(),
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct: util_now,
            idle_threshold_pct: 0.0,
        };
    };
    let slots: Vec<&[Option<Quantiles>]> = IDLE_RESOURCES
        .iter()
        .filter_map(|r| f.resource(*r))
        .map(|r| r.slots.as_slice())
        .collect();
    let idle_last = latest.is_some_and(|u| u < f.idle_threshold_pct);
    EdgeAvailability {
        idle_since_ms: sample.busy_ms.filter(|_| idle_last),
        ..EdgeAvailability::from_forecast(
            f.start_ms,
            i64::from(f.slot_len_s) * 1000,
            &slots,
            f.idle_threshold_pct,
            now_ms,
            util_now,
        )
    }
}

/// Per-class defaults, overridden by each measured link. A link an edge
/// measured to the coordinator stands for its link to every cloud node.
fn link_table(cfg: &SchedulerConfig, links: &[LinkRecord]) -> LinkTable {
    let cloud: Vec<&String> = cfg.cloud_nodes.keys().collect();
    let mut measured = Vec::new();
    for l in links {
        let to_cloud = l.to == tidemill_proto::CLOUD_PEER;
        // The senders' congestion control is the deployment's, from its class default.
        let class = if to_cloud {
            &cfg.links.cloud_edge
        } else {
            &cfg.links.edge_edge
        };
        let link = LinkSpec {
            bandwidth_bps: l.bandwidth_bps,
            latency_s: l.rtt_ms / 2000.0,
            loss: l.loss,
            congestion: class.congestion,
        };
        let ends: Vec<&String> = if to_cloud { cloud.clone() } else { vec![&l.to] };
        for b in ends {
            measured.push(MeasuredLink {
                a: l.from.clone(),
                b: b.clone(),
                link,
            });
        }
    }
    cfg.links.table(measured)
}

/// The scheduler's state of a planned job. A job that gives its own rates, or
/// whose rate was measured from its own progress reports, is planned under a
/// model name of its own (`<model>#job<id>`), with its given rates as
/// one-worker tables and the shared tables for the other classes; a measured
/// rate then scales its tables on the classes of its placement
/// ([`measured_ratio`]). `classes` gives each node's device class.
fn job_state(
    j: &PlannedJob,
    classes: &HashMap<&str, &str>,
    throughput: &mut ThroughputTables,
) -> Option<JobState> {
    let w = j.spec.work.as_ref()?;
    let mut model = w.model.clone();
    let ratio = measured_ratio(j);
    if !w.iters_per_s.is_empty() || ratio.is_some() {
        model = format!("{}#job{}", w.model, j.id);
        for models in throughput.classes.values_mut() {
            if let Some(shared) = models.get(&w.model).cloned() {
                models.insert(model.clone(), shared);
            }
        }
        for (class, &rate) in &w.iters_per_s {
            throughput.classes.entry(class.clone()).or_default().insert(
                model.clone(),
                ModelTable::one_worker(
                    w.global_batch,
                    rate,
                    TableSource::Given {
                        by: "the job's own iters_per_s".into(),
                    },
                ),
            );
        }
    }
    if let Some(ratio) = ratio {
        for a in &j.location {
            let Some(class) = classes.get(a.node_id.as_str()) else {
                continue;
            };
            let Some(table) = throughput
                .classes
                .get_mut(*class)
                .and_then(|models| models.get_mut(&model))
                .filter(|t| !matches!(t.source, TableSource::JobMeasured { .. }))
            else {
                continue;
            };
            *table = ModelTable {
                data: table.data.scaled(ratio),
                source: TableSource::JobMeasured { ratio },
            };
        }
    }
    Some(JobState {
        spec: tidemill_sched::JobSpec {
            id: j.id,
            class: j.spec.class,
            submitted_ms: j.submitted_ms,
            deadline_ms: j.spec.deadline.timestamp_millis(),
            iterations: w.iterations,
            global_batch: w.global_batch,
            model,
            model_bytes: w.model_bytes,
            dataset_bytes: w.dataset_bytes,
            dataset_site: w.data_site(),
            min_workers: w.min_workers,
            max_workers: w.max_workers,
            memory_per_worker_bytes: w.memory_per_worker_bytes,
            // What the job's edge measured when it last sent its
            // checkpoint, once it has; the job file's estimate before.
            checkpoint_bytes: j.checkpoint_bytes.unwrap_or(w.checkpoint_bytes),
            checkpoint_interval_s: j.spec.checkpoint_interval_s(),
            on_infeasible: j.spec.on_infeasible,
        },
        admission: j.admission,
        progress: Progress {
            done_iters: j.done_iters.min(w.iterations * MAX_ESTIMATED_SHARE),
            attained_s: j.attained_s,
            location: j.location.clone(),
            running: j.running,
            startup_left_s: j.startup_left_s,
        },
        reservation: j.reservation.clone(),
    })
}

/// How much faster than its plan predicted a job ran on its placement:
/// `measured_ips / predicted_ips` (both iterations per second, so the ratio
/// has no unit), by which its tables on that placement's classes are
/// scaled, so that the planner predicts the measured rate for the job's
/// current shape (exactly for one node, where a step is all compute; the
/// cost model still adds its own link term across nodes). `None` until a
/// rate was measured.
fn measured_ratio(j: &PlannedJob) -> Option<f64> {
    let (measured, predicted) = j.measured_ips.zip(j.predicted_ips)?;
    let ratio = measured / predicted;
    (ratio.is_finite() && ratio > 0.0).then_some(ratio)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tidemill_forecast::{CycleVerdict, DailyCycle, Method, Quantiles, ResourceForecast};

    fn node(cpu_now: f32) -> NodeRecord {
        serde_json::from_value(serde_json::json!({
            "id": "e1", "online": true, "cpu_cores": 4, "mem_bytes": 8_000_000_000u64,
            "accelerators": [], "os": "linux", "arch": "x86_64", "daemon_version": "0",
            "last_seq": 1, "cpu_util": cpu_now, "mem_util": 40.0, "gpu_util": null,
            "last_sample_at": "1970-01-01T00:15:30Z", "last_seen_at": "2026-01-01T00:00:00Z",
            "registered_at": "2026-01-01T00:00:00Z", "forecast": null
        }))
        .unwrap()
    }

    /// A forecast over `p90` slots built on 48 h of history, for tests.
    pub(crate) fn forecast(p90: &[Option<f64>]) -> NodeForecast {
        let q = |p: f64| Quantiles {
            p10: p,
            p50: p,
            p90: p,
        };
        NodeForecast {
            method: Method::Tidemill,
            issued_ms: 1_000_000 - 300_000,
            start_ms: 1_000_000,
            slot_len_s: 900,
            idle_threshold_pct: 30.0,
            resources: vec![ResourceForecast {
                resource: Resource::Cpu,
                cycle: CycleVerdict {
                    daily_cycle: DailyCycle::Present,
                    strength: None,
                    days_used: 0,
                },
                slots: p90.iter().map(|p| p.map(q)).collect(),
                observed_h: 48.0,
            }],
            idle_windows: Vec::new(),
            history_days: 7,
            prior: None,
        }
    }

    #[test]
    fn what_was_measured_overrides_the_job_file_a_rate_on_its_placement_and_the_checkpoint_size() {
        let spec = crate::job::JobFile::from_toml(
            "name = \"j\"\ncommand = [\"true\"]\ndeadline = \"2030-01-01T00:00:00Z\"\n\
             [work]\nmodel = \"m\"\niterations = 1000\nglobal_batch = 32\nmodel_bytes = 1000\n",
            "j",
        )
        .unwrap();
        let on = |n: &str| tidemill_sched::Assignment {
            node_id: n.into(),
            workers: 1,
        };
        let job = PlannedJob {
            id: 7,
            spec,
            submitted_ms: 0,
            admission: tidemill_sched::Admission::Pending,
            reservation: Vec::new(),
            done_iters: 0.0,
            attained_s: 0.0,
            // Two nodes of one class: its table is scaled once.
            location: vec![on("e1"), on("e2")],
            running: true,
            startup_left_s: 0.0,
            busy: true,
            predicted_ips: Some(0.1),
            measured_ips: Some(0.05),
            checkpoint_bytes: None,
        };
        let mut tables = ThroughputTables::default();
        for class in ["cpu", "gpu"] {
            tables.classes.entry(class.into()).or_default().insert(
                "m".into(),
                ModelTable::one_worker(
                    32,
                    0.1,
                    TableSource::Given {
                        by: "the test".into(),
                    },
                ),
            );
        }
        let classes = HashMap::from([("e1", "cpu"), ("e2", "cpu")]);
        let state = job_state(&job, &classes, &mut tables).unwrap();
        assert_eq!(state.spec.model, "m#job7");
        let rate =
            |class: &str, model: &str| tables.lookup(class, model, 32, 1).unwrap().iters_per_s;
        // 0.1 × (0.05 / 0.1): the measured rate, on the placement's class only.
        assert!((rate("cpu", "m#job7") - 0.05).abs() < 1e-12);
        assert!((rate("gpu", "m#job7") - 0.1).abs() < 1e-12);
        assert!(
            (rate("cpu", "m") - 0.1).abs() < 1e-12,
            "other jobs keep the table"
        );
        // Without a measurement the job is planned by the shared table.
        let unmeasured = PlannedJob {
            measured_ips: None,
            ..job
        };
        let state = job_state(&unmeasured, &classes, &mut tables).unwrap();
        assert_eq!(state.spec.model, "m");
        assert_eq!(state.spec.checkpoint_bytes, 0, "the job file's estimate");
        // Once its edge sent a checkpoint, its move is priced by that size.
        let measured = PlannedJob {
            checkpoint_bytes: Some(12_345_678),
            ..unmeasured
        };
        let state = job_state(&measured, &classes, &mut tables).unwrap();
        assert_eq!(state.spec.checkpoint_bytes, 12_345_678);
    }

    #[test]
    fn the_slot_in_progress_is_judged_on_the_load_now() {
        let f = forecast(&[Some(20.0), Some(50.0), Some(10.0), None]);
        // Idle now (10 % < 30 %): the window runs from the slot in progress,
        // which began at 1_000_000 − 900_000, to the end of the first slot.
        let now = 1_000_000 - 60_000;
        let idle = availability(&node(10.0), Some(&f), now);
        let spans: Vec<(i64, i64)> = idle
            .windows
            .iter()
            .map(|w| (w.start_ms, w.end_ms))
            .collect();
        assert_eq!(spans, vec![(100_000, 1_900_000), (2_800_000, 3_700_000)]);
        // Busy now: the present is not in a window.
        let busy = availability(&node(80.0), Some(&f), now);
        assert_eq!(busy.windows[0].start_ms, 1_000_000);
        assert!(busy.tide_in());
        // Once the idle slot has begun, a busy sample from before it still
        // holds until a newer one shows the box idle: a tide that came in
        // earlier than forecast does not go out at a slot boundary.
        let stale_busy = availability(&node(80.0), Some(&f), 1_000_000 + 5_000);
        assert!(stale_busy.tide_in(), "{stale_busy:?}");
        // An idle sample from before a slot the forecast calls busy does not
        // open it: the forecast decides that slot.
        let at = 1_900_000 + 5_000;
        let stale_idle = availability(&node(10.0), Some(&f), at);
        assert!(
            !stale_idle
                .windows
                .iter()
                .any(|w| w.start_ms <= at && at < w.end_ms),
            "{stale_idle:?}"
        );
        assert!(availability(&node(10.0), None, now).windows.is_empty());
    }

    #[test]
    fn an_idle_sample_holds_the_slot_a_newer_forecast_does_not_cover() {
        // Issued during the slot [1_000_000, 1_900_000), the forecast starts
        // at its end. The last sample (idle, at 930_000) predates the slot:
        // it is still the only word on the present, so a job running there
        // keeps a window that covers now, into the forecast's idle slot.
        let f = NodeForecast {
            issued_ms: 1_000_000 + 2_000,
            start_ms: 1_900_000,
            ..forecast(&[Some(20.0), Some(50.0)])
        };
        let now = 1_000_000 + 5_000;
        let a = availability(&node(10.0), Some(&f), now);
        let spans: Vec<(i64, i64)> = a.windows.iter().map(|w| (w.start_ms, w.end_ms)).collect();
        assert_eq!(spans, vec![(1_000_000, 2_800_000)], "{a:?}");
        // A busy sample from then still says busy.
        let busy = availability(&node(80.0), Some(&f), now);
        assert!(
            busy.tide_in() && busy.windows[0].start_ms == 1_900_000,
            "{busy:?}"
        );
    }

    #[test]
    fn the_likely_dwell_counts_from_the_last_busy_sample_when_the_slot_is_not_sampled_yet() {
        // The box was busy at 900_000 and idle at 930_000; the round at
        // 1_005_000 is in a slot no sample has reached yet, so the forecast
        // judges the present, but the box did not become "never seen busy":
        // the likely grade's dwell still runs from 900_000.
        let f = forecast(&[Some(20.0), Some(50.0)]);
        let mut idle = node(10.0);
        idle.busy_ms = Some(900_000);
        let a = availability(&idle, Some(&f), 1_000_000 + 5_000);
        assert_eq!(a.util_now_pct, None, "{a:?}");
        assert_eq!(a.idle_since_ms, Some(900_000), "{a:?}");
    }
}
