//! The live twin (`tidemill-sim twin`) on a small slice of the MEC scenario:
//! a real coordinator, 10 emulated MEC boxes and a cloud node that run their
//! tasks in emulation, and the first 20 jobs of the trace, submitted through
//! the API. The live deadline satisfaction ratio must stay within 0.05 of the
//! simulator's on the same slice and seed, so that the live path cannot drift
//! from the model unnoticed.

mod support;

use std::path::{Path, PathBuf};

use support::{CLOUD, Coordinator};
use tidemill_runtime::clock::{self, Phase};
use tidemill_sim::simulate::policies::PolicyName;
use tidemill_sim::twin::{self, Args, SpeedFrom};

/// The MEC scenario cut to 10 sites of one box and one cloud node, with its
/// data paths made absolute; written under `dir`.
fn small_mec(dir: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let data = repo
        .join("../shared/data")
        .canonicalize()
        .expect("the scenario's data sits beside the repository, in ../shared/data");
    let mut text = std::fs::read_to_string(repo.join("configs/scenarios/mec-sites.toml")).unwrap();
    for (from, to) in [
        ("\nsites = 20\n", "\nsites = 10\n"),
        ("\nnodes = 8\n", "\nnodes = 1\n"),
        ("\nnodes = 2\n", "\nnodes = 1\n"),
        ("\"../shared/data", &format!("\"{}", data.display())),
    ] {
        assert!(text.contains(from), "mec-sites.toml has no {from:?}");
        text = text.replace(from, to);
    }
    let file = dir.join("mec-small.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The suite's twin: the first 20 jobs of `topology` at 3600×, compared
/// with the simulator, its chart written to `svg`.
fn args(topology: PathBuf, svg: PathBuf, work_dir: PathBuf) -> Args {
    Args {
        topology,
        jobs: None,
        max_jobs: Some(20),
        days: None,
        edge_boxes: None,
        speed: 3600.0,
        speed_from: Vec::new(),
        policy: PolicyName::Tidemill,
        cloud_bin: Some(CLOUD.into()),
        seed: 1,
        compare: true,
        // The second live run that edge_gain needs would double the test's
        // time (about 65 s in all on a loaded 2-core box, over its 60 s).
        no_edge_gain: true,
        svg: Some(svg),
        json: false,
        work_dir: Some(work_dir),
    }
}

#[test]
fn an_svg_path_in_a_missing_directory_is_refused_before_the_runs() {
    let dir = support::tempdir();
    let missing = dir.path().join("no-such-dir/twin.svg");
    let err = twin::twin(&args(
        dir.path().join("no-such-scenario.toml"),
        missing.clone(),
        dir.path().join("twin"),
    ))
    .expect_err("a chart that cannot be written is refused")
    .to_string();
    assert!(
        err.starts_with(&format!("--svg {}: ", missing.display())) && err.contains("directory"),
        "{err}"
    );
}

#[test]
fn speed_phases_out_of_order_are_refused_before_the_runs() {
    let dir = support::tempdir();
    let mut a = args(
        dir.path().join("no-such-scenario.toml"),
        dir.path().join("twin.svg"),
        dir.path().join("twin"),
    );
    let phase = |hours, speed| SpeedFrom { hours, speed };
    a.speed_from = vec![phase(5.0, 7200.0), phase(2.0, 7200.0)];
    let err = twin::twin(&a).expect_err("phases out of order").to_string();
    assert!(
        err.starts_with("--speed-from 2:7200: ") && err.contains("in order"),
        "{err}"
    );
    // Apart in hours but not in the clock's milliseconds.
    a.speed_from = vec![phase(1.0, 7200.0), phase(1.0 + 1e-10, 7200.0)];
    let err = twin::twin(&a)
        .expect_err("phases within a millisecond")
        .to_string();
    assert!(
        err.starts_with("--speed-from 1.0000000001:7200: ") && err.contains("in order"),
        "{err}"
    );
    a.speed_from = vec![phase(1.0, 0.0)];
    let err = twin::twin(&a).expect_err("a zero speed").to_string();
    assert!(
        err.starts_with("--speed-from 1:0: ") && err.contains("between 1 and 100000"),
        "{err}"
    );
}

#[test]
fn the_coordinator_keeps_to_its_clock_phases() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    // Real time from an anchor 10 s ago, then 100× from 1 s of clock time
    // after it: by now the coordinator's clock is about 900 s ahead of the
    // wall, where one that ignored the phase would read the wall.
    let anchor = support::cluster::now_ms() - 10_000;
    let phases = [Phase {
        from_ms: anchor + 1_000,
        speed: 100.0,
    }];
    let _cloud = coord.start_with(&[
        (
            "speed = 1.0",
            &format!(
                "speed = 1.0\nphases = [{{ from_ms = {}, speed = 100.0 }}]",
                anchor + 1_000
            ),
        ),
        (
            "# anchor_ms = 1767225600000",
            &format!("anchor_ms = {anchor}"),
        ),
    ]);
    let ours = clock::for_phases(1.0, Some(anchor), &phases);
    let body = br#"{"name":"clock","command":["true"],"deadline":"2099-01-01T00:00:00Z"}"#;
    let auth = format!("Bearer {}", coord.admin_token());
    let before = ours.now_ms();
    let (status, answer) = coord.request("POST", "/v1/jobs", Some(&auth), body);
    let after = ours.now_ms();
    assert_eq!(status, 201, "{answer}");
    let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
        .as_u64()
        .unwrap();
    let (_, job) = coord.request("GET", &format!("/v1/jobs/{id}"), Some(&auth), b"");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    let stamped = chrono::DateTime::parse_from_rfc3339(job["submitted_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    // Submitted between our two readings of the same clock, give or take
    // 1 s of wall (100 s of it) for a loaded box.
    assert!(
        before - 100_000 <= stamped && stamped <= after + 100_000,
        "the coordinator stamped {stamped}, our clock read {before} to {after} (the wall {})",
        support::cluster::now_ms()
    );
}

#[test]
fn a_small_twin_meets_the_deadlines_the_simulator_promises() {
    let dir = support::tempdir();
    let mut a = args(
        small_mec(dir.path()),
        dir.path().join("twin.svg"),
        dir.path().join("twin"),
    );
    // The coordinator and the edges change speed together an hour in
    // (`the_coordinator_keeps_to_its_clock_phases` checks they agree).
    a.speed_from = vec![SpeedFrom {
        hours: 1.0,
        speed: 5400.0,
    }];
    let report = twin::twin(&a).expect("the twin runs");
    let live = &report.live[0];
    let sim = &report.simulated[0];
    eprintln!(
        "twin: live DSR {:.3} ({} of {} SLO jobs met, {} guaranteed, {} missed), simulated {:.3}; coordinator {:.1} CPU-s, {:.0} MiB; {:.1} s wall; differing {:?}",
        live.metrics.deadline_satisfaction_ratio,
        live.metrics.deadlines_met,
        live.metrics.slo_jobs,
        live.metrics.guaranteed_jobs,
        live.metrics.guaranteed_missed,
        sim.deadline_satisfaction_ratio,
        live.coordinator_cpu_s,
        live.coordinator_rss_mib,
        live.wall_s,
        report.differing_jobs,
    );
    assert_eq!(live.metrics.jobs, 20);
    assert_eq!(
        (live.metrics.edge_gain, live.no_edge_wall_s),
        (None, None),
        "edge_gain skipped is not measured, never 0"
    );
    assert!(
        sim.edge_gain.is_some(),
        "the simulator's row has its edge_gain"
    );
    let svg = std::fs::read_to_string(dir.path().join("twin.svg")).expect("--svg writes the chart");
    assert!(
        svg.contains("<svg") && svg.contains("live") && svg.contains("simulated"),
        "the chart has a live and a simulated line"
    );
    assert!(
        (live.metrics.deadline_satisfaction_ratio - sim.deadline_satisfaction_ratio).abs() <= 0.05,
        "live DSR {} against simulated {}; jobs that differ: {:#?}; the coordinator's log: {}",
        live.metrics.deadline_satisfaction_ratio,
        sim.deadline_satisfaction_ratio,
        report.differing_jobs,
        dir.path().join("twin/cloud.log").display(),
    );
}
