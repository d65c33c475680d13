//! 3 000 idle connections to the operator API from one address leave the
//! coordinator's memory bounded: all but `[api] max_connections_per_address`
//! are closed at once, and the API serves that address again once the header
//! deadline cuts the ones it held. In a file of its own: its 3 000 client
//! ports must not race the free ports other tests pick.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{Coordinator, PATIENCE, rss_kib};

#[test]
fn three_thousand_idle_connections_leave_memory_bounded() {
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start_with(&[("header_timeout_secs = 5", "header_timeout_secs = 1")]);
    let before = rss_kib(cloud.pid());
    let addr = coord.api.trim_start_matches("http://").to_string();
    let idle: Vec<TcpStream> = (0..3_000)
        .map(|_| {
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap()
        })
        .collect();
    let during = rss_kib(cloud.pid());
    eprintln!(
        "coordinator RSS {before} KiB before, {during} KiB with {} idle API connections opened",
        idle.len()
    );
    assert!(during < 40 * 1024, "RSS {during} KiB");
    // The held ones are cut at the header deadline, and the API serves this
    // address again: polled, bounded.
    let deadline = Instant::now() + PATIENCE;
    let answer = loop {
        let mut health = TcpStream::connect(&addr).unwrap();
        health.set_read_timeout(Some(PATIENCE)).unwrap();
        let _ = health
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidemill\r\nConnection: close\r\n\r\n");
        let mut answer = String::new();
        let _ = health.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 200") || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(idle);
}
