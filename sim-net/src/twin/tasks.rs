//! Tasks run in emulation: the registry every emulated edge shares, which
//! advances each job at the rate the scenario's cost model gives for where
//! its tasks run, saves its checkpoints at its interval, and says what each
//! edge must report.
//!
//! A job advances only while as many of its tasks run as its `WORLD_SIZE`
//! (a distributed job waits for all its ranks). Before stepping it pays the
//! cost model's start-up for its placement (staging, checkpoint transfer,
//! restart), as the simulator's engine does. A planned stop (the
//! coordinator's cancel) checkpoints on the way out and keeps all progress;
//! a yield because a box's own load came back falls back to the last
//! checkpoint. A job that ran all its iterations saves a last checkpoint, as
//! the reference training script does: a task of it started again (the
//! coordinator may have asked it to stop just as it finished, and read its
//! exit as that stop) resumes there and ends once its start-up is paid.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tidemill_proto::TaskAssignment;
use tidemill_sched::JobSpec;
use tidemill_sched::policies::FirstStop;

use crate::simulate::metrics::Accumulators;
use crate::simulate::placement::CostModel;

/// One running task.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Task {
    /// The coordinator's task id.
    pub(crate) task_id: u64,
    /// The coordinator's job id.
    pub(crate) job_id: u64,
    /// The node's index in the cost model.
    pub(crate) node: u32,
    /// Devices it uses there.
    pub(crate) workers: u32,
}

/// A job's emulated training state.
struct Job {
    spec: JobSpec,
    /// Ranks the job's tasks say it has.
    world: u32,
    done: f64,
    checkpoint: f64,
    /// Training seconds since the last checkpoint.
    since_checkpoint_s: f64,
    startup_left_s: f64,
    /// Where it last ran (empty before its first start).
    location: Vec<(u32, u32)>,
    tasks: BTreeMap<u64, Task>,
    /// Whether the current placement has been charged its start-up.
    started: bool,
    /// When a task of it was first stopped before it was done, tide ms.
    first_stop: Option<FirstStop>,
}

/// What an edge must report after the registry changed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The task's job ran all its iterations: the task exits with code 0.
    Finished(Task),
}

/// The registry.
pub(crate) struct Registry {
    model: CostModel,
    /// The trace's jobs by the coordinator's id, filled as they are submitted.
    specs: Mutex<HashMap<u64, JobSpec>>,
    jobs: Mutex<HashMap<u64, Job>>,
    /// What the tasks moved and lost, as the engine counts it: traffic by
    /// tier (start-ups and all-reduce), evictions and what they lost.
    ledger: Mutex<Accumulators>,
}

/// Why a task could not be taken on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// The job was not submitted by this twin (or not yet registered).
    UnknownJob(u64),
}

impl Registry {
    /// An empty registry over `model`'s nodes.
    pub(crate) fn new(model: CostModel) -> Registry {
        Registry {
            model,
            specs: Mutex::new(HashMap::new()),
            jobs: Mutex::new(HashMap::new()),
            ledger: Mutex::new(Accumulators::default()),
        }
    }

    /// Traffic by tier, evictions and what they lost, so far.
    pub(crate) fn ledger(&self) -> Accumulators {
        self.ledger.lock().unwrap().clone()
    }

    /// Records that the coordinator calls the trace's job `spec` `job_id`.
    pub(crate) fn submitted(&self, job_id: u64, spec: JobSpec) {
        self.specs.lock().unwrap().insert(job_id, spec);
    }

    /// Takes on `a` on node `node`; returns the step of the checkpoint it
    /// resumes from, if the job has one, or `None` when the task is known
    /// already (assignments are idempotent).
    pub(crate) fn assign(&self, node: u32, a: &TaskAssignment) -> Result<Option<u64>, Refusal> {
        let env = |k: &str| a.env.get(k).and_then(|v| v.parse::<u32>().ok());
        let world = env("WORLD_SIZE").unwrap_or(1).max(1);
        let workers = env("TIDEMILL_WORKERS").unwrap_or(1).max(1);
        let mut jobs = self.jobs.lock().unwrap();
        let job = match jobs.entry(a.job_id) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                let spec = self
                    .specs
                    .lock()
                    .unwrap()
                    .get(&a.job_id)
                    .cloned()
                    .ok_or(Refusal::UnknownJob(a.job_id))?;
                v.insert(Job {
                    spec,
                    world,
                    done: 0.0,
                    checkpoint: 0.0,
                    since_checkpoint_s: 0.0,
                    startup_left_s: 0.0,
                    location: Vec::new(),
                    tasks: BTreeMap::new(),
                    started: false,
                    first_stop: None,
                })
            }
        };
        if job.tasks.contains_key(&a.task_id) {
            return Ok(None);
        }
        if job.tasks.is_empty() {
            job.world = world;
        }
        job.tasks.insert(
            a.task_id,
            Task {
                task_id: a.task_id,
                job_id: a.job_id,
                node,
                workers,
            },
        );
        job.started = false;
        if let Some(ips) = a.checkpoint_interval_s {
            job.spec.checkpoint_interval_s = ips;
        }
        Ok(Some(job.checkpoint.floor() as u64))
    }

    /// Stops task `task_id` at `t_ms` (tide): with `keep`, a planned stop
    /// that checkpoints on the way out; without, a yield that falls back to
    /// the last checkpoint. Returns the task if it ran here.
    pub(crate) fn stop(&self, task_id: u64, keep: bool, t_ms: i64) -> Option<Task> {
        let mut jobs = self.jobs.lock().unwrap();
        let job = jobs.values_mut().find(|j| j.tasks.contains_key(&task_id))?;
        let task = job.tasks.remove(&task_id)?;
        if job.done < job.spec.iterations {
            job.first_stop.get_or_insert(FirstStop {
                at_ms: t_ms,
                evicted: !keep,
            });
        }
        if keep {
            job.checkpoint = job.done;
        } else {
            // An eviction of the running placement, as the engine counts one:
            // the work since the checkpoint is lost on every device it held.
            if job.started && job.done < job.spec.iterations {
                let workers = task.workers + job.tasks.values().map(|t| t.workers).sum::<u32>();
                let mut ledger = self.ledger.lock().unwrap();
                ledger.evictions += 1;
                ledger.lost_iters += job.done - job.checkpoint;
                ledger.lost_device_s += job.since_checkpoint_s * f64::from(workers);
            }
            job.done = job.checkpoint;
        }
        job.since_checkpoint_s = 0.0;
        job.started = false;
        Some(task)
    }

    /// The tasks on node `node`.
    pub(crate) fn on_node(&self, node: u32) -> Vec<Task> {
        let jobs = self.jobs.lock().unwrap();
        jobs.values()
            .flat_map(|j| j.tasks.values())
            .filter(|t| t.node == node)
            .cloned()
            .collect()
    }

    /// When a task of job `job_id` was first stopped before the job was
    /// done, and how (tide ms); `None` if never.
    pub(crate) fn first_stop(&self, job_id: u64) -> Option<FirstStop> {
        self.jobs.lock().unwrap().get(&job_id)?.first_stop
    }

    /// Iterations job `job_id` has done, if it runs here.
    pub(crate) fn done(&self, job_id: u64) -> Option<f64> {
        self.jobs.lock().unwrap().get(&job_id).map(|j| j.done)
    }

    /// Advances every job whose ranks all run by `dt_s` seconds of tide;
    /// returns the tasks of jobs that finished. A finished job keeps its last
    /// checkpoint (all its iterations) for a task started again.
    pub(crate) fn advance(&self, dt_s: f64) -> Vec<Event> {
        let mut jobs = self.jobs.lock().unwrap();
        let mut events = Vec::new();
        for job in jobs.values_mut() {
            if job.tasks.len() < job.world as usize || job.tasks.is_empty() {
                continue;
            }
            let mut place: Vec<(u32, u32)> =
                job.tasks.values().map(|t| (t.node, t.workers)).collect();
            place.sort_unstable();
            if !job.started {
                let startup = self.model.startup(&job.spec, &job.location, &place);
                self.ledger
                    .lock()
                    .unwrap()
                    .traffic
                    .add_scaled(&startup.wan, 1.0);
                job.startup_left_s = startup.secs;
                job.location = place.clone();
                job.started = true;
            }
            let mut left = dt_s;
            let startup = job.startup_left_s.min(left);
            job.startup_left_s -= startup;
            left -= startup;
            if job.startup_left_s > 0.0 {
                continue;
            }
            let Some((step_s, _)) = self.model.step(&job.spec, &place) else {
                continue;
            };
            if left > 0.0 && step_s > 0.0 {
                let before = job.done;
                job.done = (job.done + left / step_s).min(job.spec.iterations);
                if place.len() > 1 {
                    let ring = self.model.allreduce_traffic(&job.spec, &place);
                    let mut ledger = self.ledger.lock().unwrap();
                    ledger.traffic.add_scaled(&ring, job.done - before);
                }
                job.since_checkpoint_s += left;
                let every = job.spec.checkpoint_interval_s;
                if every > 0.0 && job.since_checkpoint_s >= every {
                    // Saved at the last whole multiple of the interval.
                    let past = job.since_checkpoint_s % every;
                    job.checkpoint = (job.done - past / step_s).max(job.checkpoint);
                    job.since_checkpoint_s = past;
                }
            }
            if job.done >= job.spec.iterations {
                job.checkpoint = job.done;
                job.since_checkpoint_s = 0.0;
                job.started = false;
                let tasks = std::mem::take(&mut job.tasks);
                events.extend(tasks.into_values().map(Event::Finished));
            }
        }
        events
    }
}

/// Two one-GPU cloud nodes, model `m` at 2 iterations/s on one GPU: the
/// world of the twin's unit tests.
#[cfg(test)]
pub(crate) fn test_model() -> CostModel {
    let mut tables = tidemill_sched::ThroughputTables::default();
    let rates = tidemill_sched::ModelRates {
        global_batch: 64,
        source: "test".into(),
        iters_per_s: [("A100".to_string(), 2.0)].into(),
    };
    tables.insert_rates("m", &rates).unwrap();
    tables.fill_missing();
    let nodes = vec![
        crate::simulate::testkit::cloud_node("c0", "A100", 1),
        crate::simulate::testkit::cloud_node("c1", "A100", 1),
    ];
    CostModel::new(
        nodes,
        tables,
        tidemill_sched::LinkTable::default(),
        2.0,
        30.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(task_id: u64, job_id: u64, world: u32) -> TaskAssignment {
        let mut env = std::collections::BTreeMap::new();
        env.insert("WORLD_SIZE".to_string(), world.to_string());
        env.insert("TIDEMILL_WORKERS".to_string(), "1".to_string());
        TaskAssignment {
            task_id,
            job_id,
            command: vec!["emulated".into()],
            env,
            memory_bytes: None,
            checkpoint_interval_s: Some(600.0),
        }
    }

    fn registry() -> (Registry, JobSpec) {
        let model = test_model();
        let mut spec = crate::simulate::testkit::job("m").spec;
        spec.iterations = 1e9;
        let r = Registry::new(model);
        r.submitted(7, spec.clone());
        (r, spec)
    }

    #[test]
    fn a_job_waits_for_all_its_ranks_and_then_steps_at_the_model_rate() {
        let (r, spec) = registry();
        assert_eq!(r.assign(0, &assignment(1, 7, 2)), Ok(Some(0)));
        assert_eq!(r.assign(0, &assignment(1, 7, 2)), Ok(None), "idempotent");
        r.advance(100.0);
        assert_eq!(r.done(7), Some(0.0), "one rank of two: no progress");
        r.assign(1, &assignment(2, 7, 2)).unwrap();
        let model = test_model();
        let place = [(0, 1), (1, 1)];
        let startup = model.startup(&spec, &[], &place).secs;
        let (step, _) = model.step(&spec, &place).unwrap();
        r.advance(startup + 1000.0);
        let done = r.done(7).unwrap();
        assert!((done - 1000.0 / step).abs() < 1e-6, "{done}");
        // Its traffic: the start-up's, then each step's ring between c0 and c1.
        let mut want = model.startup(&spec, &[], &place).wan;
        want.add_scaled(&model.allreduce_traffic(&spec, &place), done);
        let got = r.ledger().traffic;
        assert!(
            (got.cloud_cloud - want.cloud_cloud).abs() <= 1e-6 * want.cloud_cloud.max(1.0),
            "{got:?} {want:?}"
        );
        assert_eq!(r.ledger().evictions, 0);
    }

    #[test]
    fn a_yield_loses_what_came_after_the_checkpoint_and_a_planned_stop_keeps_it() {
        let (r, spec) = registry();
        assert_eq!(r.assign(0, &assignment(1, 7, 1)), Ok(Some(0)));
        r.advance(10_000.0);
        let before = r.done(7).unwrap();
        assert_eq!(r.first_stop(7), None);
        r.stop(1, false, 5).unwrap();
        let yielded = Some(FirstStop {
            at_ms: 5,
            evicted: true,
        });
        assert_eq!(r.first_stop(7), yielded);
        let after_yield = r.done(7).unwrap();
        // One eviction, losing the work since the checkpoint on its one
        // device: of 10 000 s, the start-up's (about 30 s) trained nothing,
        // and a checkpoint came every 600 s of training, so the last
        // (10 000 − start-up) mod 600 s are lost.
        let startup = test_model().startup(&spec, &[], &[(0, 1)]).secs;
        let ledger = r.ledger();
        assert_eq!(ledger.evictions, 1);
        assert!((ledger.lost_iters - (before - after_yield)).abs() < 1e-9);
        let lost_s = (10_000.0 - startup) % 600.0;
        assert!((ledger.lost_device_s - lost_s).abs() < 1e-6, "{lost_s}");
        assert!(
            after_yield < before && after_yield > 0.0,
            "{after_yield} {before}"
        );
        r.assign(0, &assignment(2, 7, 1)).unwrap();
        r.advance(10_000.0);
        let before = r.done(7).unwrap();
        r.stop(2, true, 9).unwrap();
        assert_eq!(r.done(7), Some(before));
        assert_eq!(r.first_stop(7), yielded, "the first stop stands");
        assert_eq!(r.ledger().evictions, 1, "a planned stop is no eviction");
        assert_eq!(
            r.assign(0, &assignment(3, 7, 1)),
            Ok(Some(before.floor() as u64))
        );
    }

    #[test]
    fn a_finished_job_started_again_resumes_at_its_end_and_ends_after_its_start_up() {
        let model = test_model();
        let mut spec = crate::simulate::testkit::job("m").spec;
        spec.iterations = 100.0;
        let r = Registry::new(model.clone());
        r.submitted(7, spec.clone());
        r.assign(0, &assignment(1, 7, 1)).unwrap();
        let ended = r.advance(1e6);
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(r.done(7), Some(100.0));
        // The coordinator asked it to stop as it finished, and starts it
        // again elsewhere: it resumes from its last checkpoint, the end.
        assert_eq!(r.assign(1, &assignment(2, 7, 1)), Ok(Some(100)));
        let startup = model.startup(&spec, &[(0, 1)], &[(1, 1)]).secs;
        assert!(startup > 1.0, "{startup}");
        assert!(r.advance(startup / 2.0).is_empty(), "still starting up");
        let again = r.advance(startup);
        assert_eq!(
            again,
            vec![Event::Finished(Task {
                task_id: 2,
                job_id: 7,
                node: 1,
                workers: 1
            })]
        );
        assert_eq!(r.done(7), Some(100.0));
    }

    #[test]
    fn an_unknown_job_is_refused() {
        let (r, _) = registry();
        assert_eq!(
            r.assign(0, &assignment(1, 99, 1)),
            Err(Refusal::UnknownJob(99))
        );
    }
}
