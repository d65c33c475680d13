//! Why the scheduler did or could not do something, as typed values: the
//! round carries these, tests match on them, and they become words only
//! when a decision's explanation is written (see [`Reason`]'s `Display`).

use std::fmt;

/// One reason behind a decision: a failure (a reservation that broke, a plan
/// that cannot be made), a tide event on a running job, or the choice a plan
/// made. Each carries the numbers its explanation quotes.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// A guaranteed job came with no standing reservation to keep.
    NoReservation,
    /// A node in the reservation is no longer in the snapshot.
    NodeGone {
        /// The missing node.
        node: String,
    },
    /// The reservation runs past this round's planning horizon.
    PastHorizon,
    /// The tide came in on a node the reservation holds.
    TideBrokeReservation {
        /// The edge node.
        node: String,
        /// Its primary load now, percent.
        load_pct: f64,
        /// Its idle threshold, percent.
        threshold_pct: f64,
    },
    /// A node in the reservation has less free capacity than it holds.
    LostCapacity {
        /// The node.
        node: String,
    },
    /// A throughput table the reservation was planned with is gone.
    TableGone,
    /// Re-walked on today's capacity, the reservation finishes too late.
    ReservationLate,
    /// The tide came in on a node the job runs on now.
    TideIn {
        /// The edge node.
        node: String,
        /// Its primary load now, percent.
        load_pct: f64,
        /// Its idle threshold, percent.
        threshold_pct: f64,
    },
    /// The idle window on a node the job runs on ends now.
    WindowEnds {
        /// The edge node.
        node: String,
        /// The margin the plan left before the window's end, ms: the
        /// policy's grace plus the forecast's doubt ([`crate::Window::usable_until_ms`]).
        margin_ms: i64,
    },
    /// A node the job runs on is still idle, but a job planned before it
    /// this round took it (a deadline job before a best-effort one, or one
    /// with less left to do).
    Displaced {
        /// The edge node.
        node: String,
    },
    /// Nothing is left to plan.
    WorkDone,
    /// New jobs arrived, and every guarantee was planned again, earliest deadline first.
    Reshuffled,
    /// Under queue admission a guaranteed job is planned again every round,
    /// in its turn with the queue, shortest first.
    InTurn,
    /// A running job whose stay still meets its deadline keeps its capacity
    /// before the queue is planned, so a shorter arrival does not move it.
    RunningFirst,
    /// A guaranteed job its reservation leaves idle now runs ahead on free capacity.
    RunsAhead {
        /// Where.
        place: Vec<Share>,
        /// Until when the capacity is free, Unix ms.
        until_ms: i64,
    },
    /// The job's worker bounds admit no worker count.
    BadWorkers {
        /// `min_workers`.
        min: u32,
        /// `max_workers`.
        max: u32,
    },
    /// No device class has a throughput table for the job's model.
    NoTable {
        /// The model.
        model: String,
    },
    /// The deadline is already behind.
    DeadlinePassed {
        /// The deadline, Unix ms.
        deadline_ms: i64,
    },
    /// Even its fastest class and worker count would finish after the deadline.
    TooSlow {
        /// Iterations left.
        remaining: f64,
        /// The deadline, Unix ms.
        deadline_ms: i64,
        /// The fastest rate any class gives it, iterations/s.
        fastest: f64,
    },
    /// No edge plan, cloud tail or cloud plan can guarantee the deadline.
    NoPlanByDeadline {
        /// The deadline, Unix ms.
        deadline_ms: i64,
        /// The most of the remaining work any edge option covers, percent.
        edge_pct: f64,
        /// Iterations left.
        remaining: f64,
        /// Edge options tried.
        options: usize,
    },
    /// No capacity free now lets it meet its deadline without a reservation.
    NoCapacityNow {
        /// The deadline, Unix ms.
        deadline_ms: i64,
    },
    /// No edge capacity is left within the horizon.
    NoLeftoverEdge,
    /// A standing reservation, kept as planned.
    Reserved {
        /// Its stretches, in order.
        stretches: Vec<Stretch>,
    },
    /// An edge placement finishes the job by the deadline at no cloud cost.
    EdgeFinishes {
        /// The placement.
        place: Vec<Share>,
        /// The finish, Unix ms.
        finish_ms: i64,
    },
    /// An edge placement takes leftover capacity without finishing.
    EdgeLeftover {
        /// The placement.
        place: Vec<Share>,
        /// Share of the remaining work it covers within the horizon, percent.
        done_pct: f64,
    },
    /// No edge plan meets the deadline, so the cloud runs it all.
    CloudOnly {
        /// Edge options tried.
        options: usize,
        /// The most of the remaining work any edge option covers, percent.
        edge_pct: f64,
        /// The cloud placement.
        place: Vec<Share>,
        /// Its cost, currency units.
        cost: f64,
    },
    /// Edge capacity first, then a cloud tail that meets the deadline.
    EdgeThenCloud {
        /// The edge placement.
        edge: Vec<Share>,
        /// Share of the remaining work the edge covers, percent.
        edge_pct: f64,
        /// The cloud placement.
        cloud: Vec<Share>,
        /// The cloud tail's cost, currency units.
        cost: f64,
    },
    /// It keeps running where it is and still finishes by its deadline.
    Stays {
        /// Where it runs.
        place: Vec<Share>,
        /// Expected finish within the horizon, Unix ms.
        finish_ms: Option<i64>,
    },
    /// No fixed worker count fits the cloud capacity left, but one cloud
    /// group does the work by the deadline with a worker count that changes
    /// between stretches, each resize paid as checkpoint plus restart.
    Elastic {
        /// Its stretches, in order.
        stretches: Vec<Stretch>,
        /// Changes of placement between stretches.
        resizes: usize,
        /// Its cost, currency units.
        cost: f64,
    },
    /// The edge offers nothing better now; unreserved cloud capacity runs it.
    CloudNow {
        /// The cloud placement.
        place: Vec<Share>,
        /// Its cost, currency units.
        cost: f64,
    },
}

/// Workers on one node, as explanations name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The node.
    pub node: String,
    /// Workers on it.
    pub workers: u32,
    /// Its device class.
    pub class: String,
}

/// One stretch of a reservation: where it runs and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stretch {
    /// The placement.
    pub place: Vec<Share>,
    /// Its end, Unix ms.
    pub until_ms: i64,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoReservation => f.write_str("it had no reservation"),
            Reason::NodeGone { node } => write!(f, "node {node} is gone"),
            Reason::PastHorizon => f.write_str("its reservation reaches past the horizon"),
            Reason::TideBrokeReservation {
                node,
                load_pct,
                threshold_pct,
            } => write!(
                f,
                "the tide came in on {node} (primary load {load_pct:.0}% > {threshold_pct:.0}%)"
            ),
            Reason::LostCapacity { node } => {
                write!(f, "{node} no longer has the reserved capacity")
            }
            Reason::TableGone => f.write_str("a throughput table it relied on is gone"),
            Reason::ReservationLate => {
                f.write_str("its reservation no longer finishes by the deadline")
            }
            Reason::TideIn {
                node,
                load_pct,
                threshold_pct,
            } => write!(
                f,
                "the tide came in on {node} (primary load {load_pct:.0}% > {threshold_pct:.0}% threshold)"
            ),
            Reason::WindowEnds { node, margin_ms } => write!(
                f,
                "the idle window on {node} ends (margin {} s: grace and the forecast's doubt)",
                margin_ms / 1000
            ),
            Reason::Displaced { node } => write!(
                f,
                "{node} is still idle, but a job planned before this one took it (a deadline job, or one with less left to do)"
            ),
            Reason::WorkDone => f.write_str("its work is done"),
            Reason::InTurn => f.write_str(
                "guaranteed jobs take their turn with the queue each round, shortest first",
            ),
            Reason::RunningFirst => f.write_str(
                "running jobs that still meet their deadline where they run keep it before the queue",
            ),
            Reason::Reshuffled => f.write_str(
                "new jobs arrived and every guarantee was planned again, earliest deadline first",
            ),
            Reason::RunsAhead { place, until_ms } => write!(
                f,
                "runs ahead of its reservation on {}, free until {}",
                Place(place),
                Utc(*until_ms)
            ),
            Reason::BadWorkers { min, max } => write!(
                f,
                "min_workers {min} / max_workers {max} leave no valid worker count; set 1 ≤ min ≤ max"
            ),
            Reason::NoTable { model } => write!(
                f,
                "no device class has a throughput table for model {model:?}; add its iterations/s per device class as [scheduler.throughput.{model}] in the coordinator's config (a simulator topology: its throughput tables), or give the job's own rates in [work.iters_per_s]"
            ),
            Reason::DeadlinePassed { deadline_ms } => {
                write!(f, "its deadline {} has passed", Utc(*deadline_ms))
            }
            Reason::TooSlow {
                remaining,
                deadline_ms,
                fastest,
            } => write!(
                f,
                "it cannot finish its {remaining:.0} remaining iterations by its deadline {} even at its fastest ({fastest:.3} iterations/s)",
                Utc(*deadline_ms)
            ),
            Reason::NoPlanByDeadline {
                deadline_ms,
                edge_pct,
                remaining,
                options,
            } => write!(
                f,
                "no plan finishes by the deadline {}: edge alone reaches {edge_pct:.0}% of the {remaining:.0} remaining iterations ({options} edge option(s)), and no cloud group with free capacity is fast enough",
                Utc(*deadline_ms)
            ),
            Reason::NoCapacityNow { deadline_ms } => write!(
                f,
                "no capacity free now on which it can meet its deadline {}",
                Utc(*deadline_ms)
            ),
            Reason::NoLeftoverEdge => f.write_str("no free edge capacity within the horizon"),
            Reason::Reserved { stretches } if stretches.is_empty() => {
                f.write_str("nothing left to run")
            }
            Reason::Reserved { stretches } => Stretches(stretches).fmt(f),
            Reason::Elastic {
                stretches,
                resizes,
                cost,
            } => write!(
                f,
                "no fixed worker count fits the cloud capacity left; elastic: {}, {resizes} resize(s) paid as checkpoint and restart, for {cost:.2}",
                Stretches(stretches)
            ),
            Reason::EdgeFinishes { place, finish_ms } => write!(
                f,
                "{} finishes on idle edge capacity at {} with no cloud cost",
                Place(place),
                Utc(*finish_ms)
            ),
            Reason::EdgeLeftover { place, done_pct } => write!(
                f,
                "{} takes leftover edge capacity, {done_pct:.0}% of the work within the horizon",
                Place(place)
            ),
            Reason::CloudOnly {
                options,
                edge_pct,
                place,
                cost,
            } => write!(
                f,
                "no edge plan meets the deadline within {options} edge option(s) (best reaches {edge_pct:.0}%); cloud {} costs {cost:.2}",
                Place(place)
            ),
            Reason::EdgeThenCloud {
                edge,
                edge_pct,
                cloud,
                cost,
            } => write!(
                f,
                "{} covers {edge_pct:.0}% on idle edge capacity, then cloud {} finishes the rest by the deadline for {cost:.2}",
                Place(edge),
                Place(cloud)
            ),
            Reason::Stays {
                place,
                finish_ms: Some(t),
            } => write!(
                f,
                "keeps running on {} and finishes at {}, so it does not move",
                Place(place),
                Utc(*t)
            ),
            Reason::Stays {
                place,
                finish_ms: None,
            } => write!(f, "keeps running on {} while it stays free", Place(place)),
            Reason::CloudNow { place, cost } => write!(
                f,
                "the edge offers nothing better now; runs on cloud capacity no reservation holds, {} for {cost:.2}",
                Place(place)
            ),
        }
    }
}

/// Stretches in words: `PLACE until TIME`, joined by `, then `.
struct Stretches<'a>(&'a [Stretch]);

impl fmt::Display for Stretches<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", then ")?;
            }
            write!(f, "{} until {}", Place(&s.place), Utc(s.until_ms))?;
        }
        Ok(())
    }
}

/// A placement in words: `node×workers class`, joined by ` + `.
struct Place<'a>(&'a [Share]);

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{}×{} {}", s.node, s.workers, s.class)?;
        }
        Ok(())
    }
}

/// How explanations write a time: UTC to the second, as operators read it.
/// Public so that a front end showing times on its own clock (the demo's
/// trace time) can find and convert them without guessing the format.
pub const EXPLANATION_TIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S UTC";

/// A time for explanations, in [`EXPLANATION_TIME_FORMAT`].
struct Utc(i64);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(t) => write!(f, "{}", t.format(EXPLANATION_TIME_FORMAT)),
            None => write!(f, "{} ms", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-01-01 18:00:00 UTC, Unix ms.
    const EVENING: i64 = 1_704_132_000_000;

    fn share(node: &str, workers: u32, class: &str) -> Share {
        Share {
            node: node.into(),
            workers,
            class: class.into(),
        }
    }

    #[test]
    fn reservations_name_each_stretch_and_its_end_in_utc() {
        let r = Reason::Reserved {
            stretches: vec![
                Stretch {
                    place: vec![share("e1", 2, "T4"), share("e2", 1, "T4")],
                    until_ms: EVENING,
                },
                Stretch {
                    place: vec![share("c1", 4, "A100")],
                    until_ms: EVENING + 90_500,
                },
            ],
        };
        assert_eq!(
            r.to_string(),
            "e1×2 T4 + e2×1 T4 until 2024-01-01 18:00:00 UTC, then c1×4 A100 until 2024-01-01 18:01:30 UTC"
        );
        let none = Reason::Reserved { stretches: vec![] };
        assert_eq!(none.to_string(), "nothing left to run");
    }

    #[test]
    fn numbers_are_rounded_as_operators_read_them() {
        let slow = Reason::TooSlow {
            remaining: 99_999.6,
            deadline_ms: EVENING,
            fastest: 21.3,
        };
        assert_eq!(
            slow.to_string(),
            "it cannot finish its 100000 remaining iterations by its deadline 2024-01-01 18:00:00 UTC even at its fastest (21.300 iterations/s)"
        );
        let tide = Reason::TideBrokeReservation {
            node: "e1".into(),
            load_pct: 85.4,
            threshold_pct: 50.0,
        };
        assert_eq!(
            tide.to_string(),
            "the tide came in on e1 (primary load 85% > 50%)"
        );
        let window = Reason::WindowEnds {
            node: "e1".into(),
            margin_ms: 1_200_000,
        };
        assert_eq!(
            window.to_string(),
            "the idle window on e1 ends (margin 1200 s: grace and the forecast's doubt)"
        );
    }

    #[test]
    fn an_unknown_model_names_the_keys_that_would_plan_it() {
        let r = Reason::NoTable {
            model: "resnet5".into(),
        };
        let text = r.to_string();
        assert!(
            text.contains("[scheduler.throughput.resnet5]") && text.contains("[work.iters_per_s]"),
            "{text}"
        );
    }

    #[test]
    fn a_time_out_of_chrono_range_is_shown_in_ms() {
        let r = Reason::DeadlinePassed {
            deadline_ms: i64::MAX,
        };
        assert_eq!(
            r.to_string(),
            format!("its deadline {} ms has passed", i64::MAX)
        );
    }
}
