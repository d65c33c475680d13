//! The coordinator's `/metrics` scraped from a live system (two edges, one
//! job run) passes `promtool check metrics` where promtool is installed, and
//! always an equivalent checker: the exposition parsed with a maintained
//! parser, and promtool's lint rules that can be checked here. `/readyz`
//! turns unready when the store cannot be written, and ready again after.
//! The edge's status port serves the same checks, refuses bad input and
//! unauthenticated requests, and `tidemill-edge status` reads it or the
//! journal.

mod support;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};
use support::{Coordinator, EDGE, PATIENCE, Proc, free_port, start_edge, write_trace};

/// `GET path` on the coordinator's API from loopback with its admin token:
/// the status line, headers and body as one string.
fn get(coord: &Coordinator, path: &str) -> String {
    let addr = coord.api.trim_start_matches("http://");
    raw(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            coord.admin_token()
        ),
    )
}

/// Sends `request` as is to `addr` and returns all that comes back.
fn raw(addr: &str, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    // A server may answer and close before it has read all of a bad request.
    let _ = s.write_all(request.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

/// The body of an answer from [`get`].
fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// Polls `GET path` until `done` holds for the answer, bounded by
/// [`PATIENCE`]; returns the last answer.
fn poll(coord: &Coordinator, path: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = get(coord, path);
        if done(&answer) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `name` is a valid Prometheus metric or label name.
fn valid_name(name: &str, colon: bool) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

/// promtool's lint rules that can be checked on the text, on top of what the
/// parser checks: every family has HELP and TYPE, counters end in `_total`
/// and nothing else does, histograms are in `_seconds` or `_bytes`, names and
/// label names are valid, no series repeats, and every sample line is one the
/// parser understood. Returns each problem found.
fn lint(text: &str, scrape: &Scrape) -> Vec<String> {
    let mut problems = Vec::new();
    let mut types: HashMap<&str, &str> = HashMap::new();
    let mut sample_lines = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if types.insert(name, kind).is_some() {
                problems.push(format!("{name}: a second TYPE line"));
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            sample_lines += 1;
        }
    }
    for (name, kind) in &types {
        if !valid_name(name, true) {
            problems.push(format!("{name}: not a valid metric name"));
        }
        if !scrape.docs.contains_key(*name) {
            problems.push(format!("{name}: no HELP"));
        }
        match *kind {
            "counter" if !name.ends_with("_total") => problems.push(format!(
                "{name}: a counter whose name does not end in _total"
            )),
            "gauge" | "histogram" if name.ends_with("_total") => {
                problems.push(format!("{name}: a {kind} whose name ends in _total"))
            }
            "histogram" if !(name.ends_with("_seconds") || name.ends_with("_bytes")) => {
                problems.push(format!("{name}: a histogram without its unit in its name"))
            }
            "counter" | "gauge" | "histogram" => {}
            other => problems.push(format!("{name}: unexpected type {other:?}")),
        }
    }
    let mut series = HashSet::new();
    let mut parsed_lines = 0;
    for sample in &scrape.samples {
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                sample
                    .metric
                    .strip_suffix(suffix)
                    .filter(|base| types.get(base) == Some(&"histogram"))
            })
            .unwrap_or(&sample.metric);
        if !types.contains_key(family) {
            problems.push(format!("{}: a sample without a TYPE", sample.metric));
        }
        for label in sample.labels.keys() {
            if !valid_name(label, false) || label.starts_with("__") {
                problems.push(format!("{}: invalid label name {label:?}", sample.metric));
            }
        }
        if !series.insert(format!("{}{{{}}}", sample.metric, sample.labels)) {
            problems.push(format!(
                "{}{{{}}}: a duplicate series",
                sample.metric, sample.labels
            ));
        }
        parsed_lines += match &sample.value {
            Value::Histogram(buckets) => buckets.len(),
            _ => 1,
        };
    }
    if parsed_lines != sample_lines {
        problems.push(format!(
            "{sample_lines} sample lines, of which the parser understood {parsed_lines}"
        ));
    }
    problems
}

/// The one sample of `metric` whose labels include `labels`.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{metric} is not a plain sample: {other:?}"),
        })
}

/// Checks every histogram: buckets cumulative, ending in `+Inf`, whose count
/// is `_count`; returns each problem found.
fn check_histograms(scrape: &Scrape) -> Vec<String> {
    let mut problems = Vec::new();
    for sample in &scrape.samples {
        let Value::Histogram(buckets) = &sample.value else {
            continue;
        };
        let mut sorted = buckets.clone();
        sorted.sort_by(|a, b| a.less_than.total_cmp(&b.less_than));
        if sorted.windows(2).any(|w| w[1].count < w[0].count) {
            problems.push(format!("{}: buckets not cumulative", sample.metric));
        }
        let count = value(scrape, &format!("{}_count", sample.metric), &[]);
        match sorted.last() {
            Some(inf) if inf.less_than.is_infinite() && Some(inf.count) == count => {}
            last => problems.push(format!(
                "{}: the +Inf bucket {last:?} is not _count {count:?}",
                sample.metric
            )),
        }
    }
    problems
}

/// Runs `promtool check metrics` on `text`, if promtool is installed:
/// `None` when it is not, else its verdict and output.
fn promtool(text: &str) -> Option<(bool, String)> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), said))
}

/// Checks a `/metrics` answer with every checker there is here and returns
/// it parsed.
fn checked_scrape(answer: &str) -> Scrape {
    assert!(
        answer.starts_with("HTTP/1.1 200")
            && answer.contains("content-type: text/plain; version=0.0.4"),
        "{answer}"
    );
    let text = body(answer);
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let mut problems = lint(text, &scrape);
    problems.extend(check_histograms(&scrape));
    assert!(problems.is_empty(), "{problems:#?}\n{text}");
    match promtool(text) {
        Some((passed, said)) => assert!(passed, "promtool check metrics: {said}\n{text}"),
        None => eprintln!("promtool is not installed; the built-in checker alone ran"),
    }
    scrape
}

#[test]
fn a_live_scrape_passes_the_checkers_and_bounds_node_series() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[("max_node_series = 1000", "max_node_series = 1")]);
    let trace = write_trace(dir.path(), &["e1", "e2"]);
    let _edges: Vec<_> = ["e1", "e2"]
        .iter()
        .map(|n| start_edge(&coord, dir.path(), n, Some(&trace)))
        .collect();
    cloud.wait_for("edge connected", 2, PATIENCE);
    let id = coord.submit(dir.path(), "hello", &["sh", "-c", "echo hi"]);
    cloud.wait_for(&format!("job_id={id} state=succeeded"), 1, PATIENCE);

    let answer = get(&coord, "/metrics");
    let scrape = checked_scrape(&answer);
    let text = body(&answer);

    let v = |metric: &str, labels: &[(&str, &str)]| {
        value(&scrape, metric, labels).unwrap_or_else(|| panic!("no {metric} {labels:?}\n{text}"))
    };
    assert_eq!(v("tidemill_nodes_connected", &[]), 2.0);
    assert_eq!(v("tidemill_nodes", &[("state", "online")]), 2.0);
    assert_eq!(v("tidemill_jobs", &[("state", "succeeded")]), 1.0);
    assert!(v("tidemill_reports_stored", &[]) >= 2.0);
    for histogram in [
        "tidemill_round_duration_seconds_count",
        "tidemill_report_ingest_seconds_count",
        "tidemill_report_ack_seconds_count",
    ] {
        assert!(v(histogram, &[]) >= 1.0, "{histogram}\n{text}");
    }
    for (direction, kind) in [
        ("received", "report"),
        ("sent", "report"),
        ("sent", "command"),
        ("received", "command"),
        ("received", "control"),
        ("sent", "control"),
    ] {
        assert!(
            v(
                "tidemill_wan_bytes_total",
                &[("direction", direction), ("kind", kind)]
            ) > 0.0,
            "{direction} {kind}\n{text}"
        );
    }
    // One node series, the first in id order; the other is counted dropped.
    let seen: Vec<_> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "tidemill_node_last_seen_seconds")
        .collect();
    assert_eq!(seen.len(), 1, "{text}");
    assert_eq!(seen[0].labels.get("node_id"), Some("e1"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let last_seen = v("tidemill_node_last_seen_seconds", &[("node_id", "e1")]);
    assert!((now - last_seen).abs() < 60.0, "{last_seen} vs {now}");
    assert_eq!(v("tidemill_node_series_dropped", &[]), 1.0);
    for direction in ["sent", "received"] {
        assert!(
            v(
                "tidemill_edge_probe_bytes_total",
                &[("direction", direction)]
            ) >= 0.0
        );
    }
    assert!(
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == "tidemill_node_probe_bytes_total")
            .all(|s| s.labels.get("node_id") == Some("e1")),
        "per-node probe series only for nodes with a series\n{text}"
    );
    assert!(v("process_resident_memory_bytes", &[]) > 1e6);
    assert!(v("process_open_fds", &[]) >= 3.0);
    assert!(v("process_start_time_seconds", &[]) <= now);
}

#[test]
fn readyz_is_unready_while_the_store_cannot_be_written() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let ready = |a: &str| a.starts_with("HTTP/1.1 200");
    let answer = poll(&coord, "/readyz", ready);
    assert!(ready(&answer), "{answer}");

    // The database file is lost (moved away, as by a mistaken cleanup): the
    // coordinator's open handle still reads, but writes must not pass.
    let db = coord.data_dir.join("tidemill.db");
    let moved = coord.data_dir.join("tidemill.db.moved");
    std::fs::rename(&db, &moved).unwrap();
    let answer = poll(&coord, "/readyz", |a| !ready(a));
    assert!(
        answer.starts_with("HTTP/1.1 503")
            && body(&answer).contains("the store cannot be written")
            && body(&answer).contains("tidemill.db is no longer the file"),
        "{answer}"
    );

    std::fs::rename(&moved, &db).unwrap();
    let answer = poll(&coord, "/readyz", ready);
    assert!(ready(&answer), "{answer}");

    // The write-ahead log cannot be written (an immutable file: the
    // kernel refuses writes through open handles too, even root's, as it
    // does on a read-only or failing disk). Setting the flag needs
    // CAP_LINUX_IMMUTABLE and a file system that has it.
    let wal = coord.data_dir.join("tidemill.db-wal");
    let Some(_immutable) = Immutable::set(&wal) else {
        return;
    };
    let answer = poll(&coord, "/readyz", |a| !ready(a));
    assert!(
        answer.starts_with("HTTP/1.1 503")
            && body(&answer).contains("the store cannot be written: database"),
        "{answer}"
    );
    drop(_immutable);
    let answer = poll(&coord, "/readyz", ready);
    assert!(ready(&answer), "{answer}");
}

/// A file made immutable (`chattr +i`) until dropped.
struct Immutable(std::path::PathBuf);

impl Immutable {
    /// Makes `path` immutable, or says why it cannot and returns `None`.
    fn set(path: &std::path::Path) -> Option<Immutable> {
        match Command::new("chattr").arg("+i").arg(path).output() {
            Ok(out) if out.status.success() => Some(Immutable(path.to_owned())),
            Ok(out) => {
                eprintln!(
                    "skipping the unwritable-log case: chattr +i failed (needs root and ext4 or xfs): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                None
            }
            Err(e) => {
                eprintln!("skipping the unwritable-log case: no chattr ({e})");
                None
            }
        }
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let undone = Command::new("chattr").arg("-i").arg(&self.0).status();
        assert!(
            undone.is_ok_and(|s| s.success()),
            "chattr -i {} failed",
            self.0.display()
        );
    }
}

/// The default edge config with the status port on `listen`, guarded by a
/// token file when `token` is given; returns the config file.
fn edge_config(dir: &std::path::Path, listen: &str, token: Option<&str>) -> std::path::PathBuf {
    let defaults = Command::new(EDGE)
        .arg("print-default-config")
        .output()
        .unwrap();
    let mut config = String::from_utf8(defaults.stdout).unwrap();
    let token_file = match token {
        Some(t) => {
            let f = dir.join("status-token");
            std::fs::write(&f, format!("{t}\n")).unwrap();
            f.display().to_string()
        }
        None => String::new(),
    };
    for (key, value) in [("listen", listen), ("token_file", token_file.as_str())] {
        let default = format!("\n{key} = \"\"\n");
        assert_eq!(config.matches(&default).count(), 1, "{config}");
        config = config.replace(&default, &format!("\n{key} = {value:?}\n"));
    }
    let file = dir.join(format!("edge-{}.toml", free_port()));
    std::fs::write(&file, config).unwrap();
    file
}

/// `tidemill-edge ARGS`: its exit status, stdout and stderr.
fn edge_cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(EDGE).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn a_non_loopback_status_port_needs_a_token() {
    let dir = support::tempdir();
    let open = edge_config(dir.path(), "0.0.0.0:7491", None);
    let (ok, _, err) = edge_cli(&["config", "check", "--config", open.to_str().unwrap()]);
    assert!(
        !ok && err.contains("status.listen") && err.contains("token_file"),
        "{err}"
    );
    let guarded = edge_config(dir.path(), "0.0.0.0:7491", Some("0123456789abcdef0123"));
    let (ok, _, err) = edge_cli(&["config", "check", "--config", guarded.to_str().unwrap()]);
    assert!(ok, "{err}");
    let garbage = edge_config(dir.path(), "localhost", None);
    let (ok, _, err) = edge_cli(&["config", "check", "--config", garbage.to_str().unwrap()]);
    assert!(!ok && err.contains("HOST:PORT"), "{err}");
}

#[test]
fn the_edge_status_port_answers_checks_and_refuses() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    let port = free_port();
    let token = "status-token-0123456789";
    let config = edge_config(dir.path(), &format!("0.0.0.0:{port}"), Some(token));
    let data_dir = dir.path().join("e1");
    let mut cmd = support::replaying_edge(&coord, &config, dir.path(), "e1", &trace, "e1");
    cmd.args(["--sample-interval", "0.2"])
        .env("RUST_LOG", "info");
    let edge = Proc::spawn("e1", cmd);
    edge.wait_for("status port listening", 1, PATIENCE);
    cloud.wait_for("edge connected", 1, PATIENCE);
    let addr = format!("127.0.0.1:{port}");
    let get = |path: &str, auth: Option<&str>| {
        let header = auth.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        raw(
            &addr,
            &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{header}Connection: close\r\n\r\n"),
        )
    };

    // Without the token, or with another, nothing is served.
    for auth in [None, Some("status-token-0123456780"), Some("")] {
        let answer = get("/status", auth);
        assert!(answer.starts_with("HTTP/1.1 401"), "{auth:?}: {answer}");
        assert!(!answer.contains(token), "{answer}");
    }
    // Ready once a report has been acknowledged: bounded polling.
    let deadline = Instant::now() + PATIENCE;
    let status: serde_json::Value = loop {
        let answer = get("/status", Some(token));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let status: serde_json::Value = serde_json::from_str(body(&answer)).unwrap();
        if !status["last_ack_ms"].is_null() || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status["node_id"], "e1", "{status}");
    assert_eq!(status["connection"], "connected", "{status}");
    assert!(status["last_ack_ms"].as_i64().is_some(), "{status}");
    assert!(status["journal_backlog"].as_u64().is_some(), "{status}");
    assert_eq!(status["tasks"], serde_json::json!([]), "{status}");
    // The edge forecasts at its first sample; the summary is what it said.
    assert!(
        status["forecast"]["issued_ms"].as_i64().is_some(),
        "{status}"
    );

    let scrape = checked_scrape(&get("/metrics", Some(token)));
    let v = |metric: &str| value(&scrape, metric, &[]).unwrap_or_else(|| panic!("no {metric}"));
    assert_eq!(v("tidemill_edge_connected"), 1.0);
    assert!(v("tidemill_edge_samples_total") >= 1.0);
    assert!(v("tidemill_edge_last_ack_age_seconds") < 60.0);
    assert!(v("tidemill_edge_journal_backlog") >= 0.0);
    assert_eq!(v("tidemill_edge_tasks_running"), 0.0);
    assert!(v("process_resident_memory_bytes") > 1e6);
    assert!(value(&scrape, "tidemill_build_info", &[]).is_some());

    // Bad input: an unknown path, another method, garbage, an oversized head.
    let unknown = get("/nope", Some(token));
    assert!(unknown.starts_with("HTTP/1.1 404"), "{unknown}");
    let post = raw(
        &addr,
        &format!(
            "POST /status HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let garbage = raw(&addr, "\x16\x03\x01 not http at all\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    let huge = raw(
        &addr,
        &format!(
            "GET /status HTTP/1.1\r\nHost: t\r\nX-Filler: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        ),
    );
    assert!(huge.starts_with("HTTP/1.1 431"), "{huge}");
    // The port still serves after all that.
    assert!(get("/status", Some(token)).starts_with("HTTP/1.1 200"));

    // `tidemill-edge status` asks the port with the config's token...
    let config = config.to_str().unwrap();
    let (ok, out, err) = edge_cli(&["status", "--config", config]);
    assert!(ok, "{err}");
    assert!(
        out.contains("connection       connected") && out.contains("tasks            none"),
        "{out}"
    );
    let (ok, out, err) = edge_cli(&["status", "--config", config, "--json"]);
    assert!(ok, "{err}");
    let asked: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(asked["connection"], "connected", "{asked}");
    // ...and reads the journal with only a data dir: the connection unknown.
    let (ok, out, err) = edge_cli(&["status", "--data-dir", data_dir.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let read: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(read["connection"], "unknown", "{read}");
    assert!(read["last_ack_ms"].as_i64().is_some(), "{read}");
    let (ok, out, err) = edge_cli(&[
        "status",
        "--data-dir",
        dir.path().join("nowhere").to_str().unwrap(),
    ]);
    assert!(
        !ok && out.is_empty() && err.contains("edge-journal.db"),
        "{err}"
    );
    drop(edge);
}
