//! The optional shared-storage checkpoint backend, live: two edges whose
//! `[checkpoint]` names the same `file://` store (a local path, as an NFS
//! mount would be), each with its own checkpoint dir under its own data dir;
//! a job drained from one resumes on the other from the checkpoint found in
//! the shared store, and no chunk of it went through the coordinator, which
//! still records the legs (size and step) for `jobs show` and the move's
//! price.

mod support;

use std::process::Command;

use support::PATIENCE;
use support::cluster::Net;
use support::trainer;

#[test]
fn a_drained_job_resumes_on_another_edge_from_the_shared_store_not_through_the_coordinator() {
    let dir = support::tempdir();
    let store = dir.path().join("shared-checkpoints");
    std::fs::create_dir(&store).unwrap();
    let url = format!("file://{}", store.display());
    // Each edge keeps its task's checkpoint dir under its own data dir; only
    // the shared store is common.
    let shared = |_: &str, mut cmd: Command| {
        cmd.env_remove("TIDEMILL_TASKS__CHECKPOINT_DIR")
            .env("TIDEMILL_CHECKPOINT__BACKEND", "shared")
            .env("TIDEMILL_CHECKPOINT__URL", &url);
        cmd
    };
    let net = Net {
        coord: support::Coordinator::new(dir.path()),
        edge: &shared,
        probe_interval_secs: 1,
    };
    let (cluster, id, first) = trainer::drained_from_one_of_two(dir.path(), net, 2 << 20, "shared");
    let edge = &cluster.nodes.iter().find(|(n, _)| *n == first).unwrap().1;
    edge.wait_until("the checkpoint put", 1, PATIENCE, |l| {
        l.contains("checkpoint put in the shared store")
    });
    let job_dir = store.join(format!("job-{id}"));
    let complete = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .filter(|d| d.path().join("complete").exists())
        .count();
    assert_eq!(
        complete, 1,
        "the drained task's checkpoint is in the shared store"
    );

    let (job, _) = cluster.wait_until_succeeded(id);
    let other = job["node"].as_str().unwrap();
    assert_ne!(other, first);
    let legs: Vec<(String, String, u64, u64)> = job["checkpoint_transfers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["from"].as_str().unwrap().to_string(),
                t["to"].as_str().unwrap().to_string(),
                t["step"].as_u64().unwrap(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let [(a, b, up, bytes), (c, d, down, _)] = &legs[..] else {
        panic!("one move of two legs: {legs:#?}")
    };
    assert_eq!(
        (a.as_str(), b.as_str(), c.as_str(), d.as_str()),
        (first.as_str(), "shared-store", "shared-store", other),
        "{legs:#?}"
    );
    assert!(
        *bytes > 2 << 20,
        "the coordinator learnt the size: {legs:#?}"
    );
    assert!(0 < *up && up == down, "{legs:#?}");
    let tail = job["output_tail"].to_string();
    assert!(
        tail.contains(&format!("resumed at {up} on {other}")),
        "{tail}"
    );
    let events = cluster.coord.job_events(id);
    let resumed = format!("resumed from the checkpoint of step {up}");
    assert!(events.iter().any(|e| e.contains(&resumed)), "{events:#?}");
    let shown = cluster.coord.cli(&["jobs", "show", &id.to_string()]);
    assert!(
        shown.contains(&format!("{first} → shared-store: step {up}")),
        "{shown}"
    );
    assert_eq!(
        trainer::held_by_coordinator(&cluster.coord.data_dir, id),
        Vec::<std::path::PathBuf>::new(),
        "no checkpoint went through the coordinator"
    );
    // The job finished: its checkpoints left the shared store.
    let other_edge = &cluster.nodes.iter().find(|(n, _)| *n == other).unwrap().1;
    other_edge.wait_until("the finished job's checkpoints deleted", 1, PATIENCE, |l| {
        l.contains("its checkpoints are deleted from the shared store")
    });
    assert!(!job_dir.exists(), "{}", job_dir.display());
}
