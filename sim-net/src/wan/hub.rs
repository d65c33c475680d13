//! The tokio shell that joins a [`super::netns::Lab`]'s TUN devices: each IPv4
//! packet a node sends goes, by its destination address, to that node's
//! device, through the [`Direction`] of that ordered pair. So every pair of
//! nodes has a link of its own in each direction, impaired as the caller says,
//! and TCP sees real delay, loss and a rate limit in userspace.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::impair::{Datagram, Direction, Outages};
use super::scenario::Impairment;

/// The largest packet read whole: the TUN MTU is far below it.
const MAX_PACKET: usize = 65_535;

/// Packets read and not yet impaired; readers wait when it is full.
const BACKLOG: usize = 4096;

/// The destination of an IPv4 packet (bytes 16 to 19 of its header), or `None`
/// for anything else (IPv6 router solicitations, say), which the hub drops.
pub fn ipv4_destination(packet: &[u8]) -> Option<Ipv4Addr> {
    let header: &[u8; 20] = packet.get(..20)?.try_into().ok()?;
    (header[0] >> 4 == 4).then(|| Ipv4Addr::new(header[16], header[17], header[18], header[19]))
}

/// A running hub, on a runtime of its own; dropping it stops it.
pub struct Hub {
    _runtime: tokio::runtime::Runtime,
}

impl Hub {
    /// Starts moving packets between `tuns`, where `tuns[i]` is the device of
    /// the node at `ips[i]`; packets from `i` to `j` pass through `link(i, j)`,
    /// seeded from `seed`.
    pub fn start(
        tuns: Vec<File>,
        ips: Vec<Ipv4Addr>,
        link: impl Fn(usize, usize) -> Impairment,
        seed: u64,
    ) -> std::io::Result<Hub> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wan-hub")
            .enable_all()
            .build()?;
        let _in_runtime = runtime.enter();
        // SAFETY: a File owns its descriptor, which stays open and the same
        // until the AsyncFd drops it.
        let tuns: Vec<Arc<AsyncFd<File>>> = tuns
            .into_iter()
            .map(|t| {
                unsafe { AsyncFd::register(t) }
                    .map(Arc::new)
                    .map_err(std::io::Error::from)
            })
            .collect::<Result<_, _>>()?;
        let start = Instant::now().into_std();
        let mut dirs = HashMap::new();
        for from in 0..tuns.len() {
            for to in (0..tuns.len()).filter(|&to| to != from) {
                let pair_seed = seed.wrapping_add((from * tuns.len() + to) as u64);
                let d = Direction::new(&link(from, to), Outages::default(), pair_seed, start);
                dirs.insert((from, to), d);
            }
        }
        let (tx, rx) = mpsc::channel(BACKLOG);
        for (from, tun) in tuns.iter().enumerate() {
            tokio::spawn(read_packets(from, tun.clone(), tx.clone()));
        }
        tokio::spawn(forward(tuns, ips, dirs, rx));
        Ok(Hub { _runtime: runtime })
    }
}

/// Reads packets from one device into the hub until the hub stops.
async fn read_packets(from: usize, tun: Arc<AsyncFd<File>>, tx: mpsc::Sender<(usize, Vec<u8>)>) {
    let mut buf = vec![0u8; MAX_PACKET];
    loop {
        let Ok(mut guard) = tun.readable().await else {
            return;
        };
        match guard.try_io(|f| f.get_ref().read(&mut buf)) {
            Ok(Ok(n)) => {
                if tx.send((from, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(node = from, error = %e, "cannot read the TUN device");
                return;
            }
            Err(_would_block) => {}
        }
    }
}

/// Impairs each packet on its pair's direction and writes it when due.
async fn forward(
    tuns: Vec<Arc<AsyncFd<File>>>,
    ips: Vec<Ipv4Addr>,
    mut dirs: HashMap<(usize, usize), Direction>,
    mut rx: mpsc::Receiver<(usize, Vec<u8>)>,
) {
    let index: HashMap<Ipv4Addr, usize> = ips.iter().enumerate().map(|(i, ip)| (*ip, i)).collect();
    loop {
        let deadline = dirs.values().filter_map(Direction::next_deadline).min();
        let wake = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            packet = rx.recv() => {
                let Some((from, bytes)) = packet else { return };
                let to = ipv4_destination(&bytes).and_then(|ip| index.get(&ip).copied());
                if let Some((to, dir)) = to.and_then(|to| Some((to, dirs.get_mut(&(from, to))?))) {
                    let client = SocketAddr::new(IpAddr::V4(ips[to]), 0);
                    dir.push(Instant::now().into_std(), Datagram { client, bytes });
                }
            }
            () = wake => {
                let now = Instant::now().into_std();
                for (&(_, to), dir) in &mut dirs {
                    for d in dir.pop_ready(now) {
                        write_packet(&tuns[to], &d.bytes);
                    }
                }
            }
        }
    }
}

/// Hands one packet to a device's node; a full device drops it, as a link would.
fn write_packet(tun: &AsyncFd<File>, bytes: &[u8]) {
    match tun.get_ref().write(bytes) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            tracing::debug!("TUN device full: packet dropped");
        }
        Err(e) => tracing::warn!(error = %e, "cannot write to the TUN device"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_ipv4_by_destination_and_drops_the_rest() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[16..20].copy_from_slice(&[10, 77, 3, 2]);
        assert_eq!(ipv4_destination(&v4), Some(Ipv4Addr::new(10, 77, 3, 2)));
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        assert_eq!(ipv4_destination(&v6), None);
        assert_eq!(ipv4_destination(&v4[..19]), None, "a truncated header");
    }
}
