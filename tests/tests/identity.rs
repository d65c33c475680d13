//! Who may be an edge: a join token pinned to the CA buys a node certificate,
//! every connection is mutual TLS, and a node id belongs to its certificate.
//! Real processes throughout.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use rustls::pki_types::pem::PemObject;
use support::{Coordinator, EDGE, PATIENCE, Proc, start_edge, write_trace};
use tidemill_cloud::client::Client;

/// Runs `tidemill-edge args…` to its end; returns whether it succeeded and
/// its stderr.
fn edge(args: &[&str]) -> (bool, String) {
    let out = Command::new(EDGE)
        .args(args)
        .output()
        .expect("run tidemill-edge");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tidemill-edge join` as `node` with `token` into `data`.
fn join(coord: &Coordinator, node: &str, token: &str, data: &Path) -> (bool, String) {
    edge(&[
        "join",
        "--coordinator",
        &coord.quic.to_string(),
        "--node-id",
        node,
        "--token",
        token,
        "--data-dir",
        data.to_str().unwrap(),
    ])
}

/// A token made with `token create` and `flags`.
fn token(coord: &Coordinator, flags: &[&str]) -> String {
    let out = coord.cli(&[&["token", "create"], flags].concat());
    out.lines().last().unwrap().trim().to_string()
}

/// The value of a counter in the coordinator's /metrics.
fn metric(coord: &Coordinator, name: &str) -> u64 {
    let text = Client::new(&coord.api, &coord.admin_token())
        .metrics()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn only_a_valid_token_makes_an_edge_and_then_no_ca_is_copied() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let quic = coord.quic.to_string();

    // No token and no certificate: the edge says how to get one.
    let bare = dir.path().join("bare");
    let (ok, err) = edge(&[
        "run",
        "--coordinator",
        &quic,
        "--data-dir",
        bare.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("tidemill-cloud token create"), "{err}");

    // A revoked token.
    let revoked = token(&coord, &["--uses", "1"]);
    let id = revoked
        .split("::")
        .nth(1)
        .unwrap()
        .split('.')
        .next()
        .unwrap();
    coord.cli(&["token", "revoke", id]);
    let (ok, err) = join(&coord, "e1", &revoked, &dir.path().join("e1"));
    assert!(!ok && err.contains("was revoked"), "{err}");

    // A wrong secret: its last character changed to another one.
    let last = if revoked.ends_with('x') { 'y' } else { 'x' };
    let forged = format!("{}{last}", &revoked[..revoked.len() - 1]);
    let (ok, err) = join(&coord, "e1", &forged, &dir.path().join("e1"));
    assert!(
        !ok && err.contains("unknown or its secret is wrong"),
        "{err}"
    );

    // An expired token: it works for one second.
    let expiring = token(&coord, &["--ttl", "1s"]);
    let listed: Vec<serde_json::Value> =
        serde_json::from_str(&coord.cli(&["token", "list", "--json"])).unwrap();
    let expires = listed
        .iter()
        .find_map(|t| t["expires_ms"].as_i64())
        .expect("the expiring token is listed with its expiry");
    while support::cluster::now_ms() <= expires {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (ok, err) = join(&coord, "e1", &expiring, &dir.path().join("e1"));
    assert!(!ok && err.contains("has expired"), "{err}");

    // A token pinned to another CA: the edge refuses the coordinator.
    let good = token(&coord, &["--uses", "1", "--description", "e1"]);
    let other_ca = format!("K10{}{}", "0".repeat(64), &good[67..]);
    let (ok, err) = join(&coord, "e1", &other_ca, &dir.path().join("e1"));
    assert!(
        !ok && err.contains("does not match the join token's pin"),
        "{err}"
    );

    // A valid token: the edge joins, stores its credentials privately, and
    // runs with them, no ca.pem copied by hand and no token any more.
    let data = dir.path().join("e1");
    let (ok, err) = join(&coord, "e1", &good, &data);
    assert!(ok, "{err}");
    for f in ["node.pem", "node-key.pem", "ca.pem"] {
        let mode = std::fs::metadata(data.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the data dir");
    let mut run = Command::new(EDGE);
    run.args([
        "run",
        "--coordinator",
        &quic,
        "--node-id",
        "e1",
        "--data-dir",
    ])
    .arg(&data)
    .args(["--sample-interval", "0.2"]);
    let _e1 = Proc::spawn("e1", run);
    cloud.wait_until("e1 connected", 1, PATIENCE, |l| {
        l.contains("edge connected") && l.contains("node_id=e1 ")
    });
    // The one-use token is spent.
    let (ok, err) = join(&coord, "e2", &good, &dir.path().join("e2"));
    assert!(!ok && err.contains("no uses left"), "{err}");
    assert_eq!(metric(&coord, "tidemill_joins_total"), 1);
    // Revoked, forged, expired and spent; the wrong pin never reached it.
    assert_eq!(metric(&coord, "tidemill_refused_identity_total"), 4);
    // No secret reaches the log or the listing.
    let secret = good.rsplit('.').next().unwrap();
    assert!(!cloud.log().join("\n").contains(secret));
    assert!(!coord.cli(&["token", "list", "--json"]).contains(secret));
}

#[test]
fn an_impostor_cannot_take_a_node_id() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_trace(dir.path(), &["e1"]);
    let _e1 = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_until("e1 connected", 1, PATIENCE, |l| {
        l.contains("edge connected") && l.contains("node_id=e1 ")
    });
    cloud.wait_until("a forecast from e1", 1, 2 * PATIENCE, |l| {
        l.contains("forecast stored") && l.contains("node_id=e1 ")
    });
    let forecast_before = coord.cli(&["forecast", "e1", "--json"]);

    // 1. A token holder asks for e1's certificate: refused while e1 has one.
    let (ok, err) = join(&coord, "e1", coord.token(), &dir.path().join("thief"));
    assert!(
        !ok && err.contains("node e1 already has a certificate"),
        "{err}"
    );

    // 2. A process with e9's certificate says it is e1: refused, again and again.
    let e9 = dir.path().join("e9");
    let (ok, err) = join(&coord, "e9", coord.token(), &e9);
    assert!(ok, "{err}");
    let mut cmd = Command::new(EDGE);
    cmd.args([
        "run",
        "--coordinator",
        &coord.quic.to_string(),
        "--node-id",
        "e1",
    ])
    .arg("--data-dir")
    .arg(&e9)
    .args(["--sample-interval", "0.2"])
    .args(["--replay"])
    .arg(&trace)
    .args(["--replay-node", "e1", "--speed", "1"]);
    let mut impostor = Proc::spawn("impostor", cmd);
    cloud.wait_until("the impostor refused twice", 2, PATIENCE, |l| {
        l.contains("refused a connection")
            && l.contains("a hello as node e1 over the certificate of node e9")
    });
    impostor.kill9();

    // e1 was never evicted, its forecast is its own, its ledger has no gap.
    let connects = cloud
        .log()
        .iter()
        .filter(|l| l.contains("edge connected") && l.contains("node_id=e1 "))
        .count();
    assert_eq!(connects, 1, "e1 connected once and was never replaced");
    let forecast_after = coord.cli(&["forecast", "e1", "--json"]);
    let method = |f: &str| serde_json::from_str::<serde_json::Value>(f).unwrap()["method"].clone();
    assert_eq!(method(&forecast_before), method(&forecast_after));
    let (_, last, seqs) = coord
        .stored_report_seqs()
        .into_iter()
        .find(|(id, ..)| id == "e1")
        .unwrap();
    assert_eq!(
        seqs,
        (1..=last).collect::<Vec<_>>(),
        "e1's ledger has no gap"
    );
    assert!(metric(&coord, "tidemill_refused_identity_total") >= 3);

    // 3. The operator removes e1: its certificate is refused from then on.
    coord.cli(&["nodes", "remove", "e1"]);
    cloud.wait_until("e1's revoked certificate refused", 1, PATIENCE, |l| {
        l.contains("refused a connection")
            && l.contains("the certificate of node e1")
            && l.contains("was revoked")
    });
}

#[test]
fn a_certificate_is_renewed_without_losing_the_connection() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    // Certificates last 365 days: renewing 400 days ahead makes the edge
    // renew as soon as it is connected.
    let defaults = Command::new(EDGE)
        .arg("print-default-config")
        .output()
        .unwrap();
    let config = String::from_utf8(defaults.stdout)
        .unwrap()
        .replace("renew_before_days = 30", "renew_before_days = 400");
    let config_file = dir.path().join("edge.toml");
    std::fs::write(&config_file, config).unwrap();
    let data = dir.path().join("e1");
    let mut cmd = Command::new(EDGE);
    cmd.args(["run", "--config"])
        .arg(&config_file)
        .args([
            "--coordinator",
            &coord.quic.to_string(),
            "--node-id",
            "e1",
            "--token",
            coord.token(),
        ])
        .arg("--data-dir")
        .arg(&data)
        .args(["--sample-interval", "0.2"]);
    let e1 = Proc::spawn("e1", cmd);
    cloud.wait_for("certificate renewed", 1, PATIENCE);
    e1.wait_for(
        "certificate renewed; the next connection uses it",
        1,
        PATIENCE,
    );
    let renewed = std::fs::read(data.join("node.pem")).unwrap();
    // The connection it renewed over was never dropped.
    let connects = |p: &Proc| {
        p.log()
            .iter()
            .filter(|l| l.contains("edge connected"))
            .count()
    };
    assert_eq!(connects(&cloud), 1);

    // The next connection, after a coordinator restart, uses the new certificate.
    cloud.kill9();
    let cloud = coord.start();
    cloud.wait_for("edge connected", 1, PATIENCE);
    let fingerprint = |pem: &[u8]| {
        let der = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
            .next()
            .unwrap()
            .unwrap();
        tidemill_runtime::identity::sha256_hex(&der)
    };
    let db = rusqlite::Connection::open_with_flags(
        coord.data_dir.join("tidemill.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let via: String = db
        .query_row(
            "SELECT token_id FROM node_certs WHERE fingerprint = ?1",
            [fingerprint(&renewed)],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(via, "renewal", "the stored certificate is the renewed one");
    let short = &fingerprint(&renewed)[..16];
    cloud.wait_until("e1 back with its renewed certificate", 1, PATIENCE, |l| {
        l.contains("edge connected") && l.contains(&format!("cert={short}"))
    });
    assert_eq!(
        e1.log()
            .iter()
            .filter(|l| l.contains("link to coordinator down"))
            .count(),
        1,
        "one reconnect, after the restart"
    );
}

#[test]
fn a_coordinator_with_another_ca_and_a_missing_ca_file_are_named_as_such() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let mut first = start_edge(&coord, dir.path(), "e1", None);
    cloud.wait_for("edge connected", 1, PATIENCE);
    first.terminate(PATIENCE);
    cloud.terminate(PATIENCE);

    // The coordinator comes back from a fresh data dir, with a new CA.
    let other = Coordinator::at(coord.quic, &dir.path().join("other"));
    let _other = other.start();
    let again = start_edge(&coord, dir.path(), "e1", None);
    again.wait_until("the untrusted coordinator named", 1, PATIENCE, |l| {
        l.contains("the coordinator's certificate does not verify")
            && l.contains("not from the CA this node trusts")
    });
    drop(again);

    let (ok, err) = edge(&[
        "run",
        "--coordinator",
        &coord.quic.to_string(),
        "--ca",
        "/nonexistent/ca.pem",
        "--data-dir",
        dir.path().join("edge-e1").to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("cannot read the CA certificate /nonexistent/ca.pem"),
        "{err}"
    );
}
