//! A rogue edge for the attack tests: it joins with a real token, holds a real
//! certificate, and then says whatever the test tells it to, in the real
//! protocol (a hello with any capabilities, any reports, any forecast), and
//! answers the coordinator's commands however the test wants. It is what a
//! joined edge gone bad can do, without the edge daemon's own checks.

use std::net::SocketAddr;
use std::time::Duration;

use tidemill_proto::{Capabilities, CloudMsg, EdgeMsg, Hello};
use tidemill_runtime::frames;
use tidemill_runtime::identity::{JoinToken, NodeIdentity, NodeKeyPair, request_certificate};
use tidemill_runtime::quic::{self, Timing};

use super::Coordinator;

/// How long the rogue waits for one answer from the coordinator.
const ANSWER: Duration = Duration::from_secs(20);

/// A joined node identity that a test drives by hand.
pub struct Rogue {
    /// The node id it joined as.
    pub node_id: String,
    identity: NodeIdentity,
    addr: SocketAddr,
}

/// Capabilities like a small real box's, for a hello that claims nothing odd.
pub fn modest_capabilities() -> Capabilities {
    Capabilities {
        cpu_cores: 2,
        mem_bytes: 2 << 30,
        accelerators: Vec::new(),
        os: "linux".into(),
        arch: "x86_64".into(),
        daemon_version: env!("CARGO_PKG_VERSION").into(),
    }
}

impl Rogue {
    /// Joins `coord` as `node_id` with the test's join token.
    pub async fn join(coord: &Coordinator, node_id: &str) -> Rogue {
        let token: JoinToken = coord.token().parse().expect("a join token");
        let joiner = quic::joiner(&token.ca_sha256, Timing::default()).expect("a joiner endpoint");
        let conn = joiner
            .connect(coord.quic, "127.0.0.1")
            .expect("connect to join")
            .await
            .expect("the join connection");
        let key = NodeKeyPair::generate().expect("a key pair");
        let issued = request_certificate(&conn, &token, node_id, &key)
            .await
            .expect("the coordinator issues a certificate");
        conn.close(0u32.into(), b"joined");
        Rogue {
            node_id: node_id.to_string(),
            identity: key.into_identity(issued),
            addr: coord.quic,
        }
    }

    /// A new mutually authenticated connection with this node's certificate.
    pub async fn connect(&self) -> quinn::Connection {
        let endpoint = quic::client(&self.identity, Timing::default()).expect("a client endpoint");
        endpoint
            .connect(self.addr, "127.0.0.1")
            .expect("connect")
            .await
            .expect("the connection")
    }

    /// Connects and says hello with `capabilities`; returns the connection
    /// and the coordinator's answer (a welcome, or an error saying why not).
    pub async fn hello(&self, capabilities: Capabilities) -> (quinn::Connection, CloudMsg) {
        let conn = self.connect().await;
        let hello = EdgeMsg::Hello(Hello {
            node_id: self.node_id.clone(),
            capabilities,
            probe_port: None,
            site: None,
        });
        let answer = ask(&conn, &hello).await;
        (conn, answer)
    }
}

/// Sends `msg` on a new stream and waits (boundedly) for the one answer.
pub async fn ask(conn: &quinn::Connection, msg: &EdgeMsg) -> CloudMsg {
    tokio::time::timeout(ANSWER, frames::request(conn, msg))
        .await
        .expect("an answer within the bound")
        .expect("an answer")
}

/// The next command the coordinator sends on `conn`, with the stream to
/// answer it on; `None` if none comes within `within`.
pub async fn next_command(
    conn: &quinn::Connection,
    within: Duration,
) -> Option<(CloudMsg, quinn::SendStream)> {
    let (send, mut recv) = tokio::time::timeout(within, conn.accept_bi())
        .await
        .ok()?
        .ok()?;
    let msg = frames::read_msg::<CloudMsg>(&mut recv).await.ok()??;
    Some((msg, send))
}
