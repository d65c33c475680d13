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

mod rendezvous;
mod ring;

use std::io;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use thiserror::Error;

/// Added per rank to the initial values, so that every rank's data differs.
const RANK_STRIDE: u32 = 0x9E37_79B9;

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

pub use rendezvous::{Rendezvous, join, join_master, join_worker};
pub use ring::Ring;

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
    use std::net::TcpListener;
    use std::thread;

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
