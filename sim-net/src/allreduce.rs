//! `tidemill-sim allreduce`: a small ring all-reduce over TCP, the workload the
//! cost model's sync term describes, so that term can be checked against a
//! real exchange on a real (or rate-limited) link.
//!
//! It finds its peers the way a training job does, from the rendezvous
//! environment every task receives (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
//! `MASTER_PORT`): rank 0 listens on `MASTER_ADDR:MASTER_PORT`; every other
//! rank connects there and says its rank and the address of its own ring
//! listener (an ephemeral port on the IP it reached rank 0 from); rank 0 then
//! tells each rank its successor `(rank + 1) mod n`. Each rank connects to its
//! successor and accepts its predecessor, which closes the ring.
//!
//! One step all-reduces `M` bytes of `u32` (wrapping sums) split into `n`
//! chunks of `M/n` bytes: a reduce-scatter of `n − 1` transfers, after which
//! rank `r` holds the full sum of chunk `(r + 1) mod n`, then an all-gather of
//! `n − 1` more. Every rank sends and receives `2(n − 1)` chunks of `M/n`
//! bytes per step, `2(n − 1)/n × M` bytes each way, exactly the schedule of
//! [`tidemill_sched::cost::ring_allreduce_s`]:
//! `T_n = 2(n−1)/n × M / B_eff + 2(n−1) × latency_s`. (When `M/4` elements
//! do not split evenly, chunks differ by at most one element.)
//!
//! Each rank starts every step from values that depend on its rank and checks
//! afterwards that every element equals the known sum.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use thiserror::Error;

/// Added per rank to the initial values, so that every rank's data differs.
const RANK_STRIDE: u32 = 0x9E37_79B9;

/// How to set `MASTER_ADDR`, for every error about it.
const ADDR_FIX: &str =
    "set MASTER_ADDR to the host or IP where rank 0 listens (tidemill sets it for every task)";

/// How long a worker waits for rank 0's answer beyond its timeout: rank 0 may
/// have started later and still be waiting its own full timeout for a late rank.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// How long a polling accept or a refused connect waits before trying again.
const POLL: Duration = Duration::from_millis(5);

/// Options of `allreduce`; the ranks come from the environment.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Bytes all-reduced per step (the model size M of the cost model); a
    /// multiple of 4, as the elements are u32.
    #[arg(long, default_value_t = 4 << 20)]
    pub bytes: usize,
    /// Number of steps to run and time.
    #[arg(long, default_value_t = 10)]
    pub steps: u32,
    /// Seconds to wait for the other ranks during rendezvous, and for any one
    /// chunk during a step.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
}

/// Why `allreduce` failed.
#[derive(Debug, Error)]
pub enum AllreduceError {
    /// A rendezvous variable is missing or malformed.
    #[error("{var}: {problem}; {fix}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        problem: String,
        /// How to set it.
        fix: &'static str,
    },
    /// A flag is out of range.
    #[error("--{flag} {value}: {rule}")]
    BadOption {
        /// The flag, without dashes.
        flag: &'static str,
        /// Its value.
        value: String,
        /// What it must be.
        rule: &'static str,
    },
    /// A listening socket could not be opened.
    #[error("rank {rank}: cannot listen on {addr}: {source}; {fix}")]
    Listen {
        /// The rank that tried.
        rank: u32,
        /// The address, as given.
        addr: String,
        /// The OS error.
        source: io::Error,
        /// How to fix it.
        fix: &'static str,
    },
    /// A peer could not be reached before the timeout.
    #[error(
        "rank {rank}: cannot reach {peer} at {addr} within {timeout_s} s: {source}; \
         check that it is running and that {addr} is reachable from here"
    )]
    Connect {
        /// The rank that tried.
        rank: u32,
        /// Who it tried to reach.
        peer: String,
        /// Where.
        addr: String,
        /// Seconds it kept trying.
        timeout_s: f64,
        /// The last error.
        source: io::Error,
    },
    /// Peers did not show up before the timeout.
    #[error(
        "rank {rank}: timed out after {timeout_s} s waiting for {waiting_for}; \
         check that every rank started with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT"
    )]
    Timeout {
        /// The rank that waited.
        rank: u32,
        /// What it waited for.
        waiting_for: String,
        /// Seconds it waited.
        timeout_s: f64,
    },
    /// A peer broke the rendezvous protocol or sent inconsistent settings.
    #[error("rank {rank}: {peer}: {problem}")]
    Protocol {
        /// The rank that noticed.
        rank: u32,
        /// The peer at fault.
        peer: String,
        /// What was wrong.
        problem: String,
    },
    /// Rank 0 gave up on the rendezvous and said why.
    #[error("rank {rank}: rank 0 abandoned the rendezvous: {reason}")]
    Abandoned {
        /// The rank told.
        rank: u32,
        /// Rank 0's reason.
        reason: String,
    },
    /// Sending to or receiving from a peer failed.
    #[error(
        "rank {rank}: {what} rank {peer} failed: {source}; check that rank {peer} is still running"
    )]
    Io {
        /// The rank that noticed.
        rank: u32,
        /// The peer.
        peer: u32,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The all-reduce produced a wrong sum.
    #[error(
        "rank {rank}: step {step}: element {index} is {got}, expected {want}; \
         the ring lost or misplaced a chunk"
    )]
    WrongSum {
        /// The rank that checked.
        rank: u32,
        /// The step, from 1.
        step: u32,
        /// The first wrong element.
        index: usize,
        /// Its value.
        got: u32,
        /// The known sum.
        want: u32,
    },
}

/// The rendezvous settings a task receives, read from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// This task's rank, `0..world`.
    pub rank: u32,
    /// The number of ranks.
    pub world: u32,
    /// Host or IP where rank 0 listens.
    pub master_addr: String,
    /// TCP port where rank 0 listens.
    pub master_port: u16,
}

impl Rendezvous {
    /// Reads `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` from the process environment.
    pub fn from_env() -> Result<Self, AllreduceError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the four variables through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AllreduceError> {
        const RANK_FIX: &str =
            "set RANK to this task's rank, 0 to WORLD_SIZE - 1 (tidemill sets it for every task)";
        const WORLD_FIX: &str =
            "set WORLD_SIZE to the number of ranks, at least 1 (tidemill sets it for every task)";
        const PORT_FIX: &str = "set MASTER_PORT to the TCP port, 1 to 65535, where rank 0 listens (tidemill sets it for every task)";
        let get = |var: &'static str, fix: &'static str| {
            lookup(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| AllreduceError::Env {
                    var,
                    problem: "is not set".to_string(),
                    fix,
                })
        };
        let number = |var: &'static str, fix: &'static str| {
            let value = get(var, fix)?;
            value.parse::<u32>().map_err(|_| AllreduceError::Env {
                var,
                problem: format!("{value:?} is not a whole number"),
                fix,
            })
        };
        let world = number("WORLD_SIZE", WORLD_FIX)?;
        if world == 0 {
            return Err(AllreduceError::Env {
                var: "WORLD_SIZE",
                problem: "is 0".to_string(),
                fix: WORLD_FIX,
            });
        }
        let rank = number("RANK", RANK_FIX)?;
        if rank >= world {
            return Err(AllreduceError::Env {
                var: "RANK",
                problem: format!("is {rank}, not below WORLD_SIZE {world}"),
                fix: RANK_FIX,
            });
        }
        let master_addr = get("MASTER_ADDR", ADDR_FIX)?;
        let port = get("MASTER_PORT", PORT_FIX)?;
        let master_port = port
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| AllreduceError::Env {
                var: "MASTER_PORT",
                problem: format!("{port:?} is not a port number"),
                fix: PORT_FIX,
            })?;
        Ok(Self {
            rank,
            world,
            master_addr,
            master_port,
        })
    }
}

/// One rank's place in the ring: open connections to its successor and
/// predecessor (none when it is alone).
#[derive(Debug)]
pub struct Ring {
    rank: u32,
    world: u32,
    peers: Option<Peers>,
}

#[derive(Debug)]
struct Peers {
    next: TcpStream,
    prev: TcpStream,
    send_buf: Vec<u8>,
    recv_buf: Vec<u8>,
}

/// Joins the ring described by `rv`: rank 0 listens on `MASTER_ADDR:MASTER_PORT`,
/// the others connect there. Waits at most `timeout` for each phase.
pub fn join(rv: &Rendezvous, timeout: Duration) -> Result<Ring, AllreduceError> {
    if rv.world == 1 {
        return Ok(Ring::alone());
    }
    if rv.rank == 0 {
        let addr = format!("{}:{}", rv.master_addr, rv.master_port);
        let listener =
            TcpListener::bind((rv.master_addr.as_str(), rv.master_port)).map_err(|source| {
                AllreduceError::Listen {
                    rank: 0,
                    addr,
                    source,
                    fix: "MASTER_ADDR must be an address of this host and MASTER_PORT a free port",
                }
            })?;
        join_master(listener, rv.world, timeout)
    } else {
        join_worker(rv.rank, rv.world, &rv.master_addr, rv.master_port, timeout)
    }
}

/// Rank 0's side: collects every other rank's ring address on `listener`,
/// tells each its successor, then closes the ring. Taking a bound listener lets
/// tests use an ephemeral port.
pub fn join_master(
    listener: TcpListener,
    world: u32,
    timeout: Duration,
) -> Result<Ring, AllreduceError> {
    if world <= 1 {
        return Ok(Ring::alone());
    }
    let deadline = Instant::now() + timeout;
    let master_addr = listener
        .local_addr()
        .map_err(|source| io_err(0, 0, "reading the address of", source))?;
    let ring_listener = listen(0, master_addr.ip())?;
    let ring_port = ring_listener
        .local_addr()
        .map_err(|source| io_err(0, 0, "reading the address of", source))?
        .port();
    // Per rank 1..world: its rendezvous connection and its ring address.
    let mut joined: Vec<Option<(TcpStream, SocketAddr)>> = (0..world).map(|_| None).collect();
    let mut missing = world - 1;
    let outcome = (|| {
        while missing > 0 {
            let Some(stream) = accept_until(&listener, deadline, 0)? else {
                let absent: Vec<String> = (1..world)
                    .filter(|&r| joined[r as usize].is_none())
                    .map(|r| r.to_string())
                    .collect();
                return Err(AllreduceError::Timeout {
                    rank: 0,
                    waiting_for: format!(
                        "rank {} to join at {master_addr}",
                        absent.join(", rank ")
                    ),
                    timeout_s: timeout.as_secs_f64(),
                });
            };
            let registered = read_hello(&stream, world, deadline).and_then(|(rank, addr)| {
                match joined[rank as usize] {
                    Some(_) => Err(AllreduceError::Protocol {
                        rank: 0,
                        peer: format!("rank {rank}"),
                        problem: "joined twice; give every task its own RANK".to_string(),
                    }),
                    None => Ok((rank, addr)),
                }
            });
            let (rank, ring_addr) = registered.inspect_err(|e| {
                // Best effort, as below: tell the offender why before giving up.
                let _ = writeln!(&stream, "ERR {e}");
            })?;
            tracing::debug!(rank, %ring_addr, "allreduce: rank joined");
            joined[rank as usize] = Some((stream, ring_addr));
            missing -= 1;
        }
        Ok(())
    })();
    if let Err(e) = outcome {
        for (stream, _) in joined.iter_mut().flatten() {
            // Best effort: the rank also gives up on its own timeout.
            let _ = writeln!(stream, "ERR {e}");
        }
        return Err(e);
    }
    // Ranks 1..world in order: rank 0 never registers, every other one did.
    let joined: Vec<(TcpStream, SocketAddr)> = joined.into_iter().flatten().collect();
    for (i, (stream, _)) in joined.iter().enumerate() {
        let rank = i as u32 + 1;
        // The successor of rank `i + 1` registered at index `i + 1`; the last one's is rank 0.
        let addr = match joined.get(i + 1) {
            Some((_, a)) => *a,
            None => {
                let ip = stream
                    .local_addr()
                    .map_err(|source| io_err(0, rank, "reading the address towards", source))?
                    .ip();
                SocketAddr::new(ip, ring_port)
            }
        };
        let mut stream: &TcpStream = stream;
        writeln!(stream, "OK {addr}").map_err(|source| io_err(0, rank, "answering", source))?;
    }
    let next_addr = joined[0].1;
    close_ring(0, world, next_addr, &ring_listener, timeout)
}

/// The side of every rank but 0: registers with rank 0 at `master_addr:master_port`,
/// learns its successor, then closes the ring.
pub fn join_worker(
    rank: u32,
    world: u32,
    master_addr: &str,
    master_port: u16,
    timeout: Duration,
) -> Result<Ring, AllreduceError> {
    let deadline = Instant::now() + timeout;
    let shown = format!("{master_addr}:{master_port} (MASTER_ADDR:MASTER_PORT)");
    let addrs: Vec<SocketAddr> = (master_addr, master_port)
        .to_socket_addrs()
        .map_err(|e| AllreduceError::Env {
            var: "MASTER_ADDR",
            problem: format!("{master_addr:?} does not resolve: {e}"),
            fix: ADDR_FIX,
        })?
        .collect();
    let stream = connect_until(rank, "rank 0", &addrs, &shown, deadline, timeout)?;
    let my_ip = stream
        .local_addr()
        .map_err(|source| io_err(rank, 0, "reading the address towards", source))?
        .ip();
    let ring_listener = listen(rank, my_ip)?;
    let ring_addr = ring_listener
        .local_addr()
        .map_err(|source| io_err(rank, rank, "reading the address of", source))?;
    (&stream)
        .write_all(format!("{rank} {world} {ring_addr}\n").as_bytes())
        .map_err(|source| io_err(rank, 0, "registering with", source))?;
    let wait = timeout + ANSWER_GRACE;
    stream
        .set_read_timeout(Some(wait))
        .map_err(|source| io_err(rank, 0, "setting a timeout towards", source))?;
    let mut line = String::new();
    match BufReader::new(&stream).read_line(&mut line) {
        Ok(0) => {
            return Err(AllreduceError::Protocol {
                rank,
                peer: "rank 0".to_string(),
                problem: "closed the rendezvous without naming a successor; see rank 0's error"
                    .to_string(),
            });
        }
        Ok(_) => {}
        Err(e) if is_timeout(&e) => {
            return Err(AllreduceError::Timeout {
                rank,
                waiting_for: "rank 0 to name this rank's successor (some rank has not joined)"
                    .to_string(),
                timeout_s: wait.as_secs_f64(),
            });
        }
        Err(source) => return Err(io_err(rank, 0, "waiting for the successor from", source)),
    }
    let line = line.trim_end();
    if let Some(reason) = line.strip_prefix("ERR ") {
        return Err(AllreduceError::Abandoned {
            rank,
            reason: reason.to_string(),
        });
    }
    let next_addr = line
        .strip_prefix("OK ")
        .and_then(|a| a.parse::<SocketAddr>().ok())
        .ok_or_else(|| AllreduceError::Protocol {
            rank,
            peer: "rank 0".to_string(),
            problem: format!(
                "answered {line:?}, not `OK <address>`; run the same tidemill-sim on every rank"
            ),
        })?;
    close_ring(rank, world, next_addr, &ring_listener, timeout)
}

impl Ring {
    /// The ring of a world of one: nothing to exchange.
    fn alone() -> Self {
        Self {
            rank: 0,
            world: 1,
            peers: None,
        }
    }

    /// Replaces `data` on every rank by the elementwise wrapping sum over all
    /// ranks; every rank must call it with the same length.
    pub fn allreduce(&mut self, data: &mut [u32]) -> Result<(), AllreduceError> {
        let Some(peers) = &mut self.peers else {
            return Ok(());
        };
        let (rank, world) = (self.rank, self.world);
        let (r, n, len) = (rank as usize, world as usize, data.len());
        let chunk = |c: usize| c * len / n..(c + 1) * len / n;
        for s in 0..n - 1 {
            let (send, recv) = ((r + n - s) % n, (r + 2 * n - s - 1) % n);
            let got = peers.exchange(rank, world, &data[chunk(send)], chunk(recv).len())?;
            for (d, b) in data[chunk(recv)].iter_mut().zip(got.chunks_exact(4)) {
                *d = d.wrapping_add(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        }
        for s in 0..n - 1 {
            let (send, recv) = ((r + 1 + n - s) % n, (r + n - s) % n);
            let got = peers.exchange(rank, world, &data[chunk(send)], chunk(recv).len())?;
            for (d, b) in data[chunk(recv)].iter_mut().zip(got.chunks_exact(4)) {
                *d = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        Ok(())
    }
}

impl Peers {
    /// Sends `send` to the successor while receiving `recv_elems` elements
    /// from the predecessor; both at once, so a ring of full socket buffers
    /// cannot deadlock.
    fn exchange(
        &mut self,
        rank: u32,
        world: u32,
        send: &[u32],
        recv_elems: usize,
    ) -> Result<&[u8], AllreduceError> {
        self.send_buf.clear();
        self.send_buf
            .extend(send.iter().flat_map(|v| v.to_le_bytes()));
        self.recv_buf.resize(recv_elems * 4, 0);
        let (next, prev, send_buf, recv_buf) = (
            &mut self.next,
            &mut self.prev,
            &self.send_buf,
            &mut self.recv_buf,
        );
        let (sent, received) = thread::scope(|s| {
            let writer = s.spawn(move || next.write_all(send_buf));
            let received = prev.read_exact(recv_buf);
            let sent = writer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (sent, received)
        });
        let (next_rank, prev_rank) = ((rank + 1) % world, (rank + world - 1) % world);
        received.map_err(|source| io_err(rank, prev_rank, "receiving a chunk from", source))?;
        sent.map_err(|source| io_err(rank, next_rank, "sending a chunk to", source))?;
        Ok(&self.recv_buf)
    }
}

/// Runs `steps` all-reduces of `bytes` bytes on `ring`, each from rank-dependent
/// values, checks every result, and returns each step's time (zero when alone).
pub fn run_steps(
    ring: &mut Ring,
    bytes: usize,
    steps: u32,
) -> Result<Vec<Duration>, AllreduceError> {
    let len = bytes / 4;
    let (rank, world) = (ring.rank, ring.world);
    let mut data = vec![0u32; len];
    let mut times = Vec::with_capacity(steps as usize);
    for step in 1..=steps {
        for (i, d) in data.iter_mut().enumerate() {
            *d = initial(rank, i);
        }
        let start = Instant::now();
        ring.allreduce(&mut data)?;
        // Alone, nothing moves: report the cost model's zero, not the loop's overhead.
        times.push(if ring.peers.is_some() {
            start.elapsed()
        } else {
            Duration::ZERO
        });
        if let Some((index, &got)) = data
            .iter()
            .enumerate()
            .find(|&(i, &v)| v != expected_sum(world, i))
        {
            return Err(AllreduceError::WrongSum {
                rank,
                step,
                index,
                got,
                want: expected_sum(world, index),
            });
        }
    }
    Ok(times)
}

/// The median of `times` (the mean of the middle two for an even count); zero when empty.
pub fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// Runs `allreduce`: joins the ring from the environment, runs the steps and
/// prints `step K: S s` per step and the median.
pub fn run(args: &Args) -> Result<(), AllreduceError> {
    if !args.bytes.is_multiple_of(4) {
        return Err(AllreduceError::BadOption {
            flag: "bytes",
            value: args.bytes.to_string(),
            rule: "must be a multiple of 4 (the elements are u32)",
        });
    }
    if args.steps == 0 {
        return Err(AllreduceError::BadOption {
            flag: "steps",
            value: "0".to_string(),
            rule: "must be at least 1",
        });
    }
    if !(args.timeout_s.is_finite() && args.timeout_s > 0.0) {
        return Err(AllreduceError::BadOption {
            flag: "timeout-s",
            value: args.timeout_s.to_string(),
            rule: "must be a positive number of seconds",
        });
    }
    let rv = Rendezvous::from_env()?;
    let mut ring = join(&rv, Duration::from_secs_f64(args.timeout_s))?;
    let times = run_steps(&mut ring, args.bytes, args.steps)?;
    for (k, t) in times.iter().enumerate() {
        println!("step {}: {:.6} s", k + 1, t.as_secs_f64());
    }
    println!(
        "{}",
        median_line(
            median(&times),
            args.bytes,
            ring.world,
            ring.rank,
            times.len()
        )
    );
    Ok(())
}

/// The summary line [`run`] prints last, which [`median_in_output`] reads.
fn median_line(median: Duration, bytes: usize, world: u32, rank: u32, steps: usize) -> String {
    format!(
        "median step: {:.6} s for {bytes} bytes over {world} ranks (rank {rank}, {steps} steps)",
        median.as_secs_f64()
    )
}

/// The median step, in seconds, in the output of [`run`] (its
/// `median step: S s ...` line), for whoever reads a rank's output.
pub fn median_in_output(output: &str) -> Option<f64> {
    output
        .split("median step: ")
        .nth(1)?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// Rank `rank`'s value of element `i` before a step.
fn initial(rank: u32, i: usize) -> u32 {
    (i as u32).wrapping_add(RANK_STRIDE.wrapping_mul(rank))
}

/// The sum over `world` ranks of [`initial`] at element `i`: `n·i + STRIDE·n(n−1)/2`, wrapping.
fn expected_sum(world: u32, i: usize) -> u32 {
    let pairs = (u64::from(world) * u64::from(world.saturating_sub(1)) / 2) as u32;
    (i as u32)
        .wrapping_mul(world)
        .wrapping_add(RANK_STRIDE.wrapping_mul(pairs))
}

/// Connects to this rank's successor and accepts its predecessor, within
/// `timeout`; each side names itself with its rank in 4 bytes so a stray
/// connection is caught.
fn close_ring(
    rank: u32,
    world: u32,
    next_addr: SocketAddr,
    listener: &TcpListener,
    timeout: Duration,
) -> Result<Ring, AllreduceError> {
    let deadline = Instant::now() + timeout;
    let (next_rank, prev_rank) = ((rank + 1) % world, (rank + world - 1) % world);
    let next_name = format!("rank {next_rank} (successor)");
    let mut next = connect_until(
        rank,
        &next_name,
        &[next_addr],
        &next_addr.to_string(),
        deadline,
        timeout,
    )?;
    next.write_all(&rank.to_le_bytes())
        .map_err(|source| io_err(rank, next_rank, "greeting", source))?;
    let Some(mut prev) = accept_until(listener, deadline, rank)? else {
        return Err(AllreduceError::Timeout {
            rank,
            waiting_for: format!(
                "rank {prev_rank} (predecessor) to connect to {}",
                local(listener)
            ),
            timeout_s: timeout.as_secs_f64(),
        });
    };
    prev.set_read_timeout(Some(remaining(deadline)))
        .map_err(|source| io_err(rank, prev_rank, "setting a timeout towards", source))?;
    let mut hello = [0u8; 4];
    prev.read_exact(&mut hello)
        .map_err(|source| io_err(rank, prev_rank, "reading the greeting of", source))?;
    let who = u32::from_le_bytes(hello);
    if who != prev_rank {
        return Err(AllreduceError::Protocol {
            rank,
            peer: format!("rank {who}"),
            problem: format!(
                "connected as predecessor, expected rank {prev_rank}; give every task its own RANK"
            ),
        });
    }
    for (stream, peer) in [(&next, next_rank), (&prev, prev_rank)] {
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_read_timeout(Some(timeout)))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|source| io_err(rank, peer, "configuring the connection to", source))?;
    }
    tracing::debug!(rank, world, %next_addr, "allreduce: ring closed");
    Ok(Ring {
        rank,
        world,
        peers: Some(Peers {
            next,
            prev,
            send_buf: Vec::new(),
            recv_buf: Vec::new(),
        }),
    })
}

/// Reads a rank's `RANK WORLD_SIZE RING_ADDR` line and checks it against `world`.
fn read_hello(
    stream: &TcpStream,
    world: u32,
    deadline: Instant,
) -> Result<(u32, SocketAddr), AllreduceError> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "a rank".to_string(), |a| format!("the rank at {a}"));
    let bad = |problem: String| AllreduceError::Protocol {
        rank: 0,
        peer: peer.clone(),
        problem,
    };
    stream
        .set_read_timeout(Some(remaining(deadline)))
        .map_err(|e| bad(format!("cannot set a timeout: {e}")))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| bad(format!("sent no registration: {e}")))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [rank, their_world, addr] = fields[..] else {
        return Err(bad(format!(
            "sent {:?}, not `RANK WORLD_SIZE ADDRESS`; run the same tidemill-sim on every rank",
            line.trim_end()
        )));
    };
    let (Ok(rank), Ok(their_world), Ok(addr)) = (
        rank.parse::<u32>(),
        their_world.parse::<u32>(),
        addr.parse::<SocketAddr>(),
    ) else {
        return Err(bad(format!(
            "sent a malformed registration {:?}",
            line.trim_end()
        )));
    };
    if their_world != world {
        return Err(bad(format!(
            "has WORLD_SIZE {their_world}, rank 0 has {world}; give every task the same WORLD_SIZE"
        )));
    }
    if rank == 0 || rank >= world {
        return Err(bad(format!(
            "says it is rank {rank}; ranks other than 0 must be 1 to {}",
            world - 1
        )));
    }
    Ok((rank, addr))
}

/// Binds an ephemeral ring listener on `ip`.
fn listen(rank: u32, ip: IpAddr) -> Result<TcpListener, AllreduceError> {
    TcpListener::bind((ip, 0)).map_err(|source| AllreduceError::Listen {
        rank,
        addr: format!("{ip}:0"),
        source,
        fix: "the ring needs an ephemeral port on the address used to reach rank 0",
    })
}

/// Accepts one connection, or `None` once `deadline` passes.
fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
    rank: u32,
) -> Result<Option<TcpStream>, AllreduceError> {
    let fail = |source| AllreduceError::Listen {
        rank,
        addr: local(listener),
        source,
        fix: "the listener failed while waiting for a peer",
    };
    listener.set_nonblocking(true).map_err(fail)?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).map_err(fail)?;
                return Ok(Some(stream));
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                thread::sleep(POLL);
            }
            Err(e) => return Err(fail(e)),
        }
    }
}

/// Connects to the first of `addrs` that answers, retrying refusals (the peer
/// may not be listening yet) until `deadline`.
fn connect_until(
    rank: u32,
    peer: &str,
    addrs: &[SocketAddr],
    shown: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream, AllreduceError> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the name resolved to no address");
    loop {
        for addr in addrs {
            match TcpStream::connect_timeout(addr, remaining(deadline)) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        if Instant::now() >= deadline {
            return Err(AllreduceError::Connect {
                rank,
                peer: peer.to_string(),
                addr: shown.to_string(),
                timeout_s: timeout.as_secs_f64(),
                source: last,
            });
        }
        thread::sleep(POLL * 10);
    }
}

/// Time left until `deadline`, at least a millisecond (a zero socket timeout is an error).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Whether a socket read gave up on its timeout (Linux says WouldBlock).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// The listener's address for messages.
fn local(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map_or_else(|_| "its ring listener".to_string(), |a| a.to_string())
}

/// Shorthand for [`AllreduceError::Io`].
fn io_err(rank: u32, peer: u32, what: &'static str, source: io::Error) -> AllreduceError {
    AllreduceError::Io {
        rank,
        peer,
        what,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_secs(1);

    /// Runs `ranks` (a subset of `0..world`) as threads on 127.0.0.1; each
    /// returns its step times or its error.
    fn ring_on_loopback(
        world: u32,
        ranks: &[u32],
        bytes: usize,
        steps: u32,
        timeout: Duration,
    ) -> Vec<Result<Vec<Duration>, AllreduceError>> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        // Without rank 0 nobody may listen there, or the others would connect and wait.
        let mut listener = ranks.contains(&0).then_some(listener);
        let handles: Vec<_> = ranks
            .iter()
            .map(|&rank| {
                let master = if rank == 0 { listener.take() } else { None };
                thread::spawn(move || {
                    let mut ring = match master {
                        Some(l) => join_master(l, world, timeout)?,
                        None => join_worker(rank, world, "127.0.0.1", port, timeout)?,
                    };
                    run_steps(&mut ring, bytes, steps)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    }

    #[test]
    fn allreduce_sums_one_megabyte_over_three_and_four_ranks() {
        for world in [3u32, 4] {
            let ranks: Vec<u32> = (0..world).collect();
            for (rank, result) in
                ring_on_loopback(world, &ranks, 1_000_000, 3, Duration::from_secs(10))
                    .into_iter()
                    .enumerate()
            {
                let times = result.unwrap_or_else(|e| panic!("world {world} rank {rank}: {e}"));
                assert_eq!(times.len(), 3);
            }
        }
    }

    #[test]
    fn the_median_line_reads_back() {
        let line = median_line(Duration::from_micros(1_234_567), 4096, 3, 1, 8);
        assert_eq!(
            line,
            "median step: 1.234567 s for 4096 bytes over 3 ranks (rank 1, 8 steps)"
        );
        let output = format!("step 1: 1.2 s\n{line}\n");
        assert_eq!(median_in_output(&output), Some(1.234_567));
        assert_eq!(median_in_output("step 1: 1.2 s"), None);
    }

    #[test]
    fn allreduce_handles_two_ranks_and_uneven_chunks() {
        for (world, bytes) in [(2u32, 4_000usize), (3, 4 * 7), (5, 8)] {
            let ranks: Vec<u32> = (0..world).collect();
            for result in ring_on_loopback(world, &ranks, bytes, 2, Duration::from_secs(10)) {
                result.unwrap_or_else(|e| panic!("world {world}, {bytes} bytes: {e}"));
            }
        }
    }

    #[test]
    fn allreduce_alone_takes_no_time() {
        let rv = Rendezvous {
            rank: 0,
            world: 1,
            master_addr: "127.0.0.1".to_string(),
            master_port: 1,
        };
        let mut ring = join(&rv, SHORT).expect("world of one");
        let times = run_steps(&mut ring, 1024, 3).expect("steps");
        assert_eq!(times.len(), 3);
        assert_eq!(median(&times), Duration::ZERO);
    }

    #[test]
    fn allreduce_env_errors_name_the_variable() {
        let good = [
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.5"),
            ("MASTER_PORT", "29500"),
        ];
        let with = |key: &str, value: Option<&str>| {
            let env: Vec<(String, String)> = good
                .iter()
                .filter(|(k, _)| *k != key)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain(value.map(|v| (key.to_string(), v.to_string())))
                .collect();
            Rendezvous::from_lookup(|name| {
                env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        assert_eq!(
            with("", None).expect("all set"),
            Rendezvous {
                rank: 1,
                world: 4,
                master_addr: "10.0.0.5".to_string(),
                master_port: 29500
            }
        );
        for (key, value, says) in [
            ("RANK", None, "is not set"),
            ("RANK", Some("one"), "not a whole number"),
            ("RANK", Some("4"), "not below WORLD_SIZE 4"),
            ("WORLD_SIZE", Some("0"), "is 0"),
            ("WORLD_SIZE", None, "is not set"),
            ("MASTER_ADDR", Some(" "), "is not set"),
            ("MASTER_PORT", Some("70000"), "not a port number"),
            ("MASTER_PORT", Some("0"), "not a port number"),
        ] {
            let msg = with(key, value).expect_err(key).to_string();
            assert!(msg.starts_with(&format!("{key}: ")), "{msg}");
            assert!(msg.contains(says), "{msg}");
            assert!(msg.contains(&format!("set {key} to")), "no fix in: {msg}");
        }
    }

    #[test]
    fn allreduce_missing_rank_times_out_with_its_name() {
        let start = Instant::now();
        let results = ring_on_loopback(3, &[0, 1], 1024, 1, SHORT);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        for result in results {
            let msg = result.expect_err("rank 2 never joins").to_string();
            assert!(
                msg.contains("timed out after 1 s waiting for rank 2 to join"),
                "{msg}"
            );
        }
    }

    #[test]
    fn allreduce_missing_master_is_a_connect_error() {
        let start = Instant::now();
        let results = ring_on_loopback(2, &[1], 1024, 1, SHORT);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "took {:?}",
            start.elapsed()
        );
        let msg = results
            .into_iter()
            .next()
            .expect("one rank")
            .expect_err("no rank 0")
            .to_string();
        assert!(msg.contains("cannot reach rank 0 at 127.0.0.1:"), "{msg}");
        assert!(
            msg.contains("(MASTER_ADDR:MASTER_PORT) within 1 s"),
            "{msg}"
        );
    }

    #[test]
    fn allreduce_world_size_mismatch_is_named() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let master = thread::spawn(move || join_master(listener, 3, SHORT).map(|_| ()));
        let worker = join_worker(1, 2, "127.0.0.1", port, SHORT).map(|_| ());
        let master = master.join().expect("rank 0 thread");
        let msg = master.expect_err("mismatch").to_string();
        assert!(msg.contains("has WORLD_SIZE 2, rank 0 has 3"), "{msg}");
        let msg = worker.expect_err("rank 0 gives up").to_string();
        assert!(msg.contains("WORLD_SIZE 2"), "{msg}");
    }

    #[test]
    fn allreduce_bad_options_are_named() {
        let args = |bytes, steps, timeout_s| Args {
            bytes,
            steps,
            timeout_s,
        };
        for (bad, flag) in [
            (args(6, 1, 1.0), "--bytes 6"),
            (args(8, 0, 1.0), "--steps 0"),
            (args(8, 1, -1.0), "--timeout-s -1"),
        ] {
            let msg = run(&bad).expect_err(flag).to_string();
            assert!(msg.starts_with(flag), "{msg}");
        }
    }

    #[test]
    fn allreduce_median_of_even_and_odd_counts() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(
            median(&[ms(4), ms(1), ms(2), ms(3)]),
            Duration::from_micros(2500)
        );
        assert_eq!(median(&[]), Duration::ZERO);
    }
}
