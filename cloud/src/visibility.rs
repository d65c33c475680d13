//! What of a job an API caller may see: a job's output (its tail) is shown
//! only to the token that submitted it and to admin tokens, since a task's
//! output may carry what its secrets unlocked. Others see that output exists,
//! and why it is withheld.

use crate::auth::{Caller, Scope};
use crate::job::JobRecord;

/// Whether `caller` may see the output of a job submitted by API token
/// `owner` (empty: a job with no owning token, which only admins see).
pub fn may_see_output(caller: &Caller, owner: &str) -> bool {
    caller.scope >= Scope::Admin || (!owner.is_empty() && owner == caller.id)
}

/// `job` as `caller` may see it: its output (and its checkpoint's error
/// line) withheld, with the reason in `output_hidden`, unless
/// [`may_see_output`].
pub fn shown_to(mut job: JobRecord, caller: &Caller, owner: &str) -> JobRecord {
    if may_see_output(caller, owner) {
        return job;
    }
    // The checkpoint's error line is a line of the task's output.
    if let Some(ck) = job.checkpoint.as_mut() {
        ck.last_error = None;
    }
    if !job.output_tail.is_empty() {
        let lines = match job.output_tail.len() {
            1 => "1 line".to_string(),
            n => format!("{n} lines"),
        };
        job.output_hidden = Some(format!(
            "{lines} of output withheld: job {} was not submitted with API token {}; only its own token or an admin token may read its output",
            job.id, caller.id
        ));
        job.output_tail.clear();
    }
    job
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(id: &str, scope: Scope) -> Caller {
        Caller {
            id: id.into(),
            scope,
        }
    }

    #[test]
    fn output_goes_to_the_owner_and_admins_only() {
        assert!(may_see_output(&caller("tmaA", Scope::Submit), "tmaA"));
        assert!(may_see_output(&caller("tmaZ", Scope::Admin), "tmaA"));
        assert!(may_see_output(&caller("tmaZ", Scope::Admin), ""));
        assert!(!may_see_output(&caller("tmaB", Scope::Submit), "tmaA"));
        assert!(!may_see_output(&caller("tmaB", Scope::Read), "tmaA"));
        assert!(!may_see_output(&caller("", Scope::Read), ""));
    }
}
