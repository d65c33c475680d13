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
    // Probe every second so that edges which connected early also probe the
    // peers that joined after them.
    let config = dir.path().join("edge.toml");
    let defaults = Command::new(EDGE)
        .arg("print-default-config")
        .output()
        .unwrap()
        .stdout;
    let toml = String::from_utf8(defaults)
        .unwrap()
        .replace("interval_secs = 600", "interval_secs = 1");
    std::fs::write(&config, toml).unwrap();
    let _edges: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|node| {
            let cmd = replaying_edge(&coord, &config, dir.path(), node, &trace, node);
            Proc::spawn(node, cmd)
        })
        .collect();
    cloud.wait_for("edge connected", 3, PATIENCE);
    // Each edge reports at least two rounds of measurements.
    for node in ["a", "b", "c"] {
        cloud.wait_until(&format!("link reports from {node}"), 2, PATIENCE, |l| {
            l.contains("kind=links") && l.contains(&format!("node_id={node} "))
        });
    }

    let links: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["links", "--json"])).unwrap();
    let pair = |l: &serde_json::Value| {
        (
            l["from"].as_str().unwrap().to_string(),
            l["to"].as_str().unwrap().to_string(),
        )
    };
    for node in ["a", "b", "c"] {
        let up = links
            .iter()
            .find(|l| pair(l) == (node.into(), "cloud".into()))
            .expect("a cloud-edge link");
        assert_eq!(up["class"], "cloud-edge", "{up}");
        // With three edges and up to three peers each, every edge probes both others.
        for other in ["a", "b", "c"].into_iter().filter(|o| *o != node) {
            let l = links
                .iter()
                .find(|l| pair(l) == (node.into(), other.into()));
            let l = l.unwrap_or_else(|| panic!("no {node} -> {other} link in {links:#?}"));
            assert_eq!(l["class"], "edge-edge", "{l}");
        }
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
}
