//! The edge daemon's command line: documented defaults, and clear errors
//! without a panic.

use std::process::Command;

fn edge(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemill-edge"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn prints_the_documented_default_config() {
    let (ok, out, _) = edge(&["print-default-config"]);
    assert!(ok);
    assert_eq!(out, include_str!("../../configs/edge.toml"));
}

#[test]
fn an_edge_without_a_certificate_or_token_says_how_to_join() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (ok, _, err) = edge(&["run", "--data-dir", data.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("holds no node certificate")
            && err.contains("tidemill-cloud token create")
            && !err.contains("panicked"),
        "{err}"
    );
    let (ok, _, err) = edge(&[
        "join",
        "--token",
        "K10abc::not.valid",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("not a join token") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn a_missing_replay_node_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "node,time_s,cpu,mem,gpu\na,0,1,1,\n").unwrap();
    let data = dir.path().join("data");
    let args = ["run", "--data-dir", data.to_str().unwrap()];
    let (ok, _, err) = edge(
        &[
            &args[..],
            &["--replay", trace.to_str().unwrap(), "--replay-node", "b"],
        ]
        .concat(),
    );
    assert!(!ok);
    assert!(
        err.contains("no rows for node \"b\"") && err.contains("include: a"),
        "{err}"
    );
}

#[test]
fn a_join_that_nothing_answers_names_the_address_and_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Well-formed, for a CA that answers nowhere: port 1 on loopback.
    let token = format!("K10{}::abc123.secret456", "0".repeat(64));
    let (ok, _, err) = edge(&[
        "join",
        "--coordinator",
        "127.0.0.1:1",
        "--token",
        &token,
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("no coordinator answered at 127.0.0.1:1 within 10 s")
            && err.contains("UDP port")
            && err.contains("firewall")
            && !err.contains("panicked"),
        "{err}"
    );
}
