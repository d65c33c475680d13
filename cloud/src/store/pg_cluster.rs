//! A throwaway PostgreSQL cluster for the store's tests, so the PostgreSQL
//! back end is tested against a real server without any setup: one cluster
//! per test process, started on first use, with a fresh database per call.
//!
//! The crate has no PostgreSQL client of its own here, so databases are made
//! with the cluster's `createdb`. The server dies with the test process and
//! its directory is then removed (best effort), so nothing outlives a run.

use std::fs::{self, File};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The superuser that the URLs carry, with the cluster's random password.
const USER: &str = "tidemill";
/// How long the server may take to accept connections before a test fails.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The process-wide cluster; `None` when PostgreSQL is not installed.
static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();

/// A running cluster: where its client programs are and how to reach it.
struct Cluster {
    bin: PathBuf,
    port: u16,
    password: String,
    /// Its stdin is held open for the life of the process: when it closes
    /// (the process exits), the sweeper removes the cluster's directory.
    _sweeper: Child,
}

/// The URL (`postgres://USER:PASSWORD@127.0.0.1:PORT/NAME`) of a new, empty
/// database, or `None` (after one `SKIPPED:` line on stderr) when PostgreSQL
/// is not installed, so the tests that need it skip rather than fail.
/// Panics when PostgreSQL is installed but the cluster cannot start.
pub(crate) fn database() -> Option<String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let cluster = CLUSTER.get_or_init(start).as_ref()?;
    let name = format!("test_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let port = cluster.port.to_string();
    let out = Command::new(cluster.bin.join("createdb"))
        .args(["-h", "127.0.0.1", "-p", &port, "-U", USER, &name])
        .env("PGPASSWORD", &cluster.password)
        .output()
        .expect("run createdb");
    assert!(
        out.status.success(),
        "createdb {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(format!(
        "postgres://{USER}:{}@127.0.0.1:{}/{name}",
        cluster.password, cluster.port
    ))
}

/// The directory holding `initdb` and its sibling server programs: from the
/// PATH, else Debian's /usr/lib/postgresql/VERSION/bin, newest first.
fn find_bin() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    std::env::split_paths(&path)
        .chain(versions.into_iter().map(|(_, bin)| bin))
        .filter_map(|dir| fs::canonicalize(dir.join("initdb")).ok())
        .filter_map(|initdb| initdb.parent().map(Path::to_path_buf))
        .find(|bin| bin.join("postgres").is_file())
}

/// Starts the cluster, or says SKIPPED and gives `None` without PostgreSQL.
fn start() -> Option<Cluster> {
    let Some(bin) = find_bin() else {
        eprintln!(
            "SKIPPED: PostgreSQL's initdb is in neither PATH nor /usr/lib/postgresql/*/bin; \
             install PostgreSQL (apt-get install postgresql) to run the PostgreSQL store tests"
        );
        return None;
    };
    let dir = tempfile::Builder::new()
        .prefix("tidemill-pg-")
        .tempdir()
        .expect("temp dir")
        .keep();
    let sweeper = sweep_when_done(&dir);
    // PostgreSQL refuses to run as root: as root, run it as the user that
    // Debian's package creates, which must then own its files.
    let postgres = nix::unistd::Uid::effective().is_root().then(|| {
        let user = nix::unistd::User::from_name("postgres").ok().flatten();
        user.expect("running as root, PostgreSQL needs a `postgres` user to run as")
    });
    let own = |path: &Path| {
        if let Some(user) = &postgres {
            std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .expect("chown");
        }
    };
    // setpriv sets the parent-death signal after it changes user (a change
    // of user would clear it).
    let as_pg = |program: &str, pdeathsig: bool| {
        let mut cmd = Command::new("setpriv");
        if postgres.is_some() {
            cmd.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]);
        }
        if pdeathsig {
            cmd.args(["--pdeathsig", "KILL"]);
        }
        cmd.arg("--").arg(bin.join(program));
        cmd
    };
    own(&dir);

    let password = random_hex(16);
    let pwfile = dir.join("pwfile");
    fs::write(&pwfile, &password).expect("write the password file");
    own(&pwfile);
    let log = dir.join("log");
    let log_file = || {
        let file = File::options().create(true).append(true).open(&log);
        file.expect("open the cluster's log")
    };
    let data = dir.join("data");
    let initdb = as_pg("initdb", false)
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            USER,
            "-A",
            "scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
        ])
        .arg("--no-sync")
        .arg(format!("--pwfile={}", pwfile.display()))
        .stdout(Stdio::null())
        .stderr(log_file())
        .status()
        .expect("run initdb");
    let _ = fs::remove_file(&pwfile);
    assert!(initdb.success(), "initdb failed:\n{}", tail(&log));

    // A free port (a race with other programs is possible, and would show in the log).
    let listener = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let port = listener.expect("a free port").port();
    let mut server = as_pg("postgres", true);
    server.arg("-D").arg(&data).arg("-k").arg(&dir);
    server.args(["-p", &port.to_string()]);
    // Durability buys nothing in a cluster that dies with the tests.
    for setting in [
        "listen_addresses=127.0.0.1",
        "fsync=off",
        "synchronous_commit=off",
        "full_page_writes=off",
        "max_connections=300",
    ] {
        server.args(["-c", setting]);
    }
    server
        .stdin(Stdio::null())
        .stdout(log_file())
        .stderr(log_file());
    // The kill on parent death is tied to the spawning thread, not the
    // process, so the server is spawned from a thread that never ends.
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("postgres".into())
        .spawn(move || {
            tx.send(server.spawn()).expect("send the server");
            loop {
                thread::park();
            }
        })
        .expect("spawn the server's thread");
    let mut child: Child = rx
        .recv()
        .expect("the server's thread")
        .expect("spawn postgres");

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("wait for postgres") {
            panic!("postgres exited ({status}) while starting:\n{}", tail(&log));
        }
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
            .status()
            .expect("run pg_isready");
        if ready.success() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "postgres did not accept connections within {START_TIMEOUT:?}:\n{}",
                tail(&log)
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    Some(Cluster {
        bin,
        port,
        password,
        _sweeper: sweeper,
    })
}

/// Starts the sweeper: a shell that waits for this process to exit (its
/// stdin, a pipe from here, then closes) and removes `dir`, retrying a few
/// times while the server's processes, killed at the same moment, go.
fn sweep_when_done(dir: &Path) -> Child {
    let script = r#"trap '' INT HUP; cat >/dev/null; i=0
        until rm -rf "$0" 2>/dev/null || [ $i -ge 50 ]; do i=$((i+1)); sleep 0.1; done"#;
    Command::new("sh")
        .args(["-c", script])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the sweeper")
}

/// `bytes` random bytes from the kernel, in hex: the superuser's password.
fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0; bytes];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read /dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The end of the cluster's log, for the message of a failed start.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
