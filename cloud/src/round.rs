//! Scheduling rounds: expire silent nodes, ask the policy for a plan on a fresh
//! snapshot, commit it with re-checks, deliver owed commands to connected
//! edges, then prune history when due. Rounds run on a timer and whenever
//! something changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tidemill_sched::{FirstFitLimits, first_fit};

use crate::coordinator::Coordinator;
use crate::dispatch::deliver;
use crate::store::{Fence, NodeRecord, PruneBefore, Store, StoreError};
use crate::world;

/// A round woken early by a change waits at least this many times the last
/// round's own duration after it, so that rounds take at most about a tenth
/// of a core however often edges connect, report or leave.
const WOKEN_GAP_FACTOR: u32 = 9;

/// Runs rounds forever: every `round_interval_secs`, and sooner when
/// something changes, but never more often than [`WOKEN_GAP_FACTOR`] allows.
pub async fn run(coord: Arc<Coordinator>) {
    let interval = Duration::from_secs_f64(coord.cfg.round_interval_secs);
    loop {
        let started = std::time::Instant::now();
        match round(&coord).await {
            Ok(()) => coord.round_done(),
            Err(e) => tracing::error!(error = %e, "scheduling round failed; retrying next round"),
        }
        let took = started.elapsed();
        coord.metrics.round_seconds.observe(took.as_secs_f64());
        tracing::debug!(elapsed_us = took.as_micros() as u64, "round done");
        let gap = (took * WOKEN_GAP_FACTOR).min(interval);
        tokio::select! {
            _ = coord.wake.notified() => coord.clock.sleep(gap).await,
            _ = coord.clock.sleep(interval) => {}
        }
    }
}

/// One round: decide, deliver the commands owed, then prune history if
/// due, so that upkeep never delays a decision's commands.
pub async fn round(coord: &Arc<Coordinator>) -> Result<(), StoreError> {
    crate::owed_listener::OwedListener::ensure(coord);
    let now = coord.clock.now_ms();
    let fence = coord.leadership.fence();
    if let Some(fence) = &fence {
        fenced(coord, fence, |store| decide(coord, store, now))?;
    }
    let delivered = deliver_owed(coord).await;
    if let Some(fence) = &fence {
        fenced(coord, fence, |store| prune_if_due(coord, store, now))?;
    }
    delivered
}

/// Runs `f` on the store with every write fenced by this replica's lease;
/// a refused write means the lease passed on, and this replica follows.
fn fenced(
    coord: &Coordinator,
    fence: &Fence,
    f: impl FnOnce(&mut Store) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let mut store = coord.store.lock().unwrap();
    store.set_fence(Some(fence.clone()));
    let out = f(&mut store);
    store.set_fence(None);
    if let Err(e @ StoreError::Deposed { .. }) = &out {
        coord.leadership.deposed(e.to_string());
    }
    out
}

/// Marks silent nodes offline, takes back unstarted work, and plans: jobs
/// with `[work]` with the chosen policy, the others first-fit.
fn decide(coord: &Coordinator, store: &mut Store, now: i64) -> Result<(), StoreError> {
    let cutoff = now - coord.cfg.offline_after().as_millis() as i64;
    let in_grace = now < coord.started_ms + coord.cfg.restart_grace().as_millis() as i64;
    let spare_before = in_grace.then_some(coord.started_ms);
    for node_id in store.expire(&coord.connected(), cutoff, spare_before, now)? {
        tracing::warn!(node_id = %node_id, "node offline: disconnected past the grace period");
    }
    take_back_unstarted(coord, store, now)?;
    planned_round(coord, store, now)?;
    let snapshot = store.snapshot(now, true)?;
    let policy = FirstFitLimits {
        idle_cpu_threshold_pct: coord.cfg.scheduler.idle_cpu_threshold_pct,
        max_tasks_per_node: coord.cfg.scheduler.max_tasks_per_node,
    };
    let plan = first_fit(&snapshot, &policy);
    store.apply_plan(&plan, &policy, now)?;
    Ok(())
}

/// Sends the connected nodes owed a command what they are owed: each
/// node's commands in order, the nodes side by side, so that a round that
/// moves jobs waits for the slowest edge's round trips, not for the sum of
/// every edge's.
async fn deliver_owed(coord: &Arc<Coordinator>) -> Result<(), StoreError> {
    let owed = coord.store.lock().unwrap().owed_nodes()?;
    let mut deliveries = tokio::task::JoinSet::new();
    for (node_id, conn) in coord.connections() {
        if owed.contains(&node_id) {
            let coord = coord.clone();
            deliveries.spawn(async move { deliver(&coord, &node_id, &conn).await });
        }
    }
    let mut outcome = Ok(());
    while let Some(delivered) = deliveries.join_next().await {
        match delivered {
            Ok(Ok(())) => {}
            Ok(Err(e)) => outcome = Err(e),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {} // cancelled: only when this round itself is dropped
        }
    }
    outcome
}

/// Drops history past its retention, once an hour.
fn prune_if_due(coord: &Coordinator, store: &mut Store, now: i64) -> Result<(), StoreError> {
    if !coord.prune_due(now) {
        return Ok(());
    }
    let hours_ago = |h: u64| now - h as i64 * 3_600_000;
    let gone = store.prune(PruneBefore {
        raw_ms: hours_ago(coord.cfg.raw_hours()),
        history_ms: hours_ago(coord.cfg.retention_hours),
        jobs_ms: hours_ago(coord.cfg.ended_job_retention_days * 24),
    })?;
    tracing::info!(rows = gone, "pruned history past the retention period");
    crate::checkpoints::prune_ended(coord, &store.live_job_ids()?);
    Ok(())
}

/// Observes, for each node whose newest sample came after the last round
/// that planned jobs, the time from that sample to `now` (this round, the
/// first to plan with it), seconds of the coordinator's clock.
fn observe_report_to_decision(coord: &Coordinator, nodes: &[NodeRecord], now: i64) {
    let since = coord.last_planned_ms.swap(now, Ordering::Relaxed);
    for t in nodes.iter().filter_map(|n| n.last_sample_at) {
        let t = t.timestamp_millis();
        if t > since {
            let secs = (now - t).max(0) as f64 / 1000.0;
            coord.metrics.report_to_decision_seconds.observe(secs);
        }
    }
}

/// Plans every job with a `[work]` section with the chosen policy, on one
/// snapshot, and commits the round's decisions.
fn planned_round(coord: &Coordinator, store: &mut Store, now: i64) -> Result<(), StoreError> {
    store.advance_progress(now)?;
    let jobs = store.planned_jobs(now)?;
    if jobs.is_empty() {
        return Ok(());
    }
    let nodes = store.nodes()?;
    observe_report_to_decision(coord, &nodes, now);
    let world = world::snapshot(
        now,
        &coord.cfg.scheduler,
        &coord.throughput,
        &nodes,
        &store.forecasts()?,
        &store.links()?,
        &jobs,
        world::Trusted {
            config: &coord.cfg.trust,
            constraints: store.constraints()?,
            priors: store.priors()?,
        },
    );
    let policy = coord.cfg.scheduler.policy.as_str();
    // A policy that panics must not take the coordinator with it (the store
    // and the policy's own lock stay usable): the round is skipped and the
    // policy starts afresh.
    let mut driver = coord.scheduler.lock().unwrap_or_else(|e| e.into_inner());
    let planned =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.plan(&world, now)));
    let Ok(plan) = planned else {
        tracing::error!(
            policy,
            "the policy panicked planning this round; round skipped, policy restarted"
        );
        *driver = coord.cfg.scheduler.driver();
        return Ok(());
    };
    drop(driver);
    for (job_id, what) in store.apply_round(&plan, &store.addresses()?)? {
        let reason = plan
            .decision(job_id)
            .map_or("", |d| d.explanation.reason.as_str());
        tracing::info!(job_id, policy, action = %what, %reason, "plan");
    }
    Ok(())
}

/// Takes back the assignments acknowledged and not started within
/// `[trust] start_timeout_secs`, counting them against their nodes.
fn take_back_unstarted(coord: &Coordinator, store: &mut Store, now: i64) -> Result<(), StoreError> {
    let t = &coord.cfg.trust;
    let before = now - t.start_timeout_ms(coord.cfg.clock.speed);
    for b in store.take_back_unstarted(before, t.cordon_after_unstarted, now)? {
        coord.metrics.unstarted_assignments.inc();
        tracing::warn!(node_id = %b.node_id, job_id = b.job_id, task_id = b.task_id,
            start_timeout_secs = t.start_timeout_secs,
            "assignment taken back: acknowledged and not started in time; the job is queued again");
        if let Some(reason) = b.cordoned {
            coord.metrics.trust_cordons.inc();
            tracing::warn!(node_id = %b.node_id, %reason, "node cordoned");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last planning round ran at 20 s; n1's newest sample is from 40 s,
    /// n2's from 10 s. The round at 100 s is the first to plan with n1's:
    /// one observation, 60 s. A round at 160 s with no newer sample observes
    /// nothing.
    #[test]
    fn a_sample_counts_once_from_its_time_to_the_first_round_that_plans_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let coord = crate::coordinator::test_coordinator(dir.path());
        let mut nodes = coord.store.lock().unwrap().nodes().unwrap();
        for (n, t_ms) in nodes.iter_mut().zip([40_000, 10_000]) {
            n.last_sample_at = chrono::DateTime::from_timestamp_millis(t_ms);
        }
        coord.last_planned_ms.store(20_000, Ordering::Relaxed);
        let h = &coord.metrics.report_to_decision_seconds;
        observe_report_to_decision(&coord, &nodes, 100_000);
        assert_eq!((h.get_sample_count(), h.get_sample_sum()), (1, 60.0));
        observe_report_to_decision(&coord, &nodes, 160_000);
        assert_eq!(h.get_sample_count(), 1);
    }
}
