//! Edges probe their links to the coordinator and to each other; the
//! coordinator keeps the matrix and `links --json` shows it.

mod support;

use std::process::Command;

use support::{Coordinator, EDGE, PATIENCE, Proc, replaying_edge, write_trace};

#[test]
fn edges_measure_the_link_matrix() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["a", "b", "c"]);
    // A round every second, so that edges which connected early soon ask
    // for the peers that joined after them.
    let config = dir.path().join("edge.toml");
    let defaults = Command::new(EDGE)
        .arg("print-default-config")
        .output()
        .unwrap()
        .stdout;
    let toml = String::from_utf8(defaults)
        .unwrap()
        .replace("interval_secs = 3600", "interval_secs = 1");
    std::fs::write(&config, toml).unwrap();
    let _edges: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|node| {
            let cmd = replaying_edge(&coord, &config, dir.path(), node, &trace, node);
            Proc::spawn(node, cmd)
        })
        .collect();
    cloud.wait_for("edge connected", 3, PATIENCE);
    let pair = |l: &serde_json::Value| {
        (
            l["from"].as_str().unwrap().to_string(),
            l["to"].as_str().unwrap().to_string(),
        )
    };
    let edge_pairs = [("a", "b"), ("a", "c"), ("b", "c")];
    // The pairs fill in as edges that connected early ask again: wait for
    // link reports until every pair is measured.
    let is_links = |l: &str| l.contains("kind=links");
    let mut reports = 0;
    let links: Vec<serde_json::Value> = loop {
        let links: Vec<serde_json::Value> =
            serde_json::from_str(&coord.cli(&["links", "--json"])).unwrap();
        let measured = |a: &str, b: &str| {
            links
                .iter()
                .any(|l| pair(l) == (a.into(), b.into()) || pair(l) == (b.into(), a.into()))
        };
        if edge_pairs.iter().all(|(a, b)| measured(a, b)) {
            break links;
        }
        reports = cloud
            .log()
            .iter()
            .filter(|l| is_links(l))
            .count()
            .max(reports)
            + 1;
        cloud.wait_until("another link report", reports, PATIENCE, is_links);
    };
    for node in ["a", "b", "c"] {
        let up = links
            .iter()
            .find(|l| pair(l) == (node.into(), "cloud".into()))
            .expect("a cloud-edge link");
        assert_eq!(up["class"], "cloud-edge", "{up}");
    }
    // With three edges and up to three peers each, every pair is measured,
    // from one end only: the scheduler reads a link both ways.
    for (a, b) in edge_pairs {
        let both: Vec<_> = links
            .iter()
            .filter(|l| pair(l) == (a.into(), b.into()) || pair(l) == (b.into(), a.into()))
            .collect();
        assert_eq!(both.len(), 1, "{a} - {b} measured once: {links:#?}");
        assert_eq!(both[0]["class"], "edge-edge", "{}", both[0]);
    }
    for l in &links {
        let (rtt, bw, loss) = (
            l["rtt_ms"].as_f64().unwrap(),
            l["bandwidth_bps"].as_f64().unwrap(),
            l["loss"].as_f64().unwrap(),
        );
        assert!(rtt > 0.0 && rtt < 1000.0, "loopback RTT: {l}");
        assert!(bw > 1e5, "loopback throughput: {l}");
        assert!((0.0..=1.0).contains(&loss), "{l}");
    }
    // Every probe's bytes were counted: a peer probe is a handshake, a
    // train and the transfer, both ways.
    let db = rusqlite::Connection::open_with_flags(
        coord.data_dir.join(tidemill_cloud::store::DB_FILE),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let (sent, received): (i64, i64) = db
        .query_row(
            "SELECT MIN(probe_sent), MIN(probe_received) FROM links WHERE to_node != 'cloud'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        sent > 16_384 + 11_000 && received > 1_200,
        "{sent} {received}"
    );
}
