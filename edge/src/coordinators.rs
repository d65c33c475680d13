//! The coordinator addresses an edge may use, and the order it tries them
//! in: replicas of one coordinator, so that a lost connection or a refusing
//! replica moves the edge to the next one at once.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};

use serde::Deserialize;

/// The `coordinator` key: one `HOST:PORT` or a list of them, in the order
/// they are tried. Never empty once validated.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "OneOrMany")]
pub struct Coordinators(Vec<String>);

/// What TOML may hold under `coordinator`.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl From<OneOrMany> for Coordinators {
    fn from(v: OneOrMany) -> Self {
        match v {
            OneOrMany::One(a) => Coordinators(vec![a]),
            OneOrMany::Many(list) => Coordinators(list),
        }
    }
}

impl From<&str> for Coordinators {
    fn from(one: &str) -> Self {
        Coordinators(vec![one.to_string()])
    }
}

impl fmt::Display for Coordinators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl Coordinators {
    /// Parses `--coordinator`: one address, or several separated by commas.
    pub fn parse_flag(flag: &str) -> Self {
        Coordinators(
            flag.split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// The addresses as written, in the order they are tried.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// The first address, which joins and names the TLS default; empty
    /// when the list is.
    pub fn first(&self) -> &str {
        self.0.first().map_or("", String::as_str)
    }

    /// Resolves every address, in order; the error names the one that failed.
    pub fn resolve(&self) -> Result<Vec<SocketAddr>, (String, std::io::Error)> {
        if self.0.is_empty() {
            return Err((
                String::new(),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no coordinator address"),
            ));
        }
        self.0
            .iter()
            .map(|a| {
                a.to_socket_addrs()
                    .and_then(|mut it| {
                        it.next().ok_or_else(|| {
                            std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                "no address for the coordinator",
                            )
                        })
                    })
                    .map_err(|e| (a.clone(), e))
            })
            .collect()
    }
}

/// Which address the link uses, and when it must back off: it moves to the
/// next address at once after each failure, and backs off only once a whole
/// pass over the list has failed since it last connected.
#[derive(Debug, Clone)]
pub struct Rotation {
    addrs: Vec<SocketAddr>,
    current: usize,
    /// Sessions ended since the last successful connection, counting the
    /// one that connected.
    ended: usize,
}

impl Rotation {
    /// Starts at the first of `addrs`, which must not be empty.
    pub fn new(addrs: Vec<SocketAddr>) -> Self {
        assert!(!addrs.is_empty(), "a validated config has an address");
        Rotation {
            addrs,
            current: 0,
            ended: 0,
        }
    }

    /// The address to connect to now.
    pub fn current(&self) -> SocketAddr {
        self.addrs[self.current]
    }

    /// The link connected: a new pass starts from here.
    pub fn connected(&mut self) {
        self.ended = 0;
    }

    /// The session at the current address ended: moves on, and says whether
    /// to back off before the next try.
    pub fn failed(&mut self) -> bool {
        let (next, back_off) = after_failure(self.addrs.len(), self.current, self.ended);
        self.current = next;
        self.ended += 1;
        back_off
    }
}

/// After the address at `failed` of `len` fails with `ended` sessions already
/// ended since the last connection: the next index (wrapping), and whether a
/// full pass has now failed, so the link backs off. One address always
/// backs off, as a single coordinator always did.
pub fn after_failure(len: usize, failed: usize, ended: usize) -> (usize, bool) {
    ((failed + 1) % len, (ended + 1).is_multiple_of(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Cfg {
        coordinator: Coordinators,
    }

    fn parse(toml_text: &str) -> Coordinators {
        toml::from_str::<Cfg>(toml_text).unwrap().coordinator
    }

    #[test]
    fn one_address_or_a_list() {
        assert_eq!(
            parse(r#"coordinator = "10.0.0.1:7400""#).as_slice(),
            ["10.0.0.1:7400"]
        );
        let many = parse(r#"coordinator = ["10.0.0.1:7400", "10.0.0.2:7400"]"#);
        assert_eq!(many.as_slice(), ["10.0.0.1:7400", "10.0.0.2:7400"]);
        assert_eq!(many.first(), "10.0.0.1:7400");
        assert_eq!(many.to_string(), "10.0.0.1:7400,10.0.0.2:7400");
        assert_eq!(
            Coordinators::parse_flag(" 10.0.0.1:7400, 10.0.0.2:7400 ,"),
            many
        );
    }

    #[test]
    fn every_address_resolves_or_the_error_names_it() {
        let list = Coordinators::parse_flag("127.0.0.1:1,[::1]:2");
        let addrs = list.resolve().unwrap();
        assert_eq!(addrs.len(), 2);
        assert_eq!(addrs[1].port(), 2);
        let (bad, _) = Coordinators::parse_flag("127.0.0.1:1,nope")
            .resolve()
            .unwrap_err();
        assert_eq!(bad, "nope");
        assert!(parse("coordinator = []").resolve().is_err());
    }

    #[test]
    fn moves_on_at_once_and_backs_off_after_a_full_pass() {
        // Three replicas, none answering: 1, 2, then back off before 0.
        assert_eq!(after_failure(3, 0, 0), (1, false));
        assert_eq!(after_failure(3, 1, 1), (2, false));
        assert_eq!(after_failure(3, 2, 2), (0, true));
        assert_eq!(after_failure(3, 0, 3), (1, false));
        // One address backs off every time, as before.
        assert_eq!(after_failure(1, 0, 0), (0, true));
        assert_eq!(after_failure(1, 0, 1), (0, true));
    }

    #[test]
    fn a_lost_connection_starts_a_new_pass_at_the_next_address() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut r = Rotation::new(vec![a, b]);
        assert_eq!(r.current(), a);
        assert!(!r.failed(), "a's connect failed: b at once");
        assert_eq!(r.current(), b);
        r.connected();
        assert!(!r.failed(), "b's connection lost: a at once");
        assert_eq!(r.current(), a);
        assert!(r.failed(), "a failed too: the pass is over, back off");
        assert_eq!(r.current(), b);
    }
}
