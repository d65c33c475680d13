//! The ring itself: one rank's open connections to its neighbours and the
//! reduce-scatter and all-gather that run over them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;

use super::{AllreduceError, io_err};

/// One rank's place in the ring: open connections to its successor and
/// predecessor (none when it is alone).
#[derive(Debug)]
pub struct Ring {
    pub(super) rank: u32,
    pub(super) world: u32,
    pub(super) peers: Option<Peers>,
}

#[derive(Debug)]
pub(super) struct Peers {
    pub(super) next: TcpStream,
    pub(super) prev: TcpStream,
    pub(super) send_buf: Vec<u8>,
    pub(super) recv_buf: Vec<u8>,
}

impl Ring {
    /// The ring of a world of one: nothing to exchange.
    pub(super) fn alone() -> Self {
        Self {
            rank: 0,
            world: 1,
            peers: None,
        }
    }

    /// Replaces `data` on every rank by the elementwise wrapping sum over all
    /// ranks; every rank must call it with the same length.
    pub fn allreduce(&mut self, data: &mut [u32]) -> Result<(), AllreduceError> {
        let Some(peers) = &mut self.peers else {
            return Ok(());
        };
        let (rank, world) = (self.rank, self.world);
        let (r, n, len) = (rank as usize, world as usize, data.len());
        let chunk = |c: usize| c * len / n..(c + 1) * len / n;
        for s in 0..n - 1 {
            let (send, recv) = ((r + n - s) % n, (r + 2 * n - s - 1) % n);
            let got = peers.exchange(rank, world, &data[chunk(send)], chunk(recv).len())?;
            for (d, b) in data[chunk(recv)].iter_mut().zip(got.chunks_exact(4)) {
                *d = d.wrapping_add(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        }
        for s in 0..n - 1 {
            let (send, recv) = ((r + 1 + n - s) % n, (r + n - s) % n);
            let got = peers.exchange(rank, world, &data[chunk(send)], chunk(recv).len())?;
            for (d, b) in data[chunk(recv)].iter_mut().zip(got.chunks_exact(4)) {
                *d = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        Ok(())
    }
}

impl Peers {
    /// Sends `send` to the successor while receiving `recv_elems` elements
    /// from the predecessor; both at once, so a ring of full socket buffers
    /// cannot deadlock.
    fn exchange(
        &mut self,
        rank: u32,
        world: u32,
        send: &[u32],
        recv_elems: usize,
    ) -> Result<&[u8], AllreduceError> {
        self.send_buf.clear();
        self.send_buf
            .extend(send.iter().flat_map(|v| v.to_le_bytes()));
        self.recv_buf.resize(recv_elems * 4, 0);
        let (next, prev, send_buf, recv_buf) = (
            &mut self.next,
            &mut self.prev,
            &self.send_buf,
            &mut self.recv_buf,
        );
        let (sent, received) = thread::scope(|s| {
            let writer = s.spawn(move || next.write_all(send_buf));
            let received = prev.read_exact(recv_buf);
            let sent = writer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (sent, received)
        });
        let (next_rank, prev_rank) = ((rank + 1) % world, (rank + world - 1) % world);
        received.map_err(|source| io_err(rank, prev_rank, "receiving a chunk from", source))?;
        sent.map_err(|source| io_err(rank, next_rank, "sending a chunk to", source))?;
        Ok(&self.recv_buf)
    }
}
