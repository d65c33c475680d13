//! Builders for small worlds and a tiny deterministic executor that runs plans
//! forward with the cost model as the world's physics.

use tidemill_sched::placement::PlacementCost;
use tidemill_sched::*;

pub const H: i64 = 3_600_000;
pub const A100_M: &str = "global_batch_size,1,2,4,8\n64,6.8,11.8,18.3,21.3\n";
pub const T4_M: &str = "global_batch_size,1,2,4,8\n64,1.0,1.9,3.4,5.0\n";

pub fn tables() -> ThroughputTables {
    let mut t = ThroughputTables::default();
    t.insert_csv("A100", "m", "inline/A100/m.csv", A100_M)
        .unwrap();
    t.insert_csv("T4", "m", "inline/T4/m.csv", T4_M).unwrap();
    t
}

pub fn cloud(id: &str, gpus: u32) -> NodeSpec {
    NodeSpec {
        id: id.into(),
        class: "A100".into(),
        devices: gpus,
        memory_per_device_bytes: 80 << 30,
        online: true,
        kind: NodeKind::Cloud {
            price_per_gpu_hour: 3.0,
        },
    }
}

pub fn edge(id: &str, devices: u32, windows: &[(i64, i64)], util_now: f64) -> NodeSpec {
    NodeSpec {
        id: id.into(),
        class: "T4".into(),
        devices,
        memory_per_device_bytes: 16 << 30,
        online: true,
        kind: NodeKind::Edge(EdgeAvailability {
            windows: windows
                .iter()
                .map(|&(s, e)| Window {
                    start_ms: s,
                    end_ms: e,
                    confidence: 1.0,
                })
                .collect(),
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct: Some(util_now),
            idle_threshold_pct: 50.0,
        }),
    }
}

pub fn job(
    id: u64,
    class: JobClass,
    submitted_ms: i64,
    deadline_ms: i64,
    iterations: f64,
) -> JobState {
    JobState {
        spec: JobSpec {
            id,
            class,
            submitted_ms,
            deadline_ms,
            iterations,
            global_batch: 64,
            model: "m".into(),
            model_bytes: 100_000_000,
            dataset_bytes: 1_000_000_000,
            dataset_site: DataSite::Cloud,
            min_workers: 1,
            max_workers: 1,
            memory_per_worker_bytes: 8 << 30,
            checkpoint_bytes: 200_000_000,
            checkpoint_interval_s: tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S,
            on_infeasible: OnInfeasible::Reject,
        },
        admission: match class {
            JobClass::Slo => Admission::Pending,
            JobClass::BestEffort => Admission::BestEffort,
        },
        progress: Progress::default(),
        reservation: Vec::new(),
    }
}

/// A loss-free link: bytes/s and one-way seconds.
pub fn link(bandwidth_bps: f64, latency_s: f64) -> cost::LinkSpec {
    cost::LinkSpec {
        bandwidth_bps,
        latency_s,
        loss: 0.0,
        congestion: cost::Congestion::LossBased,
    }
}

pub fn world(nodes: Vec<NodeSpec>, jobs: Vec<JobState>) -> WorldSnapshot {
    WorldSnapshot {
        nodes,
        links: LinkTable::default(),
        jobs,
        throughput: tables(),
        constraints: Default::default(),
    }
}

fn node<'a>(w: &'a WorldSnapshot, id: &str) -> &'a NodeSpec {
    w.nodes
        .iter()
        .find(|n| n.id == id)
        .expect("plan names a known node")
}

/// The shared placement cost over the world's nodes, and `on` as its indices.
fn priced(w: &WorldSnapshot, on: &[Assignment]) -> (PlacementCost, Vec<(usize, u32)>) {
    let cost = PlacementCost::new(
        w.nodes
            .iter()
            .map(|n| (n.id.as_str(), matches!(n.kind, NodeKind::Cloud { .. }))),
        &w.links,
    );
    let place = on
        .iter()
        .map(|a| {
            (
                cost.index_of(&a.node_id).expect("plan names a known node"),
                a.workers,
            )
        })
        .collect();
    (cost, place)
}

/// The world's physics for one placement: seconds per step, each node's
/// compute from its class's measured rate, through the shared placement cost.
pub fn true_step_s(w: &WorldSnapshot, spec: &JobSpec, on: &[Assignment], gamma: f64) -> f64 {
    let n: u32 = on.iter().map(|a| a.workers).sum();
    let compute: Vec<f64> = on
        .iter()
        .map(|a| {
            1.0 / w
                .throughput
                .lookup(
                    &node(w, &a.node_id).class,
                    &spec.model,
                    spec.global_batch,
                    n,
                )
                .unwrap()
                .iters_per_s
        })
        .collect();
    let (cost, place) = priced(w, on);
    cost.step(compute, &place, spec.model_bytes as f64, gamma)
        .0
        .total_s
}

/// The world's physics for moving to `to` from `from`: staging or migration seconds.
pub fn true_move_s(
    w: &WorldSnapshot,
    spec: &JobSpec,
    from: &[Assignment],
    to: &[Assignment],
    restart_s: f64,
) -> f64 {
    let (cost, to) = priced(w, to);
    let (_, from) = priced(w, from);
    cost.staging(spec, &from, &to).secs + restart_s
}

/// True when the edge node is idle through `[t0, t1)` per its (perfect) forecast.
fn truly_idle(n: &NodeSpec, t0: i64, t1: i64) -> bool {
    match &n.kind {
        NodeKind::Cloud { .. } => true,
        NodeKind::Edge(av) => av
            .windows
            .iter()
            .any(|w| w.start_ms <= t0 && t1 <= w.end_ms),
    }
}

/// What happened to one job in a simulation.
#[derive(Debug)]
pub struct Outcome {
    pub job_id: u64,
    pub deadline_ms: i64,
    pub ever_guaranteed: bool,
    pub finished_ms: Option<i64>,
    /// Rounds whose plan for the job was elastic (its worker count changes).
    pub elastic_rounds: usize,
}

/// Runs `jobs` (arriving at `submitted_ms`) on `nodes` from `t0` to `t_end`,
/// re-scheduling at every slot boundary and arrival, running each job where
/// its decision's action puts it and charging startup with the world's physics.
pub fn simulate(
    nodes: Vec<NodeSpec>,
    mut arrivals: Vec<JobState>,
    policy: &Policy,
    t0: i64,
    t_end: i64,
) -> Vec<Outcome> {
    arrivals.sort_by_key(|j| j.spec.submitted_ms);
    let mut w = world(nodes, Vec::new());
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut t = t0;
    while t < t_end {
        while arrivals.first().is_some_and(|j| j.spec.submitted_ms <= t) {
            let j = arrivals.remove(0);
            outcomes.push(Outcome {
                job_id: j.spec.id,
                deadline_ms: j.spec.deadline_ms,
                ever_guaranteed: false,
                finished_ms: None,
                elastic_rounds: 0,
            });
            w.jobs.push(j);
        }
        let next_slot = (t.div_euclid(policy.slot_ms) + 1) * policy.slot_ms;
        let t_next = arrivals
            .first()
            .map_or(next_slot, |j| j.spec.submitted_ms.min(next_slot))
            .min(t_end);
        let plan = schedule(&w, t, policy);
        // The simulator's rounds skip the words; nothing else may change.
        let mut unexplained = plan.clone();
        for d in &mut unexplained.decisions {
            d.explanation.reason.clear();
            d.explanation.nodes.clear();
        }
        assert_eq!(
            schedule_with(&w, t, policy, Words::Skip),
            unexplained,
            "a round without words decided otherwise at {t}"
        );
        // A segment may end inside a slot (when its window does): the
        // executor plans again then, as the simulator's adapter wakes.
        let t_next = plan
            .decisions
            .iter()
            .flat_map(|d| d.segments.iter().chain(&d.ahead))
            .flat_map(|s| [s.start_ms, s.end_ms])
            .filter(|&x| x > t)
            .fold(t_next, i64::min);
        let mut used: std::collections::HashMap<String, u32> = Default::default();
        let snapshot = w.clone();
        let mut rejected = Vec::new();
        for j in w.jobs.iter_mut() {
            let d = plan.decision(j.spec.id).expect("every job gets a decision");
            let out = outcomes.iter_mut().find(|o| o.job_id == j.spec.id).unwrap();
            if d.explanation
                .why
                .iter()
                .any(|r| matches!(r, Reason::Elastic { .. }))
            {
                out.elastic_rounds += 1;
            }
            match d.verdict.admission() {
                None => {
                    assert!(!out.ever_guaranteed, "job {} lost its guarantee", j.spec.id);
                    rejected.push(j.spec.id);
                    continue;
                }
                Some(a) => {
                    if out.ever_guaranteed {
                        assert!(
                            matches!(a, Admission::Guaranteed { .. }),
                            "job {} lost its guarantee",
                            j.spec.id
                        );
                    }
                    out.ever_guaranteed |= matches!(a, Admission::Guaranteed { .. });
                    j.admission = a;
                }
            }
            j.reservation = d.segments.clone();
            // Where the action says the job runs now (with `run_ahead`, not
            // always its reservation's first stretch).
            let on_now = match &d.action {
                Action::Start { on } | Action::Migrate { to: on, .. } => on.clone(),
                Action::Continue => j.progress.location.clone(),
                Action::Pause | Action::Wait | Action::Reject => {
                    j.progress.running = false;
                    continue;
                }
            };
            for a in &on_now {
                let n = node(&snapshot, &a.node_id);
                let u = used.entry(a.node_id.clone()).or_default();
                *u += a.workers;
                assert!(*u <= n.devices, "node {} overbooked at {t}", n.id);
                assert!(
                    truly_idle(n, t, t_next),
                    "job {} on busy edge node {} at {t}",
                    j.spec.id,
                    n.id
                );
            }
            let mut on = on_now;
            on.sort();
            let p = &mut j.progress;
            if on != p.location {
                p.startup_left_s =
                    true_move_s(&snapshot, &j.spec, &p.location, &on, policy.restart_s);
                p.location = on.clone();
            } else if !p.running {
                p.startup_left_s += policy.restart_s;
            }
            p.running = true;
            let step = true_step_s(&snapshot, &j.spec, &on, policy.gamma);
            let dt = (t_next - t) as f64 / 1000.0;
            let startup = p.startup_left_s.min(dt);
            p.startup_left_s -= startup;
            let can = (dt - startup) / step;
            let left = j.spec.iterations - p.done_iters;
            p.attained_s += dt;
            if can >= left - DONE_EPS_ITERS {
                let fin = t + ((startup + left * step) * 1000.0).ceil() as i64;
                p.done_iters = j.spec.iterations;
                out.finished_ms = Some(fin);
            } else {
                p.done_iters += can;
            }
        }
        w.jobs.retain(|j| {
            !rejected.contains(&j.spec.id) && j.progress.done_iters < j.spec.iterations
        });
        t = t_next;
    }
    outcomes
}

// The clock and the policies the hand-built scheduler scenarios share.

/// 18:00 on day 0; tonight's idle window is 22:00–06:00.
pub const NOW: i64 = 18 * H;
pub const NIGHT: (i64, i64) = (22 * H, 30 * H);

/// Reserve admission in least-attained-service order, without running
/// ahead: the policy these hand-built scenarios were written for (queue
/// admission has its own tests).
pub fn policy() -> Policy {
    Policy {
        admission: AdmissionMode::Reserve,
        best_effort_order: BestEffortOrder::LeastAttainedService,
        run_ahead: false,
        ..Policy::default()
    }
}

pub fn each_round() -> Policy {
    Policy {
        admission: AdmissionMode::EachRound,
        best_effort_order: BestEffortOrder::ShortestRemainingTime,
        ..policy()
    }
}
