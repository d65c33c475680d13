//! `tidemill-edge doctor`, `tidemill-edge reset` and `tidemill-cloud doctor`
//! against a real coordinator and a joined edge.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{CLOUD, Coordinator, EDGE, PATIENCE, Proc, start_edge};

/// `binary`'s default config with `changes` (each a default line and its
/// replacement), written to `dir/name`.
fn config_file(binary: &str, dir: &Path, name: &str, changes: &[(&str, String)]) -> PathBuf {
    let defaults = Command::new(binary)
        .arg("print-default-config")
        .output()
        .unwrap();
    let mut text = String::from_utf8(defaults.stdout).unwrap();
    for (from, to) in changes {
        assert!(text.contains(from), "no {from:?} in the default config");
        text = text.replace(from, to);
    }
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// An edge config file for the test's coordinator and edge data dir.
fn edge_config(dir: &Path, coord: &Coordinator, data_dir: &Path) -> PathBuf {
    config_file(
        EDGE,
        dir,
        "edge.toml",
        &[
            (
                "coordinator = \"127.0.0.1:7400\"",
                format!("coordinator = \"{}\"", coord.quic),
            ),
            (
                "data_dir = \"tidemill-edge-data\"",
                format!("data_dir = {:?}", data_dir.display().to_string()),
            ),
        ],
    )
}

/// A coordinator config file with the test coordinator's addresses and dir.
fn cloud_config(dir: &Path, coord: &Coordinator) -> PathBuf {
    config_file(
        CLOUD,
        dir,
        "cloud.toml",
        &[
            (
                "quic_listen = \"127.0.0.1:7400\"",
                format!("quic_listen = \"{}\"", coord.quic),
            ),
            (
                "api_listen = \"127.0.0.1:7480\"",
                format!(
                    "api_listen = \"{}\"",
                    coord.api.trim_start_matches("http://")
                ),
            ),
            (
                "data_dir = \"tidemill-cloud-data\"",
                format!("data_dir = {:?}", coord.data_dir.display().to_string()),
            ),
        ],
    )
}

fn run(binary: &str, args: &[&str], config: Option<&Path>) -> (Output, String) {
    let mut cmd = Command::new(binary);
    cmd.args(args);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The status doctor printed for check `name` (its last line for it).
fn status_of<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let status = words.next()?;
            (["ok", "warn", "FAIL"].contains(&status) && words.next() == Some(name))
                .then_some(status)
        })
        .next_back()
        .unwrap_or_else(|| panic!("no {name} check in:\n{report}"))
}

fn joined_edge(dir: &Path, coord: &Coordinator) -> Proc {
    let edge = start_edge(coord, dir, "e1", None);
    edge.wait_for("connected", 1, PATIENCE);
    edge
}

#[test]
fn edge_doctor_passes_then_names_an_unreachable_coordinator() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let data_dir = dir.path().join("edge-e1");
    let _edge = joined_edge(dir.path(), &coord);
    let config = edge_config(dir.path(), &coord, &data_dir);

    let (out, report) = run(EDGE, &["doctor"], Some(&config));
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    for check in [
        "config",
        "data",
        "daemon",
        "certificate",
        "CA",
        "coordinator",
        "clock",
        "probe",
        "accelerators",
        "checkpoints",
    ] {
        assert_eq!(status_of(&report, check), "ok", "{check}:\n{report}");
    }
    assert!(
        report.contains("ms against the coordinator"),
        "the clock is measured against the coordinator:\n{report}"
    );
    assert!(
        !cloud
            .log()
            .iter()
            .any(|l| l.contains("refused a connection")),
        "a doctor's check is not a refused connection"
    );

    cloud.kill9();
    let (out, report) = run(EDGE, &["doctor"], Some(&config));
    assert!(!out.status.success(), "{report}");
    assert_eq!(status_of(&report, "coordinator"), "FAIL", "{report}");
    let fix = report
        .lines()
        .skip_while(|l| !l.starts_with("FAIL  coordinator"))
        .nth(1)
        .unwrap_or_default();
    assert!(fix.contains("fix:") && fix.contains("UDP port"), "{report}");
}

/// A data dir that task users cannot reach (under a 0700 dir, as one under
/// /root is) fails the checkpoint check, naming the file the task user could
/// not create; the same dir given relative to the working directory, with
/// `doctor`'s own `--data-dir`, passes once the dir above is passable.
#[test]
fn edge_doctor_checks_that_tasks_can_save_checkpoints() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::Uid::effective().is_root() {
        println!("PENDING not root: tasks run as this user, who owns the data dir");
        return;
    }
    let dir = support::tempdir();
    let closed = dir.path().join("closed");
    std::fs::create_dir_all(closed.join("edge")).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let doctor = || {
        let out = Command::new(EDGE)
            .args([
                "doctor",
                "--data-dir",
                "edge",
                "--coordinator",
                "127.0.0.1:9",
            ])
            .current_dir(&closed)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report = doctor();
    assert_eq!(status_of(&report, "checkpoints"), "FAIL", "{report}");
    let expected = closed.join("edge/checkpoints");
    assert!(
        report.contains(&format!("cannot create {}", expected.display()))
            && report.contains("Permission denied"),
        "the failure names the path, absolute, and the error:\n{report}"
    );

    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
    let report = doctor();
    assert_eq!(status_of(&report, "checkpoints"), "ok", "{report}");
    assert_eq!(
        std::fs::read_dir(&expected).unwrap().count(),
        0,
        "the probe leaves nothing behind"
    );
}

#[test]
fn edge_doctor_fails_on_a_bad_config_and_a_missing_certificate() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let data_dir = dir.path().join("never-joined");
    std::fs::create_dir_all(&data_dir).unwrap();
    let config = edge_config(dir.path(), &coord, &data_dir);
    let (out, report) = run(EDGE, &["doctor"], Some(&config));
    assert!(!out.status.success());
    assert_eq!(status_of(&report, "certificate"), "FAIL", "{report}");
    assert!(report.contains("join --token"), "{report}");

    let mut cmd = Command::new(EDGE);
    cmd.args(["doctor", "--config"])
        .arg(&config)
        .env("TIDEMILL_LINK__KEEP_ALIVE_SECS", "soon");
    let out = cmd.output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        report.starts_with("FAIL  config") && report.contains("TIDEMILL_LINK__KEEP_ALIVE_SECS"),
        "{report}"
    );
}

#[test]
fn reset_refuses_while_the_edge_runs_and_wipes_after() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let data_dir = dir.path().join("edge-e1");
    let mut edge = joined_edge(dir.path(), &coord);
    let d = data_dir.to_str().unwrap();

    let (out, text) = run(EDGE, &["reset", "--data-dir", d, "--yes"], None);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("in use") && text.contains(&format!("pid {}", edge.pid())),
        "{text}"
    );
    assert!(data_dir.join("node.pem").exists());

    edge.kill9();
    let (out, text) = run(EDGE, &["reset", "--data-dir", d, "--yes"], None);
    assert!(out.status.success(), "{text}");
    let left: Vec<String> = std::fs::read_dir(&data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["lock"], "{text}");
}

#[test]
fn cloud_doctor_passes_while_serving_and_fails_on_a_taken_port() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut cloud = coord.start();
    let config = cloud_config(dir.path(), &coord);
    let (out, report) = run(CLOUD, &["doctor"], Some(&config));
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("FAIL"), "{report}");
    for check in ["config", "daemon", "store", "CA", "server", "QUIC", "API"] {
        assert_eq!(status_of(&report, check), "ok", "{check}:\n{report}");
    }
    assert!(report.contains("by this coordinator"), "{report}");

    // Stopped, with another program on its QUIC port.
    cloud.kill9();
    let squatter = std::net::UdpSocket::bind(coord.quic).unwrap();
    let (out, report) = run(CLOUD, &["doctor"], Some(&config));
    assert!(!out.status.success(), "{report}");
    assert_eq!(status_of(&report, "QUIC"), "FAIL", "{report}");
    drop(squatter);
}

/// With `[checkpoint] backend = "shared"`, `config check` refuses a URL the
/// edge cannot reach, naming the key, the value and the fix, and `doctor`
/// fails a store that is not there, naming it, then passes once it exists,
/// leaving nothing behind, and warns while others may write there.
#[test]
fn edge_doctor_and_config_check_report_a_bad_or_unreachable_shared_checkpoint_store() {
    let dir = support::tempdir();
    let store = dir.path().join("shared");
    let url = format!("file://{}", store.display());
    let edge = |args: &[&str], url: &str| {
        let out = Command::new(EDGE)
            .args(args)
            .env("TIDEMILL_CHECKPOINT__BACKEND", "shared")
            .env("TIDEMILL_CHECKPOINT__URL", url)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, said) = edge(&["config", "check"], "s3://bucket/ck");
    assert!(!ok, "{said}");
    assert!(
        said.contains("checkpoint.url")
            && said.contains("s3://bucket/ck")
            && said.contains("file:///"),
        "{said}"
    );
    let (ok, said) = edge(&["config", "check"], &url);
    assert!(ok, "{said}");

    let doctor = [
        "doctor",
        "--data-dir",
        "edge",
        "--coordinator",
        "127.0.0.1:9",
    ];
    let (_, report) = edge(&doctor, &url);
    assert_eq!(status_of(&report, "checkpoint-store"), "FAIL", "{report}");
    assert!(
        report.contains(&store.display().to_string()),
        "the failure names the store:\n{report}"
    );
    std::fs::create_dir(&store).unwrap();
    let mode = |m| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(m)).unwrap();
    };
    mode(0o700);
    let (_, report) = edge(&doctor, &url);
    assert_eq!(status_of(&report, "checkpoint-store"), "ok", "{report}");
    assert_eq!(
        std::fs::read_dir(&store).unwrap().count(),
        0,
        "the probe leaves nothing"
    );
    // Anyone else who can write there could plant a checkpoint.
    mode(0o777);
    let (_, report) = edge(&doctor, &url);
    assert_eq!(status_of(&report, "checkpoint-store"), "warn", "{report}");
    assert!(report.contains("go-w"), "{report}");
}
