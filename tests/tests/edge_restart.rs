//! An edge that dies is marked offline after the grace period and is online
//! again as soon as it reconnects; its job, which has no `[work]`, is
//! requeued, the leftover process is killed, and the job runs again.

mod support;

use support::{Coordinator, PATIENCE, start_edge, write_trace};

/// Whether a process runs (a zombie waiting to be reaped does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[test]
fn a_dead_edge_goes_offline_and_its_task_is_reported_on_return() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[
        ("offline_after_secs = 20", "offline_after_secs = 1"),
        ("round_interval_secs = 2", "round_interval_secs = 0.2"),
        // A killed edge sends no close: the coordinator notices the silence.
        ("keep_alive_secs = 5", "keep_alive_secs = 1"),
        ("idle_timeout_secs = 30", "idle_timeout_secs = 3"),
    ]);
    let trace = write_trace(dir.path(), &["e1"]);
    let mut edge = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);
    let id = coord.submit(dir.path(), "long", &["sh", "-c", "exec sleep 600"]);
    cloud.wait_for(&format!("job_id={id} state=running"), 1, PATIENCE);
    let pid = running_pid(&coord, id);
    assert!(running(pid));

    edge.kill9();
    cloud.wait_for(
        "node offline: disconnected past the grace period",
        1,
        PATIENCE,
    );
    let e1 = coord.nodes().into_iter().find(|n| n["id"] == "e1").unwrap();
    assert_eq!(e1["online"], false, "{e1}");
    // The job, which has no [work], is requeued rather than left running
    // (in the same transaction that took the node offline).
    let job = coord.job(id);
    assert_eq!(job["state"], "queued", "{job}");
    let events = coord.job_events(id);
    assert!(
        events
            .iter()
            .any(|e| e == "e1 went offline; waiting to resume from the checkpoint"),
        "{events:#?}"
    );
    assert!(
        running(pid),
        "the task outlives its edge daemon until the daemon returns"
    );

    let _edge = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 2, PATIENCE);
    let e1 = coord.nodes().into_iter().find(|n| n["id"] == "e1").unwrap();
    assert_eq!(
        e1["online"], true,
        "online again as soon as it reconnects: {e1}"
    );
    // The job runs again; the returning daemon killed the leftover first.
    cloud.wait_for(&format!("job_id={id} state=running"), 2, PATIENCE);
    let again = running_pid(&coord, id);
    assert_ne!(again, pid, "a new process");
    assert!(!running(pid), "the leftover task process {pid} was killed");
    coord.cli(&["jobs", "cancel", &id.to_string()]);
    cloud.wait_for(&format!("job_id={id} state=cancelled"), 1, PATIENCE);
}

/// The pid of job `id`'s running task, which its reason names.
fn running_pid(coord: &support::Coordinator, id: u64) -> u32 {
    let reason = coord.job(id)["reason"].as_str().unwrap().to_string();
    reason
        .split("pid ")
        .nth(1)
        .and_then(|s| s.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("the running job's reason names its pid: {reason}"))
}
