//! Moving a job's checkpoint with the job, over this edge's mutual-TLS
//! connection to the coordinator (see `tidemill_cloud::checkpoints` for why
//! through the coordinator): when a task stops, its last complete checkpoint
//! is sent up before the stop is reported; before a task starts, the
//! coordinator's newest checkpoint of the job is fetched if it is newer
//! than the one here. Both ways go in SHA-256-checked chunks, a few in
//! flight at once, paced to `[checkpoint] link_share` of the link's measured
//! rate so the box's own traffic keeps the rest, and a cut transfer resumes
//! from the chunks that arrived.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidemill_proto::{CloudMsg, EdgeMsg, ErrorCode, Manifest, Transfer};
use tidemill_runtime::checkpoint::{CheckpointError, CheckpointStore};
use tidemill_runtime::clock::{Clock, SystemClock};
use tidemill_runtime::frames::{self, FrameError};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use crate::checkpoint_config::CheckpointConfig;
use crate::checkpoint_shared::{SharedError, SharedStore};
use crate::link::Probes;

/// Under the data dir, the checkpoints this edge holds (root's alone; the
/// task's own dir is `checkpoints/`).
pub const STORE_DIR: &str = "checkpoint-store";

/// Chunk requests in flight at once: enough to fill a long fat link, few
/// enough that one transfer never floods it.
const WINDOW: usize = 4;

/// Wall seconds of the link's rate the chunks in flight may take together:
/// each must reach the coordinator within its stream timeout (10 s by
/// default), and chunks in flight share the link.
const WINDOW_S: f64 = 4.0;

/// Chunks in flight on a link of `rate_bps` (bytes/s): [`WINDOW`], fewer on
/// a slow link, at least one.
fn window(rate_bps: Option<f64>) -> usize {
    rate_bps
        .filter(|r| r.is_finite() && *r > 0.0)
        .map_or(WINDOW, |r| {
            ((r * WINDOW_S / f64::from(tidemill_proto::CHUNK_BYTES)) as usize).clamp(1, WINDOW)
        })
}

/// Offers (or fetch rounds) before a transfer gives up: each resends what
/// failed its hash in the round before.
const ROUNDS: usize = 3;

/// Why a checkpoint did not move.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The edge is not connected.
    #[error("not connected to the coordinator")]
    NoLink,
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] CheckpointError),
    /// The stream failed.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The shared store failed.
    #[error(transparent)]
    Shared(#[from] SharedError),
    /// The coordinator refused.
    #[error("the coordinator refused {what}: {message}")]
    Refused {
        /// What was refused.
        what: &'static str,
        /// Its reason.
        message: String,
    },
    /// Some chunks still failed their hash after every round.
    #[error(
        "{0} chunks still failed their hash after {ROUNDS} rounds; the previous complete checkpoint stands"
    )]
    GaveUp(usize),
    /// The coordinator answered something else.
    #[error("unexpected answer to {0}")]
    Unexpected(&'static str),
}

fn expect(what: &'static str, reply: CloudMsg) -> MoveError {
    match reply {
        CloudMsg::Error(e) => MoveError::Refused {
            what,
            message: e.message,
        },
        _ => MoveError::Unexpected(what),
    }
}

/// Spaces chunks so that a transfer keeps to its rate.
pub struct Pacer {
    rate_bps: Option<f64>,
    start: Instant,
    sent: u64,
}

impl Pacer {
    /// A pacer at `rate_bps` bytes/s (`None`: unpaced).
    pub fn new(rate_bps: Option<f64>) -> Self {
        Pacer {
            rate_bps: rate_bps.filter(|r| r.is_finite() && *r > 0.0),
            start: Instant::now(),
            sent: 0,
        }
    }

    /// Bytes admitted so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Waits until `len` more bytes keep within the rate.
    pub async fn admit(&mut self, len: usize) {
        if let Some(rate) = self.rate_bps {
            let due = Duration::from_secs_f64(self.sent as f64 / rate);
            let waited = self.start.elapsed();
            if due > waited {
                SystemClock.sleep(due - waited).await;
            }
        }
        self.sent += len as u64;
    }
}

/// Moves checkpoints between this edge's store and the coordinator.
pub struct Mover {
    node_id: String,
    /// The checkpoints this edge holds.
    pub store: CheckpointStore,
    cfg: CheckpointConfig,
    link: watch::Sender<Link>,
    /// The operators' shared store, when `[checkpoint] backend = "shared"`:
    /// checkpoints go there instead of through the coordinator.
    shared: Option<SharedStore>,
}

/// The connection transfers use, with the probes that measure its rate.
pub type Link = Option<(quinn::Connection, Option<Arc<Probes>>)>;

impl Mover {
    /// A mover over the store under `data_dir`.
    pub fn new(node_id: String, data_dir: &std::path::Path, cfg: CheckpointConfig) -> Arc<Self> {
        Arc::new(Mover {
            node_id,
            store: CheckpointStore::new(data_dir.join(STORE_DIR), cfg.max_bytes, cfg.keep),
            cfg,
            link: watch::Sender::new(None),
            shared: None,
        })
    }

    /// A mover that keeps checkpoints in `shared`, not at the coordinator.
    pub fn with_shared(
        node_id: String,
        data_dir: &std::path::Path,
        cfg: CheckpointConfig,
        shared: SharedStore,
    ) -> Arc<Self> {
        let mut mover = Arc::into_inner(Self::new(node_id, data_dir, cfg)).expect("just made");
        mover.shared = Some(shared);
        Arc::new(mover)
    }

    /// The settings.
    pub fn cfg(&self) -> &CheckpointConfig {
        &self.cfg
    }

    /// The node this edge is.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The shared store checkpoints are kept in, if that is the backend.
    pub fn shared(&self) -> Option<&SharedStore> {
        self.shared.as_ref()
    }

    /// Tells the coordinator of a checkpoint put in the shared store.
    pub(crate) async fn tell(&self, report: &EdgeMsg) -> Result<(), MoveError> {
        let (conn, _) = self.conn()?;
        match frames::request(&conn, report).await? {
            CloudMsg::CheckpointStored { .. } => Ok(()),
            other => Err(expect("the shared-store checkpoint report", other)),
        }
    }

    /// The connection transfers use from now on (`None`: disconnected), and
    /// the probes that measure its rate.
    pub fn set_link(&self, link: Link) {
        self.link.send_replace(link);
    }

    fn conn(&self) -> Result<(quinn::Connection, Option<f64>), MoveError> {
        let link = self.link.borrow();
        let (conn, _) = link.as_ref().ok_or(MoveError::NoLink)?;
        Ok((conn.clone(), self.rate()))
    }

    /// `link_share` of the coordinator link's measured rate, bytes/s: the
    /// pace of a transfer, whichever way it goes (the shared store is
    /// reached over the same uplink); `None` while unmeasured.
    pub(crate) fn rate(&self) -> Option<f64> {
        let link = self.link.borrow();
        let probes = link.as_ref()?.1.as_ref()?;
        Some(probes.cloud.lock().unwrap().bandwidth_bps * self.cfg.link_share)
    }

    /// Sends stored checkpoint `id` of `job_id` to the coordinator; returns
    /// how it went.
    pub async fn upload(
        &self,
        task_id: u64,
        job_id: u64,
        (id, m): (&str, &Manifest),
    ) -> Result<Transfer, MoveError> {
        let (conn, rate) = self.conn()?;
        let started = Instant::now();
        let mut pacer = Pacer::new(rate);
        let mut resent = 0u32;
        for _ in 0..ROUNDS {
            let offer = EdgeMsg::CheckpointOffer {
                task_id,
                manifest: m.clone(),
            };
            let missing = match frames::request(&conn, &offer).await? {
                CloudMsg::CheckpointMissing {
                    manifest_id,
                    missing,
                } if manifest_id == id => missing,
                other => return Err(expect("the checkpoint offer", other)),
            };
            if missing.len() < m.chunk_count() {
                tracing::info!(node_id = %self.node_id, job_id, missing = missing.len(), chunks = m.chunk_count(), "the coordinator holds part of the checkpoint already; sending the rest");
            }
            let mut inflight = JoinSet::new();
            let mut bad = 0;
            for index in missing {
                while inflight.len() >= window(rate) {
                    bad += chunk_sent(inflight.join_next().await)?;
                }
                let data = self.store.read_chunk(job_id, id, index)?;
                pacer.admit(data.len()).await;
                let msg = EdgeMsg::CheckpointChunk {
                    job_id,
                    manifest_id: id.to_string(),
                    index,
                    data,
                };
                let conn = conn.clone();
                inflight.spawn(async move { frames::request::<_, CloudMsg>(&conn, &msg).await });
            }
            while let Some(done) = inflight.join_next().await {
                bad += chunk_sent(Some(done))?;
            }
            resent += bad;
            let commit = EdgeMsg::CheckpointCommit {
                job_id,
                manifest_id: id.to_string(),
            };
            match frames::request(&conn, &commit).await? {
                CloudMsg::CheckpointStored { .. } => {
                    return Ok(Transfer {
                        bytes: m.bytes(),
                        moved_bytes: pacer.sent,
                        seconds: started.elapsed().as_secs_f64(),
                        resent_chunks: resent,
                        shared: false,
                    });
                }
                // Chunks were missing or found corrupt: the next offer
                // lists them.
                CloudMsg::Error(e) => {
                    tracing::info!(node_id = %self.node_id, job_id, reason = %e.message, "checkpoint not complete at the coordinator; sending what it lacks");
                    resent += 1;
                }
                _ => return Err(MoveError::Unexpected("the checkpoint commit")),
            }
        }
        Err(MoveError::GaveUp(resent as usize))
    }

    /// The coordinator's newest complete checkpoint of `job_id`, if it
    /// keeps one.
    pub async fn latest(&self, task_id: u64, job_id: u64) -> Result<Option<Manifest>, MoveError> {
        let (conn, _) = self.conn()?;
        match frames::request(&conn, &EdgeMsg::CheckpointLatest { task_id, job_id }).await? {
            CloudMsg::CheckpointLatest(m) => Ok(m),
            other => Err(expect("the checkpoint request", other)),
        }
    }

    /// Fetches checkpoint `m` of `job_id` into this edge's store, checking
    /// every chunk (a chunk that fails its hash is fetched again); returns
    /// its id and how the transfer went, `None` if it was here already.
    pub async fn download(
        &self,
        task_id: u64,
        job_id: u64,
        m: &Manifest,
    ) -> Result<(String, Option<Transfer>), MoveError> {
        let (conn, rate) = self.conn()?;
        let started = Instant::now();
        let (id, mut missing) = self.store.offer(job_id, m)?;
        if missing.is_empty() {
            self.store.commit(job_id, &id)?;
            return Ok((id, None));
        }
        let mut pacer = Pacer::new(rate);
        let (mut resent, mut moved) = (0u32, 0u64);
        for _ in 0..ROUNDS {
            let mut inflight = JoinSet::new();
            for index in missing {
                while inflight.len() >= window(rate) {
                    let (bad, len) = self.chunk_fetched(job_id, &id, inflight.join_next().await)?;
                    (resent, moved) = (resent + bad, moved + len);
                }
                let len = m.chunks().nth(index as usize).map_or(0, |c| c.len);
                pacer.admit(len).await;
                let msg = EdgeMsg::CheckpointFetch {
                    task_id,
                    job_id,
                    manifest_id: id.clone(),
                    index,
                };
                let conn = conn.clone();
                inflight.spawn(async move { frames::request::<_, CloudMsg>(&conn, &msg).await });
            }
            while let Some(done) = inflight.join_next().await {
                let (bad, len) = self.chunk_fetched(job_id, &id, Some(done))?;
                (resent, moved) = (resent + bad, moved + len);
            }
            match self.store.commit(job_id, &id) {
                Ok(_) => {
                    return Ok((
                        id,
                        Some(Transfer {
                            bytes: m.bytes(),
                            moved_bytes: moved,
                            seconds: started.elapsed().as_secs_f64(),
                            resent_chunks: resent,
                            shared: false,
                        }),
                    ));
                }
                Err(CheckpointError::Incomplete { .. }) => {
                    missing = self.store.offer(job_id, m)?.1;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(MoveError::GaveUp(resent as usize))
    }

    /// Stores one fetched chunk; returns whether it failed its hash (1: it
    /// is fetched again in the next round) and the bytes that came.
    fn chunk_fetched(
        &self,
        job_id: u64,
        id: &str,
        done: Option<Result<Result<CloudMsg, FrameError>, tokio::task::JoinError>>,
    ) -> Result<(u32, u64), MoveError> {
        let Some(done) = done else { return Ok((0, 0)) };
        match done.map_err(|_| MoveError::Unexpected("a chunk request"))?? {
            CloudMsg::CheckpointChunk { index, data } => {
                let len = data.len() as u64;
                match self.store.put(job_id, id, index, &data) {
                    Ok(()) => Ok((0, len)),
                    Err(CheckpointError::BadChunk { .. }) => {
                        tracing::warn!(node_id = %self.node_id, job_id, chunk = index, "a fetched checkpoint chunk failed its hash; fetching it again");
                        Ok((1, len))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            other => Err(expect("a chunk request", other)),
        }
    }
}

impl MoveError {
    /// Whether the connection went: the transfer resumes on the next one.
    fn link_lost(&self) -> bool {
        matches!(
            self,
            MoveError::NoLink
                | MoveError::Frame(
                    FrameError::Connection(_)
                        | FrameError::Read(_)
                        | FrameError::Write(_)
                        | FrameError::Closed(_)
                )
        )
    }
}

impl Mover {
    /// Runs `attempt` until it ends other than by a lost link, each retry
    /// on the connection the link makes next: what arrived before the cut
    /// is kept, so each retry moves only the rest. The caller bounds it.
    pub(crate) async fn resuming<T, F, Fut>(
        &self,
        (what, job_id, patient): (&str, u64, bool),
        mut attempt: F,
    ) -> Result<T, MoveError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, MoveError>>,
    {
        loop {
            // Marks the link the attempt uses as seen: a retry waits for one
            // set after it. (Not `stable_id`: a new connection may reuse the
            // freed address of the one that went, and so its id.)
            let mut next = self.link.subscribe();
            match attempt().await {
                Err(e) if patient && e.link_lost() => {
                    tracing::info!(node_id = %self.node_id, job_id, error = %e, "the link went during {what}; it resumes once the edge is connected again");
                    loop {
                        if next.changed().await.is_err() || next.borrow_and_update().is_some() {
                            break;
                        }
                    }
                }
                other => return other,
            }
        }
    }

    /// Before a task of job `job_id` starts in `dir` (owned by `user`):
    /// fetches the coordinator's newest checkpoint of the job if it is newer
    /// than the one in `dir`, and writes it there. Returns the step the task
    /// resumes from and the transfer that brought it, if any. Whatever
    /// fails, the task starts with what `dir` holds.
    pub async fn resume(
        &self,
        (task_id, job_id): (u64, u64),
        dir: &std::path::Path,
        user: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
    ) -> Option<(u64, Option<Transfer>)> {
        let here = crate::checkpoint_files::local_step(dir);
        let limit = Duration::from_secs(self.cfg.transfer_timeout_secs);
        let fetched = tidemill_runtime::clock::timeout(&SystemClock, limit, async {
            if let Some(shared) = &self.shared {
                let from = (self.node_id.as_str(), job_id);
                let got =
                    crate::checkpoint_shared::newest(shared, &self.store, from, here, self.rate());
                return Ok(got.await?);
            }
            let latest = self.resuming(("a checkpoint request", job_id, true), || {
                self.latest(task_id, job_id)
            });
            let Some(m) = latest.await? else {
                return Ok(None);
            };
            if here.is_some_and(|s| s >= m.step) {
                return Ok(None);
            }
            let fetch = self.resuming(("a checkpoint fetch", job_id, true), || {
                self.download(task_id, job_id, &m)
            });
            let (id, transfer) = fetch.await?;
            Ok::<_, MoveError>(Some((id, m, transfer)))
        })
        .await;
        let (id, m, transfer) = match fetched {
            Ok(Ok(Some(got))) => got,
            Ok(Ok(None)) => return here.map(|s| (s, None)),
            Ok(Err(e)) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, error = %e, "cannot fetch the job's checkpoint; the task starts from what this node holds");
                return here.map(|s| (s, None));
            }
            Err(_) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, limit_s = limit.as_secs(), "fetching the job's checkpoint took longer than [checkpoint] transfer_timeout_secs; the task starts from what this node holds");
                return here.map(|s| (s, None));
            }
        };
        let (store, dir_buf) = (self.store.clone(), dir.to_path_buf());
        let (written_m, written_id) = (m.clone(), id.clone());
        let written = tokio::task::spawn_blocking(move || {
            crate::checkpoint_files::materialize(
                &store,
                job_id,
                (&written_id, &written_m),
                &dir_buf,
                user,
            )
        })
        .await;
        match written {
            Ok(Ok(())) => {
                tracing::info!(node_id = %self.node_id, job_id, task_id, step = m.step, bytes = m.bytes(), "resuming from the job's checkpoint");
                Some((m.step, transfer))
            }
            Ok(Err(e)) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, error = %e, "cannot write the fetched checkpoint into the task's dir");
                crate::checkpoint_files::local_step(dir).map(|s| (s, None))
            }
            Err(e) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, error = %e, "writing the fetched checkpoint failed");
                None
            }
        }
    }

    /// After a task of job `job_id` stopped without finishing: reads the
    /// checkpoint it left in `dir` and sends it to the coordinator, within
    /// `[checkpoint] transfer_timeout_secs`. What fails is logged; the
    /// coordinator keeps its previous complete checkpoint. Unless
    /// `patient` is false (the daemon is stopping), a transfer cut by a lost
    /// link resumes on the next connection.
    pub async fn save(&self, (task_id, job_id): (u64, u64), dir: &std::path::Path, patient: bool) {
        let (store, dir_buf, max) = (self.store.clone(), dir.to_path_buf(), self.cfg.max_bytes);
        let read = tokio::task::spawn_blocking(move || {
            crate::checkpoint_files::snapshot(&store, job_id, &dir_buf, max)
        })
        .await;
        let (id, m) = match read {
            Ok(Ok(Some(found))) => found,
            Ok(Ok(None)) => {
                tracing::info!(node_id = %self.node_id, job_id, task_id, "the task left no checkpoint (no tidemill-step file); its job starts from its previous one, if any");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, error = %e, "cannot read the task's checkpoint");
                return;
            }
            Err(e) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, error = %e, "reading the task's checkpoint failed");
                return;
            }
        };
        if let Some(shared) = &self.shared {
            return self
                .share(shared, (task_id, job_id), (&id, &m), patient)
                .await;
        }
        let limit = Duration::from_secs(self.cfg.transfer_timeout_secs);
        let upload = self.resuming(("a checkpoint upload", job_id, patient), || {
            self.upload(task_id, job_id, (&id, &m))
        });
        let sent = tidemill_runtime::clock::timeout(&SystemClock, limit, upload).await;
        match sent {
            Ok(Ok(t)) => {
                tracing::info!(node_id = %self.node_id, job_id, task_id, step = m.step, bytes = t.bytes, moved = t.moved_bytes, seconds = t.seconds, "checkpoint sent to the coordinator")
            }
            Ok(Err(e)) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, step = m.step, error = %e, "cannot send the checkpoint; the coordinator keeps its previous one")
            }
            Err(_) => {
                tracing::warn!(node_id = %self.node_id, job_id, task_id, step = m.step, limit_s = limit.as_secs(), "sending the checkpoint took longer than [checkpoint] transfer_timeout_secs; the coordinator keeps its previous one")
            }
        }
    }
}

/// The outcome of one chunk sent: 1 if the coordinator found it corrupt (it
/// is sent again in the next round), an error if the stream failed.
fn chunk_sent(
    done: Option<Result<Result<CloudMsg, FrameError>, tokio::task::JoinError>>,
) -> Result<u32, MoveError> {
    let Some(done) = done else { return Ok(0) };
    match done.map_err(|_| MoveError::Unexpected("a chunk"))?? {
        CloudMsg::CheckpointChunkStored { .. } => Ok(0),
        CloudMsg::Error(e) if e.code == ErrorCode::Corrupt => Ok(1),
        other => Err(expect("a checkpoint chunk", other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_link_has_fewer_chunks_in_flight_so_each_arrives_within_the_stream_timeout() {
        assert_eq!(window(None), WINDOW);
        assert_eq!(window(Some(100e6 / 8.0)), WINDOW);
        // 2 Mb/s: 1 MB in 4 s, one chunk and a bit.
        assert_eq!(window(Some(2e6 / 8.0)), 1);
        assert_eq!(window(Some(4e6 / 8.0)), 3);
        assert_eq!(window(Some(0.0)), WINDOW, "unmeasured");
    }
}
