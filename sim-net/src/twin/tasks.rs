//! Tasks run in emulation: the registry every emulated edge shares, which
//! advances each job at the rate the scenario's cost model gives for where
//! its tasks run, saves its checkpoints at its interval, and says what each
//! edge must report.
//!
//! A job advances only while as many of its tasks run as its `WORLD_SIZE`
//! (a distributed job waits for all its ranks), on exact tide times, as the
//! engine times them: from its last rank's assignment to a task's stop, and
//! it finishes when its last step ends, whenever the twin's tick (a quarter
//! of the sample interval: 75 s on the MEC scenario) notices. On the tick's
//! grid every start, stop and finish was off by up to a tick, and every
//! finish late by half a tick on average. Before stepping it pays the
//! cost model's start-up for its placement (staging, checkpoint transfer,
//! restart), as the simulator's engine does. A planned stop (the
//! coordinator's cancel) checkpoints on the way out and keeps all progress;
//! a yield because a box's own load came back falls back to the last
//! checkpoint. A job that ran all its iterations saves a last checkpoint, as
//! the reference training script does: a task of it started again (the
//! coordinator may have asked it to stop just as it finished, and read its
//! exit as that stop) resumes there and ends once its start-up is paid.
//!
//! The registry charges what the tasks held as the engine does: device-seconds
//! on the cloud and on the edge (start-up included), the share of them on a
//! box truly idle at the time, and the box-seconds a task ran on a busy box
//! (interference, until its edge notices and yields). A job that stops while
//! it runs has moved (a migration) if it runs again within one round on other
//! nodes, and was paused (a preemption) otherwise, as the engine counts a
//! decision that changes or empties a running placement.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tidemill_proto::TaskAssignment;
use tidemill_sched::JobSpec;
use tidemill_sched::policies::{FirstStart, FirstStop};

use crate::simulate::edges::EdgeWorld;
use crate::simulate::metrics::{Accumulators, Held};
use crate::simulate::placement::CostModel;

/// The scenario's edge load on the tide clock, to tell harvested device time
/// from interference, and the round that tells a move from a pause.
pub(crate) struct TideLoad {
    /// The boxes' own load, on the trace's clock.
    pub(crate) edges: EdgeWorld,
    /// Tide minus trace time, ms.
    pub(crate) offset_ms: i64,
    /// Where the measurement window ends, trace ms: nothing is charged past it.
    pub(crate) window_end_ms: i64,
    /// One round, tide ms: a job running again within it after a stop moved.
    pub(crate) round_ms: i64,
}

/// How a job's runs ended and began again, as the engine counts them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// When all its ranks first ran, tide ms, and on which nodes: where it
    /// first started, whatever the coordinator's record says once it has
    /// moved since.
    pub first_start: Option<FirstStart>,
    /// When a task of it was first stopped before it was done, tide ms.
    pub first_stop: Option<FirstStop>,
    /// Times it ran again on other nodes within a round of a stop.
    pub migrations: u32,
    /// Times it stopped and did not run again within a round (or at all).
    pub preemptions: u32,
}

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
    /// Its first stop, migrations and preemptions so far.
    history: History,
    /// When it last stopped while running, tide ms, until it runs again.
    left_ms: Option<i64>,
    /// When its latest task was assigned, tide ms: it trains from then, not
    /// from the start of the tick that first advances it.
    ready_ms: i64,
}

/// What an edge must report after the registry changed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The task's job ran all its iterations at `at_ms` (tide), within the
    /// tick that found it: the task exits with code 0, dated then, as the
    /// engine dates a finish.
    Finished {
        /// The task.
        task: Task,
        /// When its job's last iteration ended, tide ms.
        at_ms: i64,
    },
}

/// The registry.
pub(crate) struct Registry {
    model: CostModel,
    /// The trace's jobs by the coordinator's id, filled as they are submitted.
    specs: Mutex<HashMap<u64, JobSpec>>,
    jobs: Mutex<HashMap<u64, Job>>,
    /// What the tasks held, moved and lost, as the engine counts it: device
    /// time by kind, traffic by tier (start-ups and all-reduce), evictions
    /// and what they lost.
    ledger: Mutex<Accumulators>,
    /// Tide ms up to which [`Registry::advance`] has advanced the jobs.
    advanced_to_ms: Mutex<i64>,
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
            advanced_to_ms: Mutex::new(i64::MIN),
        }
    }

    /// Device time, traffic by tier, evictions and what they lost, so far.
    pub(crate) fn ledger(&self) -> Accumulators {
        self.ledger.lock().unwrap().clone()
    }

    /// Records that the coordinator calls the trace's job `spec` `job_id`.
    pub(crate) fn submitted(&self, job_id: u64, spec: JobSpec) {
        self.specs.lock().unwrap().insert(job_id, spec);
    }

    /// Takes on `a` on node `node` at tide ms `t_ms`; returns the step of the
    /// checkpoint it resumes from, if the job has one, or `None` when the
    /// task is known already (assignments are idempotent).
    pub(crate) fn assign(
        &self,
        node: u32,
        a: &TaskAssignment,
        t_ms: i64,
    ) -> Result<Option<u64>, Refusal> {
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
                    history: History::default(),
                    left_ms: None,
                    ready_ms: t_ms,
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
        job.ready_ms = t_ms;
        if let Some(ips) = a.checkpoint_interval_s {
            job.spec.checkpoint_interval_s = ips;
        }
        Ok(Some(job.checkpoint.floor() as u64))
    }

    /// Stops task `task_id` at `t_ms` (tide): with `keep`, a planned stop
    /// that checkpoints on the way out; without, a yield that falls back to
    /// the last checkpoint. The job first trains up to `t_ms` from the last
    /// tick, so a stop between ticks keeps (or loses) exactly what it made.
    /// Returns the task if it ran here.
    pub(crate) fn stop(
        &self,
        task_id: u64,
        keep: bool,
        t_ms: i64,
        load: &TideLoad,
    ) -> Option<Task> {
        let mut jobs = self.jobs.lock().unwrap();
        let job = jobs.values_mut().find(|j| j.tasks.contains_key(&task_id))?;
        let from_ms = *self.advanced_to_ms.lock().unwrap();
        if t_ms > from_ms {
            let mut ledger = self.ledger.lock().unwrap();
            let mut busy_ms = vec![0i64; self.model.nodes().len()];
            self.advance_job(job, from_ms, t_ms, load, &mut ledger, &mut busy_ms, false);
            ledger.interference_s += busy_ms.iter().sum::<i64>() as f64 / 1000.0;
        }
        let task = job.tasks.remove(&task_id)?;
        if job.done < job.spec.iterations {
            job.history.first_stop.get_or_insert(FirstStop {
                at_ms: t_ms,
                evicted: !keep,
            });
            if job.started {
                job.left_ms.get_or_insert(t_ms);
            }
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

    /// Job `job_id`'s first stop, migrations and preemptions (a stop it has
    /// not run again since counts as a preemption); empty if it never ran.
    pub(crate) fn history(&self, job_id: u64) -> History {
        let jobs = self.jobs.lock().unwrap();
        let Some(job) = jobs.get(&job_id) else {
            return History::default();
        };
        let mut h = job.history.clone();
        h.preemptions += u32::from(job.left_ms.is_some());
        h
    }

    /// Iterations job `job_id` has done, if it runs here.
    pub(crate) fn done(&self, job_id: u64) -> Option<f64> {
        self.jobs.lock().unwrap().get(&job_id).map(|j| j.done)
    }

    /// Advances every job whose ranks all run by `dt_s` seconds of tide from
    /// tide ms `from_ms` (a job assigned since, from its assignment),
    /// charging what they hold against `load`; returns the tasks of jobs that
    /// finished, each with the time it finished. A finished job keeps its
    /// last checkpoint (all its iterations) for a task started again.
    pub(crate) fn advance(&self, from_ms: i64, dt_s: f64, load: &TideLoad) -> Vec<Event> {
        let mut jobs = self.jobs.lock().unwrap();
        let mut events = Vec::new();
        let mut ledger = self.ledger.lock().unwrap();
        let mut busy_ms = vec![0i64; self.model.nodes().len()];
        let to_ms = from_ms + (dt_s * 1000.0).round() as i64;
        for job in jobs.values_mut() {
            let finished =
                self.advance_job(job, from_ms, to_ms, load, &mut ledger, &mut busy_ms, true);
            if let Some(at_ms) = finished {
                let tasks = std::mem::take(&mut job.tasks);
                events.extend(
                    tasks
                        .into_values()
                        .map(|task| Event::Finished { task, at_ms }),
                );
            }
        }
        ledger.interference_s += busy_ms.iter().sum::<i64>() as f64 / 1000.0;
        *self.advanced_to_ms.lock().unwrap() = to_ms;
        events
    }

    /// Advances `job`, if all its ranks run, from `from_ms` (or its
    /// assignment, if later) to `to_ms`, tide ms, charging what it holds to
    /// `ledger` and `busy_ms`; returns when it finished, if it did and
    /// `may_finish` (its tasks then end). Without `may_finish` it stops at
    /// its last iteration, checkpointed, and keeps its tasks for a stop to
    /// take: a yield just after the finish loses nothing.
    #[allow(clippy::too_many_arguments)]
    fn advance_job(
        &self,
        job: &mut Job,
        from_ms: i64,
        to_ms: i64,
        load: &TideLoad,
        ledger: &mut Accumulators,
        busy_ms: &mut [i64],
        may_finish: bool,
    ) -> Option<i64> {
        if job.tasks.len() < job.world as usize || job.tasks.is_empty() {
            return None;
        }
        let from_ms = if job.started {
            from_ms
        } else {
            from_ms.max(job.ready_ms)
        };
        if to_ms <= from_ms {
            return None;
        }
        let dt_s = (to_ms - from_ms) as f64 / 1000.0;
        let mut place: Vec<(u32, u32)> = job.tasks.values().map(|t| (t.node, t.workers)).collect();
        place.sort_unstable();
        if !job.started {
            if let Some(left) = job.left_ms.take() {
                if from_ms - left > load.round_ms {
                    job.history.preemptions += 1;
                } else if place != job.location {
                    job.history.migrations += 1;
                }
            }
            job.history
                .first_start
                .get_or_insert_with(|| FirstStart::on(&self.model, from_ms, &place));
            let startup = self.model.startup(&job.spec, &job.location, &place);
            ledger.traffic.add_scaled(&startup.wan, 1.0);
            job.startup_left_s = startup.secs;
            job.location = place.clone();
            job.started = true;
        }
        let su = job.startup_left_s.min(dt_s);
        job.startup_left_s -= su;
        let mut used_s = su;
        if let Some((step_s, _)) = self.model.step(&job.spec, &place)
            && job.startup_left_s <= 0.0
            && dt_s > su
            && step_s > 0.0
        {
            let left = (dt_s - su).min((job.spec.iterations - job.done) * step_s);
            used_s += left;
            let before = job.done;
            job.done = (job.done + left / step_s).min(job.spec.iterations);
            if place.len() > 1 {
                let ring = self.model.allreduce_traffic(&job.spec, &place);
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
        let held = Held {
            place: &place,
            from_ms: from_ms - load.offset_ms,
            used_s,
            startup_s: su,
            window_end_ms: load.window_end_ms,
        };
        ledger.hold(&self.model, &load.edges, busy_ms, held);
        if job.startup_left_s > 0.0 || job.done < job.spec.iterations {
            return None;
        }
        // Its last step saved a last checkpoint, whatever stops it next.
        job.checkpoint = job.done;
        job.since_checkpoint_s = 0.0;
        if !may_finish {
            return None;
        }
        job.started = false;
        Some(from_ms + (used_s * 1000.0).ceil() as i64)
    }
}

/// Two one-GPU cloud nodes, model `m` at 2 iterations/s on one GPU: the
/// world of the twin's unit tests.
#[cfg(test)]
pub(crate) fn test_model() -> CostModel {
    model_of(vec![
        crate::simulate::testkit::cloud_node("c0", "A100", 1),
        crate::simulate::testkit::cloud_node("c1", "A100", 1),
    ])
}

/// `nodes` (of class A100), model `m` at 2 iterations/s on one GPU.
#[cfg(test)]
fn model_of(nodes: Vec<crate::simulate::placement::CostNode>) -> CostModel {
    let mut tables = tidemill_sched::ThroughputTables::default();
    let rates = tidemill_sched::ModelRates {
        global_batch: 64,
        source: "test".into(),
        iters_per_s: [("A100".to_string(), 2.0)].into(),
    };
    tables.insert_rates("m", &rates).unwrap();
    tables.fill_missing();
    CostModel::new(
        nodes,
        tables,
        tidemill_sched::LinkTable::default(),
        2.0,
        30.0,
    )
}

/// The load of no box, on a clock with tide = trace time and 60-s rounds:
/// the twin's unit tests run on cloud nodes.
#[cfg(test)]
pub(crate) fn no_load() -> TideLoad {
    TideLoad {
        edges: EdgeWorld::new(&[], &[], 0, 300_000, 60_000, 0),
        offset_ms: 0,
        window_end_ms: i64::MAX,
        round_ms: 60_000,
    }
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
        registry_with(1e9)
    }

    /// A registry knowing job 7 of `iterations`, with its start-up on c0 from
    /// nowhere and its step time there, s.
    fn on_c0(iterations: f64) -> (Registry, f64, f64) {
        let (r, spec) = registry_with(iterations);
        let model = test_model();
        let startup = model.startup(&spec, &[], &[(0, 1)]).secs;
        let (step, _) = model.step(&spec, &[(0, 1)]).unwrap();
        (r, startup, step)
    }

    /// A registry over the test model knowing job 7 of `iterations`.
    fn registry_with(iterations: f64) -> (Registry, JobSpec) {
        let mut spec = crate::simulate::testkit::job("m").spec;
        spec.iterations = iterations;
        let r = Registry::new(test_model());
        r.submitted(7, spec.clone());
        (r, spec)
    }

    #[test]
    fn a_job_waits_for_all_its_ranks_and_then_steps_at_the_model_rate() {
        let (r, spec) = registry();
        assert_eq!(r.assign(0, &assignment(1, 7, 2), 0), Ok(Some(0)));
        assert_eq!(r.assign(0, &assignment(1, 7, 2), 0), Ok(None), "idempotent");
        r.advance(0, 100.0, &no_load());
        assert_eq!(r.done(7), Some(0.0), "one rank of two: no progress");
        r.assign(1, &assignment(2, 7, 2), 0).unwrap();
        let model = test_model();
        let place = [(0, 1), (1, 1)];
        let startup = model.startup(&spec, &[], &place).secs;
        let (step, _) = model.step(&spec, &place).unwrap();
        r.advance(0, startup + 1000.0, &no_load());
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
        assert_eq!(r.assign(0, &assignment(1, 7, 1), 0), Ok(Some(0)));
        r.advance(0, 10_000.0, &no_load());
        let before = r.done(7).unwrap();
        assert_eq!(r.history(7).first_stop, None);
        r.stop(1, false, 5, &no_load()).unwrap();
        let yielded = Some(FirstStop {
            at_ms: 5,
            evicted: true,
        });
        assert_eq!(r.history(7).first_stop, yielded);
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
        r.assign(0, &assignment(2, 7, 1), 0).unwrap();
        r.advance(0, 10_000.0, &no_load());
        let before = r.done(7).unwrap();
        r.stop(2, true, 9, &no_load()).unwrap();
        assert_eq!(r.done(7), Some(before));
        assert_eq!(r.history(7).first_stop, yielded, "the first stop stands");
        assert_eq!(r.ledger().evictions, 1, "a planned stop is no eviction");
        assert_eq!(
            r.assign(0, &assignment(3, 7, 1), 0),
            Ok(Some(before.floor() as u64))
        );
    }

    #[test]
    fn a_finished_job_started_again_resumes_at_its_end_and_ends_after_its_start_up() {
        let model = test_model();
        let (r, spec) = registry_with(100.0);
        r.assign(0, &assignment(1, 7, 1), 0).unwrap();
        let ended = r.advance(0, 1e6, &no_load());
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(r.done(7), Some(100.0));
        // The coordinator asked it to stop as it finished, and starts it
        // again elsewhere: it resumes from its last checkpoint, the end.
        assert_eq!(r.assign(1, &assignment(2, 7, 1), 0), Ok(Some(100)));
        let startup = model.startup(&spec, &[(0, 1)], &[(1, 1)]).secs;
        assert!(startup > 1.0, "{startup}");
        assert!(
            r.advance(0, startup / 2.0, &no_load()).is_empty(),
            "still starting up"
        );
        // It ends once its start-up is paid, dated then, within the tick.
        let half_ms = (startup * 500.0).round() as i64;
        let at_ms = half_ms + ((startup - half_ms as f64 / 1000.0) * 1000.0).ceil() as i64;
        let again = r.advance(half_ms, startup, &no_load());
        assert_eq!(
            again,
            vec![Event::Finished {
                task: Task {
                    task_id: 2,
                    job_id: 7,
                    node: 1,
                    workers: 1
                },
                at_ms
            }]
        );
        assert_eq!(r.done(7), Some(100.0));
    }

    #[test]
    fn device_time_is_charged_as_the_engine_does_idle_edge_time_harvested_busy_time_interfering() {
        use crate::simulate::testkit::{cloud_node, edge_node};
        // Box e0 idle (10 %) for the first hour and busy (60 %) the next,
        // in 5-minute bins, under a 30 % threshold.
        let points = (0..24)
            .map(|k| (k * 300_000, if k < 12 { 10.0 } else { 60.0 }))
            .collect();
        let series = crate::trace::Series {
            node: "e0".into(),
            points,
        };
        let load = TideLoad {
            edges: EdgeWorld::new(&[series], &[(30.0, 1)], 0, 300_000, 0, 0),
            ..no_load()
        };
        let model = model_of(vec![
            cloud_node("c0", "A100", 1),
            edge_node("e0", "A100", 0),
        ]);
        let r = Registry::new(model.clone());
        let mut spec = crate::simulate::testkit::job("m").spec;
        spec.iterations = 1e9;
        r.submitted(7, spec.clone());
        r.submitted(8, spec.clone());
        r.assign(0, &assignment(1, 7, 1), 0).unwrap();
        r.assign(1, &assignment(2, 8, 1), 0).unwrap();
        r.advance(0, 1000.0, &load);
        r.advance(1_000_000, 6200.0, &load);
        let startup = model.startup(&spec, &[], &[(1, 1)]).secs;
        let l = r.ledger();
        // By hand: job 7 held c0's GPU 7 200 s at 3 per GPU-hour (6.0); job
        // 8 held e0 7 200 s, its start-up among them, of which the first
        // hour was idle and the second busy.
        assert!((l.cloud_gpu_s - 7200.0).abs() < 1e-6, "{l:?}");
        assert!((l.cloud_cost - 6.0).abs() < 1e-9, "{l:?}");
        assert!((l.edge_used_s - 7200.0).abs() < 1e-6, "{l:?}");
        assert!((l.edge_startup_s - startup).abs() < 1e-9, "{l:?}");
        assert!((l.edge_idle_used_s - 3600.0).abs() < 1e-6, "{l:?}");
        assert!((l.interference_s - 3600.0).abs() < 1e-6, "{l:?}");
    }

    #[test]
    fn a_run_again_elsewhere_within_a_round_is_a_migration_and_later_a_preemption() {
        let (r, _) = registry();
        let moves = |r: &Registry| {
            let h = r.history(7);
            (h.migrations, h.preemptions)
        };
        r.assign(0, &assignment(1, 7, 1), 0).unwrap();
        r.advance(0, 100.0, &no_load());
        r.stop(1, true, 100_000, &no_load()).unwrap();
        r.assign(1, &assignment(2, 7, 1), 0).unwrap();
        r.advance(130_000, 10.0, &no_load());
        assert_eq!(moves(&r), (1, 0), "moved to c1 30 s later");
        r.stop(2, true, 200_000, &no_load()).unwrap();
        r.assign(1, &assignment(3, 7, 1), 0).unwrap();
        r.advance(210_000, 10.0, &no_load());
        assert_eq!(moves(&r), (1, 0), "back on the same node at once");
        r.stop(3, true, 300_000, &no_load()).unwrap();
        r.assign(0, &assignment(4, 7, 1), 0).unwrap();
        r.advance(500_000, 10.0, &no_load());
        assert_eq!(moves(&r), (1, 1), "paused for more than a round");
        r.stop(4, true, 600_000, &no_load()).unwrap();
        assert_eq!(moves(&r), (1, 2), "stopped and not run again");
        // It first ran on c0, when its first placement began to step.
        let first = r.history(7).first_start.unwrap();
        assert_eq!((first.at_ms, first.nodes), (0, vec!["c0".to_string()]));
    }

    #[test]
    fn an_unknown_job_is_refused() {
        let (r, _) = registry();
        assert_eq!(
            r.assign(0, &assignment(1, 99, 1), 0),
            Err(Refusal::UnknownJob(99))
        );
    }

    #[test]
    fn a_job_trains_from_its_assignment_to_its_stop_and_finishes_when_its_last_step_ends() {
        let (r, startup, step) = on_c0(1000.0);
        // Ticks of 75 s from 0; the task comes at 40 s, mid-tick.
        r.assign(0, &assignment(1, 7, 1), 40_000).unwrap();
        r.advance(0, 75.0, &no_load());
        r.advance(75_000, 75.0, &no_load());
        // By hand: 150 − 40 s held, the start-up first.
        let want = (110.0 - startup) / step;
        assert!((r.done(7).unwrap() - want).abs() < 1e-9, "{want}");
        // A planned stop at 180 s, mid-tick, keeps the 30 s since the tick.
        r.stop(1, true, 180_000, &no_load()).unwrap();
        let kept = (140.0 - startup) / step;
        assert!((r.done(7).unwrap() - kept).abs() < 1e-9, "{kept}");
        // Back on the same node at 200 s (a restart: start-up again), it
        // ends at 200 s + start-up + its remaining steps, not at the tick's end.
        r.assign(0, &assignment(2, 7, 1), 200_000).unwrap();
        let ended = r.advance(150_000, 10_000.0, &no_load());
        let want_ms = 200_000.0 + (startup + (1000.0 - kept) * step) * 1000.0;
        let [Event::Finished { task, at_ms }] = &ended[..] else {
            panic!("{ended:?}");
        };
        assert_eq!((task.task_id, task.node), (2, 0));
        assert!((*at_ms as f64 - want_ms).abs() <= 1.0, "{at_ms} {want_ms}");
    }

    #[test]
    fn a_yield_between_a_finish_and_the_tick_that_notices_it_loses_nothing() {
        let (r, startup, step) = on_c0(100.0);
        r.assign(0, &assignment(1, 7, 1), 0).unwrap();
        r.advance(0, 10.0, &no_load());
        // It finishes at start-up + 100 steps; its box turns busy 5 s later,
        // before the next tick.
        let yield_ms = ((startup + 100.0 * step + 5.0) * 1000.0) as i64;
        r.stop(1, false, yield_ms, &no_load()).unwrap();
        assert_eq!(r.done(7), Some(100.0));
        assert_eq!(r.ledger().evictions, 0);
        assert_eq!(r.history(7).first_stop, None, "it stopped done");
    }
}
