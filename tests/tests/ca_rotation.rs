//! `tidemill-cloud ca rotate begin` then `finish`: every edge renews onto the
//! new CA and is back after one reconnect at each step; the new CA is then the
//! only one, and new joins work with new tokens.

mod support;

use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, start_edge};

fn status(coord: &Coordinator) -> serde_json::Value {
    serde_json::from_str(&coord.cli(&["ca", "status", "--json"])).unwrap()
}

/// How many times `node` connected, by the coordinator's log.
fn connects(cloud: &Proc, node: &str) -> usize {
    let of = format!("node_id={node} ");
    cloud
        .log()
        .iter()
        .filter(|l| l.contains("edge connected") && l.contains(&of))
        .count()
}

#[test]
fn a_ca_rotation_moves_every_edge_with_one_reconnect_per_step() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let edges: Vec<Proc> = ["e1", "e2"]
        .iter()
        .map(|n| start_edge(&coord, dir.path(), n, None))
        .collect();
    cloud.wait_for("edge connected", 2, PATIENCE);
    let before = status(&coord);
    assert_eq!(before["rotating"], false);
    assert_eq!(
        (
            before["nodes"].as_u64(),
            before["nodes_on_issuing"].as_u64()
        ),
        (Some(2), Some(2))
    );
    let old_ca = before["ca_sha256"].as_str().unwrap().to_string();

    // Begin: a new CA issues; each edge reconnects once and renews onto it.
    let begun: serde_json::Value =
        serde_json::from_str(&coord.cli(&["ca", "rotate", "begin", "--json"])).unwrap();
    assert_eq!(begun["rotating"], true);
    let new_ca = begun["issuing_sha256"].as_str().unwrap().to_string();
    assert_ne!(new_ca, old_ca);
    cloud.wait_for("certificate renewed", 2, PATIENCE);
    // Finish is refused until every node holds a certificate of the new CA.
    let mid = status(&coord);
    assert_eq!(mid["nodes_on_issuing"].as_u64(), Some(2), "{mid}");

    // Finish: the new CA signs the server certificate and is the only one.
    let finished: serde_json::Value =
        serde_json::from_str(&coord.cli(&["ca", "rotate", "finish", "--json"])).unwrap();
    assert_eq!(finished["rotating"], false);
    assert_eq!(finished["ca_sha256"].as_str(), Some(new_ca.as_str()));
    for node in ["e1", "e2"] {
        cloud.wait_until(&format!("{node} back after finish"), 3, PATIENCE, |l| {
            l.contains("edge connected") && l.contains(&format!("node_id={node} "))
        });
        assert_eq!(
            connects(&cloud, node),
            3,
            "{node}: start, begin, finish: one reconnect a step"
        );
    }
    for e in &edges {
        let downs = e
            .log()
            .iter()
            .filter(|l| l.contains("link to coordinator down"))
            .count();
        assert!(downs <= 2, "at most one reconnect per step: {downs}");
    }
    let retired = std::fs::read_dir(&coord.data_dir)
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("ca-retired-")
        })
        .count();
    assert_eq!(retired, 2, "the old CA and its key are kept, untrusted");

    // A new token pins the new CA, and a new edge joins with it.
    let token = coord.cli(&["token", "create", "--uses", "1"]);
    let token = token.lines().last().unwrap().trim();
    assert!(token.starts_with(&format!("K10{new_ca}::")), "{token}");
    let out = Command::new(EDGE)
        .args([
            "join",
            "--coordinator",
            &coord.quic.to_string(),
            "--node-id",
            "e3",
            "--token",
            token,
            "--data-dir",
        ])
        .arg(dir.path().join("e3"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
