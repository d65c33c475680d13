//! The path a job took through the round, as a typed [`Story`]: which phase
//! decided it and the [`Reason`]s on the way. It becomes the sentence
//! operators read only when the decision is written.

use std::fmt;

use super::reason::Reason;

/// How a job entered the best-effort phase.
pub(super) enum Entry {
    /// A best-effort job.
    BestEffortJob,
    /// An SLO job under each-round admission.
    EachRound,
    /// An SLO job queued for a plan that meets its deadline (queue
    /// admission), promised once that plan finishes within `lead_ms`; `None`
    /// when the lead reaches the horizon, so the promise comes on start.
    Queued {
        /// The policy's promise lead, ms, when shorter than the horizon.
        lead_ms: Option<i64>,
    },
    /// A guaranteed job taking its turn with the queued ones (queue admission).
    Held {
        /// When it was admitted, Unix ms.
        since_ms: i64,
    },
    /// An SLO job that could not be guaranteed and runs best-effort because
    /// its `on_infeasible` (the job's, by default best-effort, or the
    /// policy's override) says so.
    Downgraded(Reason),
}

/// What became of a job in the best-effort phase.
pub(super) enum Outcome {
    /// Turned away: it cannot meet its deadline and asked to be rejected.
    TurnedAway(Reason),
    /// Runs on the plan this reason describes.
    Runs(Reason),
    /// Waits: no plan, for this reason.
    Waits(Reason),
}

/// Which phase decided a job, and why.
pub(super) enum Story {
    /// A guaranteed job keeps its standing reservation.
    Kept(Reason),
    /// A guaranteed job's reservation broke and a new one was found.
    Replanned {
        /// Why the reservation broke.
        broke: Reason,
        /// The new plan.
        plan: Reason,
    },
    /// A guaranteed job's reservation broke and no new one meets the deadline.
    AtRisk {
        /// Why the reservation broke.
        broke: Reason,
        /// Why no new one was found.
        fail: Reason,
    },
    /// A new SLO job admitted with a reservation.
    Admitted(Reason),
    /// A new SLO job rejected at admission.
    Rejected(Reason),
    /// A job without a reservation.
    Leftover {
        /// How it got here.
        entry: Entry,
        /// Why it cannot meet its deadline, if it cannot and runs anyway.
        late: Option<Reason>,
        /// What became of it.
        outcome: Outcome,
    },
}

impl Story {
    /// Every reason in the story, in the order its sentence names them.
    pub(super) fn into_reasons(self) -> Vec<Reason> {
        match self {
            Story::Kept(r) | Story::Admitted(r) | Story::Rejected(r) => vec![r],
            Story::Replanned { broke, plan } => vec![broke, plan],
            Story::AtRisk { broke, fail } => vec![broke, fail],
            Story::Leftover {
                entry,
                late,
                outcome,
            } => {
                let entry = match entry {
                    Entry::Downgraded(r) => Some(r),
                    Entry::BestEffortJob
                    | Entry::EachRound
                    | Entry::Queued { .. }
                    | Entry::Held { .. } => None,
                };
                let outcome = match outcome {
                    Outcome::TurnedAway(r) | Outcome::Runs(r) | Outcome::Waits(r) => r,
                };
                entry.into_iter().chain(late).chain([outcome]).collect()
            }
        }
    }
}

impl fmt::Display for Story {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Story::Kept(r) => write!(f, "guaranteed; keeps its reservation: {r}"),
            Story::Replanned { broke, plan } => {
                write!(f, "guaranteed; re-planned because {broke}; {plan}")
            }
            Story::AtRisk { broke, fail } => write!(
                f,
                "guaranteed but now AT RISK: {broke}, and {fail}; running best-effort until capacity frees"
            ),
            Story::Admitted(r) => write!(f, "admitted as guaranteed: {r}"),
            Story::Rejected(r) => write!(f, "rejected at admission: {r}"),
            Story::Leftover {
                entry,
                late,
                outcome,
            } => {
                match entry {
                    Entry::BestEffortJob => f.write_str("best-effort job")?,
                    Entry::EachRound => {
                        f.write_str("admitted without a reservation (admission = each-round)")?
                    }
                    Entry::Held { .. } => f.write_str("guaranteed")?,
                    Entry::Queued { lead_ms: None } => f.write_str(
                        "queued until a plan meets its deadline on capacity nobody holds (admission = queue)",
                    )?,
                    Entry::Queued {
                        lead_ms: Some(lead),
                    } => write!(
                        f,
                        "queued until a plan on capacity nobody holds meets its deadline and finishes within {:.2} h (admission = queue, promise_lead_h)",
                        *lead as f64 / 3.6e6
                    )?,
                    Entry::Downgraded(r) => write!(
                        f,
                        "cannot be guaranteed ({r}); admitted best-effort because on_infeasible = \"best-effort\" (the default; \"reject\" turns it away)"
                    )?,
                }
                if let Some(h) = late {
                    write!(
                        f,
                        "; {h}, so it runs best-effort because on_infeasible = \"best-effort\""
                    )?;
                }
                match outcome {
                    Outcome::TurnedAway(h) => write!(f, "; turned away: {h}"),
                    Outcome::Runs(r) => write!(f, "; {r}"),
                    Outcome::Waits(r) => write!(f, "; waits: {r}"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downgraded_job_names_each_reason_in_the_order_it_lists_them() {
        let story = Story::Leftover {
            entry: Entry::Downgraded(Reason::NoLeftoverEdge),
            late: Some(Reason::WorkDone),
            outcome: Outcome::Waits(Reason::TableGone),
        };
        assert_eq!(
            story.to_string(),
            "cannot be guaranteed (no free edge capacity within the horizon); admitted best-effort because \
             on_infeasible = \"best-effort\" (the default; \"reject\" turns it away); \
             its work is done, so it runs best-effort because on_infeasible = \"best-effort\"; \
             waits: a throughput table it relied on is gone"
        );
        assert_eq!(
            story.into_reasons(),
            [Reason::NoLeftoverEdge, Reason::WorkDone, Reason::TableGone]
        );
    }

    #[test]
    fn a_broken_reservation_names_why_before_what_followed() {
        let story = Story::AtRisk {
            broke: Reason::PastHorizon,
            fail: Reason::NoLeftoverEdge,
        };
        assert_eq!(
            story.to_string(),
            "guaranteed but now AT RISK: its reservation reaches past the horizon, and no free edge capacity within the horizon; running best-effort until capacity frees"
        );
        assert_eq!(
            story.into_reasons(),
            [Reason::PastHorizon, Reason::NoLeftoverEdge]
        );
    }
}
