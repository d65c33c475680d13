//! Jobs as operators describe them (a TOML job file) and as the coordinator
//! reports them.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// A name for people.
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// When the job must be done.
    pub deadline: DateTime<Utc>,
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
        "job file {path} is invalid: {message}\na job needs name, command = [\"prog\", \"arg\"...], deadline = RFC 3339 time, and an optional [env] table"
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
}

/// The job file as written: the deadline may be a TOML datetime or an RFC 3339
/// string.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    name: String,
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    deadline: toml::Value,
}

impl JobSpec {
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
        let file: JobFile = toml::from_str(text).map_err(|e| parse(e.to_string()))?;
        let deadline_text = match &file.deadline {
            toml::Value::String(s) => s.clone(),
            toml::Value::Datetime(d) => d.to_string(),
            other => {
                return Err(parse(format!(
                    "deadline must be a time, not {}",
                    other.type_str()
                )));
            }
        };
        let deadline = DateTime::parse_from_rfc3339(&deadline_text)
            .map_err(|e| {
                parse(format!(
                    "deadline {deadline_text:?} is not an RFC 3339 time with an offset ({e}), for example 2026-11-23T06:00:00Z"
                ))
            })?
            .with_timezone(&Utc);
        let spec = JobSpec {
            name: file.name,
            command: file.command,
            env: file.env,
            deadline,
        };
        spec.validate()?;
        Ok(spec)
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), JobSpecError> {
        let invalid = |field, rule| Err(JobSpecError::Invalid { field, rule });
        if self.name.trim().is_empty() {
            return invalid("name", "must not be empty");
        }
        if self.command.first().is_none_or(|p| p.is_empty()) {
            return invalid(
                "command",
                "must name a program, for example [\"python3\", \"train.py\"]",
            );
        }
        if self
            .env
            .keys()
            .any(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return invalid(
                "env",
                "variable names must be non-empty, without '=' or NUL",
            );
        }
        Ok(())
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
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

impl JobState {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Rejected => "rejected",
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
        !matches!(self, JobState::Queued | JobState::Running)
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
    pub state: JobState,
    /// The node it was placed on, if any.
    pub node: Option<String>,
    /// The exit code, once it exited.
    pub exit_code: Option<i32>,
    /// The last lines of its output.
    pub output_tail: Vec<String>,
    /// Why it is in its state: waiting, failed, cancelled.
    pub reason: Option<String>,
    /// The program and arguments.
    pub command: Vec<String>,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// When it must be done.
    pub deadline: DateTime<Utc>,
    /// When it was submitted.
    pub submitted_at: DateTime<Utc>,
    /// When it started running.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// Whether an operator asked to cancel it.
    pub cancel_requested: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_job_file_with_either_deadline_form() {
        let a = JobSpec::from_toml(
            "name = \"x\"\ncommand = [\"sh\", \"-c\", \"exit 3\"]\ndeadline = 2026-11-23T06:00:00Z\n[env]\nA = \"1\"\n",
            "a.toml",
        )
        .unwrap();
        let b = JobSpec::from_toml(
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
            JobSpec::from_toml(include_str!("../../configs/job.toml"), "configs/job.toml").unwrap();
        assert_eq!(job.command[0], "python3");
        assert_eq!(job.deadline.to_rfc3339(), "2030-01-01T06:00:00+00:00");
        assert_eq!(job.env.len(), 1);
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let err = JobSpec::from_toml(
            "name = \"x\"\ncommand = []\ndeadline = \"2026-11-23T06:00:00Z\"",
            "j.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("`command`"), "{err}");
        let err = JobSpec::from_toml(
            "name = \"x\"\ncommand = [\"a\"]\ndeadline = \"tomorrow\"",
            "j.toml",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("j.toml") && err.to_string().contains("tomorrow"),
            "{err}"
        );
        let err = JobSpec::from_toml(
            "name = \"x\"\ncommand = [\"a\"]\ndeadline = \"2026-11-23T06:00:00Z\"\nprio = 1",
            "j.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("prio"), "{err}");
    }
}
