//! tidemill-edge ships as one static executable: no dynamic loader and no
//! shared libraries, so it runs on any x86_64 Linux box, NVIDIA libraries or not.

use std::process::Command;

const EDGE: &str = env!("CARGO_BIN_EXE_tidemill-edge");

#[test]
fn the_edge_binary_is_fully_static() {
    let ldd = Command::new("ldd")
        .arg(EDGE)
        .output()
        .expect("ldd is installed");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    assert!(
        said.contains("not a dynamic executable"),
        "ldd {EDGE}: {said}"
    );
}

#[test]
fn it_runs_with_an_empty_environment() {
    let out = Command::new(EDGE)
        .arg("--version")
        .env_clear()
        .output()
        .expect("run tidemill-edge");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("tidemill-edge "),
        "{out:?}"
    );
}
