//! Moving [`tidemill_proto`] frames over QUIC streams.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tidemill_proto::{CodecError, HEADER_LEN, MAX_FRAME_LEN, decode, encode, payload_len};

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame itself is bad: oversized or undecodable.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The stream ended inside a frame.
    #[error("stream ended {got} bytes into a {want}-byte frame; the sender was cut off or buggy")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes the frame needed.
        want: usize,
    },
    /// The peer finished the stream without answering.
    #[error("the peer closed the stream without a reply")]
    NoReply,
    /// Reading failed at the QUIC layer.
    #[error("stream read failed: {0}")]
    Read(#[from] quinn::ReadError),
    /// Writing failed at the QUIC layer.
    #[error("stream write failed: {0}")]
    Write(#[from] quinn::WriteError),
    /// The stream was already closed.
    #[error("stream closed: {0}")]
    Closed(#[from] quinn::ClosedStream),
    /// No connection could be started.
    #[error("cannot connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// The connection is gone.
    #[error("connection lost: {0}")]
    Connection(#[from] quinn::ConnectionError),
}

async fn read_exact(recv: &mut quinn::RecvStream, buf: &mut [u8]) -> Result<bool, FrameError> {
    match recv.read_exact(buf).await {
        Ok(()) => Ok(true),
        Err(quinn::ReadExactError::FinishedEarly(0)) => Ok(false),
        Err(quinn::ReadExactError::FinishedEarly(got)) => Err(FrameError::Truncated {
            got,
            want: buf.len(),
        }),
        Err(quinn::ReadExactError::ReadError(e)) => Err(e.into()),
    }
}

/// Reads one message; `Ok(None)` when the stream ended cleanly before a frame.
pub async fn read_msg<T: DeserializeOwned>(
    recv: &mut quinn::RecvStream,
) -> Result<Option<T>, FrameError> {
    Ok(read_msg_sized(recv).await?.map(|(msg, _)| msg))
}

/// Reads one message with the bytes its frame took on the stream, for the
/// coordinator's traffic counters.
pub async fn read_msg_sized<T: DeserializeOwned>(
    recv: &mut quinn::RecvStream,
) -> Result<Option<(T, usize)>, FrameError> {
    let Some(len) = read_header(recv, MAX_FRAME_LEN).await? else {
        return Ok(None);
    };
    read_payload(recv, len).await.map(Some)
}

/// Reads a frame's header; `Ok(None)` when the stream ended cleanly before
/// one. Returns the payload length it declares, refused as oversized above
/// `max_len` (at most [`MAX_FRAME_LEN`]), so that a reader can cap frames
/// by what the peer may send (a peer still joining only sends small ones).
pub async fn read_header(
    recv: &mut quinn::RecvStream,
    max_len: usize,
) -> Result<Option<usize>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    if !read_exact(recv, &mut header).await? {
        return Ok(None);
    }
    let len = payload_len(header)?;
    if len > max_len {
        return Err(CodecError::Oversized { len, max: max_len }.into());
    }
    Ok(Some(len))
}

/// Bytes read from a stream at a time: a frame's payload grows as its bytes
/// arrive, never allocated whole from the length its header declares.
const CHUNK: usize = 64 * 1024;

/// Reads and decodes the `len`-byte payload after a header; returns the
/// message and the bytes its frame took.
pub async fn read_payload<T: DeserializeOwned>(
    recv: &mut quinn::RecvStream,
    len: usize,
) -> Result<(T, usize), FrameError> {
    let mut payload = Vec::with_capacity(len.min(CHUNK));
    while payload.len() < len {
        let want = (len - payload.len()).min(CHUNK);
        match recv.read_chunk(want, true).await? {
            Some(chunk) => payload.extend_from_slice(&chunk.bytes),
            None => {
                return Err(FrameError::Truncated {
                    got: HEADER_LEN + payload.len(),
                    want: HEADER_LEN + len,
                });
            }
        }
    }
    Ok((decode(&payload)?, HEADER_LEN + len))
}

/// Writes one message; returns the bytes its frame took.
pub async fn write_msg<T: Serialize>(
    send: &mut quinn::SendStream,
    msg: &T,
) -> Result<usize, FrameError> {
    let frame = encode(msg)?;
    send.write_all(&frame).await?;
    Ok(frame.len())
}

/// Sends `msg` on a new bidirectional stream and waits for the one reply.
pub async fn request<Req: Serialize, Resp: DeserializeOwned>(
    conn: &quinn::Connection,
    msg: &Req,
) -> Result<Resp, FrameError> {
    Ok(request_sized(conn, msg).await?.0)
}

/// [`request`], with the bytes sent and received, for traffic counters.
pub async fn request_sized<Req: Serialize, Resp: DeserializeOwned>(
    conn: &quinn::Connection,
    msg: &Req,
) -> Result<(Resp, usize, usize), FrameError> {
    let (mut send, mut recv) = conn.open_bi().await?;
    let sent = write_msg(&mut send, msg).await?;
    send.finish()?;
    let (reply, received) = read_msg_sized(&mut recv)
        .await?
        .ok_or(FrameError::NoReply)?;
    Ok((reply, sent, received))
}
