//! A child process under test whose stderr lines are collected as they
//! arrive, so tests wait on its log lines rather than on sleeps.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process whose stderr lines are collected as they arrive.
pub struct Proc {
    child: Child,
    lines: Receiver<String>,
    seen: Arc<Mutex<Vec<String>>>,
    name: String,
}

impl Proc {
    /// Starts `cmd` with stderr captured (stdout is discarded).
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Proc {
            child,
            lines: rx,
            seen: Arc::default(),
            name: name.to_string(),
        }
    }

    fn drain(&self) {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(self.lines.try_iter());
    }

    /// Every line logged so far.
    pub fn log(&self) -> Vec<String> {
        self.drain();
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `count` logged lines (past and future) satisfy `pred`, or
    /// panics with the log after `timeout`.
    pub fn wait_until(
        &self,
        what: &str,
        count: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            let n = self.seen.lock().unwrap().iter().filter(|l| pred(l)).count();
            if n >= count {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.lock().unwrap().push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "{}: waited {timeout:?} for {count} × {what}; log:\n{}",
                        self.name,
                        self.log().join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "{}: exited while waiting for {what}; log:\n{}",
                        self.name,
                        self.log().join("\n")
                    )
                }
            }
        }
    }

    /// Waits for `count` lines containing `needle`.
    pub fn wait_for(&self, needle: &str, count: usize, timeout: Duration) {
        self.wait_until(needle, count, timeout, |l| l.contains(needle));
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("process status").is_none()
    }

    /// Stops the process with SIGTERM, as systemd or an operator would, and
    /// waits until it has exited (its stderr closes), at most `timeout`.
    pub fn terminate(&mut self, timeout: Duration) {
        let sent = Command::new("kill")
            .args(["-s", "TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "{}: SIGTERM could not be sent", self.name);
        self.wait_exit(timeout);
    }

    /// Waits until the process has exited (its stderr closes), at most
    /// `timeout`, and returns how it ended.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.lock().unwrap().push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: still running after {timeout:?}; log:\n{}",
                    self.name,
                    self.log().join("\n")
                ),
            }
        }
        self.child.wait().expect("the exit status")
    }

    /// Kills the process with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lines of each process's log a failed test prints as it ends.
const TAIL_ON_FAILURE: usize = 60;

impl Drop for Proc {
    /// Kills the process; when a test failed, prints its log's tail, so a
    /// failure shows every process's side, not only the one waited on.
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(TAIL_ON_FAILURE)..];
            eprintln!(
                "--- {} (last {} lines) ---\n{}",
                self.name,
                tail.len(),
                tail.join("\n")
            );
        }
    }
}
