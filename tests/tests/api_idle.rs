//! 3 000 idle connections to the operator API leave the coordinator's memory
//! bounded, and the API serves again once the header deadline cuts them. In
//! a file of its own: its 3 000 client ports must not race the free ports
//! other tests pick.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use support::{Coordinator, PATIENCE};

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn three_thousand_idle_connections_leave_memory_bounded() {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[("request_timeout_secs = 10", "request_timeout_secs = 1")]);
    let before = rss_kib(cloud.pid());
    let addr = coord.api.trim_start_matches("http://").to_string();
    let idle: Vec<TcpStream> = (0..3_000)
        .map(|_| {
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap()
        })
        .collect();
    let during = rss_kib(cloud.pid());
    eprintln!(
        "coordinator RSS {before} KiB before, {during} KiB with {} idle API connections open",
        idle.len()
    );
    assert!(during < 40 * 1024, "RSS {during} KiB");
    // The idle ones are cut at the header deadline, and the API serves again.
    let mut health = TcpStream::connect(&addr).unwrap();
    health.set_read_timeout(Some(PATIENCE)).unwrap();
    health
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidemill\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = health.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(idle);
}
