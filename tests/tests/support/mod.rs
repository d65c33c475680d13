//! Test support: runs the real `tidemill-cloud` and `tidemill-edge` entry points as
//! child processes and synchronises on their log lines, never on sleeps.
//! Each test binary uses a different part of it.
#![allow(dead_code)]

pub mod cluster;
#[path = "../../../cloud/src/store/pg_cluster.rs"]
pub mod pg_cluster;
pub mod process;
pub mod rogue;
pub mod trainer;

pub use process::Proc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The coordinator binary under test.
pub const CLOUD: &str = env!("CARGO_BIN_EXE_harness-cloud");
/// The edge binary under test.
pub const EDGE: &str = env!("CARGO_BIN_EXE_harness-edge");

/// A loopback port that was free a moment ago, for UDP and TCP alike.
pub fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind UDP");
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// How long a process may take to come up or react in these tests.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A coordinator's addresses and data dir, so it can be restarted in place.
pub struct Coordinator {
    /// QUIC address.
    pub quic: SocketAddr,
    /// API base URL.
    pub api: String,
    /// Data dir.
    pub data_dir: PathBuf,
    /// The join token edges get, made on first use.
    token: std::sync::OnceLock<String>,
    /// Config keys set through the environment (`TIDEMILL_<TABLE>__<KEY>`)
    /// in every `serve` it runs.
    env: Vec<(String, String)>,
}

impl Coordinator {
    /// Addresses on free loopback ports, data under `dir`. With
    /// `TIDEMILL_TEST_STORE=postgres` in the environment, its store is a
    /// fresh database on the throwaway PostgreSQL cluster, so that the
    /// whole suite can be run against that back end.
    pub fn new(dir: &Path) -> Self {
        let quic: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let coord = Coordinator::at(quic, dir);
        match std::env::var("TIDEMILL_TEST_STORE").as_deref() {
            Ok("postgres") => {
                let url =
                    pg_cluster::database().expect("TIDEMILL_TEST_STORE=postgres needs PostgreSQL");
                coord
                    .with_env("TIDEMILL_STORE__BACKEND", "postgres")
                    .with_env("TIDEMILL_STORE__URL", &url)
            }
            _ => coord,
        }
    }

    /// Edges at `quic`, the API on a free loopback port, data under `dir`.
    pub fn at(quic: SocketAddr, dir: &Path) -> Self {
        Coordinator {
            quic,
            api: format!("http://127.0.0.1:{}", free_port()),
            data_dir: dir.join("cloud"),
            token: std::sync::OnceLock::new(),
            env: Vec::new(),
        }
    }

    /// The same, with environment variable `key` set to `value` in its `serve`.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Starts `tidemill-cloud serve` and waits until it serves.
    pub fn start(&self) -> Proc {
        self.start_with(&[])
    }

    /// Starts it with some keys of the default config replaced, each given as
    /// (the default line, its replacement).
    pub fn start_with(&self, changes: &[(&str, &str)]) -> Proc {
        self.start_with_args(changes, &[])
    }

    /// Starts it with config `changes`, as [`Coordinator::start_with`], and
    /// `args` added to the `serve` command line, for the flags that override
    /// the config file (such as `--policy`).
    pub fn start_with_args(&self, changes: &[(&str, &str)], args: &[&str]) -> Proc {
        let p = Proc::spawn("tidemill-cloud", self.command(changes, args));
        p.wait_for("tidemill-cloud serving", 1, PATIENCE);
        p
    }

    /// The `serve` command that [`Coordinator::start_with_args`] runs, for
    /// tests that add to its environment.
    pub fn command(&self, changes: &[(&str, &str)], args: &[&str]) -> Command {
        let defaults = Command::new(CLOUD)
            .arg("print-default-config")
            .output()
            .expect("run tidemill-cloud");
        let mut config = String::from_utf8(defaults.stdout).expect("utf-8 config");
        for (from, to) in changes {
            assert!(
                config.contains(from),
                "the default config has no line {from:?}"
            );
            config = config.replace(from, to);
        }
        std::fs::create_dir_all(&self.data_dir).unwrap();
        let file = self.data_dir.join("cloud.toml");
        std::fs::write(&file, config).unwrap();
        let mut cmd = Command::new(CLOUD);
        cmd.args(["serve", "--config"])
            .arg(&file)
            .args(["--quic-listen", &self.quic.to_string()])
            .args(["--api-listen", self.api.trim_start_matches("http://")])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(args)
            .env(
                "RUST_LOG",
                "info,tidemill_cloud::ingest=debug,quinn_proto::endpoint=debug",
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// The admin API token the coordinator wrote to its data dir on first
    /// start.
    pub fn admin_token(&self) -> String {
        let path = self.data_dir.join("admin-token");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .trim()
            .to_string()
    }

    /// `GET path` on the API from loopback with the admin token: the status
    /// line, headers and body.
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let addr = self.api.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the API");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.admin_token()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read the API's answer");
        out
    }

    /// Sends one raw HTTP/1.1 request to the API from loopback, with
    /// `authorization` as the whole `Authorization` header value if given;
    /// returns the status code (0 if none came) and the body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: &[u8],
    ) -> (u16, String) {
        use std::io::{Read, Write};
        let addr = self.api.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the API");
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        // The server may answer (413) before it has read a large body.
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out);
        let status = out
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, body.to_string())
    }

    /// The coordinator's event log for job `id`, oldest first: the reasons a
    /// job had, even those a later round replaced.
    pub fn job_events(&self, id: u64) -> Vec<String> {
        if let Some(url) = self.postgres_url() {
            return psql(
                &url,
                &format!("SELECT detail FROM events WHERE job_id = {id} ORDER BY id"),
            );
        }
        let db = rusqlite::Connection::open(self.data_dir.join("tidemill.db")).unwrap();
        db.prepare("SELECT detail FROM events WHERE job_id = ?1 ORDER BY id")
            .unwrap()
            .query_map([id as i64], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The PostgreSQL database its store is on, if it is on one.
    pub fn postgres_url(&self) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == "TIDEMILL_STORE__URL")
            .map(|(_, v)| v.clone())
    }

    /// The report sequence numbers stored for each node, as
    /// [`stored_report_seqs`] reads them, on either back end (on
    /// PostgreSQL in one statement, so one snapshot).
    pub fn stored_report_seqs(&self) -> Vec<(String, u64, Vec<u64>)> {
        let Some(url) = self.postgres_url() else {
            return stored_report_seqs(&self.data_dir);
        };
        let rows = psql(
            &url,
            "SELECT n.id, n.last_seq, r.seq FROM nodes n LEFT JOIN reports r ON r.node_id = n.id
             ORDER BY n.id, r.seq",
        );
        let mut out: Vec<(String, u64, Vec<u64>)> = Vec::new();
        for row in rows {
            let cols: Vec<&str> = row.split('|').collect();
            if out.last().is_none_or(|(id, _, _)| id != cols[0]) {
                out.push((cols[0].to_string(), cols[1].parse().unwrap(), Vec::new()));
            }
            if let Ok(seq) = cols[2].parse() {
                out.last_mut().unwrap().2.push(seq);
            }
        }
        out
    }

    /// The CA certificate of the coordinator.
    pub fn ca(&self) -> PathBuf {
        self.data_dir.join("ca.pem")
    }

    /// A join token for the test's edges (made with `token create` on first
    /// use; it allows any number of joins).
    pub fn token(&self) -> &str {
        self.token.get_or_init(|| {
            let out = self.cli(&["token", "create", "--description", "test edges"]);
            out.lines().last().expect("a token line").trim().to_string()
        })
    }

    /// Runs a `tidemill-cloud` client command with `--api` and `--data-dir`
    /// (so that, without `--api-token`, it reads the coordinator's admin
    /// token as the operator's CLI on its host does) and returns stdout,
    /// panicking with stderr if it fails.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.cli_command(args).output().expect("run tidemill-cloud");
        assert!(
            out.status.success(),
            "tidemill-cloud {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// The `tidemill-cloud` client command that [`Coordinator::cli`] runs.
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(CLOUD);
        cmd.args(args)
            .args(["--api", &self.api])
            .arg("--data-dir")
            .arg(&self.data_dir);
        cmd
    }

    /// `nodes --json`, parsed.
    pub fn nodes(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.cli(&["nodes", "--json"])).expect("nodes JSON")
    }

    /// `nodes --json`'s entry for `id`.
    pub fn node(&self, id: &str) -> serde_json::Value {
        self.nodes()
            .into_iter()
            .find(|n| n["id"] == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// `jobs show ID --json`, parsed.
    pub fn job(&self, id: u64) -> serde_json::Value {
        serde_json::from_str(&self.cli(&["jobs", "show", &id.to_string(), "--json"]))
            .expect("job JSON")
    }

    /// This coordinator on the PostgreSQL database at `url` (a replica when
    /// several share it).
    pub fn on_postgres(self, url: &str) -> Self {
        self.with_env("TIDEMILL_STORE__BACKEND", "postgres")
            .with_env("TIDEMILL_STORE__URL", url)
    }

    /// Waits until job `id` ended, polling the API for at most
    /// [`cluster::JOB_PATIENCE`], and asserts that it succeeded.
    pub fn wait_until_succeeded(&self, id: u64) {
        let deadline = Instant::now() + cluster::JOB_PATIENCE;
        loop {
            let job = self.job(id);
            if ["succeeded", "failed", "cancelled"].contains(&job["state"].as_str().unwrap_or("")) {
                assert_eq!(job["state"], "succeeded", "{job:#}");
                return;
            }
            assert!(Instant::now() < deadline, "job {id} did not end: {job:#}");
            std::thread::park_timeout(Duration::from_millis(200));
        }
    }

    /// Writes a job file and submits it; returns the job id.
    pub fn submit(&self, dir: &Path, name: &str, command: &[&str]) -> u64 {
        let file = dir.join(format!("{name}.toml"));
        let cmd = command
            .iter()
            .map(|c| format!("{c:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            &file,
            format!("name = {name:?}\ncommand = [{cmd}]\ndeadline = \"2099-01-01T00:00:00Z\"\n"),
        )
        .unwrap();
        self.submit_file(&file)
    }

    /// Submits the job file at `file`; returns the job's id.
    pub fn submit_file(&self, file: &Path) -> u64 {
        self.cli(&["jobs", "submit", "--file", file.to_str().unwrap()])
            .trim()
            .parse()
            .expect("job id")
    }
}

/// Resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A temporary directory that an edge's task user (`nobody`, when the tests
/// run as root) may pass through, as an operator's data dir's parents are.
pub fn tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}

/// Where the edges of a test under `dir` make their jobs' checkpoint dirs
/// (`[tasks] checkpoint_dir`): one root for all, as operators point their
/// nodes at shared storage, so that a job moved between edges resumes.
pub fn checkpoint_root(dir: &Path) -> PathBuf {
    dir.join("checkpoints")
}

/// Job `id`'s checkpoint dir, which the edge chose, under [`checkpoint_root`].
pub fn checkpoint_dir(dir: &Path, id: u64) -> PathBuf {
    checkpoint_root(dir).join(format!("job-{id}"))
}

/// Waits (bounded by [`PATIENCE`]) until `path` exists, panicking with
/// `proc`'s log if it does not.
pub fn wait_until_path(path: &Path, proc: &Proc) {
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "no {} within {PATIENCE:?}: {:#?}",
            path.display(),
            proc.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts an edge. With `replay`, it replays that node of `trace` at 60×.
pub fn start_edge(coord: &Coordinator, dir: &Path, node: &str, replay: Option<&Path>) -> Proc {
    Proc::spawn(node, edge_command(coord, dir, node, replay))
}

/// The `run` command that [`start_edge`] runs, for tests that add to its
/// environment.
pub fn edge_command(coord: &Coordinator, dir: &Path, node: &str, replay: Option<&Path>) -> Command {
    let mut cmd = Command::new(EDGE);
    cmd.args([
        "run",
        "--coordinator",
        &coord.quic.to_string(),
        "--node-id",
        node,
    ])
    .arg("--token")
    .arg(coord.token())
    .arg("--data-dir")
    .arg(dir.join(format!("edge-{node}")))
    .args(["--sample-interval", "0.2"])
    .env("TIDEMILL_TASKS__CHECKPOINT_DIR", checkpoint_root(dir))
    .env("RUST_LOG", "info");
    if let Some(trace) = replay {
        cmd.arg("--replay")
            .arg(trace)
            .args(["--replay-node", node, "--speed", "1"]);
    }
    cmd
}

/// The command of an edge `node` under `config`, replaying `series` of
/// `trace`, with its data under `dir/node`; callers add flags.
pub fn replaying_edge(
    coord: &Coordinator,
    config: &Path,
    dir: &Path,
    node: &str,
    trace: &Path,
    series: &str,
) -> Command {
    let mut cmd = Command::new(EDGE);
    cmd.arg("run")
        .arg("--config")
        .arg(config)
        .args(["--coordinator", &coord.quic.to_string(), "--node-id", node])
        .arg("--token")
        .arg(coord.token())
        .arg("--data-dir")
        .arg(dir.join(node))
        .env("TIDEMILL_TASKS__CHECKPOINT_DIR", checkpoint_root(dir))
        .arg("--replay")
        .arg(trace)
        .args(["--replay-node", series]);
    cmd
}

/// Writes a two-node tidal trace (`tidemill` CSV format) and returns its path.
pub fn write_trace(dir: &Path, nodes: &[&str]) -> PathBuf {
    let mut csv = String::from("node,time_s,cpu,mem,gpu\n");
    for (k, node) in nodes.iter().enumerate() {
        for i in 0..288 {
            let hour = i as f64 / 12.0;
            let cpu =
                45.0 + 40.0 * ((hour - 14.0 + k as f64 * 3.0) / 24.0 * std::f64::consts::TAU).cos();
            csv.push_str(&format!("{node},{},{cpu:.1},35.0,\n", i * 300));
        }
    }
    let path = dir.join("trace.csv");
    std::fs::write(&path, csv).unwrap();
    path
}

/// Logical CPUs and physical memory (bytes) of this host, read from /proc the
/// way an operator would check them.
pub fn host_cores_and_memory() -> (u64, u64) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count() as u64;
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal in /proc/meminfo");
    (cores, kib * 1024)
}

/// Rows of `sql` on the PostgreSQL database at `url`, through psql, each as
/// its `|`-separated columns.
pub fn psql(url: &str, sql: &str) -> Vec<String> {
    let out = Command::new("psql")
        .args([url, "-At", "-c", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The report sequence numbers stored for each node, read from the coordinator's
/// database (read-only, so the running coordinator is undisturbed), in one
/// read transaction, so that a node's `last_seq` and its reports agree even
/// while edges keep reporting.
pub fn stored_report_seqs(data_dir: &Path) -> Vec<(String, u64, Vec<u64>)> {
    let mut db = rusqlite::Connection::open_with_flags(
        data_dir.join("tidemill.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open the coordinator database");
    let db = db.transaction().expect("a read transaction");
    let nodes: Vec<(String, i64)> = db
        .prepare("SELECT id, last_seq FROM nodes ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    nodes
        .into_iter()
        .map(|(id, last)| {
            let seqs: Vec<u64> = db
                .prepare("SELECT seq FROM reports WHERE node_id = ?1 ORDER BY seq")
                .unwrap()
                .query_map([&id], |r| r.get::<_, i64>(0))
                .unwrap()
                .map(|s| s.unwrap() as u64)
                .collect();
            (id, last as u64, seqs)
        })
        .collect()
}
