//! A small swarm of simulated edges (`tidemill_sim::swarm`) against a real
//! coordinator: every edge registers and has its reports acknowledged, and a
//! coordinator killed with SIGKILL and restarted loses none of them.

mod support;

use std::sync::atomic::Ordering;

use support::{Coordinator, PATIENCE};
use tidemill_sim::swarm::{self, Args};

const EDGES: usize = 20;

#[test]
fn a_swarm_survives_a_coordinator_crash_without_losing_a_report() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counters = {
        let _in_rt = rt.enter();
        swarm::start(Args {
            coordinator: coord.quic,
            token: coord.token().to_string(),
            server_name: "localhost".into(),
            edges: EDGES,
            sample_interval: 0.2,
            forecast_refresh: 2.0,
            prefix: "sw-".into(),
            stats_every: 1.0,
            duration: None,
            ramp: 0.5,
        })
        .expect("start the swarm")
    };
    cloud.wait_for("edge connected", EDGES, PATIENCE);
    cloud.wait_until("forecasts from the swarm", EDGES, PATIENCE, |l| {
        l.contains("forecast stored")
    });
    cloud.kill9();

    // The edges journal on while the coordinator is down, then resend.
    let cloud = coord.start();
    cloud.wait_for("edge connected", EDGES, PATIENCE);
    let journaled = counters.journaled.load(Ordering::Relaxed);
    let stored = |l: &str| l.contains("report stored");
    let mut seen = cloud.log().iter().filter(|l| stored(l)).count();
    while counters.acked.load(Ordering::Relaxed) < journaled {
        seen += 1;
        cloud.wait_until("another stored report", seen, PATIENCE, stored);
    }
    let nodes = coord.stored_report_seqs();
    assert_eq!(nodes.len(), EDGES, "{nodes:?}");
    for (id, last, seqs) in nodes {
        let expected: Vec<u64> = (1..=last).collect();
        assert!(last >= 3 && seqs == expected, "{id}: {seqs:?}");
    }
    assert!(counters.sessions.load(Ordering::Relaxed) >= 2 * EDGES as u64);
    eprintln!(
        "swarm: {} reports journaled, all acknowledged and stored without a gap across a SIGKILL of the coordinator",
        journaled
    );
}
