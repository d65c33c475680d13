//! Bounds on QUIC connections before and after admission (`[quic]`): how
//! many connections, how many of them not yet admitted in all and per source
//! address, and how many frame bytes are being read at once. A connection is
//! admitted once its certificate and hello are accepted; until then it holds
//! a [`Ticket`], and it may send only small frames.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use tidemill_runtime::frames::{self, FrameError};
use tidemill_runtime::quic::ConnectionBounds;
use tokio::sync::Semaphore;

use crate::config::QuicConfig;

/// Largest frame a connection may send before it is admitted: a join or a
/// hello takes a few hundred bytes.
pub const UNADMITTED_FRAME: usize = 16 * 1024;

/// The connection caps and the frame-byte budget shared by every connection.
pub struct Admission {
    cfg: QuicConfig,
    unadmitted: Arc<Mutex<Unadmitted>>,
    frame_bytes: Semaphore,
}

#[derive(Default)]
struct Unadmitted {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// A connection not yet admitted: it counts against the unadmitted caps
/// until dropped.
pub struct Ticket {
    ip: IpAddr,
    unadmitted: Arc<Mutex<Unadmitted>>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut u = self.unadmitted.lock().unwrap();
        u.total -= 1;
        if let Some(n) = u.by_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                u.by_address.remove(&self.ip);
            }
        }
    }
}

/// Why a connection was refused before its handshake.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Too many connections in all.
    #[error("{0} QUIC connections are open, the cap ([quic] max_connections)")]
    Connections(usize),
    /// Too many unadmitted connections in all.
    #[error("{0} connections are not yet admitted, the cap ([quic] max_unadmitted)")]
    Unadmitted(usize),
    /// Too many unadmitted connections from the address.
    #[error(
        "{count} connections from {ip} are not yet admitted, the cap ([quic] max_unadmitted_per_address)"
    )]
    FromAddress {
        /// The source address.
        ip: IpAddr,
        /// Its unadmitted connections.
        count: usize,
    },
}

impl Admission {
    /// The caps of `cfg`, with nothing open.
    pub fn new(cfg: &QuicConfig) -> Self {
        Admission {
            cfg: cfg.clone(),
            unadmitted: Arc::default(),
            frame_bytes: Semaphore::new(cfg.frame_bytes_total),
        }
    }

    /// Admits a new connection from `remote` to its handshake, with `open`
    /// connections open already, or says which cap it is over.
    pub fn admit(&self, remote: SocketAddr, open: usize) -> Result<Ticket, Refusal> {
        if open >= self.cfg.max_connections {
            return Err(Refusal::Connections(open));
        }
        let ip = remote.ip();
        let mut u = self.unadmitted.lock().unwrap();
        if u.total >= self.cfg.max_unadmitted {
            return Err(Refusal::Unadmitted(u.total));
        }
        let count = u.by_address.get(&ip).copied().unwrap_or(0);
        if count >= self.cfg.max_unadmitted_per_address {
            return Err(Refusal::FromAddress { ip, count });
        }
        u.total += 1;
        *u.by_address.entry(ip).or_default() += 1;
        Ok(Ticket {
            ip,
            unadmitted: self.unadmitted.clone(),
        })
    }

    /// What an admitted edge's connection may hold.
    pub fn admitted_bounds(&self) -> ConnectionBounds {
        ConnectionBounds {
            streams: self.cfg.max_streams_per_connection,
            receive_window: self.cfg.receive_window_bytes,
        }
    }

    /// Reads one message of at most `max_len` payload bytes, waiting for
    /// room in the frame-byte budget before reading its payload; `Ok(None)`
    /// when the stream ended cleanly before a frame. The caller bounds the
    /// wait with the stream timeout.
    pub async fn read_frame<T: DeserializeOwned>(
        &self,
        recv: &mut quinn::RecvStream,
        max_len: usize,
    ) -> Result<Option<(T, usize)>, FrameError> {
        let Some(len) = frames::read_header(recv, max_len).await? else {
            return Ok(None);
        };
        let permits = u32::try_from(len).expect("frames are at most 1 MiB");
        let _room = self
            .frame_bytes
            .acquire_many(permits)
            .await
            .expect("the frame budget is never closed");
        frames::read_payload(recv, len).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> QuicConfig {
        QuicConfig {
            max_connections: 10,
            max_unadmitted: 3,
            max_unadmitted_per_address: 2,
            max_streams_per_connection: 4,
            receive_window_bytes: 2 << 20,
            frame_bytes_total: 2 << 20,
        }
    }

    #[test]
    fn unadmitted_connections_are_capped_per_address_and_in_all_until_dropped() {
        let a = Admission::new(&caps());
        let one: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let two: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let first = a.admit(one, 0).unwrap();
        let _second = a.admit(one, 1).unwrap();
        assert!(matches!(
            a.admit(one, 2),
            Err(Refusal::FromAddress { count: 2, .. })
        ));
        let _third = a.admit(two, 2).unwrap();
        assert!(matches!(a.admit(two, 3), Err(Refusal::Unadmitted(3))));
        drop(first);
        a.admit(one, 3).unwrap();
        assert!(matches!(a.admit(two, 10), Err(Refusal::Connections(10))));
    }
}
