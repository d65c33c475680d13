//! The coordinator's command line: documented defaults, and clear errors
//! without a panic.

use std::process::Command;

fn cloud(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemill-cloud"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn prints_the_documented_default_config() {
    let (ok, out, _) = cloud(&["print-default-config"]);
    assert!(ok);
    assert_eq!(out, include_str!("../../configs/cloud.toml"));
}

/// A bare HOST:PORT is http://HOST:PORT, as it is to `api_listen`.
#[test]
fn an_unreachable_api_is_reported_plainly() {
    for api in ["http://127.0.0.1:9", "127.0.0.1:9"] {
        let (ok, _, err) = cloud(&["nodes", "--api", api]);
        assert!(!ok);
        assert!(
            err.starts_with(
                "tidemill-cloud: error: cannot reach the coordinator API at http://127.0.0.1:9/v1/nodes"
            ),
            "{api}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn an_api_with_another_scheme_is_refused_naming_the_flag_and_the_fix() {
    let (ok, _, err) = cloud(&["nodes", "--api", "ftp://127.0.0.1:9"]);
    assert!(!ok);
    assert!(
        err.contains("--api")
            && err.contains("ftp://127.0.0.1:9")
            && err.contains("HOST:PORT or http://HOST:PORT"),
        "{err}"
    );
}

#[test]
fn a_bad_job_file_names_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.toml");
    std::fs::write(
        &file,
        "name = \"x\"\ncommand = [\"true\"]\ndeadline = \"soon\"\n",
    )
    .unwrap();
    let (ok, _, err) = cloud(&[
        "jobs",
        "submit",
        "--file",
        file.to_str().unwrap(),
        "--api",
        "http://127.0.0.1:9",
    ]);
    assert!(!ok);
    assert!(
        err.contains("job.toml") && err.contains("\"soon\"") && err.contains("RFC 3339"),
        "{err}"
    );
}

#[test]
fn a_bad_config_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cloud.toml");
    std::fs::write(&file, "quic_listen = \"127.0.0.1:0\"\nround_interval = 3\n").unwrap();
    let (ok, _, err) = cloud(&["serve", "--config", file.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("cloud.toml") && err.contains("round_interval"),
        "{err}"
    );
}

#[test]
fn policies_lists_every_registered_policy_and_serve_refuses_an_unknown_one() {
    let (ok, out, _) = cloud(&["policies"]);
    assert!(ok);
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let all: Vec<&str> = tidemill_sched::policies::PolicyName::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(names, all);
    assert!(out.lines().all(|l| l.len() > 20), "{out}");
    let (ok, _, err) = cloud(&["serve", "--policy", "tidal"]);
    assert!(!ok);
    assert!(
        err.contains("unknown policy \"tidal\": expected one of tidemill, edgeflow"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
