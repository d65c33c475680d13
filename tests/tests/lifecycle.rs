//! Operations: one coordinator per data dir, and liveness and readiness
//! endpoints that mean something.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{CLOUD, Coordinator, PATIENCE};

#[test]
fn a_second_coordinator_on_the_same_data_dir_is_refused() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let out = Command::new(CLOUD)
        .args([
            "serve",
            "--quic-listen",
            "127.0.0.1:0",
            "--api-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&coord.data_dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("another tidemill-cloud") && err.contains(&format!("pid {}", cloud.pid())),
        "{err}"
    );
}

#[test]
fn liveness_and_readiness_answer() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let get = |path: &str| {
        let addr = coord.api.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        use std::io::{Read, Write};
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            coord.admin_token()
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    assert!(get("/livez").starts_with("HTTP/1.1 200"));
    // Ready once the first round has finished: poll, bounded.
    let deadline = Instant::now() + PATIENCE;
    let ready = loop {
        let answer = get("/readyz");
        if answer.starts_with("HTTP/1.1 200") || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let metrics = get("/metrics");
    assert!(
        metrics.contains("content-type: text/plain; version=0.0.4")
            && metrics.contains("# HELP tidemill_build_info")
            && metrics.contains("tidemill_build_info{version=")
            && metrics.contains("# HELP tidemill_refused_identity_total"),
        "{metrics}"
    );
}
