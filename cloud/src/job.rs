//! Jobs as operators describe them (a TOML job file) and as the coordinator
//! reports them.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tidemill_sched::cost::StepTime;
use tidemill_sched::{
    Action, DataSite, JobClass, JobDecision, OnInfeasible, Segment, Shape, Verdict,
};

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// A name for people.
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values are secret: tasks get them, but the
    /// API and the logs show only their names.
    #[serde(default)]
    pub secret_env: BTreeMap<String, String>,
    /// When the job must be done: a TOML datetime or an RFC 3339 string.
    #[serde(deserialize_with = "any_time")]
    pub deadline: DateTime<Utc>,
    /// `slo` (guaranteed when a plan meets the deadline) or `best-effort`.
    #[serde(default = "slo")]
    pub class: JobClass,
    /// What to do with an SLO job no plan can guarantee.
    #[serde(default = "run_best_effort")]
    pub on_infeasible: OnInfeasible,
    /// The training work, which lets the tidal scheduler plan the job; without
    /// it the job runs best-effort on an idle node.
    #[serde(default)]
    pub work: Option<Work>,
    /// Accept a deadline already past (the job then runs best-effort).
    #[serde(default)]
    pub allow_past_deadline: bool,
    /// Node labels the job needs: it is placed only on nodes an admin gave
    /// every one of them (`tidemill-cloud nodes label`), e.g. `["trusted"]`
    /// for a job whose secrets must not reach unvetted boxes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Minutes of training between two checkpoints the task saves on its
    /// own (default [`tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S`] / 60,
    /// 30 min): what a task stopped without warning loses at most, which the
    /// scheduler charges an eviction. Tasks read it, in seconds, from
    /// `TIDEMILL_CHECKPOINT_INTERVAL_S`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_min: Option<f64>,
}

impl JobFile {
    /// Seconds of training between the job's checkpoints: its own
    /// `checkpoint_interval_min` × 60, or the library's default.
    pub fn checkpoint_interval_s(&self) -> f64 {
        self.checkpoint_interval_min
            .map_or(tidemill_sched::DEFAULT_CHECKPOINT_INTERVAL_S, |m| m * 60.0)
    }
}

/// Longest `checkpoint_interval_min`: a week of training.
pub const MAX_CHECKPOINT_INTERVAL_MIN: f64 = 7.0 * 24.0 * 60.0;
/// Longest job name, in bytes.
pub const MAX_NAME: usize = 64;
/// Most bytes of a command (all arguments together).
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;
/// Most bytes of `env` and `secret_env` together (names and values): with the
/// command, every task assignment stays far inside one protocol frame
/// (`tidemill_proto::MAX_FRAME_LEN`, 1 MiB).
pub const MAX_ENV_BYTES: usize = 64 * 1024;

/// Reads a time written as a TOML datetime or as an RFC 3339 string (the form
/// JSON carries), with an offset.
fn any_time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    use serde::de::Error;
    let text = match toml::Value::deserialize(d)? {
        toml::Value::String(s) => s,
        toml::Value::Datetime(t) => t.to_string(),
        other => {
            return Err(D::Error::custom(format!(
                "deadline must be a time, not {}",
                other.type_str()
            )));
        }
    };
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            D::Error::custom(format!(
                "deadline {text:?} is not an RFC 3339 time with an offset ({e}), for example 2026-11-23T06:00:00Z"
            ))
        })
}

fn slo() -> JobClass {
    JobClass::Slo
}

fn run_best_effort() -> OnInfeasible {
    OnInfeasible::BestEffort
}

/// A job's training work, as the cost model needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Work {
    /// The model: the key into the throughput tables.
    pub model: String,
    /// Training iterations (steps) in all.
    pub iterations: f64,
    /// Global batch size: the throughput table's row.
    pub global_batch: u32,
    /// Model size, bytes: what gradient synchronisation moves.
    #[serde(default)]
    pub model_bytes: u64,
    /// Dataset size, bytes: what staging moves to a node.
    #[serde(default)]
    pub dataset_bytes: u64,
    /// Where the dataset lives: `cloud`, or a node id.
    #[serde(default = "cloud_site")]
    pub dataset_site: String,
    /// Fewest workers (devices) the job runs on.
    #[serde(default = "one")]
    pub min_workers: u32,
    /// Most workers the job can use.
    #[serde(default = "one")]
    pub max_workers: u32,
    /// Device memory one worker needs, bytes.
    #[serde(default)]
    pub memory_per_worker_bytes: u64,
    /// Checkpoint size, bytes: what a migration moves.
    #[serde(default)]
    pub checkpoint_bytes: u64,
    /// The job's own measured iterations/s on one worker, per device class;
    /// used where the throughput tables lack the model for a class.
    #[serde(default)]
    pub iters_per_s: BTreeMap<String, f64>,
}

fn cloud_site() -> String {
    "cloud".to_string()
}

fn one() -> u32 {
    1
}

impl Work {
    /// Where the dataset lives, as the scheduler names it.
    pub fn data_site(&self) -> DataSite {
        if self.dataset_site == "cloud" {
            DataSite::Cloud
        } else {
            DataSite::Node(self.dataset_site.clone())
        }
    }
}

/// Why a job spec is unusable.
#[derive(Debug, thiserror::Error)]
pub enum JobSpecError {
    /// The file could not be read.
    #[error("cannot read job file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid job.
    #[error(
        "job file {path} is invalid: {message}\na job needs name, command = [\"prog\", \"arg\"...], deadline = RFC 3339 time, and optional class, on_infeasible, [env] and [work]; see configs/job.toml"
    )]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A field's value is unusable.
    #[error("job field `{field}` is invalid: {rule}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What it must satisfy.
        rule: &'static str,
    },
    /// The job sets a variable that tidemill sets itself.
    #[error(
        "job variable {name} (in {field}) is reserved: the edge or the coordinator sets it for every task (the edge alone decides a task's checkpoint dir); remove it from the job file"
    )]
    Reserved {
        /// `env` or `secret_env`.
        field: &'static str,
        /// The variable.
        name: String,
    },
}

impl JobFile {
    /// Reads and validates a TOML job file.
    pub fn from_file(path: &Path) -> Result<Self, JobSpecError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| JobSpecError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_toml(&text, &shown)
    }

    /// Parses and validates a TOML job; `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, JobSpecError> {
        let parse = |message: String| JobSpecError::Parse {
            path: origin.to_string(),
            message,
        };
        let spec: JobFile = toml::from_str(text).map_err(|e| parse(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), JobSpecError> {
        let invalid = |field, rule| Err(JobSpecError::Invalid { field, rule });
        let name_ok = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
        if self.name.is_empty() || self.name.len() > MAX_NAME || !self.name.chars().all(name_ok) {
            return invalid("name", "must be 1 to 64 letters, digits, '.', '_' or '-'");
        }
        if self.command.iter().map(String::len).sum::<usize>() > MAX_COMMAND_BYTES {
            return invalid("command", "must be at most 16 KiB in all");
        }
        if self.command.first().is_none_or(|p| p.is_empty()) {
            return invalid(
                "command",
                "must name a program, for example [\"python3\", \"train.py\"]",
            );
        }
        let vars = || self.env.iter().chain(&self.secret_env);
        if vars()
            .any(|(k, v)| k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0'))
        {
            return invalid(
                "env",
                "variable names must be non-empty, without '=' or NUL, and values without NUL",
            );
        }
        if vars().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_ENV_BYTES {
            return invalid(
                "env",
                "env and secret_env together must be at most 64 KiB; pass large data as a file",
            );
        }
        for (field, vars) in [("env", &self.env), ("secret_env", &self.secret_env)] {
            if let Some(name) = vars.keys().find(|k| tidemill_proto::is_reserved_env(k)) {
                return Err(JobSpecError::Reserved {
                    field,
                    name: name.clone(),
                });
            }
        }
        if self.env.keys().any(|k| self.secret_env.contains_key(k)) {
            return invalid(
                "secret_env",
                "a variable may be in env or in secret_env, not both",
            );
        }
        if self
            .requires
            .iter()
            .any(|l| crate::trust::label_problem(l).is_some())
        {
            return invalid(
                "requires",
                "labels must be 1 to 64 lower-case letters, digits, '.', '_' or '-', e.g. [\"trusted\"]",
            );
        }
        if self
            .checkpoint_interval_min
            .is_some_and(|m| !(m.is_finite() && m > 0.0 && m <= MAX_CHECKPOINT_INTERVAL_MIN))
        {
            return invalid(
                "checkpoint_interval_min",
                "must be above 0 and at most 10080 minutes (a week), e.g. 30",
            );
        }
        if let Some(w) = &self.work {
            if w.model.trim().is_empty() {
                return invalid("work.model", "must name the model, e.g. \"resnet50\"");
            }
            if !(w.iterations.is_finite() && w.iterations > 0.0) {
                return invalid("work.iterations", "must be a number above 0");
            }
            if w.global_batch == 0 {
                return invalid("work.global_batch", "must be at least 1");
            }
            if w.min_workers == 0 || w.min_workers > w.max_workers {
                return invalid(
                    "work.min_workers",
                    "must be at least 1 and at most work.max_workers",
                );
            }
            if w.iters_per_s.values().any(|v| !(v.is_finite() && *v > 0.0)) {
                return invalid("work.iters_per_s", "rates must be numbers above 0");
            }
        }
        Ok(())
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobPhase {
    /// Waiting for, or assigned to but not yet started on, a node.
    Queued,
    /// Running on a node.
    Running,
    /// Exited with code 0.
    Succeeded,
    /// Exited otherwise, or could not run.
    Failed,
    /// Cancelled by an operator.
    Cancelled,
    /// Refused at admission.
    Rejected,
}

impl JobPhase {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Queued => "queued",
            JobPhase::Running => "running",
            JobPhase::Succeeded => "succeeded",
            JobPhase::Failed => "failed",
            JobPhase::Cancelled => "cancelled",
            JobPhase::Rejected => "rejected",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Queued,
            Self::Running,
            Self::Succeeded,
            Self::Failed,
            Self::Cancelled,
            Self::Rejected,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, JobPhase::Queued | JobPhase::Running)
    }
}

/// A job as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Where it is in its life.
    pub state: JobPhase,
    /// The node it was placed on, if any.
    pub node: Option<String>,
    /// The exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The last lines of its output (empty where withheld from the caller).
    pub output_tail: Vec<String>,
    /// Why the caller may not see the output, where it is withheld
    /// ([`crate::visibility`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hidden: Option<String>,
    /// Why it is in its state: waiting, failed, cancelled.
    pub reason: Option<String>,
    /// The program and arguments.
    pub command: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// The names of its secret environment variables; their values are never
    /// shown.
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// When it must be done.
    pub deadline: DateTime<Utc>,
    /// When it was submitted.
    pub submitted_at: DateTime<Utc>,
    /// When it first started running.
    pub started_at: Option<DateTime<Utc>>,
    /// When it last started running: after a move or a pause, the start of
    /// its current (or latest) run, which [`JobRecord::start_window`] holds.
    #[serde(default)]
    pub last_started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Whether an operator asked to cancel it.
    pub cancel_requested: bool,
    /// `slo` or `best-effort`.
    pub class: JobClass,
    /// The training work, if the job file gave it.
    pub work: Option<Work>,
    /// Iterations done: the job's own latest `TIDEMILL_PROGRESS` count plus
    /// an estimate since, or the estimate alone from the time it has run at
    /// its plan's predicted step time (see `progress`).
    pub done_iters: f64,
    /// Whether `done_iters` rests on the job's own reports.
    #[serde(default)]
    pub progress: ProgressSource,
    /// Iterations per second measured from the job's own reports on its
    /// current placement, which the planner uses in place of its tables.
    #[serde(default)]
    pub measured_ips: Option<f64>,
    /// What its latest ended task left in its checkpoint dir, as the edge
    /// saw it; absent until a task of it has ended.
    #[serde(default)]
    pub checkpoint: Option<tidemill_proto::CheckpointState>,
    /// Seconds it has run.
    pub attained_s: f64,
    /// The tidal scheduler's latest plan and why; absent under first-fit or
    /// before the first round.
    pub plan: Option<PlanView>,
    /// The idle window of its node in which the job last started, as the
    /// scheduler saw it then (the forecast in force, the slot in progress
    /// judged by the latest sample); absent when it started outside any.
    #[serde(default)]
    pub start_window: Option<StartWindow>,
    /// Its checkpoints' moves, oldest first: each leg (edge to coordinator,
    /// coordinator to edge) with its size, rate, time and step.
    #[serde(default)]
    pub checkpoint_transfers: Vec<crate::store::TransferRecord>,
}

/// Where a job's count of iterations done comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgressSource {
    /// From the time it ran at its plan's predicted step time.
    #[default]
    Estimated,
    /// From its own `TIDEMILL_PROGRESS iter=N` lines.
    Reported,
}

impl ProgressSource {
    /// The word `jobs show` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ProgressSource::Estimated => "estimated",
            ProgressSource::Reported => "reported",
        }
    }
}

/// A signed span as slack is shown, deadline minus finish: `+2h10m`,
/// `-0h20m` (minutes, rounded towards zero).
pub fn signed_span(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let minutes = ms.unsigned_abs() / 60_000;
    format!("{sign}{}h{:02}m", minutes / 60, minutes % 60)
}

/// Where a job started against its node's forecast, so that an operator can
/// see it was started in the tide's idle window and not by chance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartWindow {
    /// The node it started on.
    pub node: String,
    /// The forecast idle window that held the start.
    pub window: crate::store::IdleWindowView,
    /// When the forecast was issued.
    pub forecast_issued_at: DateTime<Utc>,
}

impl JobRecord {
    /// Why the job is where it is, in words. Once it has ended: how it ended,
    /// since the last plan described it while it ran (a plan's "keeps its
    /// reservation" is false of a job that exited). Before that: the latest
    /// plan's reason, else the coordinator's (a job without `[work]`).
    pub fn why(&self) -> &str {
        let reason = self.reason.as_deref().unwrap_or("");
        match &self.plan {
            Some(p) if !self.state.is_terminal() => &p.reason,
            _ => reason,
        }
    }
}

/// The scheduler's latest decision about a job, as `jobs show` presents it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    /// When the round that made it ran.
    pub decided_at: DateTime<Utc>,
    /// The admission verdict: guaranteed, best-effort or rejected.
    pub verdict: Verdict,
    /// What the round did with the job.
    pub action: Action,
    /// The kind of placement.
    pub shape: Shape,
    /// Every node the plan uses.
    pub nodes: Vec<String>,
    /// When the plan starts the job (or started its current stretch).
    pub expected_start: Option<DateTime<Utc>>,
    /// When the plan finishes it; absent when not within the horizon.
    pub expected_finish: Option<DateTime<Utc>>,
    /// Predicted step time of the first stretch: compute, sync and total, seconds.
    pub step: Option<StepTime>,
    /// Staging or migration before the first step, seconds.
    pub staging_s: f64,
    /// Planned cloud spend, currency units.
    pub cloud_cost: f64,
    /// Why, in words.
    pub reason: String,
    /// The plan stretch by stretch.
    pub segments: Vec<Segment>,
}

impl PlanView {
    /// The view of a round's decision.
    pub fn of(d: &JobDecision, now_ms: i64) -> Self {
        let e = &d.explanation;
        let time = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        PlanView {
            decided_at: time(now_ms),
            verdict: d.verdict,
            action: d.action.clone(),
            shape: e.shape,
            nodes: e.nodes.clone(),
            expected_start: e.expected_start_ms.map(time),
            expected_finish: e.expected_finish_ms.map(time),
            step: e.step,
            staging_s: e.staging_s,
            cloud_cost: e.cloud_cost,
            reason: e.reason.clone(),
            segments: d.segments.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_job_file_with_either_deadline_form() {
        let a = JobFile::from_toml(
            "name = \"x\"\ncommand = [\"sh\", \"-c\", \"exit 3\"]\ndeadline = 2026-11-23T06:00:00Z\n[env]\nA = \"1\"\n",
            "a.toml",
        )
        .unwrap();
        let b = JobFile::from_toml(
            "name = \"x\"\ncommand = [\"sh\", \"-c\", \"exit 3\"]\ndeadline = \"2026-11-23T07:00:00+01:00\"\nenv = { A = \"1\" }\n",
            "b.toml",
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.deadline.to_rfc3339(), "2026-11-23T06:00:00+00:00");
    }

    #[test]
    fn the_documented_example_parses() {
        let job =
            JobFile::from_toml(include_str!("../../configs/job.toml"), "configs/job.toml").unwrap();
        assert_eq!(job.command, ["/usr/local/share/tidemill/train_ddp.py"]);
        assert_eq!(job.deadline.to_rfc3339(), "2030-01-01T06:00:00+00:00");
        assert_eq!(job.env.len(), 2);
        assert!(job.secret_env.is_empty());
        assert_eq!(job.class, JobClass::Slo);
        let work = job.work.expect("the example has [work]");
        assert_eq!((work.min_workers, work.max_workers), (1, 8));
        assert_eq!(work.data_site(), DataSite::Cloud);
        assert_eq!(work.iters_per_s["cpu"], 20.0);
    }

    /// 45 minutes are 2700 s; a job that does not say gets the library's
    /// 1800 s; zero, negative and over a week are refused, naming the key.
    #[test]
    fn the_checkpoint_interval_is_read_in_minutes_and_bounded() {
        let job = |extra: &str| {
            JobFile::from_toml(
                &format!(
                    "name = \"x\"\ncommand = [\"true\"]\ndeadline = 2030-01-01T00:00:00Z\n{extra}"
                ),
                "j.toml",
            )
        };
        assert_eq!(
            job("checkpoint_interval_min = 45")
                .unwrap()
                .checkpoint_interval_s(),
            2700.0
        );
        assert_eq!(job("").unwrap().checkpoint_interval_s(), 1800.0);
        for bad in ["0", "-5", "10081", "nan"] {
            let err = job(&format!("checkpoint_interval_min = {bad}")).unwrap_err();
            assert!(
                err.to_string().contains("checkpoint_interval_min"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_ended_job_says_how_it_ended_not_what_its_last_plan_kept() {
        let mut job: JobRecord = serde_json::from_value(serde_json::json!({
            "id": 1, "name": "j", "state": "running", "node": "e1", "exit_code": null,
            "output_tail": [], "reason": "running on e1 (pid 7)", "command": ["true"],
            "env": {}, "deadline": "2026-11-23T06:00:00Z",
            "submitted_at": "2026-11-23T00:00:00Z", "started_at": null, "finished_at": null,
            "cancel_requested": false, "class": "slo", "work": null, "done_iters": 0.0,
            "attained_s": 0.0, "plan": null
        }))
        .unwrap();
        assert_eq!(job.why(), "running on e1 (pid 7)");
        job.plan = Some(PlanView {
            decided_at: job.submitted_at,
            verdict: Verdict::Guaranteed { since_ms: 0 },
            action: Action::Continue,
            shape: Shape::Edge,
            nodes: vec!["e1".into()],
            expected_start: None,
            expected_finish: None,
            step: None,
            staging_s: 0.0,
            cloud_cost: 0.0,
            reason: "guaranteed; keeps its reservation: nothing left to run".into(),
            segments: Vec::new(),
        });
        assert!(job.why().contains("keeps its reservation"));
        job.state = JobPhase::Succeeded;
        job.reason = Some("exited with code 0".into());
        assert_eq!(job.why(), "exited with code 0");
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let err = JobFile::from_toml(
            "name = \"x\"\ncommand = []\ndeadline = \"2026-11-23T06:00:00Z\"",
            "j.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("`command`"), "{err}");
        let err = JobFile::from_toml(
            "name = \"x\"\ncommand = [\"a\"]\ndeadline = \"tomorrow\"",
            "j.toml",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("j.toml") && err.to_string().contains("tomorrow"),
            "{err}"
        );
        let err = JobFile::from_toml("name = \"x\"\ncommand = [\"a\"]\ndeadline = 3", "j.toml")
            .unwrap_err();
        assert!(
            err.to_string().contains("must be a time, not integer"),
            "{err}"
        );
        let stored = serde_json::to_string(
            &JobFile::from_toml(
                "name = \"x\"\ncommand = [\"a\"]\ndeadline = 2026-11-23T06:00:00Z",
                "j.toml",
            )
            .unwrap(),
        )
        .unwrap();
        let back: JobFile = serde_json::from_str(&stored).unwrap();
        assert_eq!(back.deadline.to_rfc3339(), "2026-11-23T06:00:00+00:00");
        let err = JobFile::from_toml(
            "name = \"x\"\ncommand = [\"a\"]\ndeadline = \"2026-11-23T06:00:00Z\"\nprio = 1",
            "j.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("prio"), "{err}");
    }

    #[test]
    fn a_job_may_not_set_the_checkpoint_dir_or_other_reserved_variables() {
        for table in ["env", "secret_env"] {
            let err = JobFile::from_toml(
                &format!("name = \"x\"\ncommand = [\"a\"]\ndeadline = \"2026-11-23T06:00:00Z\"\n[{table}]\nTIDEMILL_CHECKPOINT_DIR = \"/etc\""),
                "j.toml",
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("TIDEMILL_CHECKPOINT_DIR")
                    && err.contains(table)
                    && err.contains("the edge"),
                "{err}"
            );
        }
    }
}
