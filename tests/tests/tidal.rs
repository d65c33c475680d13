//! End to end on loopback under the tidal scheduler: a coordinator, four edges
//! replaying tidal traces out of phase and one cloud node, all on one
//! accelerated clock; ten jobs with mixed deadlines. Every guaranteed job must
//! finish by its deadline, the infeasible ones must be turned away or demoted
//! with a reason, and every plan must be explained.

mod support;

use std::process::Command;

use support::cluster::{
    Cluster, Job, TRAINER, assert_met_deadline, job, ran_to_an_end, resumed_at, write_ddp_job,
    write_ddp_table, write_idle_trace,
};
use support::write_trace;

const EDGES: [&str; 4] = ["e1", "e2", "e3", "e4"];
const CLOUD_NODE: &str = "c1";

const JOBS: [Job; 10] = [
    job("night-1", 8, 3.0, "slo", "reject"),
    job("night-2", 8, 4.0, "slo", "reject"),
    job("night-3", 10, 5.0, "slo", "reject"),
    job("night-4", 6, 6.0, "slo", "reject"),
    job("night-5", 8, 8.0, "slo", "reject"),
    job("night-6", 6, 10.0, "slo", "reject"),
    // 2 h of tide are 6 wall seconds for 1.5 s of steps: room for the wall
    // seconds a loaded 2-core box takes to plan, dispatch and start it,
    // which the accelerated clock makes tens of minutes (1.2 h, the earlier
    // deadline, left 2.1 s and was missed by 84 s of tide beside two busy
    // loops).
    job("urgent", 6, 2.0, "slo", "reject"),
    job("impossible", 20, 1.0, "slo", "reject"),
    job("hopeful", 16, 1.0, "slo", "best-effort"),
    job("spare", 4, 12.0, "best-effort", "best-effort"),
];

#[test]
fn guaranteed_jobs_meet_their_deadlines_on_tidal_edges() {
    let dir = support::tempdir();
    // Four edges whose tide runs 3 h apart; the cloud node replays too, so that
    // its clock is the shared accelerated one (its load does not matter).
    let trace = write_trace(dir.path(), &EDGES);
    let nodes: Vec<(&str, &str)> = EDGES
        .iter()
        .map(|e| (*e, *e))
        .chain([(CLOUD_NODE, EDGES[0])])
        .collect();
    let cluster = Cluster::start(dir.path(), &trace, &nodes, &[CLOUD_NODE], &EDGES, "", None);
    let (coord, cloud) = (&cluster.coord, &cluster.cloud);
    let ids: Vec<u64> = JOBS.iter().map(|j| cluster.submit(dir.path(), j)).collect();

    // Every job ends: succeeded, or rejected at admission. The longest
    // deadline is 12 h of tide, 36 wall seconds after submission.
    let ended = |l: &str| ran_to_an_end(l) || l.contains("action=rejected");
    cloud.wait_until(
        "every job to end",
        JOBS.len(),
        std::time::Duration::from_secs(90),
        ended,
    );

    let mut guaranteed = 0;
    for (j, id) in JOBS.iter().zip(&ids) {
        let job = coord.job(*id);
        let plan = &job["plan"];
        eprintln!(
            "{:<10} {:<9} {:<11} nodes {:<8} submitted {} finished {} deadline {} | {}",
            j.name,
            job["state"].as_str().unwrap_or(""),
            plan["verdict"]["verdict"].as_str().unwrap_or(""),
            job["node"].as_str().unwrap_or("-"),
            job["submitted_at"].as_str().unwrap_or("-"),
            job["finished_at"].as_str().unwrap_or("-"),
            job["deadline"].as_str().unwrap_or("-"),
            plan["reason"].as_str().unwrap_or("")
        );
        let verdict = plan["verdict"]["verdict"].as_str().unwrap_or("none");
        let reason = plan["reason"].as_str().unwrap_or("");
        assert!(
            !reason.is_empty(),
            "{}: every plan has a reason: {job:#}",
            j.name
        );
        match j.name {
            "impossible" => {
                assert_eq!(job["state"], "rejected", "{job:#}");
                assert_eq!(verdict, "rejected", "{job:#}");
                assert!(
                    job["reason"]
                        .as_str()
                        .unwrap()
                        .contains("rejected at admission"),
                    "{job:#}"
                );
                continue;
            }
            "hopeful" | "spare" => {
                assert_eq!(verdict, "best-effort", "{}: {job:#}", j.name);
            }
            _ => {
                assert_eq!(verdict, "guaranteed", "{}: {job:#}", j.name);
                guaranteed += 1;
                assert_met_deadline(&job);
            }
        }
        assert_eq!(job["state"], "succeeded", "{}: {job:#}", j.name);
        let tail = job["output_tail"].to_string();
        assert!(
            tail.contains(&format!("trained {} iterations", j.iterations)),
            "{tail}"
        );
        let step = &plan["step"];
        assert!(step["compute_s"].as_f64().unwrap() > 0.0, "{job:#}");
        assert!(
            plan["nodes"].as_array().is_some_and(|n| !n.is_empty()),
            "{job:#}"
        );
        assert!(plan["expected_finish"].is_string(), "{job:#}");
    }
    assert_eq!(guaranteed, 7, "seven SLO jobs are feasible and guaranteed");

    // The link matrix holds what the edges measured.
    let links: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["links", "--json"])).unwrap();
    for node in EDGES {
        assert!(
            links
                .iter()
                .any(|l| l["from"] == node && l["to"] == "cloud"),
            "{node} measured its cloud link: {links:#?}"
        );
        assert!(
            links
                .iter()
                .any(|l| l["from"] == node && l["class"] == "edge-edge"),
            "{node} measured an edge link: {links:#?}"
        );
    }
    let shown = coord.cli(&["jobs", "show", &ids[0].to_string()]);
    assert!(
        shown.contains("verdict:  guaranteed") && shown.contains("step:"),
        "{shown}"
    );
}

/// When an edge's load rises sooner than its forecast said (the tide comes in
/// early), its job is checkpointed and moved, and resumes from its checkpoint
/// on another edge, still by its deadline.
#[test]
fn a_job_is_moved_when_the_tide_comes_in_early() {
    let dir = support::tempdir();
    // Eight days. `ebb` is idle 0-8 h on every day but the first, when its
    // load returns at 3 h; the replay starts on that first day, and its
    // forecaster, primed with the days before (the trace cycles), expects
    // 0-8 h. `flood` is idle from 2 h every day.
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..8 * 288 {
        let hour = f64::from(i % 288) / 12.0;
        let ebb_until = if i < 288 { 3.0 } else { 8.0 };
        let ebb = if hour < ebb_until { 8.0 } else { 85.0 };
        let flood = if hour < 2.0 { 85.0 } else { 8.0 };
        csv.push_str(&format!(
            "ebb,{t},{ebb},30,\nflood,{t},{flood},30,\n",
            t = i * 300
        ));
    }
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, csv).unwrap();
    let names = ["ebb", "flood"];
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let cluster = Cluster::start(dir.path(), &trace, &nodes, &[], &names, "", None);
    let start_h = (cluster.tide_now() - cluster.anchor) as f64 / 3.6e6;
    assert!(
        start_h < 1.5,
        "the cluster came up {start_h:.1} h into the tide"
    );

    // 42 iterations of 300 s (3.5 h) by a 12 h deadline: the earliest finish
    // starts on `ebb` at once.
    let id = cluster.submit(dir.path(), &job("long", 42, 12.0, "slo", "reject"));
    let (job, log) = cluster.wait_until_succeeded(id);
    assert_eq!(job["plan"]["verdict"]["verdict"], "guaranteed", "{job:#}");
    assert!(
        log.iter().any(|l| l.contains("action=started on ebb")),
        "it started on ebb"
    );
    assert!(
        log.iter().any(
            |l| l.contains("asked to checkpoint and stop") && l.contains("tide came in on ebb")
        ),
        "it was moved because ebb's tide came in"
    );
    assert_eq!(
        job["node"], "flood",
        "it finished on the other edge: {job:#}"
    );
    let tail = job["output_tail"].to_string();
    assert!((1..42).contains(&resumed_at(&tail)), "{tail}");
    assert!(tail.contains("trained 42 iterations on flood"), "{tail}");
    assert_met_deadline(&job);
}

/// A job too long for one edge by its deadline runs data-parallel on two
/// edges at once, each task with its own rank and the same rendezvous.
#[test]
fn a_job_spans_two_edges_when_one_is_too_slow() {
    let dir = support::tempdir();
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..288 {
        let cpu = if i < 144 { 8.0 } else { 85.0 };
        csv.push_str(&format!("a,{t},{cpu},30,\nb,{t},{cpu},30,\n", t = i * 300));
    }
    let trace = dir.path().join("trace.csv");
    std::fs::write(&trace, csv).unwrap();
    // One worker does an iteration per 330 s; two do 1.9 times as many.
    let throughput = write_ddp_table(dir.path());
    let names = ["a", "b"];
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let cluster = Cluster::start(dir.path(), &trace, &nodes, &[], &names, &throughput, None);

    // 24 iterations: 2.2 h on one worker, 1.2 h on two; the deadline is 1.8 h.
    let trainer = dir.path().join("trainer.sh");
    std::fs::write(&trainer, TRAINER).unwrap();
    let file = write_ddp_job(
        dir.path(),
        "ddp",
        &trainer,
        24,
        2,
        cluster.tide_now() + 6_480_000,
        "",
    );
    let id = cluster.coord.submit_file(&file);
    let checkpoints = support::checkpoint_dir(dir.path(), id);
    let (job, _) = cluster.wait_until_succeeded(id);
    let plan = &job["plan"];
    assert_eq!(plan["verdict"]["verdict"], "guaranteed", "{job:#}");
    assert_eq!(plan["shape"], "multi-edge", "{job:#}");
    assert!(plan["step"]["sync_s"].as_f64().unwrap() > 0.0, "{job:#}");
    let mut ranks: Vec<String> = std::fs::read_to_string(checkpoints.join("ranks.log"))
        .unwrap()
        .lines()
        .map(|l| l.rsplit_once(" node=").unwrap().0.to_string())
        .collect();
    ranks.sort();
    assert_eq!(
        ranks,
        [
            "rank=0 world=2 master=127.0.0.1:29500 workers=1",
            "rank=1 world=2 master=127.0.0.1:29500 workers=1"
        ],
        "each task got its rank and the same rendezvous"
    );
    assert_met_deadline(&job);
}

/// An edge that dies with a job on it goes offline; the job resumes from its
/// checkpoint on another edge and still meets its deadline.
#[test]
fn a_job_on_an_edge_that_dies_resumes_elsewhere() {
    let dir = support::tempdir();
    let names = ["a", "b"];
    let trace = write_idle_trace(dir.path(), &names);
    let nodes: Vec<(&str, &str)> = names.iter().map(|n| (*n, *n)).collect();
    let mut cluster = Cluster::start(dir.path(), &trace, &nodes, &[], &names, "", None);
    // 24 iterations: 2.2 h planned, by an 8 h deadline.
    let id = cluster.submit(dir.path(), &job("sturdy", 24, 8.0, "slo", "reject"));
    let job_line = format!("job_id={id} ");
    cluster
        .cloud
        .wait_until("the job to run", 1, support::PATIENCE, |l| {
            l.contains(&job_line) && l.contains("state=running")
        });
    let first = cluster.coord.job(id)["node"].as_str().unwrap().to_string();
    // Let it train a while: eight more of its node's samples (2 wall s, about
    // eight iterations) before the box dies.
    let from_first =
        |l: &str| l.contains(&format!("node_id={first} ")) && l.contains("kind=samples");
    let seen = cluster.cloud.log().iter().filter(|l| from_first(l)).count();
    cluster.cloud.wait_until(
        "training on the first node",
        seen + 8,
        support::PATIENCE,
        from_first,
    );
    // The box dies: its daemon and the job's processes with it.
    let ranks = support::checkpoint_dir(dir.path(), id).join("ranks.log");
    let pid: i32 = std::fs::read_to_string(&ranks)
        .unwrap()
        .trim()
        .rsplit_once("pid=")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let (_, edge) = cluster.nodes.iter_mut().find(|(n, _)| *n == first).unwrap();
    edge.kill9();
    assert!(pid > 1, "the trainer's pid: {pid}");
    let killed = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pid}")])
        .status()
        .unwrap();
    assert!(killed.success(), "killing the job's process group {pid}");

    cluster.wait_until_ended(id);
    let log = cluster.cloud.log();
    for l in log
        .iter()
        .filter(|l| l.contains(&job_line) || l.contains("offline"))
    {
        eprintln!("{l}");
    }
    assert!(
        log.iter()
            .any(|l| l.contains("node offline") && l.ends_with(&format!("node_id={first}"))),
        "{first} was declared offline"
    );
    let job = cluster.coord.job(id);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_ne!(job["node"].as_str(), Some(first.as_str()), "{job:#}");
    let tail = job["output_tail"].to_string();
    assert!(
        tail.contains("resumed at "),
        "it resumed from the checkpoint: {tail}"
    );
    assert!(tail.contains("trained 24 iterations"), "{tail}");
    assert_met_deadline(&job);
}
