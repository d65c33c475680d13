//! The scheduler's settings, as operators and experimenters write them:
//! one type, one set of defaults, read directly from `cloud.toml` and from a
//! simulator topology.

use serde::{Deserialize, Serialize};

use crate::cost::DEFAULT_GAMMA;
use crate::world::{AdmissionMode, BestEffortOrder, JobSpec, OnInfeasible};

/// The scheduler's settings: the `[tidemill]` table of a simulator
/// topology and the `[scheduler.tidemill]` table of `cloud.toml`, read
/// directly, with one set of defaults ([`Policy::default`]). Times are
/// written in seconds and hours there (`slot_s`, `horizon_h`, `grace_s`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Planning granularity, ms; edge windows are used in whole slots.
    #[serde(rename = "slot_s", with = "secs_as_ms")]
    pub slot_ms: i64,
    /// How far ahead plans reach, ms.
    #[serde(rename = "horizon_h", with = "hours_as_ms")]
    pub horizon_ms: i64,
    /// Overlap exponent γ of the step-time model.
    pub gamma: f64,
    /// Seconds to restart a job from a checkpoint (process start, state load).
    pub restart_s: f64,
    /// A job leaves an edge node this long before its idle window ends, ms.
    #[serde(rename = "grace_s", with = "secs_as_ms")]
    pub grace_ms: i64,
    /// Best-effort order.
    pub best_effort_order: BestEffortOrder,
    /// Edge nodes considered per job (the best by free time before the deadline).
    pub edge_candidates: usize,
    /// Most edge nodes one job may span.
    pub max_edge_nodes: usize,
    /// Best-effort jobs with no free edge capacity now may take cloud capacity
    /// that no reservation holds now (paid), as ElasticFlow gives leftover
    /// capacity away. SLO jobs admitted each round (`admission =
    /// each-round`) take such capacity regardless, but only while it can
    /// still meet their deadline.
    pub best_effort_cloud: bool,
    /// How SLO jobs are admitted.
    pub admission: AdmissionMode,
    /// A guaranteed job its reservation leaves idle, or narrow, now may run
    /// for the slot in progress where it does the most work on capacity
    /// nothing holds now, while its reservation stays the guarantee (see
    /// `schedule/ahead.rs`).
    pub run_ahead: bool,
    /// When new SLO jobs arrive, every guarantee is planned again with them,
    /// earliest deadline first, unless that would break one (see
    /// `schedule::reshuffle`).
    pub reshuffle: bool,
    /// A job no fixed worker count fits may run with a worker count that
    /// changes between stretches on one cloud group, fewer while capacity
    /// is scarce and more when it frees up, each resize charged as
    /// checkpoint plus restart (see `schedule/elastic.rs`).
    pub elastic: bool,
    /// What becomes of every SLO job no plan can guarantee, overriding the
    /// job's own `on_infeasible`; `None` leaves it to each job.
    pub on_infeasible: Option<OnInfeasible>,
    /// With queue admission, how far ahead of its planned finish a job may
    /// be promised, ms: a promise keeps a long job going when a burst of
    /// shorter ones arrives after it, which costs deadlines (README:
    /// Admission), so a shorter lead trades notice for deadlines. At least
    /// the horizon: promised as soon as a plan on capacity nobody holds
    /// meets the deadline, which is when it starts.
    #[serde(rename = "promise_lead_h", with = "hours_as_ms")]
    pub promise_lead_ms: i64,
    /// How long an edge box must have stayed idle before plans that carry
    /// no promise may use its likely (P50) grade, ms (see
    /// `schedule/grid.rs`): a box whose load hovers at the threshold flips
    /// back within minutes, and every such eviction disturbs its owner's
    /// workload and loses the job's work since its checkpoint.
    #[serde(rename = "likely_dwell_s", with = "secs_as_ms")]
    pub likely_dwell_ms: i64,
    /// An SLO job that is not running and could still wait longer than this
    /// and meet its deadline (its laxity: time to the deadline less its work
    /// left on one device of the fastest class), ms, takes its turn after
    /// the SLO jobs that cannot: in shortest-first order alone, a long job
    /// with days to spare took the cloud GPUs a burst of short jobs due
    /// within hours needed (docs/simulation.md measures it).
    #[serde(rename = "urgent_laxity_h", with = "hours_as_ms")]
    pub urgent_laxity_ms: i64,
}

impl Default for Policy {
    /// 15-minute slots (the forecast's), 48 h horizon, γ = 2, 30 s restart,
    /// 2-minute grace, shortest remaining time first (every job states its
    /// iterations), 12 candidates, up to 8 edge nodes, best-effort jobs on
    /// leftover cloud capacity too, queue admission promising a job once its
    /// plan finishes within the hour, guaranteed jobs running ahead on
    /// capacity nothing holds now, each job's own `on_infeasible`, and the
    /// likely grade of an edge box only after 30 minutes idle, and SLO jobs
    /// with more than 3 hours to spare after those with less.
    fn default() -> Self {
        Policy {
            slot_ms: 900_000,
            horizon_ms: 48 * 3_600_000,
            gamma: DEFAULT_GAMMA,
            restart_s: 30.0,
            grace_ms: 120_000,
            best_effort_order: BestEffortOrder::ShortestRemainingTime,
            edge_candidates: 12,
            max_edge_nodes: 8,
            best_effort_cloud: true,
            admission: AdmissionMode::Queue,
            run_ahead: true,
            reshuffle: false,
            elastic: true,
            on_infeasible: None,
            promise_lead_ms: 3_600_000,
            likely_dwell_ms: 1_800_000,
            urgent_laxity_ms: 3 * 3_600_000,
        }
    }
}

/// A bad value in the scheduler's settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{key}` = {value} is invalid: {expected}")]
pub struct PolicyError {
    /// The key, as written in the config.
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

impl Policy {
    /// What becomes of `job` if no plan can guarantee it: this policy's
    /// override, else the job's own choice.
    pub fn on_infeasible_for(&self, job: &JobSpec) -> OnInfeasible {
        self.on_infeasible.unwrap_or(job.on_infeasible)
    }

    /// Checks every setting, naming the first bad key.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let bad = |key, value: String, expected| {
            Err(PolicyError {
                key,
                value,
                expected,
            })
        };
        if self.slot_ms <= 0 {
            return bad(
                "slot_s",
                (self.slot_ms as f64 / 1000.0).to_string(),
                "more than 0 seconds",
            );
        }
        if self.horizon_ms < self.slot_ms {
            return bad(
                "horizon_h",
                (self.horizon_ms as f64 / 3.6e6).to_string(),
                "at least one slot",
            );
        }
        if self.grace_ms < 0 {
            return bad(
                "grace_s",
                (self.grace_ms as f64 / 1000.0).to_string(),
                "0 seconds or more",
            );
        }
        if !(self.restart_s >= 0.0 && self.restart_s.is_finite()) {
            return bad(
                "restart_s",
                self.restart_s.to_string(),
                "a finite number of seconds, 0 or more",
            );
        }
        if !(self.gamma >= 1.0 && self.gamma.is_finite()) {
            return bad(
                "gamma",
                self.gamma.to_string(),
                "a finite number, 1 or more",
            );
        }
        if self.edge_candidates == 0 {
            return bad("edge_candidates", "0".into(), "at least 1");
        }
        if self.max_edge_nodes == 0 {
            return bad("max_edge_nodes", "0".into(), "at least 1");
        }
        if self.promise_lead_ms <= 0 {
            return bad(
                "promise_lead_h",
                (self.promise_lead_ms as f64 / 3.6e6).to_string(),
                "more than 0 hours (horizon_h or more promises on start)",
            );
        }
        if self.urgent_laxity_ms < 0 {
            return bad(
                "urgent_laxity_h",
                (self.urgent_laxity_ms as f64 / 3.6e6).to_string(),
                "0 hours or more",
            );
        }
        if self.likely_dwell_ms < 0 {
            return bad(
                "likely_dwell_s",
                (self.likely_dwell_ms as f64 / 1000.0).to_string(),
                "0 seconds or more",
            );
        }
        Ok(())
    }
}

/// Milliseconds written as seconds.
mod secs_as_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*ms as f64 / 1000.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        Ok((f64::deserialize(d)? * 1000.0).round() as i64)
    }
}

/// Milliseconds written as hours.
mod hours_as_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*ms as f64 / 3_600_000.0)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        Ok((f64::deserialize(d)? * 3_600_000.0).round() as i64)
    }
}
