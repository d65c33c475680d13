//! An upper bound on the deadline satisfaction ratio that respects each
//! job's own feasibility: a linear-programming relaxation over time-indexed
//! capacity (`--lp-bound`, the `lp-bound` line beside `edge-as-cloud`).
//!
//! # Formulation
//!
//! Time from the first submission (rounded down to a bucket) to the end of
//! the simulation is cut into `K` buckets of [`BUCKET_MS`] (15 minutes), and
//! the buckets into the canonical intervals `v` of a segment tree over them
//! (a leaf is one bucket, a parent the union of its two children). For each
//! device class `c` and interval `v`, `C_{c,v}` is the device-hours class `c`
//! can give inside `v` ([`inputs::capacity`]: every cloud device all the
//! time, an edge device while its box is truly idle, plus the detection delay).
//! For each job `j` ([`inputs::job_rates`]): `W_j` iterations, its window
//! `[s_j, d_j]` (the first round after submission plus the restart, to the
//! deadline; to the end of the simulation for best-effort jobs), `r_{j,c}`
//! iterations per device-second of class `c` and `P_j` iterations per
//! second, upper bounds over every placement within its worker counts, the
//! sync over the fastest link the class could use included.
//!
//! The window, rounded outward to whole buckets, is split into the fewest
//! tree intervals `V_j` (at most `2 log2 K`). Variables: `z_{j,c,v} ≥ 0`, the
//! share of job `j`'s iterations done on class `c` inside `v ∈ V_j`
//! (dimensionless), and `u_{c,v} ≥ 0`, class `c`'s device-hours of `v`'s
//! subtree left over for the intervals above it.
//!
//! A job that must go fast needs more workers, and workers scale sublinearly:
//! `D_{j,c}(ρ)` is the fewest class-`c` devices that make `ρ` iterations per
//! second, the lower convex hull of `(0, 0)` and `(1 / T_lb(c, n), n)` over
//! its worker counts `n` (mixing counts over time reaches the hull, no
//! less). `h_{j,c,v}` device-hours then cover its work in `v`:
//!
//! ```text
//! maximise    Σ_{j,c,v} z_{j,c,v}                            (jobs done, fractional)
//! subject to  Σ_{c,v} z_{j,c,v} ≤ 1                          for each job j
//!             Σ_c z_{j,c,v} × W_j / ρ^max_{j,c} ≤ L_{j,v}    for each j, v ∈ V_j   (seconds)
//!             h_{j,c,v} ≥ L_{j,v}/3600 × D_{j,c}(z_{j,c,v} W_j / L_{j,v})   (each facet a row)
//!             u_{c,v} − u_{c,2v} − u_{c,2v+1} + Σ_j h_{j,c,v} = C_{c,v}^leaf   for each c, v
//! ```
//!
//! `L_{j,v}` is the seconds of `[s_j, d_j]` inside `v`; `C^leaf` is `C_{c,v}`
//! for a leaf and 0 otherwise (the children's `u` terms are absent at a
//! leaf); `ρ^max_{j,c}` is the hull's fastest rate, iterations per second.
//! The second row is the job's time: it runs on one placement at a time, so
//! the seconds its shares need at their classes' fastest rates fit in `v`.
//! Where only the hull's first facet can matter (`W_j / L_{j,v}` no faster
//! than its first corner) `h` is replaced by `z × W_j / (3600 r_{j,c})`, and
//! the time row is left out where every share alone fits in `v` (`W_j /
//! ρ^max_{j,c} ≤ L_{j,v}` for every class): the first row then implies it.
//! The last rows say that work placed in an interval uses device-hours of its
//! own subtree only: for a laminar family this is exactly Hall's condition,
//! so the rows hold if and only if the work fits in the buckets. A job with
//! `P_j × (d_j − s_j) < W_j` cannot finish on any placement and gets no
//! variable. Row two is left out where its right side is at least 1.
//!
//! # Why it is a bound
//!
//! Take any schedule the engine can run. Credit each device of a placement
//! of `n` workers with `1/n` of the iterations the placement made: the `k`
//! class-`c` devices of it make no more than `(k/n) / T_lb(c, n)` per second,
//! and as `D` is convex with `D(0) = 0`, `D((k/n) / T_lb(c, n)) ≤ k`; by
//! Jensen's inequality over the time of `v`, the device-hours the job held in
//! `v` are at least `h`'s lower bound. A job runs on one placement at a
//! time, and a placement holding a class-`c` device steps no faster than
//! `ρ^max_{j,c}` ([`inputs::job_rates`]: a mixed placement waits for its
//! slowest class and syncs over a link no faster than `S_c`); so over `dt`
//! seconds on a placement of `n` workers, `k_c` of class `c`, making `R`
//! iterations per second, the credited seconds are `Σ_c R dt (k_c/n) /
//! ρ^max_{j,c} ≤ Σ_c dt k_c/n = dt`, and the time row holds. It never steps
//! outside its window, and an edge box
//! cannot be held beyond its usable time without interfering with its primary
//! load. So `z` = the schedule's shares is feasible, and a job that met its
//! deadline (or, best-effort, finished) contributes 1. The LP's optimum
//! divided by the jobs in the trace is therefore at least the DSR of any
//! policy that leaves busy boxes when they say so. The count of jobs a
//! schedule can finish is an integer no greater than the fractional optimum;
//! the report gives the LP's value itself. Evictions, start-ups after the
//! first, staging, contention on a site's LAN, minimum worker counts and
//! fragmentation of a bucket among jobs are not charged: each can only lower
//! what a policy reaches.
//!
//! # Size and solver
//!
//! At most `2 log2 K` intervals per job and class, each with `z`, and `h`
//! where the hull's later facets can matter: 68 134 variables and 250 621
//! rows on MEC cluster01 (1 595 jobs), 140 702 and 542 910 on cluster03
//! (3 011 jobs). Clarabel's interior-point method solves them in 5 s and
//! 29 s on a loaded 2-core box; cluster04 (15 802 jobs, 466 153 variables
//! and 2 121 057 rows) in 373 s and 1.5 GB. The bound is the larger of
//! the primal and the dual objective, so a
//! solver tolerance never lowers it.

mod inputs;

use std::time::Instant;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettingsBuilder, DefaultSolver, IPSolver, NonnegativeConeT, SolverStatus, ZeroConeT,
};
use serde::Serialize;
use thiserror::Error;

use super::engine::World;

/// The time bucket of the LP, ms: the forecast's slot, so a window is widened
/// by at most 15 minutes at each end.
pub const BUCKET_MS: i64 = 900_000;

/// The LP bound and what it took.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LpBound {
    /// The bound on the DSR over all jobs: the LP's optimum over the jobs in the trace.
    pub dsr: f64,
    /// The LP's optimum: jobs done, counted fractionally.
    pub jobs_done: f64,
    /// Jobs that could finish on some placement if they had the world to
    /// themselves (the others get no variable).
    pub jobs_possible: usize,
    /// LP variables.
    pub variables: usize,
    /// LP rows.
    pub rows: usize,
    /// Wall time to build and solve the LP, seconds.
    pub elapsed_s: f64,
}

/// Why the LP bound could not be computed.
#[derive(Debug, Error)]
pub enum BoundError {
    /// The solver refused the problem.
    #[error("the LP bound's solver refused the problem: {0}")]
    Setup(String),
    /// The solver stopped without an optimum.
    #[error(
        "the LP bound's solver stopped with status {0}; run without --upper-bound to skip the bound"
    )]
    NotSolved(String),
}

/// Sparse LP rows under construction: triplets and right-hand sides.
#[derive(Default)]
struct Rows {
    row: Vec<usize>,
    col: Vec<usize>,
    val: Vec<f64>,
    rhs: Vec<f64>,
}

impl Rows {
    /// Adds the row `Σ coef × x[var] (=|≤) rhs`.
    fn push(&mut self, terms: impl IntoIterator<Item = (usize, f64)>, rhs: f64) {
        let r = self.rhs.len();
        for (c, v) in terms {
            self.row.push(r);
            self.col.push(c);
            self.val.push(v);
        }
        self.rhs.push(rhs);
    }
}

/// One `z_{j,c,v}`: job, class, tree interval, the facets `(a, b)` of its
/// device-hours `h ≥ a × z + b`, and its coefficient `W_j / (ρ^max_{j,c}
/// L_{j,v})` in the job's time row for `v`.
struct Share {
    job: usize,
    class: usize,
    node: usize,
    facets: Vec<(f64, f64)>,
    time: f64,
}

/// The canonical segment-tree intervals (heap numbering, leaves at
/// `leaves + k`) covering buckets `[lo, hi)`.
fn cover(leaves: usize, lo: usize, hi: usize) -> Vec<usize> {
    let (mut l, mut r) = (lo + leaves, hi + leaves);
    let mut out = Vec::new();
    while l < r {
        if l & 1 == 1 {
            out.push(l);
            l += 1;
        }
        if r & 1 == 1 {
            r -= 1;
            out.push(r);
        }
        l >>= 1;
        r >>= 1;
    }
    out
}

/// The buckets `[lo, hi)` tree interval `v` spans.
fn span(leaves: usize, v: usize) -> (usize, usize) {
    let depth = leaves.trailing_zeros() - v.ilog2();
    let lo = (v << depth) - leaves;
    (lo, lo + (1 << depth))
}

/// Per job of `world`, in trace order: the most iterations per second any
/// placement on the edge's boxes could make (the LP's `ρ^max` over the edge
/// classes, sync included), or `None` where no edge class runs its model.
/// It says whether the edge is fast enough for a job at all.
pub fn edge_peaks(world: &World) -> Vec<Option<f64>> {
    let classes = inputs::classes(world);
    let edge: Vec<bool> = classes
        .iter()
        .map(|c| {
            world
                .model
                .nodes()
                .iter()
                .any(|n| n.class == *c && !n.is_cloud())
        })
        .collect();
    inputs::job_rates(world)
        .iter()
        .map(|r| {
            r.curve
                .iter()
                .zip(&edge)
                .filter(|(_, e)| **e)
                .filter_map(|(c, _)| c.last().map(|p| p.0))
                .reduce(f64::max)
        })
        .collect()
}

/// The LP bound of `world` (see the module doc); `None` for a world with no job.
pub fn lp_bound(world: &World) -> Result<Option<LpBound>, BoundError> {
    let started = Instant::now();
    let Some(first) = world.jobs.iter().map(|j| j.spec.submitted_ms).min() else {
        return Ok(None);
    };
    let origin = first.div_euclid(BUCKET_MS) * BUCKET_MS;
    let buckets = ((world.end_ms - origin).max(1) as u64).div_ceil(BUCKET_MS as u64) as usize;
    let leaves = buckets.next_power_of_two();
    let classes = inputs::classes(world);
    let cap = inputs::capacity(world, &classes, origin, BUCKET_MS, buckets);
    let jobs = inputs::job_rates(world);

    let bucket_of = |t: i64| ((t - origin).max(0) / BUCKET_MS) as usize;
    let mut shares: Vec<Share> = Vec::new();
    let mut possible = 0;
    for (j, r) in jobs.iter().enumerate() {
        let window_s = (r.end_ms - r.start_ms) as f64 / 1000.0;
        if r.work <= 0.0 || window_s <= 0.0 || r.peak * window_s < r.work {
            continue;
        }
        possible += 1;
        let (lo, hi) = (
            bucket_of(r.start_ms),
            (bucket_of(r.end_ms - 1) + 1).min(buckets),
        );
        for v in cover(leaves, lo, hi) {
            let (a, b) = span(leaves, v);
            let (t0, t1) = (origin + a as i64 * BUCKET_MS, origin + b as i64 * BUCKET_MS);
            let inside_s = (r.end_ms.min(t1) - r.start_ms.max(t0)).max(0) as f64 / 1000.0;
            if inside_s <= 0.0 {
                continue;
            }
            let need = r.work / inside_s;
            for (c, curve) in r.curve.iter().enumerate() {
                let Some(&(fastest, _)) = curve.last() else {
                    continue;
                };
                let mut facets = Vec::new();
                let mut prev = (0.0, 0.0);
                for &p in curve {
                    if prev.0 >= need {
                        break;
                    }
                    let slope = (p.1 - prev.1) / (p.0 - prev.0);
                    facets.push((
                        slope * r.work / 3600.0,
                        inside_s / 3600.0 * (prev.1 - slope * prev.0),
                    ));
                    prev = p;
                }
                shares.push(Share {
                    job: j,
                    class: c,
                    node: v,
                    facets,
                    time: r.work / (fastest * inside_s),
                });
            }
        }
    }
    if shares.is_empty() {
        return Ok(Some(LpBound {
            dsr: 0.0,
            jobs_done: 0.0,
            jobs_possible: possible,
            variables: 0,
            rows: 0,
            elapsed_s: started.elapsed().as_secs_f64(),
        }));
    }

    // Variables: the shares z, the device-hours h of the shares with more
    // than one facet, then u_{c,v} for v in 1..2·leaves.
    let mut hours_var = vec![None; shares.len()];
    let mut next = shares.len();
    for (i, s) in shares.iter().enumerate() {
        if s.facets.len() > 1 {
            hours_var[i] = Some(next);
            next += 1;
        }
    }
    let tree = 2 * leaves;
    let u = |c: usize, v: usize| next + c * tree + v;
    let n = next + classes.len() * tree;
    let mut eq = Rows::default();
    // Tree rows come first, class by class, interval 1 first.
    let tree_row = |c: usize, v: usize| c * (tree - 1) + v - 1;
    for (c, class_cap) in cap.iter().enumerate() {
        for v in 1..tree {
            let mut terms = vec![(u(c, v), 1.0)];
            let leaf = v >= leaves;
            if !leaf {
                terms.extend([(u(c, 2 * v), -1.0), (u(c, 2 * v + 1), -1.0)]);
            }
            let rhs = if leaf {
                class_cap.get(v - leaves).copied().unwrap_or(0.0) / 3600.0
            } else {
                0.0
            };
            eq.push(terms, rhs);
        }
    }
    let mut le = Rows::default();
    for (i, s) in shares.iter().enumerate() {
        eq.row.push(tree_row(s.class, s.node));
        match hours_var[i] {
            None => {
                eq.col.push(i);
                eq.val.push(s.facets[0].0);
            }
            Some(h) => {
                eq.col.push(h);
                eq.val.push(1.0);
                for &(a, b) in &s.facets {
                    le.push([(i, a), (h, -1.0)], -b);
                }
            }
        }
    }
    let mut by_job: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, s) in shares.iter().enumerate() {
        by_job[s.job].push(i);
    }
    for vars in by_job.iter().filter(|v| !v.is_empty()) {
        le.push(vars.iter().map(|&i| (i, 1.0)), 1.0);
        // Shares are pushed interval by interval, so one interval's are adjacent.
        for same in vars.chunk_by(|&a, &b| shares[a].node == shares[b].node) {
            if same.iter().any(|&i| shares[i].time > 1.0) {
                le.push(same.iter().map(|&i| (i, shares[i].time)), 1.0);
            }
        }
    }
    for i in 0..n {
        le.push([(i, -1.0)], 0.0);
    }

    let (m_eq, m_le) = (eq.rhs.len(), le.rhs.len());
    let mut rows = eq.row;
    rows.extend(le.row.iter().map(|r| r + m_eq));
    let mut cols = eq.col;
    cols.extend(le.col);
    let mut vals = eq.val;
    vals.extend(le.val);
    let mut b = eq.rhs;
    b.extend(le.rhs);
    let a = CscMatrix::new_from_triplets(m_eq + m_le, n, rows, cols, vals);
    let p = CscMatrix::<f64>::zeros((n, n));
    let mut q = vec![0.0; n];
    q[..shares.len()].fill(-1.0);
    let cones = [ZeroConeT(m_eq), NonnegativeConeT(m_le)];
    let settings = DefaultSettingsBuilder::default()
        .verbose(false)
        .build()
        .map_err(|e| BoundError::Setup(e.to_string()))?;
    let mut solver = DefaultSolver::new(&p, &q, &a, &b, &cones, settings)
        .map_err(|e| BoundError::Setup(e.to_string()))?;
    solver.solve();
    let sol = &solver.solution;
    if !matches!(
        sol.status,
        SolverStatus::Solved | SolverStatus::AlmostSolved
    ) {
        return Err(BoundError::NotSolved(format!("{:?}", sol.status)));
    }
    let done = (-sol.obj_val).max(-sol.obj_val_dual).min(possible as f64);
    Ok(Some(LpBound {
        dsr: done / world.jobs.len() as f64,
        jobs_done: done,
        jobs_possible: possible,
        variables: n,
        rows: m_eq + m_le,
        elapsed_s: started.elapsed().as_secs_f64(),
    }))
}

#[cfg(test)]
mod tests;
