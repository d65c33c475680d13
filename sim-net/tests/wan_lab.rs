//! The cost model's ring all-reduce term against `tidemill-sim allreduce` over
//! TCP, its ranks in network namespaces joined by the lab's impaired links.
//! Needs root and /dev/net/tun; elsewhere the test says it was skipped, and why.

use std::path::Path;
use std::process::Stdio;

use tidemill_sim::wan::accuracy;
use tidemill_sim::wan::netns;

const BIN: &str = env!("CARGO_BIN_EXE_tidemill-sim");

/// Three ranks on each of `accuracy::settings()`: every rank runs and checks
/// its sums, and the link slows the step, so the step lies between a tenth
/// of the term and four times it. How close it comes is a measurement,
/// `tidemill-sim wan-accuracy` (docs/wan.md); a loaded 2-core machine moves
/// it by tens of percent.
#[test]
fn a_tcp_ring_runs_over_impaired_links_at_the_speed_they_allow() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: the WAN lab needs root and /dev/net/tun ({why})");
        return;
    }
    let base = (std::process::id() % 50) as u8 * 4;
    let mut off = Vec::new();
    for (k, setting) in accuracy::settings().iter().enumerate() {
        let m = accuracy::measure(Path::new(BIN), setting, 3, 6, base + k as u8)
            .unwrap_or_else(|e| panic!("{}: {e}", setting.name));
        let line = accuracy::row(setting, 3, &m);
        eprintln!("{line}");
        if !(0.1..=4.0).contains(&(m.measured_s / m.predicted_s)) {
            off.push(line);
        }
    }
    assert!(off.is_empty(), "not slowed as the link allows: {off:#?}");
}

/// A lab whose process was killed leaves its namespaces behind; the next lab
/// of the same name deletes them instead of failing with "File exists".
#[test]
fn a_lab_replaces_the_namespaces_a_killed_lab_left() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: the WAN lab needs root and /dev/net/tun ({why})");
        return;
    }
    let ip = |args: &[&str]| {
        std::process::Command::new("ip")
            .args(args)
            .output()
            .expect("run ip")
    };
    assert!(ip(&["netns", "add", "tmst-a"]).status.success());
    let subnet = 200 + (std::process::id() % 50) as u8;
    let lab = netns::Lab::create("tmst", subnet, &[("a", true)]);
    let listed = String::from_utf8_lossy(&ip(&["netns", "list"]).stdout).into_owned();
    let ok = lab.is_ok();
    drop(lab);
    let _ = ip(&["netns", "delete", "tmst-a"]);
    assert!(ok && listed.contains("tmst-a"), "{listed}");
}

/// `wan --netem` applies a scenario with the kernel's netem, or, on a kernel
/// without it (this machine's), says so and what to run instead; either way
/// it leaves no namespace behind.
#[test]
fn the_netem_back_end_applies_a_scenario_or_says_the_kernel_has_none() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: netem needs root ({why})");
        return;
    }
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/wan/rural-lte.toml");
    let mut child = std::process::Command::new(BIN)
        .args(["wan", "--netem", "--scenario"])
        .arg(&scenario)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tidemill-sim wan --netem");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut log = Vec::new();
    let ready = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(line) if line.contains("netem path ready") => break true,
            Ok(line) => log.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("neither ready nor failed within 20 s: {log:#?}")
            }
        }
    };
    let namespaces = || {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    if ready {
        let qdisc = std::process::Command::new("tc")
            .args(["-n", "tmn0", "qdisc", "show", "dev", "tmn0b"])
            .output()
            .unwrap();
        let qdisc = String::from_utf8_lossy(&qdisc.stdout);
        assert!(
            qdisc.contains("netem") && qdisc.contains("delay 40"),
            "{qdisc}"
        );
        let _ = std::process::Command::new("kill")
            .arg(child.id().to_string())
            .status();
        assert!(child.wait().unwrap().success());
        eprintln!("netem: applied rural-lte.toml: {qdisc}");
    } else {
        let status = child.wait().unwrap();
        let message = log.join("\n");
        assert_eq!(status.code(), Some(1), "{message}");
        assert!(
            message.contains("this kernel has no sch_netem"),
            "{message}"
        );
        assert!(message.contains("without --netem"), "{message}");
        eprintln!("netem: this kernel has none, as reported: {message}");
    }
    assert!(!namespaces().contains("tmn0"), "{}", namespaces());
}
