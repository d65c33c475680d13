//! Failing over (issue 33). Edges: one whose `coordinator` lists a dead
//! address before the real one moves on at once, without backing off.
//! Replicas: two coordinators on one PostgreSQL, one leading the rounds; a
//! `kill -9` of the leader hands the lease to the other within 10 s, the
//! edges move to it, scheduling goes on, and nothing is lost or assigned
//! twice; a leader paused past its lease (cut off from the database)
//! stops assigning and follows when it resumes.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Coordinator, EDGE, PATIENCE, Proc, checkpoint_root, free_port};

/// Sends `sig` to `proc`.
fn signal(proc: &Proc, sig: Signal) {
    kill(Pid::from_raw(proc.pid() as i32), sig).unwrap();
}

/// Joins `node` through `coord` at `join_at`, then runs it against
/// `addresses` in order (replaying `replay`'s series for `node`, if
/// given), with a short keep-alive so that a dead
/// coordinator is noticed within 2 s, and a backoff longer than any test,
/// so that only a move to the next address can reconnect it in time.
fn edge_on(
    coord: &Coordinator,
    dir: &Path,
    node: &str,
    join_at: &str,
    addresses: &[String],
    replay: Option<&Path>,
) -> Proc {
    let data = dir.join(format!("edge-{node}"));
    let joined = Command::new(EDGE)
        .args(["join", "--coordinator", join_at, "--node-id", node])
        .args(["--token", coord.token()])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .expect("run tidemill-edge join");
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    let mut cmd = Command::new(EDGE);
    cmd.args(["run", "--coordinator", &addresses.join(",")])
        .args(["--node-id", node, "--sample-interval", "0.2"])
        .arg("--data-dir")
        .arg(&data)
        .env("TIDEMILL_TASKS__CHECKPOINT_DIR", checkpoint_root(dir))
        .env("TIDEMILL_LINK__KEEP_ALIVE_SECS", "1")
        .env("TIDEMILL_LINK__IDLE_TIMEOUT_SECS", "2")
        .env("TIDEMILL_LINK__RECONNECT_MIN_MS", "120000")
        .env("TIDEMILL_LINK__RECONNECT_MAX_SECS", "300")
        .env("RUST_LOG", "info");
    if let Some(trace) = replay {
        cmd.arg("--replay")
            .arg(trace)
            .args(["--replay-node", node, "--speed", "1"]);
    }
    Proc::spawn(node, cmd)
}

#[test]
fn an_edge_moves_past_a_dead_address_to_the_next_at_once() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let quic = coord.quic.to_string();
    let cloud = coord.start();
    // The dead address fails within the 2 s handshake timeout; a backoff
    // would wait 120 s or more, past the patience below.
    let dead = format!("127.0.0.1:{}", free_port());
    let edge = edge_on(
        &coord,
        dir.path(),
        "f1",
        &quic,
        &[dead.clone(), quic.clone()],
        None,
    );

    edge.wait_until("a move past the dead address", 1, PATIENCE, |l| {
        l.contains("trying the next address")
            && l.contains(&format!("coordinator={dead}"))
            && l.contains(&format!("next={quic}"))
            && l.contains("retry_in_ms=0")
    });
    cloud.wait_for("edge connected", 1, PATIENCE);
    cloud.wait_until("a report from f1", 1, PATIENCE, |l| {
        l.contains("report stored") && l.contains("f1")
    });
    let f1 = coord.node("f1");
    assert_eq!(f1["online"], true, "{f1}");
}

/// What a replica logs when it takes the lease, and when another holds it.
const LEADING: &str = "leading: this replica runs the scheduling rounds";
const FOLLOWING: &str = "following: another replica runs the scheduling rounds";

/// Starts replica `a` and waits until it leads.
fn start_leading(a: &Coordinator) -> Proc {
    let cloud = a.start();
    cloud.wait_for(LEADING, 1, PATIENCE);
    cloud
}

/// The files that make a replica the same coordinator to its edges and its
/// operators: the CA, the server identity, the stateless-reset key, the
/// secrets key and the admin token (docs/operations.md, "Running replicas
/// on PostgreSQL").
const SHARED_FILES: &[&str] = &[
    "ca.pem",
    "ca-key.pem",
    "server.pem",
    "server-key.pem",
    "quic-reset-key",
    "secrets.key",
    "admin-token",
];

/// Adds replica `b` beside `a`, as an operator does: `a`'s shared files
/// into `b`'s data dir, then `serve`.
fn start_beside(a: &Coordinator, b: &Coordinator) -> Proc {
    std::fs::create_dir_all(&b.data_dir).unwrap();
    for f in SHARED_FILES {
        std::fs::copy(a.data_dir.join(f), b.data_dir.join(f)).unwrap();
    }
    b.start()
}

/// A replica of the coordinator on the database at `url`, data under `dir`.
fn replica(dir: &Path, url: &str) -> Coordinator {
    Coordinator::new(dir).on_postgres(url)
}

/// Edges `nodes` on idle replays, joined through `a` and listing `a`'s and
/// then `b`'s address; waits until `cloud_a` has them all.
fn edges_on_both(
    dir: &Path,
    a: &Coordinator,
    cloud_a: &Proc,
    b: &Coordinator,
    nodes: &[&str],
) -> Vec<Proc> {
    let addresses = [a.quic.to_string(), b.quic.to_string()];
    let trace = support::cluster::write_idle_trace(dir, nodes);
    let edges = nodes
        .iter()
        .map(|n| edge_on(a, dir, n, &addresses[0], &addresses, Some(&trace)))
        .collect();
    cloud_a.wait_for("edge connected", nodes.len(), PATIENCE);
    edges
}

/// Asserts on the task table that each of `jobs` jobs ran as exactly one
/// task: no assignment was made twice.
fn one_task_per_job(url: &str, jobs: usize) {
    let tasks = support::psql(
        url,
        "SELECT job_id, COUNT(*) FROM tasks GROUP BY job_id ORDER BY job_id",
    );
    assert_eq!(tasks.len(), jobs, "{tasks:?}");
    assert!(tasks.iter().all(|t| t.ends_with("|1")), "{tasks:?}");
}

/// `/readyz` once it answers 200 (a replica is ready after its first
/// round), polled for at most [`PATIENCE`].
fn readyz(coord: &Coordinator) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = coord.http_get("/readyz");
        if answer.starts_with("HTTP/1.1 200") {
            return answer;
        }
        assert!(Instant::now() < deadline, "never ready: {answer}");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
fn the_other_replica_leads_and_the_edges_follow_when_the_leader_is_killed() {
    let Some(url) = support::pg_cluster::database() else {
        return;
    };
    let dir = support::tempdir();
    let a = replica(&dir.path().join("a"), &url);
    let mut cloud_a = start_leading(&a);
    let b = replica(&dir.path().join("b"), &url);
    let cloud_b = start_beside(&a, &b);
    cloud_b.wait_for(FOLLOWING, 1, PATIENCE);
    let ready = readyz(&b);
    assert!(ready.contains("follows"), "{ready}");

    let _edges = edges_on_both(dir.path(), &a, &cloud_a, &b, &["r1", "r2", "r3"]);
    let long: Vec<u64> = (0..3)
        .map(|i| a.submit(dir.path(), &format!("long{i}"), &["sleep", "6"]))
        .collect();
    let queued = a.submit(dir.path(), "queued", &["true"]);
    cloud_a.wait_until("a job running", 1, PATIENCE, |l| {
        l.contains("state=running")
    });

    let killed = Instant::now();
    cloud_a.kill9();
    cloud_b.wait_for(LEADING, 1, PATIENCE);
    let led = killed.elapsed();
    eprintln!(
        "replica b led {:.1} s after the leader was killed",
        led.as_secs_f64()
    );
    assert!(led < Duration::from_secs(10), "took {led:?}");
    cloud_b.wait_for("edge connected", 3, Duration::from_secs(35));
    let moved = killed.elapsed();
    eprintln!(
        "every edge on replica b {:.1} s after the kill",
        moved.as_secs_f64()
    );
    let ready = readyz(&b);
    assert!(ready.contains("leads"), "{ready}");

    // Replica a comes back and follows. Then b, the leader, is cut off from
    // the database (paused past its lease): a leads, and b, resumed, stops
    // assigning and follows.
    let cloud_a = a.start();
    cloud_a.wait_for(FOLLOWING, 1, PATIENCE);
    let paused = Instant::now();
    signal(&cloud_b, Signal::SIGSTOP);
    cloud_a.wait_for(LEADING, 1, PATIENCE);
    let led = paused.elapsed();
    eprintln!(
        "replica a led {:.1} s after the leader was paused",
        led.as_secs_f64()
    );
    assert!(led < Duration::from_secs(10), "took {led:?}");
    signal(&cloud_b, Signal::SIGCONT);
    cloud_b.wait_until("the resumed replica to follow", 1, PATIENCE, |l| {
        l.contains("following: another replica") && l.contains("epoch=3")
    });
    cloud_a.wait_for("edge connected", 3, Duration::from_secs(35));

    // Scheduling goes on: what was running and queued ends, and a new job runs.
    let after = a.submit(dir.path(), "after", &["true"]);
    for id in long.iter().chain([&queued, &after]) {
        a.wait_until_succeeded(*id);
    }
    // No job was assigned twice: each ran as exactly one task.
    one_task_per_job(&url, 5);
    // No acknowledged report is lost: each node's ledger runs 1, 2, 3, …
    for node in ["r1", "r2", "r3"] {
        let seqs: Vec<u64> = support::psql(
            &url,
            &format!("SELECT seq FROM reports WHERE node_id = '{node}' ORDER BY seq"),
        )
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert!(!seqs.is_empty());
        assert!(
            seqs.iter().enumerate().all(|(i, s)| *s == i as u64 + 1),
            "{node}: {seqs:?}"
        );
    }
}

/// A command for an edge held by a follower reaches it through the
/// database: the leader's assignment raises a notification that wakes the
/// follower, whose own round timer (10 minutes here) would be far too late.
#[test]
fn a_follower_delivers_the_leaders_assignment_to_its_edge_when_notified() {
    let Some(url) = support::pg_cluster::database() else {
        return;
    };
    let dir = support::tempdir();
    let a = replica(&dir.path().join("a"), &url);
    let cloud_a = start_leading(&a);
    let b = replica(&dir.path().join("b"), &url).with_env("TIDEMILL_ROUND_INTERVAL_SECS", "600");
    let cloud_b = start_beside(&a, &b);
    cloud_b.wait_for("listening for commands owed", 1, PATIENCE);
    let trace = support::cluster::write_idle_trace(dir.path(), &["n1"]);
    let only_b = [b.quic.to_string()];
    let _edge = edge_on(
        &a,
        dir.path(),
        "n1",
        &a.quic.to_string(),
        &only_b,
        Some(&trace),
    );
    cloud_b.wait_until("a report from n1", 1, PATIENCE, |l| {
        l.contains("report stored") && l.contains("n1")
    });
    let id = a.submit(dir.path(), "via-b", &["true"]);
    cloud_b.wait_until("the assignment delivered by b", 1, PATIENCE, |l| {
        l.contains("command delivered") && l.contains("node_id=n1")
    });
    a.wait_until_succeeded(id);
    assert!(
        !cloud_a
            .log()
            .iter()
            .any(|l| l.contains("command delivered")),
        "the leader holds no session of n1"
    );
}

/// Leadership churn: 20 leader changes (step-downs, a lease of 2 s so that
/// they come quickly) with jobs submitted and running throughout. Every job
/// still succeeds, its history says it was placed once, and none ran as
/// two tasks.
#[test]
fn twenty_leader_changes_lose_no_job_and_assign_none_twice() {
    let Some(url) = support::pg_cluster::database() else {
        return;
    };
    let dir = support::tempdir();
    let a = replica(&dir.path().join("a"), &url).with_env("TIDEMILL_STORE__LEASE_SECS", "2");
    let cloud_a = start_leading(&a);
    let b = replica(&dir.path().join("b"), &url).with_env("TIDEMILL_STORE__LEASE_SECS", "2");
    let cloud_b = start_beside(&a, &b);
    let _edges = edges_on_both(dir.path(), &a, &cloud_a, &b, &["c1", "c2", "c3"]);

    let admin = format!("Bearer {}", a.admin_token());
    let started = Instant::now();
    let mut jobs = Vec::new();
    let mut led = [1, 0];
    let replicas = [(&a, &cloud_a), (&b, &cloud_b)];
    for change in 0..20 {
        jobs.push(a.submit(dir.path(), &format!("c{change}"), &["sleep", "1"]));
        let (leader, next) = (change % 2, (change + 1) % 2);
        let (status, body) =
            replicas[leader]
                .0
                .request("POST", "/v1/leadership/step-down", Some(&admin), b"");
        assert_eq!(status, 200, "change {change}: {body}");
        led[next] += 1;
        replicas[next].1.wait_for(LEADING, led[next], PATIENCE);
    }
    let took = started.elapsed();
    eprintln!("20 leader changes in {:.1} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(300), "took {took:?}");
    let (status, body) = b.request("POST", "/v1/leadership/step-down", Some(&admin), b"");
    assert_eq!(status, 409, "b no longer leads: {body}");

    for id in &jobs {
        a.wait_until_succeeded(*id);
        let events = a.job_events(*id);
        let placed = events.iter().filter(|e| e.contains("placed on")).count();
        assert_eq!(placed, 1, "job {id}: {events:?}");
    }
    one_task_per_job(&url, jobs.len());
}
