//! Which coordinator replica runs the scheduling rounds: a lease in the
//! database that its holder renews and that expires, and the epoch of each
//! tenure, the fencing token that every write acting on a round's plan
//! carries, so that a deposed leader's late writes are refused and two
//! leaders can never both assign a task.
//!
//! Times are the database's own clock (wall time, Unix ms), so replicas
//! whose clocks disagree still agree on when a lease ends. On SQLite the one
//! coordinator of the data dir holds the lease for as long as it runs.

use super::db::{Dialect, OptionalExtension, Query, Transaction};
use super::{Store, StoreError};

/// The database's clock, Unix ms, in each dialect.
fn now_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
        Dialect::Postgres => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
    }
}

/// The lease a leader's writes are fenced by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The replica that holds it.
    pub replica: String,
    /// Its tenure.
    pub epoch: i64,
}

/// Who leads, as the database says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lead {
    /// This replica holds the lease: a new tenure, or its own renewed.
    Leader(Fence),
    /// Another replica holds it, for `expires_in_ms` more.
    Follower {
        /// The replica that leads.
        holder: String,
        /// Its tenure.
        epoch: i64,
        /// How long its lease lasts unless renewed, ms.
        expires_in_ms: i64,
    },
}

impl Store {
    /// Takes or renews the lease for `replica`, for `ttl_ms` from now on the
    /// database's clock: renewed while `replica` holds it and it has not
    /// expired (the same epoch), taken with the next epoch when it is free
    /// or has expired; else says who holds it.
    pub fn lead(&mut self, replica: &str, ttl_ms: i64) -> Result<Lead, StoreError> {
        let err = self.sql_err();
        let now = now_sql(self.conn.dialect());
        let take = format!(
            "INSERT INTO leader_lease (id, holder, epoch, expires_ms) VALUES (1, ?1, 1, {now} + ?2)
             ON CONFLICT (id) DO UPDATE SET
                 epoch = CASE WHEN leader_lease.holder = excluded.holder
                                   AND leader_lease.expires_ms >= {now}
                              THEN leader_lease.epoch ELSE leader_lease.epoch + 1 END,
                 holder = excluded.holder,
                 expires_ms = excluded.expires_ms
             WHERE leader_lease.holder = excluded.holder OR leader_lease.expires_ms < {now}
             RETURNING epoch"
        );
        let held =
            format!("SELECT holder, epoch, expires_ms - {now} FROM leader_lease WHERE id = 1");
        // Asking for the lease is never fenced: a deposed leader asks too.
        let fence = self.fence.take();
        let answer = self.write(|tx| {
            let epoch: Option<i64> = tx
                .query_row(&take, super::db::params![replica, ttl_ms], |r| r.get(0))
                .optional()
                .map_err(&err)?;
            if let Some(epoch) = epoch {
                return Ok(Lead::Leader(Fence {
                    replica: replica.to_string(),
                    epoch,
                }));
            }
            tx.query_row(&held, [], |r| {
                Ok(Lead::Follower {
                    holder: r.get(0)?,
                    epoch: r.get(1)?,
                    expires_in_ms: r.get(2)?,
                })
            })
            .map_err(&err)
        });
        self.fence = fence;
        answer
    }

    /// Gives up `fence`'s lease at once (an operator's step-down), so that
    /// another replica takes it at its next renewal; `false` when `fence`
    /// no longer held it.
    pub fn resign(&mut self, fence: &Fence) -> Result<bool, StoreError> {
        let err = self.sql_err();
        let now = now_sql(self.conn.dialect());
        let gone = self
            .conn
            .execute(
                &format!(
                    "UPDATE leader_lease SET expires_ms = {now} - 1
                     WHERE id = 1 AND holder = ?1 AND epoch = ?2"
                ),
                super::db::params![fence.replica, fence.epoch],
            )
            .map_err(err)?;
        Ok(gone == 1)
    }

    /// Who holds the lease, without asking for it; `None` when nobody has
    /// or it has expired.
    pub fn leader(&self) -> Result<Option<(String, i64)>, StoreError> {
        let err = self.sql_err();
        let now = now_sql(self.conn.dialect());
        self.conn
            .query_row(
                &format!(
                    "SELECT holder, epoch FROM leader_lease WHERE id = 1 AND expires_ms >= {now}"
                ),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(err)
    }

    /// Fences this store's writes by `fence` (a round's, while this
    /// replica leads), or lifts the fence (`None`).
    pub fn set_fence(&mut self, fence: Option<Fence>) {
        self.fence = fence;
    }
}

/// Proves inside `tx` that `fence` still holds the lease, before a write
/// that acts on a round's plan. The row it touches stays locked until `tx`
/// ends, so on PostgreSQL no other replica takes the lease in between.
pub(super) fn check(tx: &Transaction<'_>, fence: &Fence) -> Result<(), StoreError> {
    let now = now_sql(tx.dialect());
    let held = tx
        .execute(
            &format!(
                "UPDATE leader_lease SET epoch = epoch
                 WHERE id = 1 AND holder = ?1 AND epoch = ?2 AND expires_ms >= {now}"
            ),
            super::db::params![fence.replica, fence.epoch],
        )
        .map_err(|source| StoreError::Sql {
            path: "leader_lease".into(),
            source,
        })?;
    if held == 1 {
        Ok(())
    } else {
        Err(StoreError::Deposed { epoch: fence.epoch })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::testkit::on_both_backends;

    use super::*;

    on_both_backends! {
        /// One replica leads; a second follows until the lease expires,
        /// then takes it with the next epoch, and the first one's fenced
        /// writes are refused from then on.
        fn a_lease_has_one_holder_and_a_deposed_leaders_writes_are_refused(db) {
            let mut a = db.open();
            let mut b = db.open();
            let Lead::Leader(fa) = a.lead("a", 60_000).unwrap() else {
                panic!("the first replica leads")
            };
            assert_eq!(fa.epoch, 1);
            assert_eq!(a.lead("a", 60_000).unwrap(), Lead::Leader(fa.clone()), "renewed");
            let Lead::Follower { holder, epoch, expires_in_ms } = b.lead("b", 60_000).unwrap()
            else {
                panic!("the second replica follows")
            };
            assert_eq!((holder.as_str(), epoch), ("a", 1));
            assert!(expires_in_ms > 50_000, "{expires_in_ms}");
            a.set_fence(Some(fa.clone()));
            a.touch("nobody", 1).unwrap();
            a.expire(&Default::default(), 0, None, 1).unwrap();

            // a's lease runs out; b takes the next tenure.
            assert!(matches!(a.lead("a", -1).unwrap(), Lead::Leader(_)));
            let Lead::Leader(fb) = b.lead("b", 60_000).unwrap() else {
                panic!("b takes the expired lease")
            };
            assert_eq!(fb.epoch, 2);
            let refused = a.expire(&Default::default(), 0, None, 1).unwrap_err();
            assert!(matches!(refused, StoreError::Deposed { epoch: 1 }), "{refused}");
            assert!(matches!(a.lead("a", 60_000).unwrap(), Lead::Follower { .. }));
            b.set_fence(Some(fb));
            b.expire(&Default::default(), 0, None, 1).unwrap();
        }
    }
}
