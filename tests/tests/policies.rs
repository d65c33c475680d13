//! End to end on loopback under the baseline policies, chosen by name with
//! `tidemill-cloud serve --policy`: a coordinator and replaying nodes on one
//! accelerated clock, one SLO job with a `[work]` section. Each policy must
//! place the job where that policy puts work, and the job must finish there
//! by its deadline.

mod support;

use support::cluster::{Cluster, assert_met_deadline, job, write_idle_trace};

/// 8 iterations of 330 s (0.7 h planned) by a 4 h deadline: one worker meets it.
const WORK: support::cluster::Job = job("work", 8, 4.0, "slo", "reject");

/// What a run of [`WORK`] left: its `jobs show --json` and the coordinator's
/// log lines about it.
struct Ran {
    job: serde_json::Value,
    log: Vec<String>,
}

/// Starts a cluster of idle `edges` and idle rented `cloud` nodes under
/// `policy`, submits [`WORK`] and returns what it left once it has run to an
/// end.
fn run_work(policy: &str, edges: &[&str], cloud: &[&str]) -> Ran {
    let dir = support::tempdir();
    let names: Vec<&str> = edges.iter().chain(cloud).copied().collect();
    let trace = write_idle_trace(dir.path(), &names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let cluster = Cluster::start(dir.path(), &trace, &nodes, cloud, edges, "", Some(policy));
    let id = cluster.submit(dir.path(), &WORK);
    cluster.wait_until_ended(id);
    Ran {
        log: cluster.job_log(id),
        job: cluster.coord.job(id),
    }
}

/// Asserts that `policy` started the job on `node`, and that it trained all
/// of [`WORK`]'s iterations there, unmoved, by its deadline.
fn assert_trained_on(ran: &Ran, policy: &str, node: &str) {
    let job = &ran.job;
    assert!(
        ran.log
            .iter()
            .any(|l| l.contains(&format!("policy=\"{policy}\""))
                && l.contains(&format!("action=started on {node}"))),
        "{policy} started it on {node}: {:#?}",
        ran.log
    );
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["node"], node, "{job:#}");
    let tail = job["output_tail"].to_string();
    assert!(
        tail.contains(&format!("trained {} iterations on {node}", WORK.iterations)),
        "{tail}"
    );
    assert!(!tail.contains("resumed at"), "it ran once, unmoved: {tail}");
    assert_met_deadline(job);
}

/// EdgeFlow offloads a job to an idle edge box that meets its deadline,
/// though a cloud node is free (EdgeFlow sizes an edge box against one
/// cloud GPU, so it needs a cloud node to use the edge at all).
#[test]
fn edgeflow_runs_a_job_on_an_idle_edge() {
    let ran = run_work("edgeflow", &["e1"], &["c1"]);
    assert_trained_on(&ran, "edgeflow", "e1");
}

/// ElasticFlow is cloud only: the job goes to the rented node though an
/// idle edge is there too.
#[test]
fn elasticflow_runs_a_job_on_the_cloud_node() {
    let ran = run_work("elasticflow", &["e1"], &["c1"]);
    assert_trained_on(&ran, "elasticflow", "c1");
}
