//! Edges fail over (issue 33): an edge whose `coordinator` lists a dead
//! address before the real one moves on at once, without backing off, and
//! connects and reports to the second.

mod support;

use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, checkpoint_root, free_port};

#[test]
fn an_edge_moves_past_a_dead_address_to_the_next_at_once() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let quic = coord.quic.to_string();
    let cloud = coord.start();
    let data = dir.path().join("edge-f1");
    // Joins go to the first address, so this node joins before the list.
    let joined = Command::new(EDGE)
        .args(["join", "--coordinator", &quic, "--node-id", "f1"])
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

    let dead = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(EDGE);
    cmd.args(["run", "--coordinator", &format!("{dead},{quic}")])
        .args(["--node-id", "f1", "--sample-interval", "0.2"])
        .arg("--data-dir")
        .arg(&data)
        .env(
            "TIDEMILL_TASKS__CHECKPOINT_DIR",
            checkpoint_root(dir.path()),
        )
        // The dead address fails within the 2 s handshake timeout; a backoff
        // would wait 60 s or more, past the patience below.
        .env("TIDEMILL_LINK__KEEP_ALIVE_SECS", "1")
        .env("TIDEMILL_LINK__IDLE_TIMEOUT_SECS", "2")
        .env("TIDEMILL_LINK__RECONNECT_MIN_MS", "120000")
        .env("TIDEMILL_LINK__RECONNECT_MAX_SECS", "300")
        .env("RUST_LOG", "info");
    let edge = Proc::spawn("f1", cmd);

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
