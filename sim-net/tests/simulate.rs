//! `simulate` on slices of the real traces: the world's invariants hold for
//! every policy, runs are deterministic, the classic baselines order as in the
//! ElasticFlow paper, and bad inputs end in a one-line error, not a panic.

mod support;

use std::collections::BTreeMap;

use support::{args, data, repo, shipped_topology, topology_args};
use tidemill_sim::simulate::engine::Outcome;
use tidemill_sim::simulate::metrics::PolicyMetrics;
use tidemill_sim::simulate::policies::{JobStatus, PolicyName};
use tidemill_sim::simulate::variants::Variant;
use tidemill_sim::simulate::{Setup, setup};

/// The first 120 jobs of cluster 06 with 8 edge boxes: every kind of job size,
/// arrivals in bursts, and a day and more of tide.
fn slice() -> Setup {
    let jobs = data("elasticflow/traces/cluster06.csv");
    setup(&topology_args(
        &shipped_topology(),
        &["--jobs", &jobs, "--max-jobs", "120", "--edge-boxes", "8"],
    ))
    .expect("the slice loads")
}

/// The same 120 jobs on a scarce cloud, half of them best-effort and kept
/// off the cloud.
fn best_effort_slice() -> Setup {
    let topology = repo().join("sim-net/tests/data/edge-best-effort.toml");
    let jobs = data("elasticflow/traces/cluster06.csv");
    setup(&topology_args(
        &topology,
        &["--jobs", &jobs, "--max-jobs", "120"],
    ))
    .expect("the best-effort slice loads")
}

fn run(s: &Setup, p: PolicyName) -> (PolicyMetrics, Outcome) {
    s.run_one(p, Variant::Full, true, &mut |_| {})
        .expect("the policy runs")
}

#[test]
fn every_policy_keeps_the_invariants() {
    for (s, p) in [slice(), best_effort_slice()]
        .iter()
        .flat_map(|s| PolicyName::ALL.map(|p| (s, p)))
    {
        let (m, o) = run(s, p);
        // No node over its capacity: sweep every stint's start and end.
        let mut edges: BTreeMap<(u32, i64), i64> = BTreeMap::new();
        for st in &o.stints {
            for &(q, w) in &st.place {
                *edges.entry((q, st.start_ms)).or_default() += i64::from(w);
                *edges.entry((q, st.end_ms)).or_default() -= i64::from(w);
            }
        }
        let mut used: BTreeMap<u32, i64> = BTreeMap::new();
        for (&(q, t), &d) in &edges {
            let u = used.entry(q).or_default();
            *u += d;
            let cap = i64::from(s.world.model.nodes()[q as usize].devices);
            assert!(*u <= cap, "{p:?}: node {q} at {t} ms holds {u} > {cap}");
        }
        let mut per_job = vec![0.0; o.jobs.len()];
        for st in &o.stints {
            let job = &o.jobs[st.job];
            // No start before submission, and stints never run backwards.
            assert!(
                st.start_ms >= job.spec.submitted_ms,
                "{p:?}: job {} starts at {} before its submission {}",
                st.job,
                st.start_ms,
                job.spec.submitted_ms
            );
            assert!(st.end_ms >= st.start_ms && st.iters >= 0.0, "{p:?}: {st:?}");
            per_job[st.job] += st.iters;
        }
        // Work is conserved across migrations and pauses; an eviction takes
        // back what the job trained since its last checkpoint, never more
        // than it had (the engine became honest about evictions in issue 29).
        for e in &o.evictions {
            assert!(e.after_iters <= e.before_iters, "{p:?}: {e:?}");
            per_job[e.job] -= e.before_iters - e.after_iters;
        }
        for (j, job) in o.jobs.iter().enumerate() {
            let tol = 1e-6 * job.spec.iterations.max(1.0);
            assert!(
                (per_job[j] - job.done_iters).abs() <= tol,
                "{p:?}: job {j}: stints less evictions sum to {} iterations, the job did {}",
                per_job[j],
                job.done_iters
            );
            if job.status == JobStatus::Done {
                assert!(
                    (job.done_iters - job.spec.iterations).abs() <= tol,
                    "{p:?}: finished job {j} did {} of {}",
                    job.done_iters,
                    job.spec.iterations
                );
            } else {
                assert!(job.done_iters < job.spec.iterations + tol);
            }
        }
        assert_eq!(m.jobs, 120);
        assert!((0.0..=1.0).contains(&m.deadline_satisfaction_ratio));
        assert!(m.interference_share >= 0.0 && m.harvested_idle_share <= 1.0 + 1e-9);
    }
}

#[test]
fn a_run_is_deterministic_for_a_seed() {
    let s = slice();
    for p in [
        PolicyName::Tidemill,
        PolicyName::Edgeflow,
        PolicyName::Elasticflow,
    ] {
        let (mut a, oa) = run(&s, p);
        let (mut b, ob) = run(&slice(), p);
        a.elapsed_s = 0.0;
        b.elapsed_s = 0.0;
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap(),
            "{p:?}"
        );
        assert_eq!(oa.stints, ob.stints, "{p:?}");
    }
}

/// With a scarce cloud and half the jobs best-effort and kept off the cloud,
/// tidemill runs work on idle edge boxes and leaves them when the tide comes in.
#[test]
fn tidemill_uses_the_edge_and_yields_to_the_tide() {
    let s = best_effort_slice();
    let (m, _) = run(&s, PolicyName::Tidemill);
    assert!(m.edge_gpu_hours_harvested > 0.0, "{m:?}");
    assert!(m.interference_share < 0.01, "{m:?}");
    let (cloud_only, _) = run(&s, PolicyName::CloudOnly);
    assert_eq!(cloud_only.edge_gpu_hours_harvested, 0.0);
}

/// ElasticFlow ≥ EDF ≥ first-fit in deadline satisfaction on ElasticFlow's own
/// traces and clusters, cloud only, as in the ElasticFlow paper (figure 8);
/// elasticflow and edf-elasticflow land within 0.03 of the ratios ElasticFlow's
/// own simulator gives there (../shared/data/elasticflow/REFERENCE-RESULTS.md).
#[test]
fn baselines_order_as_in_the_elasticflow_paper() {
    for (trace, topology, class, dir, ef_ref, edf_ef_ref) in [
        (
            "elasticflow/traces/philly_103959.csv",
            "elasticflow-n4g8.toml",
            "A100",
            "elasticflow/throughputs_A100",
            0.8756,
            0.0103,
        ),
        (
            "elasticflow/traces/elasticVpollux_e.csv",
            "elasticflow-n16g4-t4.toml",
            "T4",
            "elasticflow/throughputs_T4",
            0.7282,
            0.1179,
        ),
    ] {
        let topo = repo().join("configs/scenarios").join(topology);
        let s = setup(&args([
            "--topology".to_string(),
            topo.display().to_string(),
            "--jobs".into(),
            data(trace),
            "--throughputs".into(),
            format!("{class}={}", data(dir)),
        ]))
        .expect("loads");
        let dsr = |p| run(&s, p).0.deadline_satisfaction_ratio;
        let (ef, edf, ff, edf_ef) = (
            dsr(PolicyName::Elasticflow),
            dsr(PolicyName::Edf),
            dsr(PolicyName::FirstFit),
            dsr(PolicyName::EdfElasticflow),
        );
        assert!(ef >= edf && edf >= ff, "{trace}: {ef} {edf} {ff}");
        assert!((ef - ef_ref).abs() <= 0.03, "{trace}: elasticflow {ef}");
        assert!(
            (edf_ef - edf_ef_ref).abs() <= 0.03,
            "{trace}: edf-elasticflow {edf_ef}"
        );
    }
}

/// With `--upper-bound` on the slice: the LP bound lies above every policy's
/// DSR (it is a bound) and no higher than the share of jobs that could finish
/// alone; cloud-only is run as the gaps' floor though not asked for; each
/// policy's SLO `edge_gain` is its SLO DSR less the same without the edge.
#[test]
fn the_lp_bound_lies_above_every_policy_and_the_gaps_are_reported() {
    let jobs = data("elasticflow/traces/cluster06.csv");
    let mut s = setup(&topology_args(
        &shipped_topology(),
        &[
            "--jobs",
            &jobs,
            "--max-jobs",
            "120",
            "--edge-boxes",
            "8",
            "--policies",
            "tidemill,edgeflow,edf",
            "--upper-bound",
            "--lp-bound",
        ],
    ))
    .expect("the slice loads");
    s.solve_lp_bound().unwrap();
    let lp = s.lp_bound.expect("--lp-bound solves the LP");
    let runs = s.runs().unwrap();
    assert!(
        runs.contains(&(PolicyName::CloudOnly, Variant::Full)),
        "{runs:?}"
    );
    let results = runs
        .iter()
        .map(|&(p, v)| s.run_one(p, v, false, &mut |_| {}).unwrap())
        .collect();
    let (rows, _) = s.rows(&runs, results);
    let full: Vec<&PolicyMetrics> = rows
        .iter()
        .filter(|m| m.policy != "edge-as-cloud")
        .collect();
    assert_eq!(full.len(), 4);
    for m in &full {
        assert!(
            m.deadline_satisfaction_ratio <= lp.dsr + 1e-6,
            "{}: DSR {} above the LP bound {lp:?}",
            m.policy,
            m.deadline_satisfaction_ratio
        );
        if let Some(without) = m.slo_dsr_without_edge {
            let gain = m.slo_edge_gain.unwrap();
            assert!((gain - (m.slo_deadline_satisfaction_ratio - without)).abs() < 1e-12);
        }
    }
    assert!(lp.dsr <= lp.jobs_possible as f64 / 120.0 + 1e-9, "{lp:?}");
    // Taking capacity away never raises the LP's optimum.
    let bare = s.lp_bound_without_edge.unwrap();
    assert!(bare.dsr <= lp.dsr + 1e-6, "{bare:?} {lp:?}");
    let cloud_only = full.iter().find(|m| m.policy == "cloud-only").unwrap();
    assert!(cloud_only.deadline_satisfaction_ratio <= bare.dsr + 1e-6);
    let report = tidemill_sim::simulate::report::Report::new(&s, rows, 0.0);
    let cloud = report
        .policies
        .iter()
        .find(|m| m.policy == "cloud-only")
        .unwrap()
        .deadline_satisfaction_ratio;
    for g in &report.gap_shares {
        let m = report
            .policies
            .iter()
            .find(|m| m.policy == g.policy)
            .unwrap();
        let want =
            tidemill_sim::simulate::report::gap_share(m.deadline_satisfaction_ratio, cloud, lp.dsr);
        assert_eq!(g.to_lp_bound, want, "{g:?}");
    }
    assert_eq!(report.gap_shares.len(), 4);
    let mut table = Vec::new();
    report.write_table(&mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("lp-bound") && table.contains("slo_gain"),
        "{table}"
    );
}

/// `tidemill-sim simulate ARGS`: whether it succeeded, and what it wrote to stderr.
fn sim(args: &[&str]) -> (bool, String) {
    let out = support::sim(&[&["simulate"], args].concat());
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_inputs_end_in_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let topo = shipped_topology();
    let topo = topo.to_str().unwrap();
    let a100 = format!("A100={}", data("elasticflow/throughputs_A100"));
    let t4 = format!("T4={}", data("elasticflow/throughputs_T4"));
    let util = data("alibaba-2018-machine-usage/machine_usage.csv.gz");
    let base = [
        "--topology",
        topo,
        "--throughputs",
        &a100,
        "--throughputs",
        &t4,
    ];

    let (ok, err) = sim(&[&base[..], &["--jobs", "/nonexistent/jobs.csv"]].concat());
    assert!(
        !ok && err.starts_with("error: /nonexistent/jobs.csv: cannot read"),
        "{err}"
    );

    let jobs = dir.path().join("jobs.csv");
    std::fs::write(
        &jobs,
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\na,0,10,alexnet,100,64,1,10\n",
    )
    .unwrap();
    let j = jobs.to_str().unwrap();
    let (ok, err) = sim(&[
        &base[..],
        &[
            "--jobs",
            j,
            "--utilization",
            &util,
            "--format",
            "alibaba-2018",
        ],
    ]
    .concat());
    assert!(
        !ok && err.contains("model alexnet") && err.contains("add alexnet.csv"),
        "{err}"
    );

    let bert = dir.path().join("bert.csv");
    std::fs::write(
        &bert,
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\na,0,10,bert,100,64,1,10\n",
    )
    .unwrap();
    let b = bert.to_str().unwrap();
    let (ok, err) = sim(&[
        &base[..],
        &[
            "--jobs",
            b,
            "--utilization",
            &util,
            "--value-col",
            "nope",
            "--format",
            "alibaba-2018",
        ],
    ]
    .concat());
    assert!(!ok && err.contains("no column `nope`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `simulate` on cluster06's first 60 jobs with 8 edge boxes, tidemill and
/// EDF, as JSON, the data passed by path; `flag` last, for a file path to follow.
fn cli_slice(flag: &str) -> Vec<String> {
    let topo = shipped_topology();
    let a100 = format!("A100={}", data("elasticflow/throughputs_A100"));
    let t4 = format!("T4={}", data("elasticflow/throughputs_T4"));
    let util = data("alibaba-2018-machine-usage/machine_usage.csv.gz");
    let jobs = data("elasticflow/traces/cluster06.csv");
    [
        "simulate",
        "--topology",
        topo.to_str().unwrap(),
        "--throughputs",
        &a100,
        "--throughputs",
        &t4,
        "--utilization",
        &util,
        "--format",
        "alibaba-2018",
        "--jobs",
        &jobs,
        "--max-jobs",
        "60",
        "--edge-boxes",
        "8",
        "--policies",
        "tidemill,edf",
        "--json",
        flag,
    ]
    .map(String::from)
    .to_vec()
}

/// [`cli_slice`] with `flag` writing to `path`: its arguments less the
/// path, and the report it printed.
fn run_slice(flag: &str, path: &std::path::Path) -> (Vec<String>, serde_json::Value) {
    let base = cli_slice(flag);
    let mut args = base.clone();
    args.push(path.to_str().unwrap().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = support::sim(&args);
    assert!(out.status.success(), "{out:?}");
    let report = serde_json::from_slice(&out.stdout).unwrap();
    (base, report)
}

/// A file in a missing directory ends `base` (whose last flag is `flag`) in
/// one error line that names the flag, with no panic and no file left in
/// `dir`, which holds `files` already.
fn refuses_a_missing_directory(base: &[String], flag: &str, dir: &std::path::Path, files: usize) {
    let missing = dir.join("missing/out.csv");
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.push(missing.to_str().unwrap());
    let out = support::sim(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.starts_with(&format!("error: {flag} "))
            && err.contains("missing"),
        "{err}"
    );
    assert!(
        !err.contains("panicked") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), files);
}

/// `--usage-out` writes each policy's hours in order, and the device-hours
/// held add up to what the report counts: the edge's training and start-up,
/// and the cloud GPU-hours; a path it cannot write ends in one error line.
#[test]
fn usage_out_holds_what_the_report_counts_hour_by_hour() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.csv");
    let (base, report) = run_slice("--usage-out", &path);
    let mut file = csv::Reader::from_path(&path).unwrap();
    let head: Vec<String> = file.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| head.iter().position(|h| h == name).expect(name);
    let (policy, hour, idle, edge, cloud, gpus) = (
        col("policy"),
        col("hour"),
        col("edge_idle"),
        col("edge_held"),
        col("cloud_held"),
        col("cloud_gpus"),
    );
    let (plain_edge, plain_cloud) = (col("edge_held_best_effort"), col("cloud_held_best_effort"));
    // Per policy: the hours in order, and the device-hours held.
    let mut held: BTreeMap<String, (i64, f64, f64)> = BTreeMap::new();
    for row in file.into_records() {
        let row = row.unwrap();
        let num = |i: usize| row[i].parse::<f64>().unwrap();
        let e = held.entry(row[policy].to_string()).or_insert((0, 0.0, 0.0));
        assert_eq!(row[hour].parse::<i64>().unwrap(), e.0, "{row:?}");
        assert!(num(idle) >= 0.0 && num(idle) <= 8.0 * 20.0, "{row:?}");
        assert!(num(cloud) <= num(gpus) + 1e-9, "{row:?}");
        assert!(num(plain_edge) <= num(edge) + 1e-9, "{row:?}");
        assert!(num(plain_cloud) <= num(cloud) + 1e-9, "{row:?}");
        *e = (e.0 + 1, e.1 + num(edge), e.2 + num(cloud));
    }
    for p in report["policies"].as_array().unwrap() {
        let name = p["policy"].as_str().unwrap();
        let &(_, edge_h, cloud_h) = held.get(name).expect(name);
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let e = &p["edge_hours"];
        let want_edge = f(&e["training"]) + f(&e["startup"]);
        let want_cloud = f(&p["cloud_gpu_hours"]);
        assert!(
            (edge_h - want_edge).abs() <= 1e-6 * want_edge.max(1.0),
            "{name}: {edge_h} {want_edge}"
        );
        assert!(
            (cloud_h - want_cloud).abs() <= 1e-6 * want_cloud.max(1.0),
            "{name}: {cloud_h} {want_cloud}"
        );
    }
    assert!(
        held["tidemill"].1 > 0.0,
        "tidemill holds edge devices on the slice"
    );
    refuses_a_missing_directory(&base, "--usage-out", dir.path(), 1);
}

/// `--jobs-out` writes one line per job per run, and its `met` column counts
/// what each run's DSR counts, with the edge and without it; a path it
/// cannot write ends in one error line naming the flag, and leaves no file.
#[test]
fn jobs_out_has_a_line_per_job_and_run_that_add_up_to_the_dsr() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.csv");
    let (base, report) = run_slice("--jobs-out", &path);
    let mut lines: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut file = csv::Reader::from_path(&path).unwrap();
    let met = file.headers().unwrap().iter().position(|h| h == "met");
    let met = met.expect("a met column");
    let alone = file
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "edge_alone_h");
    let alone = alone.expect("an edge_alone_h column");
    for row in file.into_records() {
        let row = row.unwrap();
        // Every model of the slice has a T4 table, so the edge could run each job.
        let hours: f64 = row[alone].parse().unwrap();
        assert!(hours > 0.0 && hours.is_finite(), "{row:?}");
        let e = lines
            .entry((row[0].to_string(), row[1].to_string()))
            .or_default();
        e.0 += 1;
        e.1 += usize::from(&row[met] == "true");
    }
    assert!(lines.values().all(|&(n, _)| n == 60), "{lines:?}");
    for p in report["policies"].as_array().unwrap() {
        let name = p["policy"].as_str().unwrap().to_string();
        let met = |world: &str| lines[&(name.clone(), world.to_string())].1 as f64 / 60.0;
        assert_eq!(
            met("as-described"),
            p["deadline_satisfaction_ratio"],
            "{name}"
        );
        if let Some(without) = p["dsr_without_edge"].as_f64() {
            assert_eq!(met("no-edge"), without, "{name}");
        }
    }
    assert!(lines.contains_key(&("tidemill".into(), "no-edge".into())));

    refuses_a_missing_directory(&base, "--jobs-out", dir.path(), 1);
}
