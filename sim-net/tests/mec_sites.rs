//! The MEC scenario (configs/scenarios/mec-sites.toml) end to end: its sites,
//! link tiers, job generator and site tides reach the simulated world, and
//! tidemill and EdgeFlow run on a slice of it.

mod support;

use support::{args, data, repo};
use tidemill_sched::JobClass;
use tidemill_sim::simulate::policies::PolicyName;
use tidemill_sim::simulate::variants::Variant;
use tidemill_sim::simulate::{Setup, setup};

/// The scenario with absolute data paths (tests run in sim-net/); its T4
/// class is λ × the A100 tables given here.
fn mec(extra: &[&str]) -> Setup {
    let mut flags = vec![
        "--topology".to_string(),
        repo()
            .join("configs/scenarios/mec-sites.toml")
            .display()
            .to_string(),
        "--jobs".into(),
        data("elasticflow/traces/cluster01.csv"),
        "--throughputs".into(),
        format!("A100={}", data("elasticflow/throughputs_A100")),
        "--utilization".into(),
        data("c2tm-fog-cellular-traffic/c2tm_fog_hourly.csv.gz"),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    setup(&args(flags)).expect("the MEC scenario loads")
}

#[test]
fn sites_and_link_tiers_reach_the_world() {
    let s = mec(&["--max-jobs", "10"]);
    let boxes: Vec<_> = s
        .world
        .model
        .nodes()
        .iter()
        .filter(|n| !n.is_cloud())
        .collect();
    assert_eq!(boxes.len(), 160);
    let mut sites: Vec<&str> = boxes.iter().filter_map(|n| n.site.as_deref()).collect();
    assert_eq!(sites.len(), 160);
    sites.dedup();
    assert_eq!(sites.len(), 20);
    assert_eq!((sites[0], sites[19]), ("mec-00", "mec-19"));
    // One same-site entry per pair of boxes of a site: 20 × C(8, 2).
    let links = &s.world.model.links();
    assert_eq!(links.measured.len(), 20 * 28);
    assert!(
        links
            .measured
            .iter()
            .all(|l| l.link.bandwidth_bps == 1.25e9)
    );
    assert_eq!(links.edge_edge.bandwidth_bps, 1.25e8);
}

#[test]
fn the_generator_replaces_the_trace_deadlines() {
    let s = mec(&[]);
    let model = &s.world.model;
    let jobs = &s.world.jobs;
    let best_effort = jobs
        .iter()
        .filter(|j| j.spec.class == JobClass::BestEffort)
        .count() as f64
        / jobs.len() as f64;
    // 1595 draws of share 0.2: standard deviation 0.01.
    assert!((0.16..=0.24).contains(&best_effort), "{best_effort}");
    for j in jobs.iter().filter(|j| j.spec.class == JobClass::Slo) {
        let t_req = j.spec.iterations
            / model
                .iters_per_s("A100", &j.spec, j.requested_gpus)
                .expect("A100 has every ITP model");
        let lambda = (j.spec.deadline_ms - j.spec.submitted_ms) as f64 / 1000.0 / t_req;
        assert!(
            (1.999..=12.001).contains(&lambda),
            "job {}: λ {lambda}",
            j.name
        );
    }
}

#[test]
fn tidemill_and_edgeflow_harvest_the_site_tides() {
    let s = mec(&["--max-jobs", "60"]);
    for p in [PolicyName::Tidemill, PolicyName::Edgeflow] {
        let (m, _) = s
            .run_one(p, Variant::Full, false, &mut |_| {})
            .expect("the policy runs");
        assert!(m.edge_gpu_hours_harvested > 0.0, "{p:?}: {m:?}");
        assert!(m.deadline_satisfaction_ratio > 0.0, "{p:?}: {m:?}");
    }
}
