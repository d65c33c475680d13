//! Tasks are confined: they run as a uid of their job's own from
//! `[tasks] uid_range` when the edge is root, with a clean environment, and
//! in their own cgroup where
//! cgroup v2 is writable, so that a child that leaves the task's process group
//! still dies on cancel and on the edge's next start after a `kill -9`.

mod support;

use std::path::{Path, PathBuf};

use support::{Coordinator, PATIENCE, Proc, start_edge, write_trace};

/// Whether process `pid` runs (a zombie does not count).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// Waits until `path` holds a pid, and returns it.
fn pid_in(path: &Path, cloud: &Proc) -> u32 {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pid in {}: {:#?}",
            path.display(),
            cloud.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits until process `pid` is gone.
fn gone(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    while running(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// Waits until `edge` has journaled the start of job `id`'s task (it logs
/// the start once journaled): the task may write its files before that, and
/// an edge killed in between restarts knowing only that it was assigned.
fn journaled_start(edge: &Proc, id: u64) {
    edge.wait_until("the task's start", 1, PATIENCE, |l| {
        l.contains("task started") && l.contains(&format!("job_id={id} "))
    });
}

/// A job whose task starts a child in a session of its own (out of the
/// task's process group), writes the child's pid to `escaped.pid` in its
/// checkpoint dir, and waits.
const ESCAPER: &str = r#"setsid sh -c 'echo $$ > "$TIDEMILL_CHECKPOINT_DIR/escaped.pid"; exec sleep 1000' & sleep 1000"#;

#[test]
fn a_task_runs_as_its_jobs_uid_with_a_clean_environment() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    let _e1 = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);
    let id = coord.submit(
        dir.path(),
        "whoami",
        &[
            "sh",
            "-c",
            "echo uid=$(id -u); env | cut -d= -f1 | sort | tr '\\n' ' '",
        ],
    );
    cloud.wait_for(&format!("job_id={id} state=succeeded"), 1, PATIENCE);
    let tail = coord.job(id)["output_tail"].to_string();
    let root = nix::unistd::Uid::effective().is_root();
    eprintln!("task output: {tail}");
    let uid: u32 = tail
        .split("uid=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the task said its uid: {tail}"));
    if root {
        // The default [tasks] uid_range.
        assert!(
            (60600..=61099).contains(&uid),
            "the task runs as its job's uid: {tail}"
        );
    } else {
        assert_eq!(uid, nix::unistd::Uid::effective().as_raw(), "{tail}");
    }
    for var in [
        "PATH",
        "HOME",
        "TIDEMILL_NODE_ID",
        "TIDEMILL_JOB_ID",
        "TIDEMILL_TASK_ID",
        "TIDEMILL_CHECKPOINT_DIR",
        "TIDEMILL_EDGE",
    ] {
        assert!(tail.contains(var), "{var} is set: {tail}");
    }
    // The edge runs with RUST_LOG set; its task does not inherit it.
    assert!(!tail.contains("RUST_LOG"), "a clean environment: {tail}");
}

/// A coordinator and edge e1 (replaying `trace`) whose tasks get their own
/// cgroups; `None`, said on stderr, where cgroup v2 is not writable.
fn confined_edge(dir: &Path) -> Option<(Coordinator, Proc, Proc, PathBuf)> {
    let coord = Coordinator::new(dir);
    let cloud = coord.start();
    let trace = write_trace(dir, &["e1"]);
    let e1 = start_edge(&coord, dir, "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);
    let cgroups = e1
        .log()
        .iter()
        .any(|l| l.contains("tasks run in their own cgroups"));
    if !cgroups {
        eprintln!(
            "skipped: cgroup v2 is not writable here, so a child that leaves the task's process group outlives it"
        );
        return None;
    }
    Some((coord, cloud, e1, trace))
}

#[test]
fn an_escaped_child_dies_on_cancel_and_after_the_edge_is_killed() {
    let dir = support::tempdir();
    let Some((coord, cloud, mut e1, trace)) = confined_edge(dir.path()) else {
        return;
    };
    let memory = e1.log().iter().any(|l| l.contains("memory_limits=true"));
    if !memory {
        eprintln!("memory limits not checked: this host's cgroup v2 has no memory controller");
    }

    // Cancel: the task and its escaped child die.
    let id = coord.submit(dir.path(), "escaper", &["sh", "-c", ESCAPER]);
    let child = pid_in(
        &support::checkpoint_dir(dir.path(), id).join("escaped.pid"),
        &cloud,
    );
    assert!(running(child));
    coord.cli(&["jobs", "cancel", &id.to_string()]);
    cloud.wait_for(&format!("job_id={id} state=cancelled"), 1, PATIENCE);
    assert!(gone(child), "the escaped child {child} outlived the cancel");

    // kill -9 of the edge: its next start kills what is left.
    let id = coord.submit(dir.path(), "escaper-2", &["sh", "-c", ESCAPER]);
    let child = pid_in(
        &support::checkpoint_dir(dir.path(), id).join("escaped.pid"),
        &cloud,
    );
    journaled_start(&e1, id);
    e1.kill9();
    assert!(running(child), "the child outlives the edge's SIGKILL");
    let mut e1_again = start_edge(&coord, dir.path(), "e1", Some(&trace));
    e1_again.wait_for("stopped without warning while the task ran", 1, PATIENCE);
    assert!(
        gone(child),
        "the escaped child {child} outlived the edge's restart"
    );
    // The yielded job may run again; a stop yields it, cgroup and all.
    e1_again.terminate(PATIENCE);
}

#[test]
fn reap_kills_what_a_killed_edge_left_and_waits_while_it_runs() {
    let dir = support::tempdir();
    let Some((coord, cloud, mut e1, trace)) = confined_edge(dir.path()) else {
        return;
    };
    // kill -9, then `reap` (systemd's ExecStopPost) kills what is left at
    // once; the next start still reports the task as yielded.
    let id = coord.submit(dir.path(), "escaper", &["sh", "-c", ESCAPER]);
    let child = pid_in(
        &support::checkpoint_dir(dir.path(), id).join("escaped.pid"),
        &cloud,
    );
    journaled_start(&e1, id);
    e1.kill9();
    assert!(running(child), "the child outlives the edge's SIGKILL");
    let reap = |expect_ok: bool| {
        let out = std::process::Command::new(support::EDGE)
            .arg("reap")
            .env("TIDEMILL_DATA_DIR", dir.path().join("edge-e1"))
            .env("TIDEMILL_NODE_ID", "e1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), expect_ok, "{text}");
        text
    };
    let said = reap(true);
    assert!(said.contains("killed what was left of 1 task"), "{said}");
    assert!(gone(child), "the escaped child {child} outlived the reap");
    let mut e1_back = start_edge(&coord, dir.path(), "e1", Some(&trace));
    e1_back.wait_for("stopped without warning while the task ran", 1, PATIENCE);
    let said = reap(false);
    assert!(
        said.contains(&format!("pid {}", e1_back.pid())),
        "refused while the daemon runs: {said}"
    );
    e1_back.terminate(PATIENCE);
}
