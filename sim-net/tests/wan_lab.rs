//! The cost model's ring all-reduce term against `tidemill-sim allreduce` over
//! TCP, its ranks in network namespaces joined by the lab's impaired links.
//! Needs root and /dev/net/tun; elsewhere the test says it was skipped, and why.

use std::path::Path;
use std::process::Stdio;

use tidemill_sched::cost::{Congestion, ring_allreduce_s};
use tidemill_sim::allreduce;
use tidemill_sim::wan::netns::{self, Lab};
use tidemill_sim::wan::scenario::Impairment;

const BIN: &str = env!("CARGO_BIN_EXE_tidemill-sim");

/// A link of `mbps`, `delay_ms` each way and `loss`.
fn link(mbps: f64, delay_ms: f64, loss: f64) -> Impairment {
    Impairment {
        delay_ms,
        loss,
        rate_mbps: Some(mbps),
        ..Impairment::default()
    }
}

/// Runs a ring of `ranks` over a lab in which every pair of ranks has link
/// `imp`, their TCP under `tcp`, and returns the slowest rank's median step,
/// in seconds.
fn ring_step_s(imp: &Impairment, tcp: &str, bytes: usize, subnet: u8, ranks: usize) -> f64 {
    let names: Vec<String> = (0..ranks).map(|r| format!("r{r}")).collect();
    let nodes: Vec<(&str, bool)> = names.iter().map(|n| (n.as_str(), true)).collect();
    let mut lab = Lab::create("tmlab", subnet, &nodes).expect("the lab");
    lab.set_tcp_congestion(tcp).expect("the congestion control");
    let imp = imp.clone();
    let _hub = lab.start_hub(move |_, _| imp.clone(), 7).expect("the hub");
    let master = lab.nodes()[0].ip.to_string();
    let ranks: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(rank, name)| {
            lab.command(name, Path::new(BIN))
                .args(["allreduce", "--bytes", &bytes.to_string()])
                .args(["--steps", "6", "--timeout-s", "60"])
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", names.len().to_string())
                .env("MASTER_ADDR", &master)
                .env("MASTER_PORT", "29500")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a rank")
        })
        .collect();
    let mut slowest: f64 = 0.0;
    for rank in ranks {
        let out = rank.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a rank failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let median = allreduce::median_in_output(&stdout)
            .unwrap_or_else(|| panic!("no median step in {stdout}"));
        slowest = slowest.max(median);
    }
    slowest
}

/// Three ranks; on each setting the measured median step is within 25 % of
/// `cost::ring_allreduce_s` for the same bytes and link.
#[test]
fn the_ring_term_predicts_a_tcp_allreduce_over_impaired_links() {
    if let Some(why) = netns::unavailable() {
        eprintln!("skipped: the WAN lab needs root and /dev/net/tun ({why})");
        return;
    }
    let cubic = ("cubic", Congestion::LossBased);
    let bbr = ("bbr", Congestion::RateBased);
    let settings = [
        ("metro", link(100.0, 5.0, 0.0), cubic, 4 << 20),
        ("long", link(20.0, 30.0, 0.0), cubic, 1 << 20),
        ("lossy", link(100.0, 30.0, 0.005), cubic, 1 << 20),
        ("lossy", link(100.0, 30.0, 0.005), bbr, 1 << 20),
    ];
    let base = (std::process::id() % 50) as u8 * 4;
    let mut off = Vec::new();
    for (k, (name, imp, tcp, bytes)) in settings.iter().enumerate() {
        let measured = ring_step_s(imp, tcp.0, *bytes, base + k as u8, 3);
        let spec = imp.link_spec(tcp.1).expect("a rate");
        let predicted = ring_allreduce_s(3, *bytes as f64, &spec);
        let error = measured / predicted - 1.0;
        let line = format!(
            "{name}: {imp}, {}: {bytes} B over 3 ranks, measured {measured:.3} s, \
             predicted {predicted:.3} s, error {:+.1} %",
            tcp.0,
            100.0 * error
        );
        eprintln!("{line}");
        if error.abs() > 0.25 {
            off.push(line);
        }
    }
    assert!(off.is_empty(), "off by more than 25 %: {off:#?}");
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
