//! The coordinator on PostgreSQL (`[store] backend = "postgres"`): a job
//! runs through an edge with no SQLite file made, the state survives a
//! `kill -9` of the coordinator, which leads again when it restarts, and
//! the database's password reaches no log line. Says
//! SKIPPED where PostgreSQL is not installed (`.ci/run` installs it).

mod support;

use std::process::Command;

use support::{CLOUD, Coordinator, PATIENCE, Proc, start_edge};

/// The password of a `postgres://user:password@host/db` URL.
fn password(url: &str) -> &str {
    let auth = &url["postgres://".len()..url.rfind('@').unwrap()];
    &auth[auth.find(':').unwrap() + 1..]
}

#[test]
fn a_coordinator_on_postgres_runs_jobs_and_keeps_them_through_a_crash() {
    let Some(url) = support::pg_cluster::database() else {
        return;
    };
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path()).on_postgres(&url);
    let mut cloud = coord.start();
    // An idle replay, so that a busy test box does not keep the job off it.
    let trace = support::cluster::write_idle_trace(dir.path(), &["e1"]);
    let _edge = start_edge(&coord, dir.path(), "e1", Some(&trace));
    let id = coord.submit(
        dir.path(),
        "hello",
        &["sh", "-c", "echo hello from postgres"],
    );
    coord.wait_until_succeeded(id);
    assert!(
        !coord.data_dir.join("tidemill.db").exists(),
        "the state went to SQLite"
    );

    let ready = coord.http_get("/readyz");
    assert!(
        ready.contains("leads the scheduling rounds (epoch 1)"),
        "{ready}"
    );
    assert!(!ready.contains(password(&url)), "the password in: {ready}");

    // doctor checks the database, not a SQLite file, and shows no password.
    let doctor = Command::new(CLOUD)
        .args(["doctor", "--config"])
        .arg(coord.data_dir.join("cloud.toml"))
        .env("TIDEMILL_STORE__BACKEND", "postgres")
        .env("TIDEMILL_STORE__URL", &url)
        .env("TIDEMILL_DATA_DIR", &coord.data_dir)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout).into_owned()
        + &String::from_utf8_lossy(&doctor.stderr);
    assert!(
        report.contains("answers and takes writes (schema 3)")
            && report.contains("holds the lease (epoch 1)"),
        "{report}"
    );
    assert!(
        !report.contains(password(&url)),
        "the password in: {report}"
    );

    // A crash loses nothing that was committed.
    cloud.kill9();
    let cloud = coord.start();
    assert_eq!(coord.job(id)["state"], "succeeded");
    let next = coord.submit(dir.path(), "again", &["true"]);
    assert!(
        next > id,
        "job ids go on after the restart: {next} after {id}"
    );
    coord.wait_until_succeeded(next);
    let log = cloud.log().join("\n");
    assert!(!log.contains(password(&url)), "the password in the log");
}

#[test]
fn a_postgres_store_without_a_url_is_refused_with_the_fix() {
    let err = refused_serve(&[("TIDEMILL_STORE__BACKEND", "postgres")]);
    assert!(
        err.contains("store.url") && err.contains("TIDEMILL_STORE__URL"),
        "{err}"
    );
}

#[test]
fn an_unreachable_database_is_named_with_the_fix_and_no_password() {
    let url = format!(
        "postgres://tidemill:s3cret-pw@127.0.0.1:{}/tidemill?sslmode=disable",
        support::free_port()
    );
    let err = refused_serve(&[
        ("TIDEMILL_STORE__BACKEND", "postgres"),
        ("TIDEMILL_STORE__URL", &url),
    ]);
    assert!(
        err.contains("tidemill:<redacted>@127.0.0.1") && err.contains("pg_hba.conf"),
        "{err}"
    );
    assert!(!err.contains("s3cret-pw"), "the password in: {err}");
}

/// Runs `tidemill-cloud serve` on a fresh data dir and loopback listeners
/// with `env`, asserts that it refuses to start, and returns its log.
fn refused_serve(env: &[(&str, &str)]) -> String {
    let dir = support::tempdir();
    let mut cmd = Command::new(CLOUD);
    cmd.args(["serve", "--data-dir"]).arg(dir.path()).args([
        "--quic-listen",
        "127.0.0.1:0",
        "--api-listen",
        "127.0.0.1:0",
    ]);
    cmd.envs(env.iter().copied());
    let mut refused = Proc::spawn("tidemill-cloud", cmd);
    assert!(!refused.wait_exit(PATIENCE).success());
    refused.log().join("\n")
}
