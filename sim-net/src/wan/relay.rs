//! The tokio shell around [`Direction`]: a UDP relay for one path. It does not
//! parse what it carries, so QUIC passes through unchanged. Each client source
//! address gets an upstream socket of its own, as behind a NAT, so the upstream
//! sees one peer per client; its replies go back to that client.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::impair::{Datagram, Direction, Outages, PathSwitch};
use super::scenario::PathSpec;

/// The largest datagram the relay receives whole: UDP's limit.
const MAX_DATAGRAM: usize = 65_535;

/// At most this many clients per path, so a flood of source addresses cannot
/// exhaust sockets; datagrams from further clients are dropped.
pub const MAX_CLIENTS: usize = 1024;

/// Replies waiting for the relay loop; upstream readers wait when it is full.
const REPLY_BACKLOG: usize = 1024;

/// Why a relay stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The listen address could not be bound.
    #[error(
        "path {path:?}: cannot listen on {listen}: {source}; pick a free port, or port 0 for any"
    )]
    Bind {
        /// The path's name.
        path: String,
        /// The listen address.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The listening socket failed for good.
    #[error("path {path:?}: receiving on {listen} failed: {source}; restart the relay")]
    Receive {
        /// The path's name.
        path: String,
        /// The listen address.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A relay for one path, bound and ready to [`Relay::run`]. A client's upstream
/// socket lives as long as the relay; there are at most [`MAX_CLIENTS`].
pub struct Relay {
    spec: PathSpec,
    seed: u64,
    listener: Arc<UdpSocket>,
    local: SocketAddr,
    switch: PathSwitch,
    traffic: Traffic,
}

/// What a relay has been offered each way, before impairment: datagrams and
/// UDP payload bytes from its clients (up) and from the upstream (down), so a
/// test can measure exactly what an edge behind it sends.
#[derive(Debug, Clone)]
pub struct Traffic(Arc<[AtomicU64; 5]>);

/// Counts of one direction of a [`Traffic`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// Datagrams.
    pub datagrams: u64,
    /// UDP payload bytes.
    pub bytes: u64,
}

impl Traffic {
    fn add(&self, up: bool, bytes: usize) {
        let at = if up { 0 } else { 2 };
        self.0[at].fetch_add(1, Ordering::Relaxed);
        self.0[at + 1].fetch_add(bytes as u64, Ordering::Relaxed);
        if up {
            self.0[4].fetch_min(bytes as u64, Ordering::Relaxed);
        }
    }

    /// What clients sent towards the upstream.
    pub fn up(&self) -> Counted {
        self.counted(0)
    }

    /// What the upstream sent back to clients.
    pub fn down(&self) -> Counted {
        self.counted(2)
    }

    /// The smallest datagram a client sent, if any: in QUIC, a packet with
    /// a lone PING or ACK, the size of a keep-alive.
    pub fn smallest_up(&self) -> Option<u64> {
        let smallest = self.0[4].load(Ordering::Relaxed);
        (smallest != u64::MAX).then_some(smallest)
    }

    fn counted(&self, at: usize) -> Counted {
        Counted {
            datagrams: self.0[at].load(Ordering::Relaxed),
            bytes: self.0[at + 1].load(Ordering::Relaxed),
        }
    }
}

impl Relay {
    /// Binds the path's listen address. The up direction draws from `seed`, the
    /// down direction from `seed + 1`.
    pub async fn bind(spec: PathSpec, seed: u64) -> Result<Self, RelayError> {
        let bind_err = |source| RelayError::Bind {
            path: spec.name.clone(),
            listen: spec.listen,
            source,
        };
        let listener = UdpSocket::bind(spec.listen).await.map_err(bind_err)?;
        let local = listener.local_addr().map_err(bind_err)?;
        Ok(Self {
            spec,
            seed,
            listener: Arc::new(listener),
            local,
            switch: PathSwitch::default(),
            traffic: Traffic(Arc::new([0, 0, 0, 0, u64::MAX].map(AtomicU64::new))),
        })
    }

    /// The address clients should send to (the actual port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The switch that cuts this path at a moment of the caller's choosing.
    pub fn switch(&self) -> PathSwitch {
        self.switch.clone()
    }

    /// The counters of what passes this relay.
    pub fn traffic(&self) -> Traffic {
        self.traffic.clone()
    }

    /// Relays until the listening socket fails; outage times count from here.
    pub async fn run(self) -> Result<(), RelayError> {
        let start = Instant::now().into_std();
        let outages = Outages::new(self.spec.outage.clone(), self.spec.flap.clone())
            .with_switch(self.switch.clone());
        let mut up = Direction::new(&self.spec.up, outages.clone(), self.seed, start);
        let mut down = Direction::new(&self.spec.down, outages, self.seed.wrapping_add(1), start);
        let (reply_tx, mut reply_rx) = mpsc::channel::<Datagram>(REPLY_BACKLOG);
        let mut clients: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut readers = JoinSet::new();
        let mut buf = vec![0u8; MAX_DATAGRAM];
        tracing::info!(
            path = %self.spec.name, listen = %self.local, upstream = %self.spec.upstream,
            up = %self.spec.up, down = %self.spec.down, "relaying"
        );
        loop {
            let deadline = [up.next_deadline(), down.next_deadline()]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                received = self.listener.recv_from(&mut buf) => match received {
                    Ok((n, from)) => {
                        self.traffic.add(true, n);
                        if self.ensure_client(from, &mut clients, &mut readers, &reply_tx).await {
                            let datagram = Datagram { client: from, bytes: buf[..n].to_vec() };
                            up.push(Instant::now().into_std(), datagram);
                        }
                    }
                    Err(e) if transient(&e) => {
                        tracing::debug!(path = %self.spec.name, error = %e, "listener: transient error");
                    }
                    Err(source) => {
                        return Err(RelayError::Receive {
                            path: self.spec.name.clone(),
                            listen: self.local,
                            source,
                        });
                    }
                },
                Some(reply) = reply_rx.recv() => {
                    self.traffic.add(false, reply.bytes.len());
                    down.push(Instant::now().into_std(), reply);
                }
                () = wait_until(deadline) => {}
            }
            let now = Instant::now().into_std();
            for d in up.pop_ready(now) {
                if let Some(socket) = clients.get(&d.client)
                    && let Err(e) = socket.send(&d.bytes).await
                {
                    tracing::debug!(path = %self.spec.name, client = %d.client, error = %e, "send upstream failed");
                }
            }
            for d in down.pop_ready(now) {
                if let Err(e) = self.listener.send_to(&d.bytes, d.client).await {
                    tracing::debug!(path = %self.spec.name, client = %d.client, error = %e, "send to client failed");
                }
            }
        }
    }

    /// Makes sure `from` has an upstream socket and a task reading its replies;
    /// false when it cannot have one (the client limit, or no socket).
    async fn ensure_client(
        &self,
        from: SocketAddr,
        clients: &mut HashMap<SocketAddr, Arc<UdpSocket>>,
        readers: &mut JoinSet<()>,
        reply_tx: &mpsc::Sender<Datagram>,
    ) -> bool {
        if clients.contains_key(&from) {
            return true;
        }
        if clients.len() >= MAX_CLIENTS {
            tracing::debug!(path = %self.spec.name, client = %from, "client limit reached: dropped");
            return false;
        }
        let socket = match upstream_socket(self.spec.upstream).await {
            Ok(s) => Arc::new(s),
            Err(e) => {
                tracing::warn!(path = %self.spec.name, client = %from, upstream = %self.spec.upstream, error = %e, "no upstream socket: dropped");
                return false;
            }
        };
        tracing::debug!(path = %self.spec.name, client = %from, "new client");
        readers.spawn(read_replies(
            self.spec.name.clone(),
            from,
            socket.clone(),
            reply_tx.clone(),
        ));
        clients.insert(from, socket);
        true
    }
}

/// A socket of the upstream's address family on any free port, connected to it.
async fn upstream_socket(upstream: SocketAddr) -> std::io::Result<UdpSocket> {
    let any: SocketAddr = if upstream.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(any).await?;
    socket.connect(upstream).await?;
    Ok(socket)
}

/// Forwards one client's replies from the upstream to the relay loop until the
/// loop is gone or the socket fails for good.
async fn read_replies(
    path: String,
    client: SocketAddr,
    socket: Arc<UdpSocket>,
    tx: mpsc::Sender<Datagram>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        match socket.recv(&mut buf).await {
            Ok(n) => {
                let reply = Datagram {
                    client,
                    bytes: buf[..n].to_vec(),
                };
                if tx.send(reply).await.is_err() {
                    return;
                }
            }
            Err(e) if transient(&e) => {
                tracing::debug!(path = %path, client = %client, error = %e, "upstream: transient error (is it listening?)");
            }
            Err(e) => {
                tracing::warn!(path = %path, client = %client, error = %e, "upstream socket failed: this client's replies stop");
                return;
            }
        }
    }
}

/// Errors a UDP socket reports for an earlier datagram (an ICMP unreachable
/// from a peer that is not listening yet) or a signal: the socket still works.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    )
}

/// Sleeps until `deadline`, or forever when there is none.
async fn wait_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}
