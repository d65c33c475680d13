//! Secrets at rest (issue 28): someone who reads the coordinator's database or
//! an edge's journal (a backup, a stolen disk, a read-only bug) finds no
//! `secret_env` value in them, and the sealed copy is cleared as soon as the
//! job ends, while the task still receives the secret.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use support::cluster::write_idle_trace;
use support::{Coordinator, PATIENCE, start_edge};

/// Every byte of a SQLite database and its WAL.
fn on_disk(db: &Path) -> Vec<u8> {
    let mut all = std::fs::read(db).unwrap_or_else(|e| panic!("read {}: {e}", db.display()));
    let wal = format!("{}-wal", db.display());
    all.extend(std::fs::read(wal).unwrap_or_default());
    all
}

fn holds(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The SHA-256 of `value` as `sha256sum` prints it, the way the task does.
fn sha256sum(value: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"$V\" | sha256sum"])
        .env("V", value)
        .output()
        .expect("sha256sum runs");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Whether the coordinator's database holds a sealed `secret_env` for job `id`
/// (read-only, beside the running coordinator).
fn sealed_on_coordinator(data_dir: &Path, id: u64) -> bool {
    let db = rusqlite::Connection::open_with_flags(
        data_dir.join("tidemill.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT secret_env IS NOT NULL FROM jobs WHERE id = ?1",
        [id as i64],
        |r| r.get(0),
    )
    .expect("the jobs table has a secret_env column")
}

fn assert_owner_only_key(data_dir: &Path) {
    let key = data_dir.join("secrets.key");
    let meta = std::fs::metadata(&key).unwrap_or_else(|e| panic!("{}: {e}", key.display()));
    assert_eq!(meta.mode() & 0o777, 0o600, "{}", key.display());
}

#[test]
fn secret_env_is_never_on_disk_in_plain_text_and_is_purged_when_the_job_ends() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let cloud = coord.start();
    let trace = write_idle_trace(dir.path(), &["e1"]);
    let _edge = start_edge(&coord, dir.path(), "e1", Some(&trace));
    cloud.wait_for("edge connected", 1, PATIENCE);

    let secret = format!(
        "tm-secret-{}-{}",
        std::process::id(),
        support::cluster::now_ms()
    );
    // The task proves it got the secret by its hash, then holds on (bounded)
    // until the test has searched the files, so they are read mid-run.
    let release = dir.path().join("release");
    let job = dir.path().join("secret.toml");
    std::fs::write(
        &job,
        format!(
            r#"name = "secret"
command = ["sh", "-c", "printf %s \"$TM_SECRET\" | sha256sum; i=0; while [ ! -e '{release}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"]
deadline = "2099-01-01T00:00:00Z"
[secret_env]
TM_SECRET = "{secret}"
"#,
            release = release.display()
        ),
    )
    .unwrap();
    let id = coord.submit_file(&job);
    cloud.wait_for(&format!("job_id={id} state=running"), 1, PATIENCE);

    let edge_dir = dir.path().join("edge-e1");
    let files = [
        coord.data_dir.join("tidemill.db"),
        edge_dir.join("edge-journal.db"),
    ];
    for db in &files {
        assert!(
            !holds(&on_disk(db), &secret),
            "{} (or its WAL) holds the secret in plain text",
            db.display()
        );
    }
    assert!(
        sealed_on_coordinator(&coord.data_dir, id),
        "sealed while it runs"
    );
    assert_owner_only_key(&coord.data_dir);
    assert_owner_only_key(&edge_dir);
    let shown = coord.job(id);
    assert_eq!(
        shown["secret_env"],
        serde_json::json!(["TM_SECRET"]),
        "{shown}"
    );
    assert!(!shown.to_string().contains(&secret), "{shown}");

    std::fs::write(&release, "").unwrap();
    cloud.wait_for(&format!("job_id={id} state=succeeded"), 1, PATIENCE);
    let tail = coord.job(id)["output_tail"].to_string();
    assert!(
        tail.contains(&sha256sum(&secret)),
        "the task did not get the secret: {tail}"
    );
    assert!(
        !sealed_on_coordinator(&coord.data_dir, id),
        "purged at the end"
    );
    // The edge purged its copy in the same transaction that journaled the
    // task's end, before it reported it.
    let journal = rusqlite::Connection::open_with_flags(
        edge_dir.join("edge-journal.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let left: i64 = journal
        .query_row(
            "SELECT COUNT(*) FROM tasks WHERE job_id = ?1 AND length(assignment) > 0",
            [id as i64],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0, "the edge purged the ended task's assignment");
    for db in &files {
        assert!(!holds(&on_disk(db), &secret), "{}", db.display());
    }
}
