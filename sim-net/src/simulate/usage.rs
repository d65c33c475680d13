//! Hour by hour, what a run held against what there was to hold
//! (`simulate --usage-out FILE`, and the timeline chart of `--plot`): the
//! edge devices truly idle, and the edge devices and cloud GPUs the policy
//! held. Set beside the jobs a policy missed (`--jobs-out`), it tells hours
//! when every idle device was already in use from hours that left the edge
//! unused.

use std::path::Path;

use serde::Serialize;

use super::csv_out::{self, CsvOutError};
use super::engine::{Outcome, World};
use super::metrics::PolicyMetrics;

/// One hour of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hour {
    /// The policy that ran.
    pub policy: String,
    /// Hours from the first submission to the hour's start.
    pub hour: i64,
    /// The hour's start, Unix ms.
    pub start_ms: i64,
    /// Edge devices on boxes truly idle, the mean of the hour's slots (the
    /// true load, not a forecast).
    pub edge_idle: f64,
    /// Edge devices held, the mean over the hour.
    pub edge_held: f64,
    /// Cloud GPUs held, the mean over the hour.
    pub cloud_held: f64,
    /// The part of `edge_held` that best-effort jobs held.
    pub edge_held_best_effort: f64,
    /// The part of `cloud_held` that best-effort jobs held.
    pub cloud_held_best_effort: f64,
    /// Cloud GPUs in the world.
    pub cloud_gpus: u32,
}

/// An hour, ms.
pub const HOUR_MS: i64 = 3_600_000;

/// The hours from the first submission to the end of the simulation.
fn n_hours(world: &World) -> usize {
    ((world.end_ms - world.window.0).max(0) as u64).div_ceil(HOUR_MS as u64) as usize
}

/// Edge devices on truly idle boxes in each hour from the first submission
/// to the end of the simulation: sampled at each slot's start (`slot_ms`)
/// and averaged over the hour's slots. The same for every run on `world`.
pub fn idle_by_hour(world: &World) -> Vec<f64> {
    let slot = world.slot_ms.clamp(1, HOUR_MS);
    let boxes: Vec<_> = world
        .model
        .nodes()
        .iter()
        .filter_map(|n| Some((n.edge?, n.devices)))
        .collect();
    let idle_at = |t: i64| -> u32 {
        boxes
            .iter()
            .filter(|&&(e, _)| world.edges.idle(e, t))
            .map(|&(_, d)| d)
            .sum()
    };
    (0..n_hours(world))
        .map(|h| {
            let start = world.window.0 + h as i64 * HOUR_MS;
            let (sum, n) = (start..start + HOUR_MS)
                .step_by(slot as usize)
                .fold((0.0, 0.0), |(sum, n), t| {
                    (sum + f64::from(idle_at(t)), n + 1.0)
                });
            sum / n
        })
        .collect()
}

/// The hours of `o`, a run of `policy` on `world` recorded with its
/// stints, beside `idle` ([`idle_by_hour`] of `world`).
///
/// A stint holds its workers from its start to its end, start-up included,
/// so an hour's mean held devices is `Σ workers_k × overlap_k / 3 600 000`
/// over the stints `k` that overlap it, `overlap_k` in ms.
pub fn hourly(world: &World, idle: &[f64], policy: &str, o: &Outcome) -> Vec<Hour> {
    let t0 = world.window.0;
    let nodes = world.model.nodes();
    // Device-ms held per hour: [edge, cloud] by all jobs, then by
    // best-effort jobs.
    let mut held = vec![[0.0; 4]; n_hours(world)];
    for s in &o.stints {
        let plain = o.jobs.get(s.job).is_some_and(|j| !j.slo());
        let (edge, cloud) = s.place.iter().fold((0, 0), |(e, c), &(q, w)| {
            if nodes[q as usize].is_cloud() {
                (e, c + w)
            } else {
                (e + w, c)
            }
        });
        let first = ((s.start_ms - t0).max(0) / HOUR_MS) as usize;
        for (h, hour_held) in held.iter_mut().enumerate().skip(first) {
            let start = t0 + h as i64 * HOUR_MS;
            if start >= s.end_ms {
                break;
            }
            let overlap = (s.end_ms.min(start + HOUR_MS) - s.start_ms.max(start)).max(0) as f64;
            let (e, c) = (f64::from(edge) * overlap, f64::from(cloud) * overlap);
            hour_held[0] += e;
            hour_held[1] += c;
            if plain {
                hour_held[2] += e;
                hour_held[3] += c;
            }
        }
    }
    let cloud_gpus = world.model.cloud_gpus();
    held.iter()
        .zip(idle)
        .enumerate()
        .map(|(h, (ms, &edge_idle))| Hour {
            policy: policy.to_string(),
            hour: h as i64,
            start_ms: t0 + h as i64 * HOUR_MS,
            edge_idle,
            edge_held: ms[0] / HOUR_MS as f64,
            cloud_held: ms[1] / HOUR_MS as f64,
            edge_held_best_effort: ms[2] / HOUR_MS as f64,
            cloud_held_best_effort: ms[3] / HOUR_MS as f64,
            cloud_gpus,
        })
        .collect()
}

/// Writes the hours of every policy's run as described (`metrics` paired
/// with `outcomes`, recorded) beside `idle` ([`idle_by_hour`] of `world`)
/// to `path` as CSV with a header, whole or not at all ([`csv_out::write`]).
pub fn write(
    path: &Path,
    world: &World,
    idle: &[f64],
    metrics: &[PolicyMetrics],
    outcomes: &[Outcome],
) -> Result<(), CsvOutError> {
    csv_out::write("--usage-out", path, |out| {
        for (m, o) in metrics.iter().zip(outcomes) {
            for h in hourly(world, idle, &m.policy, o) {
                out.serialize(h)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use tidemill_sched::{JobClass, ThroughputTables};

    use super::*;
    use crate::simulate::edges::EdgeWorld;
    use crate::simulate::engine::Stint;
    use crate::simulate::policies::JobRun;
    use crate::simulate::testkit;
    use crate::trace::Series;

    const H: i64 = HOUR_MS;

    /// Two one-device boxes on one day's series, busy (60 %) 08:00 to
    /// 20:00 and idle (10 %) otherwise, and a cloud node of 2 GPUs.
    fn world() -> World {
        let points = (0..288)
            .map(|k| {
                let h = k / 12;
                (k * 300_000, if (8..20).contains(&h) { 60.0 } else { 10.0 })
            })
            .collect();
        let s = Series {
            node: "a".into(),
            points,
        };
        let edges = EdgeWorld::new(&[s], &[(30.0, 1), (30.0, 1)], 0, 300_000, 0, 0);
        let nodes = vec![
            testkit::cloud_node("c", "A100", 2),
            testkit::edge_node("e0", "T4", 0),
            testkit::edge_node("e1", "T4", 1),
        ];
        testkit::world(vec![], nodes, ThroughputTables::default(), edges, 10 * H)
    }

    /// A run of an SLO job (0) and a best-effort job (1) in `stints`.
    fn run(stints: Vec<Stint>) -> Outcome {
        let slo = testkit::job("resnet50");
        let mut plain = testkit::job("resnet50");
        plain.spec.id = 1;
        plain.spec.class = JobClass::BestEffort;
        Outcome {
            jobs: [slo, plain]
                .into_iter()
                .map(|t| JobRun::new(t.spec, t.requested_gpus))
                .collect(),
            acc: Default::default(),
            stints,
            usage: vec![],
            evictions: vec![],
        }
    }

    #[test]
    fn an_hour_holds_the_mean_of_its_stints_and_its_idle_devices() {
        let stint = |job, start_ms, end_ms, place| Stint {
            job,
            start_ms,
            end_ms,
            place,
            iters: 0.0,
        };
        // Both GPUs for half an hour, then one GPU (the best-effort job's)
        // and both boxes (nodes 1 and 2) until 09:00, then nothing.
        let o = run(vec![
            stint(0, 0, H / 2, vec![(0, 2)]),
            stint(1, H / 2, 9 * H, vec![(0, 1)]),
            stint(0, H / 2, 9 * H, vec![(1, 1), (2, 1)]),
        ]);
        let w = world();
        let hours = hourly(&w, &idle_by_hour(&w), "p", &o);
        assert_eq!(hours.len(), 10);
        // Hour 0, by hand: cloud 2 × 0.5 + 1 × 0.5 = 1.5; edge 0 × 0.5 +
        // 2 × 0.5 = 1.0; both boxes idle all hour.
        let h0 = &hours[0];
        assert_eq!((h0.hour, h0.start_ms, h0.cloud_gpus), (0, 0, 2));
        assert_eq!((h0.edge_idle, h0.edge_held, h0.cloud_held), (2.0, 1.0, 1.5));
        // 07:00 to 08:00: idle, held throughout.
        assert_eq!(
            (hours[7].edge_idle, hours[7].edge_held, hours[7].cloud_held),
            (2.0, 2.0, 1.0)
        );
        // 08:00 to 09:00: the tide is in, and the boxes are still held.
        assert_eq!((hours[8].edge_idle, hours[8].edge_held), (0.0, 2.0));
        // From 09:00 nothing is held.
        assert_eq!((hours[9].edge_held, hours[9].cloud_held), (0.0, 0.0));
        assert_eq!(hours[9].policy, "p");
    }

    #[test]
    fn a_run_without_stints_holds_nothing() {
        let w = world();
        let hours = hourly(&w, &idle_by_hour(&w), "p", &run(vec![]));
        assert_eq!(hours.len(), 10);
        assert!(
            hours
                .iter()
                .all(|h| h.edge_held == 0.0 && h.cloud_held == 0.0)
        );
        assert_eq!(hours[3].edge_idle, 2.0);
    }
}
