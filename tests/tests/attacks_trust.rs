//! Attacks by a joined edge gone bad (issue 28, finding 3 and the future
//! timestamps of finding 8), each made by a rogue edge in the real protocol
//! against a real coordinator, and each refused, bounded or detected: an
//! edge is trusted for what it has shown, not for what it claims.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::rogue::{self, Rogue, modest_capabilities};
use support::{Coordinator, PATIENCE, Proc};
use tidemill_cloud::client::Client;
use tidemill_forecast::{
    CycleVerdict, DailyCycle, IdleWindow, Method, NodeForecast, Quantiles, Resource,
    ResourceForecast,
};
use tidemill_proto::{
    Accelerator, AcceleratorKind, Capabilities, CloudMsg, Command, EdgeMsg, ErrorCode, LinkSample,
    Report, ReportBody, Sample,
};
use tidemill_runtime::frames;

const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A multi-threaded runtime: the rogue's command reader runs on it while
/// the test thread waits on the coordinator's CLI.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// The value of a counter in the coordinator's `/metrics` (`series` with its
/// labels, if any); 0 when the series is not there.
fn metric(coord: &Coordinator, series: &str) -> u64 {
    let text = Client::new(&coord.api, &coord.admin_token())
        .metrics()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{series} ")))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The inflated hello of the issue: 256 cores, 2 TB, eight A100-80GB.
fn inflated() -> Capabilities {
    Capabilities {
        cpu_cores: 256,
        mem_bytes: 2 << 40,
        accelerators: vec![
            Accelerator {
                kind: AcceleratorKind::NvidiaGpu,
                model: "NVIDIA A100-SXM4-80GB".into(),
                mem_bytes: Some(80 << 30),
            };
            8
        ],
        ..modest_capabilities()
    }
}

/// Sends `reports` and returns the coordinator's answer.
async fn report(conn: &quinn::Connection, reports: Vec<Report>) -> CloudMsg {
    rogue::ask(conn, &EdgeMsg::Reports(reports)).await
}

/// A samples report of one sample at `t_ms` showing the node idle.
fn idle_sample(seq: u64, t_ms: i64) -> Report {
    Report {
        seq,
        body: ReportBody::Samples(vec![Sample {
            t_ms,
            cpu_pct: 0.0,
            per_core_pct: vec![0.0, 0.0],
            mem_pct: 10.0,
            net_rx_bytes: 0,
            net_tx_bytes: 0,
            gpu_pct: None,
        }]),
    }
}

/// A forecast issued at `issued_ms` of a CPU idle for 48 h at confidence 1,
/// standing on `observed_h` hours of history of 14 days.
fn idle_forecast(issued_ms: i64, observed_h: f64) -> NodeForecast {
    let slot_s = 900;
    let start_ms = issued_ms.div_euclid(slot_s * 1000) * slot_s * 1000 + slot_s * 1000;
    let zero = Quantiles {
        p10: 0.0,
        p50: 0.0,
        p90: 0.0,
    };
    NodeForecast {
        method: Method::Tidemill,
        issued_ms,
        start_ms,
        slot_len_s: slot_s as u32,
        idle_threshold_pct: 30.0,
        resources: vec![ResourceForecast {
            resource: Resource::Cpu,
            cycle: CycleVerdict {
                daily_cycle: DailyCycle::Unknown,
                strength: None,
                days_used: 0,
            },
            slots: vec![Some(zero); 192],
            observed_h,
        }],
        idle_windows: vec![IdleWindow {
            start_ms,
            end_ms: start_ms + 48 * HOUR_MS,
            confidence: 1.0,
        }],
        history_days: 14,
        prior: None,
    }
}

/// Every command the coordinator sends the rogue, each acknowledged and
/// none carried out: the black hole of the issue.
type Received = Arc<Mutex<Vec<Command>>>;

fn black_hole(rt: &tokio::runtime::Runtime, conn: &quinn::Connection) -> Received {
    let got: Received = Arc::default();
    let (conn, seen) = (conn.clone(), got.clone());
    rt.spawn(async move {
        while let Some((msg, mut send)) =
            rogue::next_command(&conn, Duration::from_secs(3600)).await
        {
            let CloudMsg::Command(cmd) = msg else {
                continue;
            };
            let task_id = match &cmd {
                Command::Assign(a) => a.task_id,
                Command::Cancel { task_id } => *task_id,
            };
            seen.lock().unwrap().push(cmd);
            let _ = frames::write_msg(&mut send, &EdgeMsg::CommandAck { task_id }).await;
            let _ = send.finish();
        }
    });
    got
}

fn assigns(got: &Received, job_id: u64) -> usize {
    got.lock()
        .unwrap()
        .iter()
        .filter(|c| matches!(c, Command::Assign(a) if a.job_id == job_id))
        .count()
}

/// Waits (boundedly) until `ok` holds of job `id`; returns the job.
fn wait_job(
    coord: &Coordinator,
    id: u64,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + 3 * PATIENCE;
    loop {
        let job = coord.job(id);
        if ok(&job) {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never {what}: {job:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A real edge replaying a node at 5 % CPU, so it is idle whatever the
/// test machine is doing.
fn quiet_edge(coord: &Coordinator, dir: &std::path::Path, node: &str) -> Proc {
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for i in 0..288 {
        csv.push_str(&format!("{node},{},5.0,30.0,\n", i * 300));
    }
    let trace = dir.join(format!("{node}.csv"));
    std::fs::write(&trace, csv).unwrap();
    let edge = support::start_edge(coord, dir, node, Some(&trace));
    edge.wait_for("connected", 1, PATIENCE);
    edge
}

#[test]
fn an_inflated_hello_after_a_modest_join_is_refused_until_an_admin_accepts_it() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let rt = runtime();
    let r = rt.block_on(Rogue::join(&coord, "r1"));

    let (c, first) = rt.block_on(r.hello(modest_capabilities()));
    assert!(matches!(first, CloudMsg::Welcome(_)), "{first:?}");
    // One session per node: the next hello comes on a new connection once
    // this one is closed, as an edge that restarts with new hardware does.
    c.close(0u32.into(), b"restarting");
    let (_c, answer) = rt.block_on(r.hello(inflated()));
    let CloudMsg::Error(e) = &answer else {
        panic!("an inflated hello was welcomed: {answer:?}")
    };
    assert_eq!(e.code, ErrorCode::Unauthorized);
    assert!(
        e.message.contains("nodes accept-capabilities r1"),
        "{}",
        e.message
    );
    assert_eq!(
        metric(&coord, "tidemill_refused_capability_claims_total"),
        1
    );
    cloud.wait_for(
        "refused a hello claiming more than the node joined with",
        1,
        PATIENCE,
    );

    let shown = coord.node("r1");
    assert_eq!(
        shown["cpu_cores"], 2,
        "nodes shows what it joined with: {shown:#}"
    );
    assert_eq!(shown["accelerators"].as_array().unwrap().len(), 0);
    assert_eq!(
        shown["trust"]["refused_claim"]["cpu_cores"], 256,
        "{shown:#}"
    );
    let table = coord.cli(&["nodes"]);
    assert!(table.contains("accept-capabilities r1"), "{table}");

    // Less than it joined with is fine (a GPU may fail).
    let fewer = Capabilities {
        cpu_cores: 1,
        ..modest_capabilities()
    };
    let (c, answer) = rt.block_on(r.hello(fewer));
    assert!(matches!(answer, CloudMsg::Welcome(_)), "{answer:?}");
    c.close(0u32.into(), b"restarting");

    coord.cli(&["nodes", "accept-capabilities", "r1"]);
    let (_c, answer) = rt.block_on(r.hello(inflated()));
    assert!(
        matches!(answer, CloudMsg::Welcome(_)),
        "accepted: {answer:?}"
    );
    let shown = coord.node("r1");
    assert_eq!(shown["cpu_cores"], 256, "{shown:#}");
    assert!(shown["trust"]["refused_claim"].is_null(), "{shown:#}");
}

#[test]
fn a_forecast_without_history_wins_no_guarantee_and_secrets_need_a_trusted_label() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let rt = runtime();
    let r = rt.block_on(Rogue::join(&coord, "a-rogue"));
    let (conn, welcome) = rt.block_on(r.hello(modest_capabilities()));
    assert!(matches!(welcome, CloudMsg::Welcome(_)), "{welcome:?}");
    let got = black_hole(&rt, &conn);
    let now = now_ms();
    let ack = rt.block_on(report(
        &conn,
        vec![
            idle_sample(1, now),
            Report {
                seq: 2,
                body: ReportBody::Forecast(Box::new(idle_forecast(now, 0.0))),
            },
        ],
    ));
    assert_eq!(ack, CloudMsg::Ack { seq: 2 });
    let shown = coord.node("a-rogue");
    assert_eq!(
        shown["forecast"]["next_idle"]["confidence"], 1.0,
        "{shown:#}"
    );

    // An SLO job that needs a guarantee: the rogue's claim of 48 idle hours
    // on no history earns none, so no plan meets the deadline.
    let slo = dir.path().join("slo.toml");
    let deadline = chrono::Utc::now() + chrono::Duration::hours(3);
    std::fs::write(
        &slo,
        format!(
            "name = \"slo\"\ncommand = [\"true\"]\ndeadline = {:?}\nclass = \"slo\"\non_infeasible = \"reject\"\n\
             [work]\nmodel = \"m\"\niterations = 3600\nglobal_batch = 1\n[work.iters_per_s]\ncpu = 1.0\n",
            deadline.to_rfc3339()
        ),
    )
    .unwrap();
    let id = coord.submit_file(&slo);
    let job = wait_job(&coord, id, "found no capacity", |j| {
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no capacity free now"))
    });
    assert_eq!(job["state"], "queued", "{job:#}");
    assert_ne!(job["plan"]["verdict"]["verdict"], "guaranteed", "{job:#}");
    assert_eq!(assigns(&got, id), 0, "the rogue got the job: {job:#}");

    // A secret-bearing job that requires `trusted` waits for a labelled
    // node, and the idle rogue never sees it.
    let secret = dir.path().join("secret.toml");
    std::fs::write(
        &secret,
        "name = \"secret\"\ncommand = [\"sh\", \"-c\", \"echo ran\"]\ndeadline = \"2099-01-01T00:00:00Z\"\n\
         requires = [\"trusted\"]\n[secret_env]\nHF_TOKEN = \"hf_victim_secret\"\n",
    )
    .unwrap();
    let id = coord.submit_file(&secret);
    let job = wait_job(&coord, id, "said why it waits", |j| {
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains("a-rogue lacks [trusted]"))
    });
    assert_eq!(job["state"], "queued", "{job:#}");
    let edge = quiet_edge(&coord, dir.path(), "z-trusted");
    coord.cli(&["nodes", "label", "z-trusted", "trusted"]);
    assert_eq!(coord.node("z-trusted")["trust"]["labels"][0], "trusted");
    let job = wait_job(&coord, id, "succeeded", |j| j["state"] == "succeeded");
    assert_eq!(job["node"], "z-trusted", "{job:#}");
    assert_eq!(assigns(&got, id), 0, "the secret reached the rogue");
    assert!(
        got.lock().unwrap().is_empty(),
        "no assignment reached the rogue: {:?}",
        got.lock().unwrap()
    );
    drop(edge);
}

#[test]
fn an_assignment_never_started_is_taken_back_and_the_node_cordoned() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[
        ("start_timeout_secs = 120", "start_timeout_secs = 6"),
        ("cordon_after_unstarted = 3", "cordon_after_unstarted = 2"),
    ]);
    let rt = runtime();
    let r = rt.block_on(Rogue::join(&coord, "a-rogue"));
    let (conn, _) = rt.block_on(r.hello(modest_capabilities()));
    let got = black_hole(&rt, &conn);
    let ack = rt.block_on(report(&conn, vec![idle_sample(1, now_ms())]));
    assert_eq!(ack, CloudMsg::Ack { seq: 1 });
    let _edge = quiet_edge(&coord, dir.path(), "b-edge");

    // First fit goes by node id: the idle rogue first, every time, until
    // it is cordoned.
    let submitted = std::time::Instant::now();
    let id = coord.submit(dir.path(), "victim", &["sh", "-c", "echo ran"]);
    let job = wait_job(&coord, id, "succeeded", |j| j["state"] == "succeeded");
    println!(
        "requeued and run elsewhere in {:.1} s",
        submitted.elapsed().as_secs_f64()
    );
    assert_eq!(job["node"], "b-edge", "{job:#}");
    assert_eq!(assigns(&got, id), 2, "{:?}", got.lock().unwrap());
    let cancels = got
        .lock()
        .unwrap()
        .iter()
        .filter(|c| matches!(c, Command::Cancel { .. }))
        .count();
    assert!(
        cancels >= 1,
        "the taken-back task is cancelled on the rogue"
    );
    cloud.wait_for("assignment taken back", 2, PATIENCE);
    assert!(metric(&coord, "tidemill_unstarted_assignments_total") >= 2);
    assert_eq!(metric(&coord, "tidemill_trust_cordons_total"), 1);

    let shown = coord.node("a-rogue");
    assert_eq!(shown["drained"], true, "{shown:#}");
    assert_eq!(shown["trust"]["unstarted"], 2);
    let reason = shown["trust"]["cordon_reason"].as_str().unwrap();
    assert!(reason.contains("not started in time"), "{reason}");
    let table = coord.cli(&["nodes"]);
    assert!(table.contains("cordoned: 2 assignments"), "{table}");
    coord.cli(&["nodes", "uncordon", "a-rogue"]);
    let shown = coord.node("a-rogue");
    assert!(shown["trust"]["cordon_reason"].is_null(), "{shown:#}");
}

fn link(peer: &str, t_ms: i64, rtt_ms: f64, bandwidth_bps: f64, loss: f64) -> LinkSample {
    LinkSample {
        peer: peer.into(),
        t_ms,
        rtt_ms,
        bandwidth_bps,
        loss,
        probe_sent_bytes: 0,
        probe_received_bytes: 0,
    }
}

#[test]
fn future_and_absurd_report_values_are_dropped_and_counted() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let rt = runtime();
    let r = rt.block_on(Rogue::join(&coord, "r1"));
    let (conn, _) = rt.block_on(r.hello(modest_capabilities()));
    let now = now_ms();
    let year_2030 = 1_893_456_000_000;
    let year_2100 = 4_102_444_800_000;
    let ack = rt.block_on(report(
        &conn,
        vec![
            Report {
                seq: 1,
                body: ReportBody::Forecast(Box::new(idle_forecast(year_2030, 100.0))),
            },
            Report {
                seq: 2,
                body: ReportBody::Links(vec![
                    link("p-future", year_2100, 20.0, 1e6, 0.0),
                    link("p-rtt", now, -5.0, 1e6, 0.0),
                    link("p-bandwidth", now, 20.0, f64::INFINITY, 0.0),
                    link("p-loss", now, 20.0, 1e6, -3.0),
                    link("cloud", now, 20.0, 1e6, 0.01),
                ]),
            },
            Report {
                seq: 3,
                body: ReportBody::Forecast(Box::new(idle_forecast(now, 100.0))),
            },
        ],
    ));
    assert_eq!(ack, CloudMsg::Ack { seq: 3 }, "the reports stand");
    for field in [
        "forecast.issued_ms",
        "links.t_ms",
        "links.rtt_ms",
        "links.bandwidth_bps",
        "links.loss",
    ] {
        let series = format!("tidemill_report_values_dropped_total{{field=\"{field}\"}}");
        assert_eq!(metric(&coord, &series), 1, "{series}");
    }
    cloud.wait_for("dropped a report value out of range", 5, PATIENCE);

    let shown = coord.node("r1");
    let issued = shown["forecast"]["issued_at"].as_str().unwrap();
    assert!(issued < "2030", "the current forecast stands: {issued}");
    let links: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["links", "--json"])).unwrap();
    let from_rogue: Vec<&serde_json::Value> = links.iter().filter(|l| l["from"] == "r1").collect();
    assert_eq!(from_rogue.len(), 1, "{links:#?}");
    assert_eq!(from_rogue[0]["to"], "cloud");
    assert_eq!(from_rogue[0]["rtt_ms"], 20.0);
}
