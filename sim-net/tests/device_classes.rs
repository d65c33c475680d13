//! Device classes from Sia profiles and lambda multiples, loaded through the
//! topology's `[throughputs]` table: the report names every class's source,
//! and a step across nodes swaps the profile's measured sync for the link model.

mod support;

use support::{args, data, shipped_topology};
use tidemill_sched::cost::{class_compute_s, overlap_s, ring_allreduce_s};
use tidemill_sim::simulate::report::Report;
use tidemill_sim::simulate::{Setup, setup};

/// The shipped topology with A100 and T4 from Sia's profiles and edge boxes of
/// a V100 class built as lambda × A100, on the first 20 jobs of the
/// ElasticFlow-vs-Pollux trace (the six profiled models).
fn sia_world(dir: &std::path::Path) -> Setup {
    let sia = data("gpu-throughput-profiles/sia-placements");
    let shipped = std::fs::read_to_string(shipped_topology()).expect("the shipped topology reads");
    let classes = format!(
        r#"[throughputs]
A100 = {{ sia = "{sia}", cluster = "dgx-ext" }}
T4 = {{ sia = "{sia}", cluster = "aws" }}
[throughputs.V100]
scale = "A100"
[throughputs.V100.lambda]
imagenet = {{ ratio = 0.6392, source = "sia_derived_lambda_vs_A100.csv" }}
bert = {{ ratio = 0.3062, source = "sia_derived_lambda_vs_A100.csv" }}
deepspeech2 = {{ ratio = 0.9923, source = "sia_derived_lambda_vs_A100.csv" }}
cifar10 = {{ ratio = 0.4935, source = "sia_derived_lambda_vs_A100.csv" }}
yolov3 = {{ ratio = 0.4939, source = "sia_derived_lambda_vs_A100.csv" }}
ncf = {{ ratio = 0.05584, source = "sia_derived_lambda_vs_A100.csv" }}
"#
    );
    let text = shipped
        .replace(
            "[throughputs]\nA100 = \"../shared/data/elasticflow/throughputs_A100\"\nT4 = \"../shared/data/elasticflow/throughputs_T4\"\n",
            &classes,
        )
        .replace("class = \"T4\"", "class = \"V100\"");
    assert!(
        text.contains("cluster = \"aws\""),
        "the [throughputs] block moved"
    );
    let topology = dir.join("sia.toml");
    std::fs::write(&topology, text).unwrap();
    let flags = [
        "--topology".to_string(),
        topology.display().to_string(),
        "--jobs".into(),
        data("elasticflow/traces/elasticVpollux_e.csv"),
        "--jobs-format".into(),
        "philly-ef".into(),
        "--utilization".into(),
        data("alibaba-2018-machine-usage/machine_usage.csv.gz"),
        "--format".into(),
        "alibaba-2018".into(),
        "--max-jobs".into(),
        "20".into(),
        "--edge-boxes".into(),
        "4".into(),
    ];
    setup(&args(flags)).expect("the Sia world loads")
}

#[test]
fn the_report_names_every_class_source() {
    let dir = tempfile::tempdir().unwrap();
    let s = sia_world(dir.path());
    let report = Report::new(&s, Vec::new(), 0.0);
    let mut out = Vec::new();
    report.write_table(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let sia = data("gpu-throughput-profiles/sia-placements");
    assert_eq!(
        lines[1],
        format!(
            "class A100: measured, Sia profile {sia} cluster dgx-ext: bert, cifar10, deepspeech2, imagenet, ncf, yolov3"
        )
    );
    assert!(
        lines[2].starts_with("class T4: measured, Sia profile"),
        "{text}"
    );
    assert!(
        lines[3].starts_with(
            "class V100: estimated, lambda × A100 per model: bert 0.3062 (sia_derived_lambda_vs_A100.csv), cifar10 0.4935"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    let v100_bert = &json["device_classes"]["V100"]["bert"];
    assert_eq!(v100_bert["kind"], "lambda");
    assert_eq!(v100_bert["ratio"], 0.3062);
    assert_eq!(json["device_classes"]["T4"]["ncf"]["cluster"], "aws");
}

#[test]
fn a_step_across_nodes_swaps_the_measured_sync_for_the_link_model() {
    let dir = tempfile::tempdir().unwrap();
    let s = sia_world(dir.path());
    let m = &s.world.model;
    let job = &s.world.jobs[0].spec;
    let edge: Vec<u32> = (0..m.nodes().len() as u32)
        .filter(|&q| !m.nodes()[q as usize].is_cloud())
        .take(2)
        .collect();
    // Two single-device V100 boxes: the V100 table at 2 workers gives
    // iterations/s and the measured sync; across the two nodes only
    // 1/iters_per_s − sync is kept, overlapped (γ) with the ring all-reduce
    // over the edge-edge link.
    let t = m
        .tables
        .lookup("V100", &job.model, job.global_batch, 2)
        .unwrap();
    let sync = t.sync_s.expect("a Sia-derived table splits its steps");
    assert!(sync > 0.0, "{t:?}");
    let compute = 1.0 / t.iters_per_s - sync;
    let ring = ring_allreduce_s(2, job.model_bytes as f64, &m.links().edge_edge);
    let (step, _) = m.step(job, &[(edge[0], 1), (edge[1], 1)]).unwrap();
    assert!(
        (step - overlap_s(compute, ring, m.gamma)).abs() < 1e-9,
        "{step} vs compute {compute} s, ring {ring} s"
    );
    // Two workers on one cloud node: the measured step, sync included.
    let cloud = (0..m.nodes().len() as u32)
        .find(|&q| m.nodes()[q as usize].is_cloud() && m.nodes()[q as usize].devices >= 2)
        .unwrap();
    let a100 = m
        .tables
        .lookup("A100", &job.model, job.global_batch, 2)
        .unwrap();
    let (step, link) = m.step(job, &[(cloud, 2)]).unwrap();
    assert!(link.is_none());
    assert!((step - 1.0 / a100.iters_per_s).abs() < 1e-12 * step);
    assert_eq!(class_compute_s(&a100, 1), 1.0 / a100.iters_per_s);
}
