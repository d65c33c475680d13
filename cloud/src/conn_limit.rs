//! Who may open another API connection: a cap on connections in total and on
//! those from one address, so that one client's idle sockets cannot take the
//! places of everyone else's. A connection over a cap is refused at once
//! rather than queued behind the ones holding the places.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The total cap, `[api] max_connections`, is reached.
    #[error("{0} API connections are open, the most [api] max_connections allows")]
    Total(usize),
    /// This address's cap, `[api] max_connections_per_address`, is reached.
    #[error(
        "this address has {0} API connections open, the most [api] max_connections_per_address allows"
    )]
    PerAddress(usize),
}

/// The open connections, counted in total and per address.
#[derive(Debug)]
pub struct ConnLimit {
    total_cap: usize,
    per_address_cap: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// A connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Place {
    limit: Arc<ConnLimit>,
    address: IpAddr,
}

impl ConnLimit {
    /// At most `total_cap` connections, `per_address_cap` of them from one
    /// address.
    pub fn new(total_cap: usize, per_address_cap: usize) -> Arc<Self> {
        Arc::new(ConnLimit {
            total_cap,
            per_address_cap,
            open: Mutex::default(),
        })
    }

    /// A place for a new connection from `address`, if both caps allow it.
    pub fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Place, Refused> {
        let mut open = self.open.lock().unwrap();
        if open.total >= self.total_cap {
            return Err(Refused::Total(open.total));
        }
        let mine = open.by_address.entry(address).or_insert(0);
        if *mine >= self.per_address_cap {
            return Err(Refused::PerAddress(*mine));
        }
        *mine += 1;
        open.total += 1;
        Ok(Place {
            limit: self.clone(),
            address,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap().total
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.limit.open.lock().unwrap();
        open.total -= 1;
        if let Some(n) = open.by_address.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                open.by_address.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_gets_its_share_and_the_total_is_bounded() {
        let limit = ConnLimit::new(3, 2);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.2".parse().unwrap(),
            "127.0.0.3".parse().unwrap(),
            "::1".parse().unwrap(),
        );
        let a1 = limit.admit(a).unwrap();
        let _a2 = limit.admit(a).unwrap();
        assert_eq!(limit.admit(a).unwrap_err(), Refused::PerAddress(2));
        let _b1 = limit.admit(b).unwrap();
        assert_eq!(limit.admit(c).unwrap_err(), Refused::Total(3));
        drop(a1);
        assert_eq!(limit.open(), 2);
        let _c1 = limit.admit(c).unwrap();
        assert_eq!(limit.admit(a).unwrap_err(), Refused::Total(3));
    }

    #[test]
    fn a_freed_address_is_forgotten() {
        let limit = ConnLimit::new(10, 1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        drop(limit.admit(a).unwrap());
        assert!(limit.open.lock().unwrap().by_address.is_empty());
        assert!(limit.admit(a).is_ok());
    }
}
