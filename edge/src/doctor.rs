//! `tidemill-edge doctor`: checks what the daemon needs on this box, each
//! printed as ok, warn or fail with the sentence that fixes it; and
//! `tidemill-edge reset`: wipes the edge's state once no daemon uses it.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use tidemill_proto::{CloudMsg, EdgeMsg};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::datadir;
use tidemill_runtime::doctor::{self, Report};
use tidemill_runtime::frames;
use tidemill_runtime::identity::{NODE_CA_FILE, NODE_CERT_FILE, NodeIdentity};
use tidemill_runtime::quic::{self, Timing};

use crate::config::EdgeConfig;

/// Days before expiry that a node certificate is worth a warning (the daemon
/// renews it itself from `[link] renew_before_days`).
const CERT_WARN_DAYS: i64 = 14;

/// Runs every check on `cfg` (already loaded and validated) and prints them;
/// returns the report.
pub async fn run(cfg: &EdgeConfig, source: &str) -> Report {
    let mut report = Report::default();
    report.ok("config", format!("{source} loads and validates"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    doctor::data_dir(&mut report, &cfg.data_dir);
    let running = datadir::holder(&cfg.data_dir);
    match &running {
        Some(holder) => report.ok(
            "daemon",
            format!("tidemill-edge runs on this data dir ({holder})"),
        ),
        None => report.warn(
            "daemon",
            "no tidemill-edge runs on this data dir",
            "start it: systemctl start tidemill-edge",
        ),
    }
    let identity = certificate(&mut report, cfg, now_ms);
    let offset = match identity {
        Some(identity) => coordinator(&mut report, cfg, &identity).await,
        None => {
            report.fail(
                "coordinator",
                "not checked: no usable node certificate",
                "fix the certificate first",
            );
            None
        }
    };
    match offset {
        Some(offset) => offset.check(&mut report),
        None => doctor::clock(&mut report),
    }
    probe_port(&mut report, cfg, running.is_some());
    accelerators(&mut report, cfg).await;
    confinement(&mut report, cfg);
    checkpoints(&mut report, cfg).await;
    match crate::ckprobe::shared_store(&cfg.checkpoint, &cfg.resolved_node_id()).await {
        Some(Ok(url)) if crate::ckprobe::writable_by_others(&url) => report.warn(
            "checkpoint-store",
            format!("the shared checkpoint store {url} is writable by group or others, who could plant a checkpoint a task then loads"),
            "chmod go-w it (and export the share to the edge hosts alone)",
        ),
        Some(Ok(url)) => report.ok(
            "checkpoint-store",
            format!("wrote, read back and deleted an object in the shared checkpoint store {url}"),
        ),
        Some(Err(e)) => report.fail(
            "checkpoint-store",
            e,
            "make [checkpoint] url an existing directory every edge mounts at the same place, writable by the edge (under the systemd unit, in its ReadWritePaths)",
        ),
        None => {}
    }
    report
}

/// Whether the task user can create, write and read back a file in a
/// checkpoint dir, as a task would ([`crate::ckprobe`]).
async fn checkpoints(report: &mut Report, cfg: &EdgeConfig) {
    if !cfg.data_dir.is_dir() {
        report.fail(
            "checkpoints",
            "not checked: the data dir does not exist",
            "fix the data dir first",
        );
        return;
    }
    let confine = match crate::confine::Confinement::detect(
        &cfg.tasks,
        &cfg.data_dir,
        &cfg.resolved_node_id(),
    ) {
        Ok(confine) => confine,
        Err(e) => {
            report.fail("checkpoints", e.to_string(), "fix [tasks] as it says");
            return;
        }
    };
    match crate::ckprobe::checkpoint_dir(&confine).await {
        Ok(dir) => report.ok(
            "checkpoints",
            format!(
                "the task user created, wrote and read back a file in {}",
                dir.display()
            ),
        ),
        Err(e) => report.fail(
            "checkpoints",
            format!("tasks cannot save checkpoints: {e}"),
            "let task users pass (o+x) through every directory above data_dir and [tasks] checkpoint_dir (a dir under /root or a home dir is not), on a writable file system",
        ),
    }
}

/// The node's certificate: present, issued by the CA the edge trusts, valid.
fn certificate(report: &mut Report, cfg: &EdgeConfig, now_ms: i64) -> Option<NodeIdentity> {
    let dir = &cfg.data_dir;
    if !NodeIdentity::present(dir) {
        report.fail(
            "certificate",
            format!("no node certificate in {}", dir.display()),
            "join: `tidemill-edge join --token T` (a token from `tidemill-cloud token create`), or put TIDEMILL_TOKEN in /etc/tidemill/edge.env and restart",
        );
        return None;
    }
    let ca_path = cfg
        .ca_override()
        .map_or_else(|| dir.join(NODE_CA_FILE), Path::to_path_buf);
    let rejoin =
        "join again with a new token (`tidemill-edge reset`, then `tidemill-edge join --token T`)";
    doctor::certificate_file(
        report,
        "certificate",
        &dir.join(NODE_CERT_FILE),
        now_ms,
        CERT_WARN_DAYS,
        rejoin,
    )?;
    doctor::certificate_file(
        report,
        "CA",
        &ca_path,
        now_ms,
        CERT_WARN_DAYS,
        "get the coordinator's current ca.pem, or join again",
    )?;
    let identity = match NodeIdentity::load(dir, cfg.ca_override()) {
        Ok(identity) => identity,
        Err(e) => {
            report.fail("certificate", e.to_string(), rejoin);
            return None;
        }
    };
    match doctor::verify_client(&identity.cert, &identity.ca, now_ms) {
        Ok(()) => report.ok(
            "certificate",
            format!("issued by the CA in {}", ca_path.display()),
        ),
        Err(e) => {
            report.fail(
                "certificate",
                format!("does not chain to the CA in {}: {e}", ca_path.display()),
                "the CA file and the certificate come from different coordinators or CA generations: remove the `ca` setting, or join again",
            );
            return None;
        }
    }
    Some(identity)
}

/// A real QUIC handshake with the node's certificate: the coordinator must
/// accept it, and its own certificate must verify against the node's CA for
/// the configured name; then the clock check asks its time on the same
/// connection. No Hello is sent, so a running daemon's session is left alone.
/// Returns the clock offset, if the coordinator answered.
async fn coordinator(
    report: &mut Report,
    cfg: &EdgeConfig,
    identity: &NodeIdentity,
) -> Option<ClockOffset> {
    let name = cfg.tls_name();
    let port = cfg
        .coordinator
        .first()
        .rsplit_once(':')
        .map_or("", |(_, p)| p);
    let unreachable = format!(
        "check that the coordinator runs (systemctl status tidemill-cloud), that UDP port {port} is open on every firewall between here and it, and that `coordinator` is its address"
    );
    let addr = match cfg.coordinator_addr() {
        Ok(addr) => addr,
        Err(e) => {
            report.fail(
                "coordinator",
                format!("cannot resolve {}: {e}", cfg.coordinator.first()),
                "check the name in `coordinator` and this box's DNS",
            );
            return None;
        }
    };
    let timing = Timing {
        keep_alive: Duration::from_secs(cfg.link.keep_alive_secs),
        idle_timeout: Duration::from_secs(cfg.link.idle_timeout_secs),
    };
    let endpoint = match quic::client(identity, timing) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            report.fail(
                "coordinator",
                e.to_string(),
                "check the node's key and certificate files",
            );
            return None;
        }
    };
    let started = Instant::now();
    let connecting = match endpoint.connect(addr, &name) {
        Ok(c) => c,
        Err(e) => {
            report.fail(
                "coordinator",
                format!("cannot dial {addr}: {e}"),
                unreachable,
            );
            return None;
        }
    };
    let limit = Duration::from_secs(cfg.link.ack_timeout_secs.max(5));
    let mut offset = None;
    match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(conn)) => {
            report.ok(
                "coordinator",
                format!(
                    "{addr} accepted this node's certificate over QUIC in {} ms; its certificate is valid for {name:?}",
                    started.elapsed().as_millis()
                ),
            );
            let asked = SystemClock.now_ms();
            let answer =
                tokio::time::timeout(limit, frames::request(&conn, &EdgeMsg::ClockRequest)).await;
            let answered = SystemClock.now_ms();
            quic::close_check(&conn);
            offset = match answer {
                Ok(Ok(CloudMsg::Clock { now_ms })) => {
                    Some(ClockOffset::measure(asked, now_ms, answered))
                }
                _ => None,
            };
        }
        Ok(Err(e)) => {
            let text = e.to_string();
            let fix = if text.contains("certificate") || text.contains("name") {
                format!(
                    "the coordinator's certificate must name {name:?} (its tls_names) and come from the CA this node trusts; or it refused this node's certificate (`tidemill-cloud nodes` shows whether the node was removed)"
                )
            } else {
                unreachable.clone()
            };
            report.fail(
                "coordinator",
                format!("handshake with {addr} failed: {text}"),
                fix,
            );
        }
        Err(_) => report.fail(
            "coordinator",
            format!("no answer from {addr} within {} s", limit.as_secs()),
            unreachable,
        ),
    }
    endpoint.close(0u32.into(), b"doctor");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    offset
}

/// This node's wall clock against the coordinator's, from one request:
/// offset = t_coordinator − (t_asked + t_answered) / 2, in ms, known to
/// within ± (t_answered − t_asked) / 2 (the round trip's half).
#[derive(Debug, Clone, Copy, PartialEq)]
struct ClockOffset {
    /// The coordinator's clock minus this node's, ms.
    offset_ms: i64,
    /// How far off the estimate may be, ms.
    within_ms: i64,
}

/// Clock offsets up to this are fine for certificates, deadlines and plans.
const CLOCK_OK_MS: i64 = 2_000;

/// Offsets beyond this break certificate validity and plans outright.
const CLOCK_FAIL_MS: i64 = 60_000;

impl ClockOffset {
    fn measure(asked_ms: i64, coordinator_ms: i64, answered_ms: i64) -> Self {
        ClockOffset {
            offset_ms: coordinator_ms - (asked_ms + answered_ms) / 2,
            within_ms: (answered_ms - asked_ms + 1) / 2,
        }
    }

    fn check(self, report: &mut Report) {
        let what = format!(
            "{:+} ms against the coordinator (± {} ms)",
            self.offset_ms, self.within_ms
        );
        let fix = "run an NTP client (systemd-timesyncd or chrony) on this box and on the coordinator: certificates, deadlines and forecasts need one time";
        match self.offset_ms.abs() - self.within_ms {
            d if d <= CLOCK_OK_MS => report.ok("clock", what),
            d if d <= CLOCK_FAIL_MS => report.warn("clock", what, fix),
            _ => report.fail("clock", what, fix),
        }
    }
}

/// The probe responder's UDP port, where one is fixed.
fn probe_port(report: &mut Report, cfg: &EdgeConfig, running: bool) {
    let port = cfg.probe.listen_port;
    if !cfg.probe.enabled {
        report.ok(
            "probe port",
            "link probes are off ([probe] enabled = false)",
        );
    } else if port == 0 {
        report.ok("probe port", "any free UDP port ([probe] listen_port = 0)");
    } else if std::net::UdpSocket::bind(("0.0.0.0", port)).is_ok() {
        report.ok("probe port", format!("UDP {port} is free"));
    } else if running {
        report.ok(
            "probe port",
            format!("UDP {port} is in use, by the running daemon"),
        );
    } else {
        report.fail(
            "probe port",
            format!("UDP {port} is in use by another program"),
            "free it (ss -ulpn shows the holder) or set another [probe] listen_port",
        );
    }
}

/// Accelerators the daemon will offer.
async fn accelerators(report: &mut Report, cfg: &EdgeConfig) {
    let found = crate::accel::Accelerators::discover(&cfg.accelerators).await;
    let devices = found.devices();
    if devices.is_empty() {
        report.ok("accelerators", "none found: this edge offers CPU only");
    } else {
        let models: Vec<&str> = devices.iter().map(|d| d.model.as_str()).collect();
        report.ok(
            "accelerators",
            format!("{} found: {}", devices.len(), models.join(", ")),
        );
    }
}

/// Whether tasks can be confined: root to drop them to their job's uid (or
/// the task user) and give them a network of their own, and a writable
/// cgroup v2 hierarchy.
fn confinement(report: &mut Report, cfg: &EdgeConfig) {
    let root = nix::unistd::Uid::effective().is_root();
    let range = crate::uids::UidRange::parse(&cfg.tasks.uid_range);
    if let (true, Some(range)) = (root, range) {
        match range.check_host() {
            Ok(()) => report.ok(
                "privileges",
                format!("root: each job's tasks run as a uid of its own from {range}"),
            ),
            Err(e) => report.fail(
                "privileges",
                e.to_string(),
                "set [tasks] uid_range to uids no user of this host has",
            ),
        }
    } else if root {
        let name = cfg.tasks.user.trim();
        match nix::unistd::User::from_name(name) {
            Ok(Some(u)) if !u.uid.is_root() => report.ok(
                "privileges",
                format!("root: tasks run as {name} (uid {})", u.uid),
            ),
            _ => report.fail(
                "privileges",
                format!("[tasks] user {name:?} is not an unprivileged user here"),
                "create it or set [tasks] user to an existing unprivileged user such as nobody",
            ),
        }
    } else {
        report.warn(
            "privileges",
            format!(
                "not root (uid {}): tasks run as this user, with its access to the data dir and credentials",
                nix::unistd::Uid::effective()
            ),
            "run the daemon as root (the systemd unit does) so tasks run as uids of their own",
        );
    }
    if cfg.tasks.network == crate::config::TaskNetwork::Private {
        match crate::netns::available() {
            Ok(()) => report.ok(
                "task network",
                "single-node tasks get a network namespace of their own (no host 127.0.0.1)",
            ),
            Err(e) => report.warn(
                "task network",
                format!(
                    "no private network for tasks ({e}): they share the host's, 127.0.0.1 included"
                ),
                "run the daemon as root, or set [tasks] network = \"host\" to accept this",
            ),
        }
    }
    match crate::confine::cgroup2_mount() {
        Some(mount) if nix::unistd::access(&mount, nix::unistd::AccessFlags::W_OK).is_ok() => {
            report.ok(
                "cgroups",
                format!("cgroup v2 at {} is writable: each task gets its own cgroup", mount.display()),
            )
        }
        Some(mount) => report.warn(
            "cgroups",
            format!("cgroup v2 at {} is not writable", mount.display()),
            "run as root with /sys/fs/cgroup writable (the unit's ReadWritePaths) so tasks are killed as a whole and memory-limited",
        ),
        None => report.warn(
            "cgroups",
            "no cgroup v2 hierarchy: tasks are killed by process group only, with no memory limit",
            "boot with the unified cgroup hierarchy (systemd.unified_cgroup_hierarchy=1)",
        ),
    }
}

/// Why `reap` could not look.
#[derive(Debug, thiserror::Error)]
pub enum ReapError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] tidemill_runtime::config_file::ConfigError),
    /// The daemon holds the data dir: it handles its tasks itself.
    #[error(transparent)]
    Locked(#[from] datadir::LockError),
    /// The task user or cgroups are unusable.
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
    /// The journal cannot be read.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
}

/// Kills the leftovers of the tasks a daemon that is no longer running left
/// unfinished in its data dir ([`crate::executor::kill_leftovers`]); returns
/// how many tasks it looked at. The journal is left as it is, so the next
/// start reports each as yielded.
pub fn reap(config: Option<&Path>) -> Result<usize, ReapError> {
    let mut cfg = EdgeConfig::load(config)?;
    cfg.absolute_paths()?;
    if !cfg.data_dir.join(crate::journal::JOURNAL_FILE).exists() {
        return Ok(0);
    }
    let _lock = datadir::lock(&cfg.data_dir)?;
    let confine =
        crate::confine::Confinement::detect(&cfg.tasks, &cfg.data_dir, &cfg.resolved_node_id())?;
    let journal = crate::journal::Journal::open(&cfg.data_dir)?;
    Ok(crate::executor::kill_leftovers(&journal, &confine)?.len())
}

/// Why `reset` did not wipe.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// A daemon (or another reset) holds the data dir.
    #[error(transparent)]
    Locked(#[from] datadir::LockError),
    /// The operator did not confirm.
    #[error("not confirmed: nothing was deleted")]
    NotConfirmed,
    /// A file could not be removed.
    #[error("cannot remove {path}: {source}; remove it by hand")]
    Remove {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Wipes `dir`'s state (journal, identity, tasks, checkpoints): everything
/// but the lock, which is held meanwhile so no daemon starts on a half-wiped
/// dir. Refuses while a daemon runs. Without `yes`, the operator must type
/// `reset` on `input` first. Returns how many entries were removed.
pub fn reset(
    dir: &Path,
    yes: bool,
    input: &mut dyn BufRead,
    output: &mut dyn Write,
) -> Result<usize, ResetError> {
    if !dir.is_dir() {
        let _ = writeln!(output, "{} does not exist: nothing to reset", dir.display());
        return Ok(0);
    }
    let _lock = datadir::lock(dir)?;
    let entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ResetError::Remove {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n != datadir::LOCK_FILE))
        .collect();
    if !yes {
        let _ = writeln!(
            output,
            "This deletes the edge's journal (reports not yet delivered), its certificate (it must join again with a new token), task work dirs and checkpoints in {}:",
            dir.display()
        );
        for e in &entries {
            let _ = writeln!(output, "  {}", e.display());
        }
        let _ = write!(output, "Type reset to go on: ");
        let _ = output.flush();
        let mut answer = String::new();
        let _ = input.read_line(&mut answer);
        if answer.trim() != "reset" {
            return Err(ResetError::NotConfirmed);
        }
    }
    for path in &entries {
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        removed.map_err(|source| ResetError::Remove {
            path: path.clone(),
            source,
        })?;
    }
    Ok(entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_offset_is_the_answer_against_the_round_trips_midpoint() {
        // Asked at 1 000, answered at 1 100: the midpoint is 1 050, so a
        // coordinator that said 4 050 is 3 000 ms ahead, give or take 50.
        let o = ClockOffset::measure(1_000, 4_050, 1_100);
        assert_eq!(
            o,
            ClockOffset {
                offset_ms: 3_000,
                within_ms: 50
            }
        );
        let status = |o: ClockOffset| {
            let mut report = Report::default();
            o.check(&mut report);
            report.checks()[0].status
        };
        let ok = ClockOffset {
            offset_ms: -2_040,
            within_ms: 50,
        };
        let far = ClockOffset {
            offset_ms: 90_000,
            within_ms: 50,
        };
        assert_eq!(status(ok), doctor::Status::Ok);
        assert_eq!(status(o), doctor::Status::Warn);
        assert_eq!(status(far), doctor::Status::Fail);
    }

    fn state(dir: &Path) {
        std::fs::write(dir.join("edge-journal.db"), b"j").unwrap();
        std::fs::create_dir_all(dir.join("tasks/7")).unwrap();
        std::fs::write(dir.join("tasks/7/out"), b"x").unwrap();
    }

    #[test]
    fn reset_asks_first_and_wipes_only_on_the_word() {
        let dir = tempfile::tempdir().unwrap();
        state(dir.path());
        let mut out = Vec::new();
        let refused = reset(dir.path(), false, &mut "yes\n".as_bytes(), &mut out);
        assert!(matches!(refused, Err(ResetError::NotConfirmed)));
        assert!(dir.path().join("edge-journal.db").exists());
        assert!(String::from_utf8(out).unwrap().contains("edge-journal.db"));
        let removed = reset(
            dir.path(),
            false,
            &mut "reset\n".as_bytes(),
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(removed, 2);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the lock is left");
    }

    #[test]
    fn reset_refuses_a_held_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        state(dir.path());
        let _daemon = datadir::lock(dir.path()).unwrap();
        let err = reset(dir.path(), true, &mut "".as_bytes(), &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("in use"), "{err}");
        assert!(dir.path().join("edge-journal.db").exists());
    }
}
