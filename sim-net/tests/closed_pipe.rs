//! Printing commands end quietly when their reader goes away (`... | head`),
//! as Unix tools do, instead of panicking.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn gen_trace_into_a_closed_pipe_ends_without_a_panic() {
    // About 6 MB of CSV: far more than a pipe holds, so the writer must meet
    // the closed pipe after the reader leaves.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemill-sim"))
        .args([
            "gen-trace",
            "--nodes",
            "50",
            "--days",
            "14",
            "--out",
            "/dev/stdout",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "node,time_s,cpu,mem,gpu\n");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE: {:?} {stderr}",
        out.status
    );
}
