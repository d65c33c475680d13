//! Waking a replica when an edge it holds is owed a command. On PostgreSQL
//! the leader's writes to the outbox (tasks assigned, asked to stop,
//! cancelled) raise a `NOTIFY tidemill_owed` (a trigger, store::schema_pg),
//! and every replica listens on its own session: a notification wakes its
//! round loop, which delivers what its edges are owed. Without a session
//! (SQLite, or PostgreSQL unreachable) the round's timer still delivers,
//! within `round_interval_secs`.

use std::sync::{Arc, Mutex};

use crate::config::StoreBackend;
use crate::coordinator::Coordinator;
use crate::store::db::Listener;

/// The channel the outbox's trigger notifies.
pub const CHANNEL: &str = "tidemill_owed";

/// This replica's listening session, if it has one.
#[derive(Debug, Default)]
pub struct OwedListener {
    session: Mutex<Option<Listener>>,
}

impl OwedListener {
    /// Makes sure `coord` listens (on PostgreSQL): starts a session when it
    /// has none or its last one ended. Called at each round, so a session
    /// lost with the database comes back with it.
    pub fn ensure(coord: &Arc<Coordinator>) {
        if coord.cfg.store.backend != StoreBackend::Postgres {
            return;
        }
        let mut session = coord.owed_listener.session.lock().unwrap();
        if session.as_ref().is_some_and(Listener::alive) {
            return;
        }
        let weak = Arc::downgrade(coord);
        let wake = move || {
            if let Some(coord) = weak.upgrade() {
                coord.wake.notify_one();
            }
        };
        match Listener::start(&coord.cfg.store.url, CHANNEL, wake) {
            Ok(listener) => {
                tracing::info!(
                    channel = CHANNEL,
                    "listening for commands owed to this replica's edges"
                );
                *session = Some(listener);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for owed commands; delivering on the round's timer");
                *session = None;
            }
        }
    }
}
