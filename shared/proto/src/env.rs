//! The task environment variables that tidemill itself sets. A job may not
//! set them: the coordinator refuses such a job at submission and an edge
//! refuses such an assignment, because each names something only the edge
//! may decide (a host path, an identity) or a placement the coordinator made.

/// Variables the edge sets for each task.
pub const EDGE_SET_ENV: [&str; 6] = [
    "TIDEMILL_NODE_ID",
    "TIDEMILL_JOB_ID",
    "TIDEMILL_TASK_ID",
    "TIDEMILL_CHECKPOINT_DIR",
    "TIDEMILL_CHECKPOINT_INTERVAL_S",
    "TIDEMILL_EDGE",
];

/// Variables the coordinator sets for a distributed job's tasks.
pub const COORDINATOR_SET_ENV: [&str; 1] = ["TIDEMILL_WORKERS"];

/// Whether a job's own `env` or `secret_env` may not hold `name`.
pub fn is_reserved_env(name: &str) -> bool {
    EDGE_SET_ENV.contains(&name) || COORDINATOR_SET_ENV.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidemills_own_variables_are_reserved_and_a_jobs_settings_are_not() {
        assert!(is_reserved_env("TIDEMILL_CHECKPOINT_DIR"));
        assert!(is_reserved_env("TIDEMILL_TASK_ID"));
        assert!(is_reserved_env("TIDEMILL_WORKERS"));
        assert!(
            !is_reserved_env("TIDEMILL_ITERATIONS"),
            "a trainer's own setting"
        );
        assert!(
            !is_reserved_env("tidemill_checkpoint_dir"),
            "names are exact"
        );
    }
}
