//! Group commit of report batches. Every batch is acknowledged only once it
//! is durable, and with `synchronous = FULL` each commit waits for an fsync.
//! Batches that arrive while a commit is under way queue here, and the next
//! connection to take its turn stores them all in one transaction, so a busy
//! fleet pays one fsync per group instead of one per batch. A batch that
//! arrives alone is committed at once, as before.

use std::sync::Mutex;

use tidemill_proto::Report;
use tidemill_runtime::metrics::prometheus::IntCounter;
use tokio::sync::oneshot;

use crate::store::{Applied, Batch, Store, StoreError};

/// A batch waiting for its commit.
struct Pending {
    node_id: String,
    reports: Vec<Report>,
    now_ms: i64,
    reply: oneshot::Sender<Result<Applied, StoreError>>,
}

/// The queue of batches and the turn to commit them.
#[derive(Default)]
pub struct ReportCommits {
    queue: Mutex<Vec<Pending>>,
    /// Held by the connection storing a group. A group's answers are all
    /// sent before it is released, so the next holder finds its own batch
    /// either answered or still queued.
    turn: tokio::sync::Mutex<()>,
}

impl ReportCommits {
    /// Stores `reports` from `node_id`, arrived at `now_ms`, together with
    /// whatever other batches are queued, and returns what storing this one
    /// did. `commits` counts the transactions.
    pub async fn apply(
        &self,
        store: &Mutex<Store>,
        commits: &IntCounter,
        node_id: &str,
        reports: Vec<Report>,
        now_ms: i64,
    ) -> Result<Applied, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        self.queue.lock().unwrap().push(Pending {
            node_id: node_id.to_string(),
            reports,
            now_ms,
            reply,
        });
        let _turn = self.turn.lock().await;
        if let Ok(done) = answer.try_recv() {
            return done;
        }
        let group = std::mem::take(&mut *self.queue.lock().unwrap());
        let batches: Vec<Batch<'_>> = group
            .iter()
            .map(|p| Batch {
                node_id: &p.node_id,
                reports: &p.reports,
                now_ms: p.now_ms,
            })
            .collect();
        let stored = store.lock().unwrap().apply_report_batches(&batches);
        commits.inc();
        match stored {
            Ok(results) => {
                for (p, r) in group.into_iter().zip(results) {
                    let _ = p.reply.send(r);
                }
            }
            Err(e) => {
                let why = e.to_string();
                for p in group {
                    let _ = p.reply.send(Err(StoreError::GroupCommit(why.clone())));
                }
            }
        }
        answer
            .try_recv()
            .expect("this connection's batch was queued before its turn, so its group answered it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testkit::{hello, samples};

    #[tokio::test]
    async fn batches_queued_during_a_commit_share_the_next_one_and_a_bad_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.register(&hello("a"), 0).unwrap();
        s.register(&hello("b"), 0).unwrap();
        let store = Mutex::new(s);
        let commits = IntCounter::new("c", "c").unwrap();
        let rc = ReportCommits::default();
        // A commit is under way: three batches arrive and queue behind it.
        let turn = rc.turn.lock().await;
        let (a, b, ghost, queued) = {
            let apply = |node: &'static str, seq| {
                rc.apply(&store, &commits, node, vec![samples(seq, 10.0)], 5)
            };
            let mut a = Box::pin(apply("a", 1));
            let mut b = Box::pin(apply("b", 1));
            let mut ghost = Box::pin(apply("ghost", 1));
            for f in [&mut a, &mut b, &mut ghost] {
                assert!(
                    futures_poll_once(f.as_mut()).is_none(),
                    "waits for its turn"
                );
            }
            let queued = rc.queue.lock().unwrap().len();
            drop(turn);
            (a.await, b.await, ghost.await, queued)
        };
        assert_eq!(queued, 3);
        assert_eq!(a.unwrap().ack, 1);
        assert_eq!(b.unwrap().ack, 1);
        assert!(matches!(ghost, Err(StoreError::UnknownNode(n)) if n == "ghost"));
        assert_eq!(commits.get(), 1, "the three batches shared one commit");
        let store = store.lock().unwrap();
        assert_eq!(store.report_seqs("a").unwrap(), vec![1]);
        assert_eq!(store.report_seqs("b").unwrap(), vec![1]);
    }

    /// Polls `f` once: `Some` if it finished.
    fn futures_poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}
