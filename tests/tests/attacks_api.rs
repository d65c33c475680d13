//! Attacks on the operator API (issue 28), each against a real coordinator:
//! loopback is no credential, a malformed `Authorization` header falls back to
//! nothing, job code on the coordinator's host gets no admin token, a header
//! flood from many addresses leaves `/healthz` answered, one address over
//! its cap is refused at once, and another token cannot read a job's output.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use support::{Coordinator, PATIENCE, Proc, rss_kib, start_edge, write_trace};

/// An API token of `scope`, made by the CLI with the local admin token.
fn api_token(coord: &Coordinator, scope: &str) -> String {
    let out = coord.cli(&["api-token", "create", "--scope", scope]);
    out.lines().last().unwrap().trim().to_string()
}

/// How many admin-scope API tokens exist.
fn admin_tokens(coord: &Coordinator) -> usize {
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["api-token", "list", "--json"])).unwrap();
    list.iter().filter(|t| t["scope"] == "admin").count()
}

/// Submits `command` as a job with API token `token`, waits until it has
/// ended, and returns its id.
fn run_job_as(coord: &Coordinator, cloud: &Proc, dir: &Path, token: &str, command: &[&str]) -> u64 {
    let file = dir.join("attack.toml");
    let command: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    std::fs::write(
        &file,
        format!(
            "name = \"attack\"\ncommand = [{}]\ndeadline = \"2099-01-01T00:00:00Z\"\n",
            command.join(", ")
        ),
    )
    .unwrap();
    let id: u64 = coord
        .cli(&[
            "jobs",
            "submit",
            "--file",
            file.to_str().unwrap(),
            "--api-token",
            token,
        ])
        .trim()
        .parse()
        .unwrap();
    let ended = [
        format!("job_id={id} state=succeeded"),
        format!("job_id={id} state=failed"),
    ];
    cloud.wait_until("the job's end", 1, PATIENCE, |l| {
        ended.iter().any(|e| l.contains(e.as_str()))
    });
    id
}

#[test]
fn loopback_without_a_token_is_refused() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let admin_before = admin_tokens(&coord);
    let (status, body) = coord.request("POST", "/v1/api-tokens", None, br#"{"scope":"admin"}"#);
    assert_eq!(status, 401, "{body}");
    assert!(
        body.contains("Bearer") && body.contains("admin-token"),
        "{body}"
    );
    let (status, body) = coord.request("GET", "/v1/jobs", None, b"");
    assert_eq!(status, 401, "{body}");
    assert_eq!(admin_tokens(&coord), admin_before);
    // The CLI with no token and no admin token file says where it looked.
    let elsewhere = dir.path().join("elsewhere");
    let out = std::process::Command::new(support::CLOUD)
        .args(["nodes", "--api", &coord.api, "--data-dir"])
        .arg(&elsewhere)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("401") && err.contains(&format!("{}/admin-token", elsewhere.display())),
        "{err}"
    );
    // Health needs no token.
    for path in ["/healthz", "/livez"] {
        assert_eq!(coord.request("GET", path, None, b"").0, 200, "{path}");
    }
}

#[test]
fn the_bearer_scheme_is_read_in_any_case_and_a_malformed_header_falls_back_to_nothing() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let admin = coord.admin_token();
    let create = br#"{"scope":"admin","description":"attack"}"#;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let (status, body) = coord.request(
            "GET",
            "/v1/api-tokens",
            Some(&format!("{scheme} {admin}")),
            b"",
        );
        assert_eq!(status, 200, "{scheme}: {body}");
    }
    let before = admin_tokens(&coord);
    for (header, says) in [
        ("bearer", "no token"),
        ("Bearer   ", "no token"),
        ("Basic YWRtaW46YWRtaW4=", "Bearer scheme"),
        ("Bearer garbage", "unknown or revoked"),
        ("bearer tmaforged.notasecret", "unknown or revoked"),
        ("Token x", "Bearer scheme"),
    ] {
        let (status, body) = coord.request("POST", "/v1/api-tokens", Some(header), create);
        assert_eq!(status, 401, "{header:?}: {body}");
        assert!(body.contains(says), "{header:?}: {body}");
    }
    // Bytes that are not text: a 401 too, never admin.
    let (status, body) = coord.request(
        "POST",
        "/v1/api-tokens",
        Some("Bearer \u{e9}t\u{e9}"),
        create,
    );
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("not plain text"), "{body}");
    assert_eq!(
        admin_tokens(&coord),
        before,
        "no header made an admin token"
    );
    assert!(
        !cloud
            .log()
            .join("\n")
            .contains(admin.split('.').nth(1).unwrap()),
        "the admin token's secret is in no log line"
    );
}

/// What the task runs: it asks the coordinator's loopback API for an admin
/// token with no token, and with malformed headers, and prints the answers.
const GRAB_ADMIN: &str = r#"
import sys, urllib.request, urllib.error
url = "http://127.0.0.1:%s/v1/api-tokens" % sys.argv[1]
for auth in [None, "bearer x", "bearer", "Basic eDp5"]:
    req = urllib.request.Request(url, data=b'{"scope":"admin"}', method="POST",
                                 headers={"Content-Type": "application/json"})
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            print("GRANTED", r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print("refused", e.code)
    except Exception as e:
        print("unreachable", type(e).__name__)
"#;

#[test]
fn job_code_on_the_coordinators_host_gets_no_admin_token() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    // The task shares the host's network, as a distributed task does (a
    // single-node one gets a network of its own: attacks_host), so it does
    // reach the API on 127.0.0.1: what stops it is the missing credential.
    let mut edge = support::edge_command(&coord, dir.path(), "e1", Some(&trace));
    edge.env("TIDEMILL_TASKS__NETWORK", "host");
    let _e1 = Proc::spawn("e1", edge);
    cloud.wait_for("edge connected", 1, PATIENCE);
    let submitter = api_token(&coord, "submit");
    let before = admin_tokens(&coord);
    let port = coord.api.rsplit(':').next().unwrap().to_string();
    let id = run_job_as(
        &coord,
        &cloud,
        dir.path(),
        &submitter,
        &["python3", "-c", GRAB_ADMIN, &port],
    );
    let job = coord.job(id);
    let tail: Vec<String> = job["output_tail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect();
    eprintln!("the task's attempts: {tail:?}");
    assert_eq!(tail.len(), 4, "the task ran its four attempts: {job:#}");
    assert!(tail.iter().all(|l| l == "refused 401"), "{tail:?}");
    assert_eq!(admin_tokens(&coord), before, "no new admin token exists");
}

/// Opens a connection to `api` from `from` (any port).
async fn connect_from(from: IpAddr, api: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(api).await
}

/// Times `GET path` on a fresh connection from 127.0.0.1; returns the time
/// and the status line.
fn timed_get(api: SocketAddr, path: &str) -> (Duration, String) {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&api, PATIENCE).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let status = answer.lines().next().unwrap_or("").to_string();
    (start.elapsed(), status)
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Connections the flood opens, and how many come from each address (each
/// address within its cap).
const FLOOD: usize = 3_000;
const PER_ADDRESS: usize = 50;

#[test]
fn a_header_flood_from_many_addresses_leaves_health_answered() {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    // Headers may take a minute here, so that the whole flood is open at once.
    let cloud = coord.start_with(&[
        ("header_timeout_secs = 5", "header_timeout_secs = 60"),
        ("request_timeout_secs = 10", "request_timeout_secs = 60"),
        (
            "max_connections_per_address = 64",
            &format!("max_connections_per_address = {PER_ADDRESS}"),
        ),
    ]);
    let api: SocketAddr = coord.api.trim_start_matches("http://").parse().unwrap();
    let before = rss_kib(cloud.pid());
    let fds_before = open_fds(cloud.pid());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let address = |k: usize| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + (k / PER_ADDRESS) as u8));
    // Connections that never send a byte of their headers.
    let flood: Vec<tokio::net::TcpStream> = rt.block_on(async {
        let mut open = Vec::with_capacity(FLOOD);
        for k in 0..FLOOD {
            open.push(connect_from(address(k), api).await.unwrap());
        }
        open
    });
    // The coordinator has accepted and holds every one of them.
    let deadline = Instant::now() + PATIENCE;
    while open_fds(cloud.pid()) < fds_before + FLOOD && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = open_fds(cloud.pid()) - fds_before;
    assert!(
        held >= FLOOD,
        "the coordinator holds {held} of the {FLOOD} connections"
    );

    let mut timings = Vec::new();
    for path in ["/healthz", "/livez", "/readyz", "/healthz", "/healthz"] {
        let (took, status) = timed_get(api, path);
        // Readiness may say 503 (not ready), but it answers.
        let ok = if path == "/readyz" {
            "HTTP/1.1 "
        } else {
            "HTTP/1.1 200"
        };
        assert!(status.starts_with(ok), "{path}: {status:?}");
        timings.push(took);
    }
    let during = rss_kib(cloud.pid());
    let worst = timings.iter().max().unwrap();
    eprintln!(
        "header flood: {FLOOD} connections from {} addresses held open; /healthz, /livez, /readyz answered in {:?} (worst {worst:?}); coordinator RSS {before} KiB before, {during} KiB during",
        FLOOD.div_ceil(PER_ADDRESS),
        timings
    );
    assert!(*worst < Duration::from_secs(5), "{timings:?}");
    assert!(during < before + 128 * 1024, "RSS {during} KiB");

    // One more from a flooding address is over its cap: closed at once,
    // while /healthz from another address is answered.
    let over = rt
        .block_on(connect_from(address(0), api))
        .unwrap()
        .into_std()
        .unwrap();
    over.set_nonblocking(false).unwrap();
    over.set_read_timeout(Some(PATIENCE)).unwrap();
    let started = Instant::now();
    let closed = match (&over).read(&mut [0; 16]) {
        Ok(0) => true,
        Err(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        Ok(_) => false,
    };
    assert!(
        closed,
        "a connection over its address's cap was not closed (waited {:?})",
        started.elapsed()
    );
    let (took, status) = timed_get(api, "/healthz");
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    eprintln!(
        "over the per-address cap: closed in {:?}; /healthz from 127.0.0.1 meanwhile in {took:?}",
        started.elapsed()
    );
    drop(flood);
}

#[test]
fn another_token_cannot_read_a_jobs_output() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    let _e1 = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);
    let owner = api_token(&coord, "submit");
    let id = run_job_as(
        &coord,
        &cloud,
        dir.path(),
        &owner,
        &["sh", "-c", "echo owner-only-$((6 * 7))"],
    );
    let show = |token: &str| {
        let (status, body) = coord.request(
            "GET",
            &format!("/v1/jobs/{id}"),
            Some(&format!("Bearer {token}")),
            b"",
        );
        assert_eq!(status, 200, "{body}");
        body
    };
    let list = |token: &str| {
        coord
            .request("GET", "/v1/jobs", Some(&format!("Bearer {token}")), b"")
            .1
    };
    assert!(show(&owner).contains("owner-only-42"));
    assert!(show(&coord.admin_token()).contains("owner-only-42"));
    for scope in ["submit", "read"] {
        let other = api_token(&coord, scope);
        for seen in [show(&other), list(&other)] {
            assert!(!seen.contains("owner-only-42"), "{scope}: {seen}");
            assert!(
                seen.contains("output withheld") && seen.contains("only its own token"),
                "{scope}: {seen}"
            );
        }
        let cli = coord.cli(&["jobs", "show", &id.to_string(), "--api-token", &other]);
        assert!(
            !cli.contains("owner-only-42") && cli.contains("withheld"),
            "{cli}"
        );
    }
}
