//! Which replica runs the scheduling rounds. Every replica serves edges and
//! the API; the one holding the lease in the database ([`Store::lead`])
//! decides. It renews the lease three times a lease and stops assigning
//! once half a lease has passed without a renewal, well before the lease
//! can pass to another replica; a write it still makes after that is
//! refused by its fence ([`crate::store::Fence`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tidemill_runtime::clock::{Clock, SystemClock};

use crate::coordinator::Coordinator;
use crate::store::{Fence, Lead, Store};

/// This replica's part in the rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// It holds the lease, last renewed at `renewed`.
    Leader {
        /// The lease, to fence the round's writes with.
        fence: Fence,
        /// When the database last confirmed it (this process's clock).
        renewed: Instant,
    },
    /// Another replica leads.
    Follower {
        /// Who.
        holder: String,
        /// Its tenure.
        epoch: i64,
    },
    /// The database could not say: this replica does not lead.
    Unsure {
        /// Why.
        why: String,
    },
}

/// This replica's standing, and the lease's length.
#[derive(Debug)]
pub struct Leadership {
    replica: String,
    lease: Duration,
    role: Mutex<Role>,
    /// Until when this replica stands aside after stepping down.
    aside_until: Mutex<Option<Instant>>,
}

impl Leadership {
    /// A replica named `replica` that has not asked yet.
    pub fn new(replica: String, lease: Duration) -> Self {
        Leadership {
            replica,
            lease,
            role: Mutex::new(Role::Unsure {
                why: "it has not asked the database for the lease yet".into(),
            }),
            aside_until: Mutex::new(None),
        }
    }

    /// Asks the database for the lease (taking or renewing it), and logs a
    /// change of role.
    pub fn renew(&self, store: &Mutex<Store>) {
        let asked = Instant::now();
        let aside = self.aside_until.lock().unwrap().is_some_and(|t| asked < t);
        if aside {
            let role = match store.lock().unwrap().leader() {
                Ok(Some((holder, epoch))) => Role::Follower { holder, epoch },
                Ok(None) => Role::Unsure {
                    why: "it stepped down, and stands aside for a lease".into(),
                },
                Err(e) => Role::Unsure {
                    why: format!("the database did not answer: {e}"),
                },
            };
            return self.set(role);
        }
        let answer = store
            .lock()
            .unwrap()
            .lead(&self.replica, self.lease.as_millis() as i64);
        let role = match answer {
            Ok(Lead::Leader(fence)) => Role::Leader {
                fence,
                renewed: asked,
            },
            Ok(Lead::Follower { holder, epoch, .. }) => Role::Follower { holder, epoch },
            Err(e) => Role::Unsure {
                why: format!("the database did not answer: {e}"),
            },
        };
        self.set(role);
    }

    /// Gives the lease up if this replica holds it, and stands aside for a
    /// lease so that another replica takes it (an operator's step-down,
    /// before maintenance). The epoch given up; `None` when it did not lead.
    pub fn step_down(&self, store: &Mutex<Store>) -> Result<Option<i64>, crate::store::StoreError> {
        let Some(fence) = self.fence() else {
            return Ok(None);
        };
        *self.aside_until.lock().unwrap() = Some(Instant::now() + self.lease);
        self.set(Role::Unsure {
            why: "it stepped down, and stands aside for a lease".into(),
        });
        store.lock().unwrap().resign(&fence)?;
        tracing::info!(replica = %self.replica, epoch = fence.epoch, "stepped down: another replica takes the lease");
        Ok(Some(fence.epoch))
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Records that the lease was lost (a fenced write was refused).
    pub fn deposed(&self, why: String) {
        self.set(Role::Unsure { why });
    }

    fn set(&self, role: Role) {
        let mut now = self.role.lock().unwrap();
        let changed = match (&*now, &role) {
            (Role::Leader { fence: a, .. }, Role::Leader { fence: b, .. }) => a != b,
            (Role::Follower { holder: a, .. }, Role::Follower { holder: b, .. }) => a != b,
            (Role::Unsure { .. }, Role::Unsure { .. }) => false,
            _ => true,
        };
        if changed {
            match &role {
                Role::Leader { fence, .. } => tracing::info!(
                    replica = %self.replica, epoch = fence.epoch,
                    "leading: this replica runs the scheduling rounds"
                ),
                Role::Follower { holder, epoch } => tracing::info!(
                    replica = %self.replica, leader = %holder, epoch,
                    "following: another replica runs the scheduling rounds"
                ),
                Role::Unsure { why } => tracing::warn!(
                    replica = %self.replica, %why,
                    "not leading: this replica stopped assigning"
                ),
            }
        }
        *now = role;
    }

    /// The fence for a round: `Some` while this replica leads and renewed
    /// its lease within half a lease.
    pub fn fence(&self) -> Option<Fence> {
        match &*self.role.lock().unwrap() {
            Role::Leader { fence, renewed } if renewed.elapsed() < self.lease / 2 => {
                Some(fence.clone())
            }
            _ => None,
        }
    }

    /// What `/readyz` says of the rounds.
    pub fn describe(&self) -> String {
        match &*self.role.lock().unwrap() {
            Role::Leader { fence, renewed } if renewed.elapsed() < self.lease / 2 => format!(
                "replica {} leads the scheduling rounds (epoch {})",
                self.replica, fence.epoch
            ),
            Role::Leader { fence, renewed } => format!(
                "replica {} holds the lease (epoch {}) but has not renewed it for {:.1} s, so it assigns nothing until it does",
                self.replica,
                fence.epoch,
                renewed.elapsed().as_secs_f64()
            ),
            Role::Follower { holder, epoch } => format!(
                "replica {} follows: replica {holder} leads the scheduling rounds (epoch {epoch})",
                self.replica
            ),
            Role::Unsure { why } => format!(
                "replica {} does not lead the scheduling rounds: {why}",
                self.replica
            ),
        }
    }
}

/// Renews the lease three times a lease, on the wall clock (a lease is
/// wall time, whatever speed the plans' clock runs at).
pub async fn run(coord: Arc<Coordinator>) {
    let every = coord.leadership.lease / 3;
    loop {
        let c = coord.clone();
        let was = c.leadership.fence().is_some();
        // The store is synchronous: ask it off the runtime's workers.
        let _ = tokio::task::spawn_blocking(move || c.leadership.renew(&c.store)).await;
        if !was && coord.leadership.fence().is_some() {
            coord.wake.notify_one();
        }
        SystemClock.sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_stops_assigning_half_a_lease_after_its_last_renewal() {
        let l = Leadership::new("a".into(), Duration::from_secs(6));
        assert_eq!(l.fence(), None, "before it asked");
        let fence = Fence {
            replica: "a".into(),
            epoch: 3,
        };
        l.set(Role::Leader {
            fence: fence.clone(),
            renewed: Instant::now(),
        });
        assert_eq!(l.fence(), Some(fence.clone()));
        assert!(
            l.describe()
                .contains("leads the scheduling rounds (epoch 3)")
        );
        l.set(Role::Leader {
            fence,
            renewed: Instant::now() - Duration::from_secs(4),
        });
        assert_eq!(l.fence(), None);
        assert!(l.describe().contains("assigns nothing"), "{}", l.describe());
        l.set(Role::Follower {
            holder: "b".into(),
            epoch: 4,
        });
        assert_eq!(l.fence(), None);
        assert!(l.describe().contains("replica b leads"), "{}", l.describe());
    }
}
