//! The simulator's command line identifies its build as the daemons do.

use std::process::Command;

#[test]
fn version_names_the_commit_and_build_date_like_the_daemons() {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemill-sim"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout);
    let expected = format!("tidemill-sim {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(
        line.starts_with(&expected) && line.contains(", built ") && line.ends_with(" UTC)\n"),
        "{line}"
    );
}
