//! Forming the ring: reading the rendezvous settings, rank 0 collecting every
//! rank's ring address and telling each its successor, and each rank
//! connecting to its successor and accepting its predecessor.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use super::ring::{Peers, Ring};
use super::{AllreduceError, io_err};

/// How to set `MASTER_ADDR`, for every error about it.
const ADDR_FIX: &str =
    "set MASTER_ADDR to the host or IP where rank 0 listens (tidemill sets it for every task)";

/// How long a worker waits for rank 0's answer beyond its timeout: rank 0 may
/// have started later and still be waiting its own full timeout for a late rank.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// How long a polling accept or a refused connect waits before trying again.
const POLL: Duration = Duration::from_millis(5);

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
