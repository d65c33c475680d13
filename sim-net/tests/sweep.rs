//! `sweep` end to end on a small slice, and what `edge_gain` rests on: a run
//! of each edge-using policy without its edge, and nothing to re-run for a
//! policy that never touches the edge.

mod support;

use support::{data, shipped_topology, sim, topology_args};
use tidemill_sim::simulate::policies::PolicyName;
use tidemill_sim::simulate::setup;
use tidemill_sim::simulate::variants::Variant;

#[test]
fn a_sweep_writes_one_row_per_point_and_policy_with_edge_gain_and_charts() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().display().to_string();
    let run = sim(&[
        "sweep",
        "--topology",
        "configs/topology-edgeflow-eval.toml",
        "--max-jobs",
        "60",
        "--vary",
        "edge.nodes=0,4",
        "--policies",
        "tidemill,edgeflow,edf",
        "--upper-bound",
        "--out",
        &dir,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut csv = csv::Reader::from_path(out.path().join("results.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    // 2 points × (3 policies + cloud-only, the floor of each share of the
    // gap, + the edge-as-cloud bound).
    assert_eq!(rows.len(), 10);
    let num = |r: &csv::StringRecord, c: &str| r[col(c)].parse::<f64>().ok();
    for r in &rows {
        let policy = &r[col("policy")];
        let boxes = num(r, "edge.nodes").unwrap();
        assert_eq!(num(r, "edge_boxes"), Some(boxes));
        if policy == "edge-as-cloud" {
            assert_eq!(&r[col("edge_gain")], "");
            continue;
        }
        let gain = num(r, "edge_gain").unwrap();
        match (policy, boxes as u32) {
            (_, 0) | ("edf" | "cloud-only", _) => {
                // No edge, or a policy that never uses it: nothing to gain, nothing run again.
                assert_eq!(gain, 0.0, "{r:?}");
                assert_eq!(&r[col("dsr_without_edge")], "", "{r:?}");
                assert_eq!(num(r, "harvested_idle_share"), Some(0.0), "{r:?}");
            }
            _ => {
                let without = num(r, "dsr_without_edge").unwrap();
                assert!(
                    (num(r, "dsr").unwrap() - without - gain).abs() < 2e-6,
                    "{r:?}"
                );
            }
        }
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json.as_array().unwrap().len(), 10);
    for f in ["dsr", "edge-gain", "harvested", "cloud-gpu-hours"] {
        let svg = std::fs::read_to_string(out.path().join(format!("{f}-vs-edge.nodes.svg")))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(svg.contains("<svg") && svg.contains("tidemill"), "{f}");
    }
}

#[test]
fn bad_sweep_flags_end_in_one_line_that_names_the_fix() {
    for (flags, expected) in [
        (vec!["--vary", "edge.boxes=1,2"], "unknown key"),
        (vec!["--vary", "edge.nodes=2,x"], "`x` is not a number"),
        (vec!["--json"], "--json does not apply to sweep"),
        (
            vec!["--jobs-out", "/tmp/never.csv"],
            "--jobs-out does not apply to sweep",
        ),
        (
            vec!["--usage-out", "/tmp/never.csv"],
            "--usage-out does not apply to sweep",
        ),
    ] {
        let mut args = vec![
            "sweep",
            "--topology",
            "configs/topology-edgeflow-eval.toml",
            "--out",
            "/nonexistent-never-written",
        ];
        args.extend(flags);
        let run = sim(&args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{args:?}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn a_policy_that_never_uses_the_edge_scores_the_same_without_it() {
    let jobs = data("elasticflow/traces/cluster06.csv");
    let s = setup(&topology_args(
        &shipped_topology(),
        &["--jobs", &jobs, "--max-jobs", "80", "--edge-boxes", "8"],
    ))
    .unwrap();
    for p in [
        PolicyName::Edf,
        PolicyName::Elasticflow,
        PolicyName::CloudOnly,
    ] {
        let full = s.run_one(p, Variant::Full, false, &mut |_| {}).unwrap().0;
        let bare = s.run_one(p, Variant::NoEdge, false, &mut |_| {}).unwrap().0;
        assert_eq!(full.deadlines_met, bare.deadlines_met, "{p:?}");
        assert_eq!(full.cloud_gpu_hours, bare.cloud_gpu_hours, "{p:?}");
    }
    let runs = s.runs().unwrap();
    assert!(runs.contains(&(PolicyName::Tidemill, Variant::NoEdge)));
    assert!(runs.contains(&(PolicyName::Edgeflow, Variant::NoEdge)));
    assert!(!runs.contains(&(PolicyName::Edf, Variant::NoEdge)));
}
