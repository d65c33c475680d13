//! Attacks on the edge's host by a job (issue 28), against real processes:
//! a job naming a host path for the edge to chown as root, links planted for
//! the edge to follow, one tenant reading another's checkpoints, a task
//! reaching the host's 127.0.0.1, and a copied or shared data dir. Each is
//! refused, bounded or detected.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, free_port, start_edge, write_trace};

/// A coordinator and edge e1 (replaying a trace that leaves it idle
/// enough to take jobs) under `dir`, the edge connected.
fn cluster(dir: &Path) -> (Coordinator, Proc, Proc) {
    let coord = Coordinator::new(dir);
    let cloud = coord.start();
    let edge = start_e1(&coord, dir);
    cloud.wait_for("edge connected", 1, PATIENCE);
    (coord, cloud, edge)
}

/// Starts edge e1 under `dir`, replaying its trace.
fn start_e1(coord: &Coordinator, dir: &Path) -> Proc {
    let trace = write_trace(dir, &["e1"]);
    start_edge(coord, dir, "e1", Some(&trace))
}

/// POSTs `body` as JSON to the API at `path` with the coordinator's own
/// admin token (so the job's refusal is the coordinator's, not the CLI's);
/// returns the status line and body.
fn post_json(coord: &Coordinator, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let token = std::fs::read_to_string(coord.data_dir.join("admin-token")).unwrap();
    let addr = coord.api.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        token.trim(),
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Submits job file `body` (name, command and deadline given) as `name`;
/// returns the CLI's output, which may be a refusal.
fn try_submit(coord: &Coordinator, dir: &Path, name: &str, body: &str) -> std::process::Output {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!("name = {name:?}\ndeadline = \"2099-01-01T00:00:00Z\"\n{body}"),
    )
    .unwrap();
    coord
        .cli_command(&["jobs", "submit", "--file", &file.to_string_lossy()])
        .output()
        .unwrap()
}

/// Waits until job `id` succeeded, and returns its output tail.
fn succeeded(coord: &Coordinator, cloud: &Proc, id: u64) -> String {
    cloud.wait_until("the job to end", 1, PATIENCE, |l| {
        l.contains(&format!("job_id={id} "))
            && l.contains("state=")
            && ["succeeded", "failed", "cancelled"]
                .iter()
                .any(|s| l.contains(&format!("state={s}")))
    });
    let job = coord.job(id);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    job["output_tail"].to_string()
}

/// A root-owned directory holding a root-owned file, as /etc would.
fn root_owned(dir: &Path) -> (PathBuf, (u32, u32, String)) {
    let victim = dir.join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(victim.join("passwd"), "root:x:0:0\n").unwrap();
    (victim.clone(), state(&victim))
}

/// Owner, mode and file content of the victim dir.
fn state(victim: &Path) -> (u32, u32, String) {
    let m = std::fs::symlink_metadata(victim).unwrap();
    let content = std::fs::read_to_string(victim.join("passwd")).unwrap_or_default();
    (m.uid(), m.mode() & 0o7777, content)
}

/// Whether the tests run as root, which the uid and network confinement
/// need; said on stderr when not.
fn root() -> bool {
    let root = nix::unistd::Uid::effective().is_root();
    if !root {
        eprintln!("skipped: an edge that is not root runs every task as itself (docs/security.md)");
    }
    root
}

#[test]
fn a_job_cannot_name_a_host_path_nor_redirect_the_edge_with_a_link() {
    let dir = support::tempdir();
    let (coord, cloud, mut edge) = cluster(dir.path());
    let (victim, before) = root_owned(dir.path());

    // A job naming a root-owned dir as its checkpoint dir is refused: by the
    // coordinator with a 400, and by the CLI before it is sent.
    for table in ["env", "secret_env"] {
        let job = serde_json::json!({
            "name": "chown-me", "command": ["true"], "deadline": "2099-01-01T00:00:00Z",
            table: { "TIDEMILL_CHECKPOINT_DIR": victim },
        });
        let answer = post_json(&coord, "/v1/jobs", &job.to_string());
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            answer.contains("TIDEMILL_CHECKPOINT_DIR") && answer.contains("the edge"),
            "{answer}"
        );
        let out = try_submit(
            &coord,
            dir.path(),
            "chown-me",
            &format!(
                "command = [\"true\"]\n[{table}]\nTIDEMILL_CHECKPOINT_DIR = {:?}\n",
                victim.display().to_string()
            ),
        );
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted: {said}");
        assert!(said.contains("TIDEMILL_CHECKPOINT_DIR"), "{said}");
    }
    assert_eq!(state(&victim), before, "the root-owned dir is untouched");

    // A task plants links to it in its checkpoint and work dirs, and tries
    // to swap its checkpoint dir for one; its edge restarts, the job
    // resumes, and the edge prepares the same dirs again.
    let plant = format!(
        r#"ck="$TIDEMILL_CHECKPOINT_DIR"
if [ -e "$ck/planted" ]; then echo "resumed in $ck"; exit 0; fi
ln -s {v} "$ck/link"; ln -s {v}/passwd "$ck/file"; ln -s {v} "$PWD/link"
mv "$ck" "$ck.moved" 2>/dev/null && ln -s {v} "$ck" && echo SWAPPED
touch "$ck/planted"; trap 'exit 0' TERM; while :; do sleep 0.1; done"#,
        v = victim.display()
    );
    let id = coord.submit(dir.path(), "planter", &["sh", "-c", &plant]);
    let ck = support::checkpoint_dir(dir.path(), id);
    support::wait_until_path(&ck.join("planted"), &cloud);
    edge.terminate(PATIENCE);
    let _again = start_e1(&coord, dir.path());
    let tail = succeeded(&coord, &cloud, id);
    assert!(tail.contains("resumed in"), "{tail}");
    assert!(
        !tail.contains("SWAPPED"),
        "the task swapped its dir: {tail}"
    );
    assert_eq!(state(&victim), before, "the root-owned dir is untouched");
    assert!(
        std::fs::symlink_metadata(&ck).unwrap().is_dir(),
        "still the edge's dir"
    );
}

#[test]
fn a_job_cannot_read_or_append_to_another_jobs_checkpoint() {
    if !root() {
        return;
    }
    let dir = support::tempdir();
    let (coord, cloud, _edge) = cluster(dir.path());
    let a = coord.submit(
        dir.path(),
        "victim",
        &["sh", "-c", "echo weights-of-A > \"$TIDEMILL_CHECKPOINT_DIR/ck\"; echo \"at $TIDEMILL_CHECKPOINT_DIR/ck\""],
    );
    let tail = succeeded(&coord, &cloud, a);
    let ck = tail
        .split("at ")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("job A said where: {tail}"))
        .to_string();
    let before = std::fs::read_to_string(&ck).unwrap();
    let thief = format!(
        "cat {ck} && echo READ; echo 'import os' >> {ck} && echo WROTE; ls $(dirname {ck}) && echo LISTED; true"
    );
    let b = coord.submit(dir.path(), "thief", &["sh", "-c", &thief]);
    let tail = succeeded(&coord, &cloud, b);
    eprintln!("job B: {tail}");
    for done in ["READ", "WROTE", "LISTED", "weights-of-A"] {
        assert!(!tail.contains(done), "job B got {done}: {tail}");
    }
    assert!(tail.contains("Permission denied"), "{tail}");
    assert_eq!(
        std::fs::read_to_string(&ck).unwrap(),
        before,
        "A's checkpoint is unchanged"
    );
}

#[test]
fn a_single_node_task_cannot_reach_the_hosts_loopback() {
    if !root() {
        return;
    }
    let dir = support::tempdir();
    let (coord, cloud, edge) = cluster(dir.path());
    assert!(
        !edge
            .log()
            .iter()
            .any(|l| l.contains("tasks share the host's network")),
        "this host allows network namespaces to root"
    );
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let api = coord.api.trim_start_matches("http://").replace(':', "/");
    let probe = format!(
        "for p in 127.0.0.1/{port} {api}; do \
           if (exec 3<>/dev/tcp/$p) 2>/dev/null; then echo REACHED $p; else echo refused $p; fi; \
         done"
    );
    let id = coord.submit(dir.path(), "prober", &["bash", "-c", &probe]);
    let tail = succeeded(&coord, &cloud, id);
    eprintln!("task: {tail}");
    assert!(tail.contains("refused 127.0.0.1"), "{tail}");
    assert!(
        !tail.contains("REACHED"),
        "the task reached the host's loopback: {tail}"
    );
    assert!(host.accept().is_err(), "the listener saw no connection");
}

#[test]
fn a_copied_data_dir_kills_nothing_and_a_shared_one_is_refused() {
    let dir = support::tempdir();
    let (coord, cloud, edge) = cluster(dir.path());
    let waiter = r#"echo $$ > "$TIDEMILL_CHECKPOINT_DIR/pid"
while [ ! -e "$TIDEMILL_CHECKPOINT_DIR/go" ]; do sleep 0.1; done; echo finished"#;
    let id = coord.submit(dir.path(), "long", &["sh", "-c", waiter]);
    let ck = support::checkpoint_dir(dir.path(), id);
    support::wait_until_path(&ck.join("pid"), &cloud);
    let pid: i32 = std::fs::read_to_string(ck.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // A second edge on the same data dir is refused, naming the holder.
    let data = dir.path().join("edge-e1");
    let nowhere = format!("127.0.0.1:{}", free_port());
    let second = Command::new(EDGE)
        .args([
            "run",
            "--node-id",
            "e1",
            "--coordinator",
            &nowhere,
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(
        said.contains(&format!("pid {}", edge.pid())) && said.contains(&data.display().to_string()),
        "{said}"
    );

    // A copy started elsewhere recovers its journal's task, whose pid is the
    // real edge's task's, and must leave it alone.
    let copy = dir.path().join("copy");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&data)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(cp.success());
    let mut cmd = Command::new(EDGE);
    cmd.args([
        "run",
        "--node-id",
        "e1",
        "--coordinator",
        &nowhere,
        "--data-dir",
    ])
    .arg(&copy)
    .env(
        "TIDEMILL_TASKS__CHECKPOINT_DIR",
        dir.path().join("copy-checkpoints"),
    )
    .env("RUST_LOG", "info");
    let mut copied = Proc::spawn("copy", cmd);
    copied.wait_for("stopped without warning while the task ran", 1, PATIENCE);
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    copied.terminate(PATIENCE);
    assert!(alive, "the copy killed the real edge's task {pid}");
    std::fs::write(ck.join("go"), "").unwrap();
    let tail = succeeded(&coord, &cloud, id);
    assert!(tail.contains("finished"), "{tail}");
}

#[test]
fn the_join_token_stays_off_the_command_line() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let token = coord.token().to_string();
    let file = dir.path().join("token.txt");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let edge = |node: &str| {
        let mut cmd = Command::new(EDGE);
        cmd.args([
            "run",
            "--node-id",
            node,
            "--coordinator",
            &coord.quic.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.path().join(node))
        .args(["--sample-interval", "0.2"])
        .env("RUST_LOG", "info");
        cmd
    };
    let mut from_file = edge("e1");
    from_file.arg("--token-file").arg(&file);
    let e1 = Proc::spawn("e1", from_file);
    let mut from_env = edge("e2");
    from_env.env("TIDEMILL_TOKEN", &token);
    let e2 = Proc::spawn("e2", from_env);
    cloud.wait_for("edge connected", 2, PATIENCE);
    for e in [&e1, &e2] {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", e.pid())).unwrap();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&token),
            "the token is in the command line"
        );
    }
}
