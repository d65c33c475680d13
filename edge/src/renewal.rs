//! Certificate renewal over the live coordinator link: the node asks for a
//! new certificate before its own expires, or when the coordinator issues
//! from another CA.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tidemill_runtime::clock::SharedClock;
use tidemill_runtime::identity::{NodeKeyPair, request_renewal};
use tidemill_runtime::quic::Timing;

/// How this node renews its certificate: on a live connection, once fewer
/// than `renew_before` are left of it. The new credentials go to the data dir
/// at once, and the next connection uses them; the current one carries on.
pub struct Renewal {
    /// The data dir holding the credentials.
    pub dir: PathBuf,
    /// A CA file trusted instead of the one received at join.
    pub ca: Option<PathBuf>,
    /// How long before expiry to renew.
    pub renew_before: Duration,
    /// When the certificate in use expires, Unix ms (0: unknown).
    pub not_after_ms: AtomicI64,
    /// Whether the data dir holds newer credentials than the endpoint uses.
    pub renewed: AtomicBool,
    /// SHA-256 of the CA that signed the certificate in use, if known.
    pub issuer: Mutex<Option<String>>,
    /// Connection timing, for the endpoint's new configuration.
    pub timing: Timing,
}

impl Renewal {
    /// Whether the certificate is due for renewal at `now_ms`: its expiry is
    /// unknown, fewer than `renew_before` are left, or another CA than the
    /// one that signed it issues now (`issuing`, from the welcome: a CA
    /// rotation is under way).
    fn due(&self, now_ms: i64, issuing: &str) -> bool {
        let not_after = self.not_after_ms.load(Ordering::Relaxed);
        let moved = !issuing.is_empty() && self.issuer.lock().unwrap().as_deref() != Some(issuing);
        moved || not_after == 0 || not_after - now_ms < self.renew_before.as_millis() as i64
    }
}

/// How often a live connection checks whether its certificate is due.
const RENEW_CHECK: Duration = Duration::from_secs(3_600);

/// Renews this node's certificate over `conn` whenever it is due, checking
/// every [`RENEW_CHECK`], for the life of the connection.
pub(crate) async fn renew_when_due(
    conn: quinn::Connection,
    renewal: Arc<Renewal>,
    clock: SharedClock,
    (node_id, issuing): (String, String),
) {
    loop {
        if renewal.due(clock.now_ms(), &issuing) {
            match renew(&conn, &renewal).await {
                Ok(not_after_ms) => {
                    tracing::info!(node_id = %node_id, not_after_ms, "certificate renewed; the next connection uses it")
                }
                Err(e) => {
                    tracing::warn!(node_id = %node_id, error = %e, "cannot renew the certificate; will retry")
                }
            }
        }
        clock.sleep(RENEW_CHECK).await;
    }
}

async fn renew(conn: &quinn::Connection, renewal: &Renewal) -> Result<i64, String> {
    let key = NodeKeyPair::generate().map_err(|e| e.to_string())?;
    let issued = request_renewal(conn, &key)
        .await
        .map_err(|e| e.to_string())?;
    key.store(&renewal.dir, &issued)
        .map_err(|e| e.to_string())?;
    renewal
        .not_after_ms
        .store(issued.not_after_ms, Ordering::Relaxed);
    *renewal.issuer.lock().unwrap() = Some(issued.issuer_sha256.clone());
    renewal.renewed.store(true, Ordering::Relaxed);
    Ok(issued.not_after_ms)
}
