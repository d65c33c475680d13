//! systemd integration: the units in deploy/systemd pass `systemd-analyze
//! verify`, both daemons speak the sd_notify protocol (READY=1 only once they
//! serve, WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM), and
//! deploy/install.sh installs into a root directory with private secrets.

mod support;

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{CLOUD, Coordinator, EDGE, PATIENCE, Proc};

/// The repository's deploy/ directory.
fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn unit(role: &str) -> String {
    std::fs::read_to_string(deploy().join(format!("systemd/tidemill-{role}.service"))).unwrap()
}

/// The value of `key=` in a unit's text.
fn setting<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "SKIPPED: systemd-analyze is not installed (apt-get install systemd); .ci/run installs it"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (role, binary) in [("edge", EDGE), ("cloud", CLOUD)] {
        // verify checks that ExecStart's program exists: point it at the build.
        let text = unit(role).replace(&format!("/usr/local/bin/tidemill-{role}"), binary);
        let file = dir.path().join(format!("tidemill-{role}.service"));
        std::fs::write(&file, text).unwrap();
        files.push(file);
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys and bad values, but names them.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

#[test]
fn units_match_what_the_daemons_do() {
    let edge = unit("edge");
    let cloud = unit("cloud");
    for u in [&edge, &cloud] {
        assert_eq!(setting(u, "Type"), Some("notify"));
        assert_eq!(setting(u, "Restart"), Some("on-failure"));
        assert!(setting(u, "WatchdogSec").is_some());
    }
    // The daemon alone gets SIGTERM and yields its tasks itself; a task that
    // got it from systemd would checkpoint, exit 0 and look finished.
    assert_eq!(setting(&edge, "KillMode"), Some("mixed"));
    assert!(
        setting(&edge, "ExecStopPost").is_some_and(|c| c.contains("tidemill-edge reap")),
        "leftover tasks are reaped when the unit stops"
    );
    let stop: u64 = setting(&edge, "TimeoutStopSec").unwrap().parse().unwrap();
    let grace = tidemill_edge::config::EdgeConfig::default()
        .tasks
        .grace_secs;
    assert!(
        stop > grace + 5,
        "TimeoutStopSec={stop} must exceed [tasks] grace_secs {grace} + 5"
    );
    // The edge's data dir and the cgroup tree stay writable under ProtectSystem.
    let rw = setting(&edge, "ReadWritePaths").unwrap();
    assert!(rw.contains("/var/lib/tidemill-edge") && rw.contains("/sys/fs/cgroup"));
    assert_eq!(setting(&cloud, "User"), Some("tidemill"));
}

/// A notify socket as systemd provides one, and what arrives on it.
struct Manager {
    socket: UnixDatagram,
    path: PathBuf,
    got: Vec<String>,
}

impl Manager {
    fn new(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        Manager {
            socket,
            path,
            got: Vec::new(),
        }
    }

    /// Sets the daemon's NOTIFY_SOCKET and a watchdog of `watchdog`.
    fn supervise(&self, cmd: &mut Command, watchdog: Duration) {
        cmd.env("NOTIFY_SOCKET", &self.path)
            .env("WATCHDOG_USEC", watchdog.as_micros().to_string());
    }

    /// Waits for the next notification, at most [`PATIENCE`]. A receive
    /// that a signal interrupts (EINTR, as the test's own children end) is
    /// tried again within the same patience.
    fn next(&mut self, daemon: &Proc) -> String {
        let deadline = Instant::now() + PATIENCE;
        let mut buf = [0u8; 4096];
        let received = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            match self.socket.recv(&mut buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted && Instant::now() < deadline => {}
                other => break other,
            }
        };
        let n = received.unwrap_or_else(|e| {
            panic!(
                "no notification within {PATIENCE:?} ({e}); so far {:?}; log:\n{}",
                self.got,
                daemon.log().join("\n")
            )
        });
        let msg = String::from_utf8_lossy(&buf[..n]).trim().to_string();
        self.got.push(msg.clone());
        msg
    }

    /// Waits for `READY=1`; keep-alives may come first (the edge's watchdog
    /// runs from its start, while it opens its journal).
    fn ready(&mut self, daemon: &Proc) {
        loop {
            match self.next(daemon).as_str() {
                "READY=1" => return,
                "WATCHDOG=1" => {}
                other => panic!("unexpected notification {other:?} before READY=1"),
            }
        }
    }

    /// Waits for `count` more `WATCHDOG=1` and checks they come about every
    /// half `watchdog`.
    fn keep_alives(&mut self, daemon: &Proc, count: usize, watchdog: Duration) {
        let start = Instant::now();
        for _ in 0..count {
            assert_eq!(self.next(daemon), "WATCHDOG=1", "after {:?}", self.got);
        }
        let mean = start.elapsed() / count as u32;
        assert!(
            mean >= watchdog / 4 && mean < watchdog,
            "keep-alives every {mean:?} for a {watchdog:?} watchdog"
        );
    }

    /// Sends SIGTERM and waits for `STOPPING=1`, skipping keep-alives.
    fn stop(&mut self, daemon: &Proc) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(daemon.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        loop {
            match self.next(daemon).as_str() {
                "STOPPING=1" => return,
                "WATCHDOG=1" => {}
                other => panic!("unexpected notification {other:?} while stopping"),
            }
        }
    }
}

const WATCHDOG: Duration = Duration::from_millis(600);

#[test]
fn the_coordinator_is_ready_only_when_it_serves() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let mut manager = Manager::new(dir.path());
    let mut cmd = coord.command(&[], &["--log-format", "json"]);
    manager.supervise(&mut cmd, WATCHDOG);
    let cloud = Proc::spawn("tidemill-cloud", cmd);
    assert_eq!(manager.next(&cloud), "READY=1", "the first notification");
    // At READY the API answers, the QUIC port is taken and the store is open.
    assert!(coord.http_get("/livez").starts_with("HTTP/1.1 200"));
    assert!(std::net::UdpSocket::bind(coord.quic).is_err());
    assert!(coord.data_dir.join("ca.pem").exists());
    manager.keep_alives(&cloud, 3, WATCHDOG);
    manager.stop(&cloud);
    cloud.wait_for("stopping", 1, PATIENCE);
    json_lines(&cloud);
}

/// Every line the daemon logged is one JSON object with a message.
fn json_lines(daemon: &Proc) {
    for line in daemon.log() {
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["fields"]["message"].is_string(), "{line}");
    }
}

#[test]
fn the_edge_is_ready_once_its_journal_is_open() {
    let dir = support::tempdir();
    let coord = Coordinator::new(dir.path());
    let _cloud = coord.start();
    let mut manager = Manager::new(dir.path());
    let mut cmd = support::edge_command(&coord, dir.path(), "e1", None);
    // The log format from the environment, as a unit's EnvironmentFile sets it.
    cmd.env("TIDEMILL_LOG_FORMAT", "json");
    manager.supervise(&mut cmd, WATCHDOG);
    let edge = Proc::spawn("e1", cmd);
    manager.ready(&edge);
    let journal = dir
        .path()
        .join("edge-e1")
        .join(tidemill_edge::journal::JOURNAL_FILE);
    assert!(
        journal.exists(),
        "READY=1 before {} exists",
        journal.display()
    );
    manager.keep_alives(&edge, 3, WATCHDOG);
    manager.stop(&edge);
    edge.wait_for("stopping", 1, PATIENCE);
    json_lines(&edge);
}

fn install(root: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("sh")
        .arg(deploy().join("install.sh"))
        .args(args)
        .arg("--root")
        .arg(root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `config check` of an installed config file: it must load and validate.
fn config_check(binary: &str, config: &Path) -> String {
    let out = Command::new(binary)
        .args(["config", "check", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "config check {}: {}",
        config.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const TOKEN: &str = "tmj1.secret-join-token-for-the-test";

#[test]
fn install_sh_puts_the_edge_in_place_with_its_token_private() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let args = [
        "edge",
        "--coordinator",
        "127.0.0.1:7411",
        "--token-file",
        "-",
        "--binary",
        EDGE,
    ];
    let out = install(r, &args, Some(&format!("{TOKEN}\n")));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains(TOKEN), "the token was printed: {stdout}");
    assert_eq!(mode(&r.join("usr/local/bin/tidemill-edge")), 0o755);
    assert_eq!(mode(&r.join("var/lib/tidemill-edge")), 0o700);
    let env = r.join("etc/tidemill/edge.env");
    assert_eq!(mode(&env), 0o600);
    assert_eq!(
        std::fs::read_to_string(&env).unwrap(),
        format!("TIDEMILL_TOKEN={TOKEN}\n")
    );
    let unit = r.join("etc/systemd/system/tidemill-edge.service");
    assert_eq!(mode(&unit), 0o644);
    let unit = std::fs::read_to_string(unit).unwrap();
    assert!(!unit.contains(TOKEN));
    assert!(unit.contains("EnvironmentFile=-/etc/tidemill/edge.env"));
    // The guide the unit's Documentation= names is where it says.
    let documentation = unit
        .lines()
        .find_map(|l| l.strip_prefix("Documentation=file:"))
        .expect("the unit names its documentation");
    let guide = r.join(documentation.trim_start_matches('/'));
    assert_eq!(
        std::fs::read_to_string(&guide).unwrap(),
        std::fs::read_to_string(deploy().join("../docs/operations.md")).unwrap()
    );
    assert_eq!(mode(&guide), 0o644);
    // systemctl and the like are shown, not run, under --root.
    assert!(stdout.contains("would run: systemctl enable tidemill-edge.service"));

    // The example job file runs as shipped: its command is the trainer
    // template, installed where it says, executable by every task user and
    // outside the data dir (the unit's only writable path besides cgroups);
    // it sets none of the variables the edge sets, such as the checkpoint dir.
    let job = tidemill_cloud::job::JobFile::from_toml(
        include_str!("../../configs/job.toml"),
        "configs/job.toml",
    )
    .unwrap();
    let [program] = &job.command[..] else {
        panic!(
            "the example's command is the trainer alone: {:?}",
            job.command
        )
    };
    assert!(
        program.starts_with("/usr/local/share/tidemill/"),
        "{program}"
    );
    let trainer = r.join(program.trim_start_matches('/'));
    assert_eq!(mode(&trainer), 0o755);
    assert_eq!(mode(trainer.parent().unwrap()), 0o755);
    assert_eq!(
        std::fs::read_to_string(&trainer).unwrap(),
        std::fs::read_to_string(deploy().join("../edge/examples/pytorch/train_ddp.py")).unwrap()
    );
    assert!(
        !job.env.keys().any(|k| tidemill_proto::is_reserved_env(k)),
        "{:?}",
        job.env
    );

    let config = r.join("etc/tidemill/edge.toml");
    let shown = config_check(EDGE, &config);
    assert!(
        shown.contains("coordinator = \"127.0.0.1:7411\""),
        "{shown}"
    );
    assert!(
        shown.contains("data_dir = \"/var/lib/tidemill-edge\""),
        "{shown}"
    );

    // A second run keeps the operator's config file.
    let edited = std::fs::read_to_string(&config)
        .unwrap()
        .replace("grace_secs = 10", "grace_secs = 12");
    std::fs::write(&config, &edited).unwrap();
    let out = install(r, &args, Some(TOKEN));
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
}

#[test]
fn install_sh_puts_the_coordinator_in_place() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let out = install(
        r,
        &["cloud", "--tls-name", "coord.example", "--binary", CLOUD],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("would run: useradd --system") || stdout.contains("would run: chown"));
    assert_eq!(mode(&r.join("var/lib/tidemill-cloud")), 0o700);
    assert!(!r.join("etc/tidemill/cloud.env").exists());
    let shown = config_check(CLOUD, &r.join("etc/tidemill/cloud.toml"));
    assert!(shown.contains("quic_listen = \"0.0.0.0:7400\""), "{shown}");
    assert!(
        shown.contains("tls_names = [\"coord.example\", \"localhost\""),
        "{shown}"
    );
}

#[test]
fn install_sh_help_lists_every_option_it_accepts() {
    let script = std::fs::read_to_string(deploy().join("install.sh")).unwrap();
    // The options the parser accepts: the long names of its case arms.
    let accepted: Vec<&str> = script
        .lines()
        .filter_map(|l| l.trim().strip_suffix(";;")?.split_once(')'))
        .flat_map(|(arm, _)| arm.split('|').map(str::trim))
        .filter(|name| name.starts_with("--"))
        .collect();
    assert!(accepted.len() >= 10, "{accepted:?}");
    let out = Command::new("sh")
        .arg(deploy().join("install.sh"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let listed = |flag: &str| {
        help.lines().any(|l| {
            l.split_whitespace()
                .any(|w| w.trim_end_matches(',') == flag)
        })
    };
    let missing: Vec<_> = accepted.iter().filter(|f| !listed(f)).collect();
    assert!(missing.is_empty(), "--help lacks {missing:?}:\n{help}");
}

#[test]
fn install_sh_dry_run_changes_nothing_and_bad_input_is_named() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let out = install(
        r,
        &[
            "edge",
            "--coordinator",
            "c:7400",
            "--token",
            TOKEN,
            "--binary",
            EDGE,
            "--dry-run",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(r).unwrap().count(),
        0,
        "--dry-run wrote files"
    );

    for (args, needle) in [
        (&["edge", "--token", TOKEN][..], "--coordinator"),
        (&["edge", "--coordinator", "c"][..], "no port"),
        (
            &["edge", "--coordinator", "c:1\"; rm -rf /"][..],
            "is not a host",
        ),
        (&["gateway"][..], "edge or cloud"),
        (&["cloud", "--bogus"][..], "unknown option '--bogus'"),
    ] {
        let out = install(r, args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}
