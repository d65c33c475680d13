//! The WAN relay through real UDP sockets on 127.0.0.1: delay, loss, outages,
//! bad input, many clients, and the shipped scenarios. Every wait is bounded.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_sim::wan::relay::{Counted, Relay};
use tidemill_sim::wan::scenario::{Impairment, PathSpec, Scenario, ScenarioError, Window};
use tokio::net::UdpSocket;
use tokio::time::{Instant, timeout};

/// Waits on any one datagram at most this long when it is expected.
const EXPECT: Duration = Duration::from_secs(2);
/// Waits this long to show that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);

/// An echo server on a free port; the set collects the peers it has seen.
async fn echo_server() -> (SocketAddr, Arc<Mutex<HashSet<SocketAddr>>>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    (addr, serve_echo(socket))
}

fn serve_echo(socket: UdpSocket) -> Arc<Mutex<HashSet<SocketAddr>>> {
    let peers = Arc::new(Mutex::new(HashSet::new()));
    let seen = peers.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_535];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            seen.lock().unwrap().insert(from);
            let _ = socket.send_to(&buf[..n], from).await;
        }
    });
    peers
}

fn path(upstream: SocketAddr, imp: Impairment) -> PathSpec {
    PathSpec {
        name: "test".into(),
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream,
        up: imp.clone(),
        down: imp,
        outage: Vec::new(),
        flap: Vec::new(),
    }
}

/// Starts a relay for `spec` and returns where to send.
async fn relay(spec: PathSpec) -> SocketAddr {
    let relay = Relay::bind(spec, 1).await.unwrap();
    let addr = relay.local_addr();
    tokio::spawn(relay.run());
    addr
}

async fn client(relay: SocketAddr) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(relay).await.unwrap();
    socket
}

/// The next datagram within `within`, or None.
async fn recv(socket: &UdpSocket, within: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 65_535];
    let n = timeout(within, socket.recv(&mut buf)).await.ok()?.unwrap();
    Some(buf[..n].to_vec())
}

/// Sends `probe` every 50 ms until its echo comes back; when, or None after `within`.
async fn probe_until_echo(socket: &UdpSocket, probe: &[u8], within: Duration) -> Option<Instant> {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let wait = async {
        let mut buf = vec![0u8; 65_535];
        loop {
            tokio::select! {
                _ = tick.tick() => { socket.send(probe).await.unwrap(); }
                got = socket.recv(&mut buf) => {
                    if let Ok(n) = got && &buf[..n] == probe {
                        return Instant::now();
                    }
                }
            }
        }
    };
    timeout(within, wait).await.ok()
}

#[tokio::test]
async fn fifty_ms_each_way_gives_at_least_a_100_ms_round_trip() {
    let (echo, _) = echo_server().await;
    let imp = Impairment {
        delay_ms: 50.0,
        ..Impairment::default()
    };
    let sock = client(relay(path(echo, imp)).await).await;
    for i in 0..3u8 {
        let sent = Instant::now();
        sock.send(&[i; 100]).await.unwrap();
        let reply = recv(&sock, EXPECT).await.expect("an echo within 2 s");
        let rtt = sent.elapsed();
        assert_eq!(reply, vec![i; 100]);
        assert!(
            rtt >= Duration::from_millis(100) && rtt < Duration::from_millis(400),
            "rtt {rtt:?}"
        );
    }
}

#[tokio::test]
async fn loss_one_drops_everything_and_loss_zero_delivers_everything() {
    let (echo, _) = echo_server().await;
    let lossy = Impairment {
        loss: 1.0,
        ..Impairment::default()
    };
    let sock = client(relay(path(echo, lossy)).await).await;
    for i in 0..20u8 {
        sock.send(&[i]).await.unwrap();
    }
    assert_eq!(recv(&sock, QUIET).await, None);

    let sock = client(relay(path(echo, Impairment::default())).await).await;
    for i in 0..50u8 {
        sock.send(&[i]).await.unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..50 {
        got.push(recv(&sock, EXPECT).await.expect("every datagram back")[0]);
    }
    got.sort_unstable();
    assert_eq!(got, (0..50).collect::<Vec<u8>>());
}

#[tokio::test]
async fn an_outage_drops_during_the_window_and_delivers_after_it() {
    let (echo, _) = echo_server().await;
    let mut spec = path(echo, Impairment::default());
    spec.outage.push(Window {
        start_s: 0.0,
        end_s: 0.5,
    });
    // The relay's clock starts after t0, so its window ends at t0 + 0.5 s or later.
    let t0 = Instant::now();
    let sock = client(relay(spec).await).await;
    sock.send(b"during").await.unwrap();
    assert_eq!(recv(&sock, Duration::from_millis(200)).await, None);
    let back = probe_until_echo(&sock, b"after", Duration::from_secs(3))
        .await
        .expect("delivered once the outage is over");
    assert!(back - t0 >= Duration::from_millis(500), "{:?}", back - t0);
}

#[tokio::test]
async fn garbage_and_a_65000_byte_datagram_do_not_stop_the_relay() {
    let (echo, _) = echo_server().await;
    let sock = client(relay(path(echo, Impairment::default())).await).await;
    sock.send(&[]).await.unwrap();
    sock.send(&[0xff, 0x00, 0x13, 0x37, 0xc0]).await.unwrap();
    let big: Vec<u8> = (0..65_000u32).map(|i| (i % 251) as u8).collect();
    sock.send(&big).await.unwrap();
    // The relay does not parse: what it gets, it passes on unchanged.
    assert_eq!(recv(&sock, EXPECT).await.unwrap(), Vec::<u8>::new());
    assert_eq!(
        recv(&sock, EXPECT).await.unwrap(),
        vec![0xff, 0x00, 0x13, 0x37, 0xc0]
    );
    assert_eq!(recv(&sock, EXPECT).await.unwrap(), big);
    sock.send(b"still here").await.unwrap();
    assert_eq!(recv(&sock, EXPECT).await.unwrap(), b"still here");
}

#[tokio::test]
async fn an_unreachable_upstream_does_not_stop_the_relay() {
    // A port nobody listens on: the relay's sends draw ICMP port unreachable.
    let gone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let upstream = gone.local_addr().unwrap();
    drop(gone);
    let sock = client(relay(path(upstream, Impairment::default())).await).await;
    for _ in 0..5 {
        sock.send(b"anyone?").await.unwrap();
    }
    assert_eq!(recv(&sock, QUIET).await, None);
    // The upstream comes up on that port; the same client gets through.
    serve_echo(UdpSocket::bind(upstream).await.unwrap());
    probe_until_echo(&sock, b"now?", Duration::from_secs(3))
        .await
        .expect("relayed once the upstream listens");
}

#[tokio::test]
async fn each_client_gets_its_own_upstream_peer_and_its_own_replies() {
    let (echo, peers) = echo_server().await;
    let addr = relay(path(echo, Impairment::default())).await;
    let (a, b) = (client(addr).await, client(addr).await);
    a.send(b"from a").await.unwrap();
    b.send(b"from b").await.unwrap();
    assert_eq!(recv(&a, EXPECT).await.unwrap(), b"from a");
    assert_eq!(recv(&b, EXPECT).await.unwrap(), b"from b");
    assert_eq!(peers.lock().unwrap().len(), 2);
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_shipped_scenario_parses() {
    let dir = repo_root().join("configs/wan");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().path();
        if file.extension().is_some_and(|e| e == "toml") {
            let scenario = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert!(!scenario.path.is_empty(), "{}", file.display());
            names.push(file.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(names, ["mec-good.toml", "rural-lte.toml", "satellite.toml"]);
}

const BAD_LOSS: &str = r#"
[[path]]
name = "edge-1"
listen = "127.0.0.1:0"
upstream = "127.0.0.1:7400"
[path.up]
loss = 2
"#;

#[test]
fn a_bad_scenario_names_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, BAD_LOSS).unwrap();
    let e = Scenario::load(&file).unwrap_err();
    assert!(matches!(e, ScenarioError::Invalid { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.starts_with(&file.display().to_string()), "{msg}");
    assert!(msg.contains("path \"edge-1\" up.loss = 2"), "{msg}");
    assert!(msg.contains("divide a percentage by 100"), "{msg}");

    std::fs::write(&file, BAD_LOSS.replace("loss = 2", "rate_mbs = 5")).unwrap();
    let msg = Scenario::load(&file).unwrap_err().to_string();
    assert!(msg.starts_with(&file.display().to_string()), "{msg}");
    assert!(msg.contains("unknown field `rate_mbs`"), "{msg}");
}

#[tokio::test]
async fn the_binary_reports_a_bad_scenario_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, BAD_LOSS).unwrap();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_tidemill-sim"))
        .args(["wan", "--scenario"])
        .arg(&file)
        .kill_on_drop(true)
        .output();
    let out = timeout(Duration::from_secs(5), run)
        .await
        .expect("exits at once")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("bad.toml: path \"edge-1\" up.loss = 2"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn the_relay_counts_what_each_side_sends_through_it() {
    let (upstream, _) = echo_server().await;
    let relay = Relay::bind(path(upstream, Impairment::default()), 1)
        .await
        .unwrap();
    let (addr, traffic) = (relay.local_addr(), relay.traffic());
    assert_eq!(traffic.smallest_up(), None);
    tokio::spawn(relay.run());
    let socket = client(addr).await;
    for size in [100, 30] {
        socket.send(&vec![7; size]).await.unwrap();
        assert_eq!(recv(&socket, EXPECT).await.map(|d| d.len()), Some(size));
    }
    let both = Counted {
        datagrams: 2,
        bytes: 130,
    };
    assert_eq!((traffic.up(), traffic.down()), (both, both));
    assert_eq!(traffic.smallest_up(), Some(30));
}
