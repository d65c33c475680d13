//! The TOML scenario of the WAN relay: one or more paths, each a listen address,
//! an upstream and the impairment of each direction, so that a test or an
//! operator can put several edges behind paths of their own. Every key is
//! documented in `configs/wan/*.toml`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tidemill_sched::cost::{Congestion, LinkSpec};

/// The longest delay or jitter a scenario may ask for, in milliseconds (one hour):
/// more is a typo, and it keeps every duration far from overflow.
const MAX_DELAY_MS: f64 = 3_600_000.0;

/// The smallest rate limit, in Mb/s (1 kb/s): a slower link is a typo.
const MIN_RATE_MBPS: f64 = 0.001;

/// The smallest explicit queue, in bytes: one full-size Ethernet packet.
const MIN_QUEUE_BYTES: u64 = 1_500;

/// Why a scenario could not be used. Each names the file; a bad value names its
/// key and says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{}: cannot read the WAN scenario: {source}; check the path", file.display())]
    Read {
        /// The scenario file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML of the scenario's shape (an unknown key, a missing
    /// one, a wrong type).
    #[error(
        "{}: not a valid WAN scenario: {source}every key is documented in configs/wan/*.toml",
        file.display()
    )]
    Parse {
        /// The scenario file.
        file: PathBuf,
        /// toml's message, with the line and the key.
        source: toml::de::Error,
    },
    /// A value is out of range.
    #[error("{}: {key} = {value}: {rule}", file.display())]
    Invalid {
        /// The scenario file.
        file: PathBuf,
        /// Where the value is, e.g. `path "edge-1" up.loss`.
        key: String,
        /// The value as written.
        value: String,
        /// What it must be, and how to fix it.
        rule: &'static str,
    },
}

/// A value that breaks a rule, before the caller adds where it came from (a file
/// or a command-line flag).
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// The key, as spelt in the scenario (`loss`, `delay_ms`, ...).
    pub key: &'static str,
    /// The value as given.
    pub value: String,
    /// What it must be, and how to fix it.
    pub rule: &'static str,
}

/// A whole scenario: the paths to relay, and the seed that makes their random
/// draws repeatable.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Seed of every random draw (loss, jitter, duplication); see [`Scenario::paths`].
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The paths, one relay each.
    pub path: Vec<PathSpec>,
}

fn default_seed() -> u64 {
    1
}

/// One relayed path: an edge pointed at `listen` reaches `upstream` through it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathSpec {
    /// A name for logs and error messages.
    pub name: String,
    /// Where the relay listens (port 0: any free port).
    pub listen: SocketAddr,
    /// Where the relay forwards to, e.g. the coordinator.
    pub upstream: SocketAddr,
    /// The impairment from the client to the upstream.
    #[serde(default)]
    pub up: Impairment,
    /// The impairment from the upstream back to the client.
    #[serde(default)]
    pub down: Impairment,
    /// Partitions: windows in which the path drops everything, both ways.
    #[serde(default)]
    pub outage: Vec<Window>,
    /// Flapping: the path goes down for a while in every period.
    #[serde(default)]
    pub flap: Vec<Flap>,
}

/// One direction's impairment, from a scenario or from the command line. The
/// defaults are a perfect link.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Impairment {
    /// One-way delay, in milliseconds.
    pub delay_ms: f64,
    /// Each datagram's delay is drawn uniformly from `delay_ms ± jitter_ms`
    /// (never below 0), in milliseconds.
    pub jitter_ms: f64,
    /// Mean fraction of datagrams lost (0.01 = 1 %).
    pub loss: f64,
    /// Mean length of a loss burst, in datagrams: 1 loses datagrams
    /// independently, more makes loss bursty (Gilbert-Elliott).
    pub loss_burst: f64,
    /// Fraction of datagrams delivered twice.
    pub duplicate: f64,
    /// Every Nth datagram overtakes the one before it; 0 is off.
    pub reorder_every: u32,
    /// Rate limit, in Mb/s (10⁶ bit/s); none when absent.
    pub rate_mbps: Option<f64>,
    /// Bytes the direction may hold, queued or on the delay line, before it
    /// drops; the default is [`Impairment::queue_bytes`].
    pub queue_bytes: Option<u64>,
}

impl Default for Impairment {
    fn default() -> Self {
        Self {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            loss: 0.0,
            loss_burst: 1.0,
            duplicate: 0.0,
            reorder_every: 0,
            rate_mbps: None,
            queue_bytes: None,
        }
    }
}

impl Impairment {
    /// The link the cost model should see on a path impaired like this, with
    /// its senders under `congestion`; `None` without a rate limit.
    pub fn link_spec(&self, congestion: Congestion) -> Option<LinkSpec> {
        Some(LinkSpec {
            bandwidth_bps: self.rate_mbps? * 1e6 / 8.0,
            latency_s: self.delay_ms / 1000.0,
            loss: self.loss,
            congestion,
        })
    }

    /// Checks every value against its range.
    pub fn check(&self) -> Result<(), Invalid> {
        let bad = |key, value: String, rule| Err(Invalid { key, value, rule });
        if !(0.0..=MAX_DELAY_MS).contains(&self.delay_ms) {
            return bad(
                "delay_ms",
                self.delay_ms.to_string(),
                "must be a one-way delay in milliseconds from 0 to 3600000; write 0 for none",
            );
        }
        if !(0.0..=MAX_DELAY_MS).contains(&self.jitter_ms) {
            return bad(
                "jitter_ms",
                self.jitter_ms.to_string(),
                "must be in milliseconds from 0 to 3600000; write 0 for none",
            );
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return bad(
                "loss",
                self.loss.to_string(),
                "must be a fraction from 0 to 1 (0.01 = 1 %); divide a percentage by 100",
            );
        }
        if !(self.loss_burst >= 1.0 && self.loss_burst.is_finite()) {
            return bad(
                "loss_burst",
                self.loss_burst.to_string(),
                "must be a mean burst length of at least 1 datagram; write 1 for independent loss",
            );
        }
        if !(0.0..=1.0).contains(&self.duplicate) {
            return bad(
                "duplicate",
                self.duplicate.to_string(),
                "must be a fraction from 0 to 1 (0.01 = 1 %); write 0 for none",
            );
        }
        if self.reorder_every == 1 {
            return bad(
                "reorder_every",
                "1".to_string(),
                "must be 0 (off) or at least 2 (every Nth datagram overtakes the one before it)",
            );
        }
        if let Some(rate) = self.rate_mbps
            && !(rate >= MIN_RATE_MBPS && rate.is_finite())
        {
            return bad(
                "rate_mbps",
                rate.to_string(),
                "must be at least 0.001 Mb/s; leave the key out for no rate limit",
            );
        }
        if let Some(queue) = self.queue_bytes {
            if self.rate_mbps.is_none() {
                return bad(
                    "queue_bytes",
                    queue.to_string(),
                    "needs rate_mbps, as only a rate limit fills a queue; set rate_mbps or remove queue_bytes",
                );
            }
            if queue < MIN_QUEUE_BYTES {
                return bad(
                    "queue_bytes",
                    queue.to_string(),
                    "must be at least 1500 (one full-size packet); leave it out for the default",
                );
            }
        }
        Ok(())
    }

    /// The bytes this direction may hold before it drops, when rate-limited:
    /// `queue_bytes` if set, else enough for what is on the delay line plus
    /// 100 ms of queueing at the rate, and never less than one largest datagram:
    ///
    /// `max(65 536, ⌈rate_mbps · 10⁶ / 8 · (delay_ms + jitter_ms + 100) / 1000⌉)` bytes.
    ///
    /// 5 Mb/s with 40 ms of delay holds 625 000 B/s · 0.14 s = 87 500 bytes.
    pub fn queue_bytes(&self) -> Option<u64> {
        let rate = self.rate_mbps?;
        Some(self.queue_bytes.unwrap_or_else(|| {
            let held_ms = self.delay_ms + self.jitter_ms + 100.0;
            // Bits/s · ms / 8000 = bytes, multiplied first so round numbers stay exact.
            let bytes = (rate * 1e6 * held_ms / 8000.0).ceil() as u64;
            bytes.max(65_536)
        }))
    }
}

/// One line for logs, e.g. `delay 40±10 ms, loss 0.01 (bursts of 2), rate 5 Mb/s (queue 93750 B)`.
impl std::fmt::Display for Impairment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "delay {}±{} ms, loss {}",
            self.delay_ms, self.jitter_ms, self.loss
        )?;
        if self.loss_burst > 1.0 {
            write!(f, " (bursts of {})", self.loss_burst)?;
        }
        if self.duplicate > 0.0 {
            write!(f, ", duplicate {}", self.duplicate)?;
        }
        if self.reorder_every > 0 {
            write!(f, ", reorder every {}", self.reorder_every)?;
        }
        match (self.rate_mbps, self.queue_bytes()) {
            (Some(rate), Some(queue)) => write!(f, ", rate {rate} Mb/s (queue {queue} B)"),
            _ => write!(f, ", no rate limit"),
        }
    }
}

/// A partition from `start_s` to `end_s`, in seconds since the relay started.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// When the path goes down.
    pub start_s: f64,
    /// When it comes back; later than `start_s`.
    pub end_s: f64,
}

/// Flapping: from `start_s` until `until_s`, the path is down for the first
/// `down_s` of every `period_s`, in seconds since the relay started.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flap {
    /// When flapping begins (default 0).
    #[serde(default)]
    pub start_s: f64,
    /// The length of one down-and-up cycle.
    pub period_s: f64,
    /// How long the path is down at the start of each cycle; less than `period_s`.
    pub down_s: f64,
    /// When flapping ends; later than `start_s`.
    pub until_s: f64,
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(file: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(file).map_err(|source| ScenarioError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(&text, file)
    }

    /// Parses and checks a scenario; `file` names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ScenarioError> {
        let scenario: Scenario = toml::from_str(text).map_err(|source| ScenarioError::Parse {
            file: file.to_path_buf(),
            source,
        })?;
        scenario
            .check()
            .map_err(|(key, value, rule)| ScenarioError::Invalid {
                file: file.to_path_buf(),
                key,
                value,
                rule,
            })?;
        Ok(scenario)
    }

    /// The paths with their seeds: path `i` (from 0) gets `seed + 2i` for its up
    /// direction and one more for its down direction, so no two directions
    /// draw the same numbers.
    pub fn paths(&self) -> impl Iterator<Item = (&PathSpec, u64)> {
        self.path
            .iter()
            .enumerate()
            .map(|(i, p)| (p, self.seed.wrapping_add(2 * i as u64)))
    }

    fn check(&self) -> Result<(), (String, String, &'static str)> {
        if self.path.is_empty() {
            return Err((
                "path".into(),
                "[]".into(),
                "a scenario needs at least one [[path]] table",
            ));
        }
        let mut names = HashSet::new();
        let mut listens = HashSet::new();
        for p in &self.path {
            let at = |key: &str| format!("path {:?} {key}", p.name);
            if !names.insert(&p.name) {
                return Err((
                    at("name"),
                    format!("{:?}", p.name),
                    "two paths share this name; give each [[path]] its own",
                ));
            }
            if p.listen.port() != 0 && !listens.insert(p.listen) {
                return Err((
                    at("listen"),
                    format!("{:?}", p.listen.to_string()),
                    "two paths listen on this address; give each [[path]] its own port",
                ));
            }
            for (dir, imp) in [("up", &p.up), ("down", &p.down)] {
                imp.check()
                    .map_err(|e| (at(&format!("{dir}.{}", e.key)), e.value, e.rule))?;
            }
            for (i, w) in p.outage.iter().enumerate() {
                if !(w.start_s >= 0.0 && w.start_s.is_finite()) {
                    return Err((
                        at(&format!("outage[{i}].start_s")),
                        w.start_s.to_string(),
                        "must be seconds since the relay started, 0 or more",
                    ));
                }
                if !(w.end_s > w.start_s && w.end_s.is_finite()) {
                    return Err((
                        at(&format!("outage[{i}].end_s")),
                        w.end_s.to_string(),
                        "must be later than start_s; swap them if they are reversed",
                    ));
                }
            }
            for (i, f) in p.flap.iter().enumerate() {
                if !(f.start_s >= 0.0 && f.start_s.is_finite()) {
                    return Err((
                        at(&format!("flap[{i}].start_s")),
                        f.start_s.to_string(),
                        "must be seconds since the relay started, 0 or more",
                    ));
                }
                if !(f.period_s > 0.0 && f.period_s.is_finite()) {
                    return Err((
                        at(&format!("flap[{i}].period_s")),
                        f.period_s.to_string(),
                        "must be a cycle length in seconds, more than 0",
                    ));
                }
                if !(f.down_s > 0.0 && f.down_s < f.period_s) {
                    return Err((
                        at(&format!("flap[{i}].down_s")),
                        f.down_s.to_string(),
                        "must be more than 0 and less than period_s; use [[path.outage]] for a path that stays down",
                    ));
                }
                if !(f.until_s > f.start_s && f.until_s.is_finite()) {
                    return Err((
                        at(&format!("flap[{i}].until_s")),
                        f.until_s.to_string(),
                        "must be later than start_s",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(text, Path::new("s.toml"))
    }

    const ONE_PATH: &str = r#"
        [[path]]
        name = "edge-1"
        listen = "127.0.0.1:7001"
        upstream = "127.0.0.1:7000"
    "#;

    #[test]
    fn a_bare_path_is_a_perfect_link_with_seed_1() {
        let s = parse(ONE_PATH).unwrap();
        assert_eq!(s.seed, 1);
        assert_eq!(s.path[0].up, Impairment::default());
        assert_eq!(s.path[0].down.queue_bytes(), None);
    }

    #[test]
    fn default_queue_is_the_hand_calculated_one() {
        // 5 Mb/s = 625 000 B/s; (40 + 0 + 100) ms → 87 500 bytes.
        let lte = Impairment {
            delay_ms: 40.0,
            rate_mbps: Some(5.0),
            ..Impairment::default()
        };
        assert_eq!(lte.queue_bytes(), Some(87_500));
        // 1 Mb/s for 100 ms is 12 500 bytes, below the 65 536-byte floor.
        let slow = Impairment {
            rate_mbps: Some(1.0),
            ..Impairment::default()
        };
        assert_eq!(slow.queue_bytes(), Some(65_536));
        let set = Impairment {
            queue_bytes: Some(3_000),
            ..slow
        };
        assert_eq!(set.queue_bytes(), Some(3_000));
    }

    #[test]
    fn an_impairment_logs_as_one_line() {
        let lte = Impairment {
            delay_ms: 40.0,
            jitter_ms: 10.0,
            loss: 0.01,
            loss_burst: 2.0,
            rate_mbps: Some(5.0),
            ..Impairment::default()
        };
        assert_eq!(
            lte.to_string(),
            "delay 40±10 ms, loss 0.01 (bursts of 2), rate 5 Mb/s (queue 93750 B)"
        );
        assert_eq!(
            Impairment::default().to_string(),
            "delay 0±0 ms, loss 0, no rate limit"
        );
    }

    #[test]
    fn seeds_differ_per_path_and_direction() {
        let two = format!(
            "seed = 10\n{ONE_PATH}\n[[path]]\nname = \"edge-2\"\nlisten = \"127.0.0.1:7002\"\nupstream = \"127.0.0.1:7000\"\n"
        );
        let s = parse(&two).unwrap();
        let seeds: Vec<u64> = s.paths().map(|(_, seed)| seed).collect();
        assert_eq!(seeds, vec![10, 12]);
    }

    fn invalid(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert!(
            matches!(e, ScenarioError::Invalid { .. }),
            "expected a range error, got {e}"
        );
        e.to_string()
    }

    #[test]
    fn out_of_range_values_name_file_key_and_fix() {
        let msg = invalid(&format!("{ONE_PATH}\n[path.up]\nloss = 1.5\n"));
        assert_eq!(
            msg,
            "s.toml: path \"edge-1\" up.loss = 1.5: must be a fraction from 0 to 1 (0.01 = 1 %); divide a percentage by 100"
        );
        let msg = invalid(&format!("{ONE_PATH}\n[path.down]\ndelay_ms = -5\n"));
        assert!(msg.contains("path \"edge-1\" down.delay_ms = -5"), "{msg}");
        let msg = invalid(&format!(
            "{ONE_PATH}\n[[path.outage]]\nstart_s = 20\nend_s = 10\n"
        ));
        assert!(
            msg.contains("outage[0].end_s = 10: must be later than start_s"),
            "{msg}"
        );
        let msg = invalid(&format!(
            "{ONE_PATH}\n[[path.flap]]\nperiod_s = 10\ndown_s = 10\nuntil_s = 60\n"
        ));
        assert!(msg.contains("flap[0].down_s = 10"), "{msg}");
        let msg = invalid(&format!("{ONE_PATH}\n[path.up]\nqueue_bytes = 9000\n"));
        assert!(
            msg.contains("up.queue_bytes = 9000: needs rate_mbps"),
            "{msg}"
        );
        let msg = invalid(&format!("{ONE_PATH}\n{}", ONE_PATH.replace("7001", "7002")));
        assert!(msg.contains("name = \"edge-1\": two paths share"), "{msg}");
        let msg = invalid("path = []");
        assert!(msg.contains("at least one [[path]]"), "{msg}");
    }

    #[test]
    fn an_unknown_key_is_named_with_the_file() {
        let e = parse(&format!("{ONE_PATH}\n[path.up]\nlos = 0.1\n")).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ScenarioError::Parse { .. }), "{msg}");
        assert!(msg.starts_with("s.toml: "), "{msg}");
        assert!(msg.contains("unknown field `los`"), "{msg}");
        assert!(msg.contains("configs/wan/*.toml"), "{msg}");
    }
}
