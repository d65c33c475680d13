//! Frames: a 4-byte big-endian payload length, then a MessagePack payload.
//!
//! The length is checked against [`MAX_FRAME_LEN`] before any payload is read, so
//! a peer cannot make the reader allocate more than the cap.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest payload a frame may carry: 1 MiB. A batch of samples or a forecast
/// is far smaller; anything bigger is a bug or an attack.
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// Bytes in the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why a frame could not be built or read.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The frame's declared length exceeds the cap; the stream must be abandoned,
    /// because the rest of it cannot be framed.
    #[error("frame of {len} bytes exceeds the {max}-byte cap; the peer must send smaller batches")]
    Oversized {
        /// The declared or encoded payload length.
        len: usize,
        /// The cap, [`MAX_FRAME_LEN`].
        max: usize,
    },
    /// The payload is not a valid message of the expected type, usually a peer of
    /// another version or a corrupted stream.
    #[error("malformed frame: {0}")]
    Malformed(#[from] rmp_serde::decode::Error),
    /// The message could not be serialised; this is a bug in the sender.
    #[error("cannot encode message: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
}

/// Serialises `msg` into a complete frame (header and payload).
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![0u8; HEADER_LEN];
    rmp_serde::encode::write_named(&mut out, msg)?;
    let len = out.len() - HEADER_LEN;
    if len > MAX_FRAME_LEN {
        return Err(CodecError::Oversized {
            len,
            max: MAX_FRAME_LEN,
        });
    }
    out[..HEADER_LEN].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Reads the payload length from a frame header, refusing lengths over the cap.
pub fn payload_len(header: [u8; HEADER_LEN]) -> Result<usize, CodecError> {
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_FRAME_LEN {
        return Err(CodecError::Oversized {
            len,
            max: MAX_FRAME_LEN,
        });
    }
    Ok(len)
}

/// How deeply a payload may nest. The protocol's own messages nest a dozen
/// levels at most; a hostile payload of nested arrays would otherwise recurse
/// once per byte and overflow the stack (found by the `edge_msg` fuzz target).
pub(crate) const MAX_DEPTH: usize = 64;

/// Deserialises a payload (without its header).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, CodecError> {
    let mut de = rmp_serde::Deserializer::from_read_ref(payload);
    de.set_max_depth(MAX_DEPTH);
    Ok(T::deserialize(&mut de)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        // 100 000 one-element arrays inside each other.
        let mut payload = vec![0x91u8; 100_000];
        payload.push(0xc0);
        assert!(decode::<crate::EdgeMsg>(&payload).is_err());
        let mut map = [0x81u8, 0xa1, b'x'].repeat(30_000);
        map.push(0xc0);
        assert!(decode::<crate::CloudMsg>(&map).is_err());
    }

    use super::*;
    use crate::{EdgeMsg, Report, ReportBody, Sample};
    use proptest::prelude::*;

    fn split(frame: &[u8]) -> ([u8; HEADER_LEN], &[u8]) {
        (
            frame[..HEADER_LEN].try_into().unwrap(),
            &frame[HEADER_LEN..],
        )
    }

    fn report(n: usize) -> EdgeMsg {
        let sample = Sample {
            t_ms: 1_700_000_000_000,
            cpu_pct: 12.5,
            per_core_pct: vec![10.0, 15.0],
            mem_pct: 40.0,
            net_rx_bytes: 10,
            net_tx_bytes: 20,
            gpu_pct: None,
        };
        EdgeMsg::Reports(vec![Report {
            seq: 7,
            body: ReportBody::Samples(vec![sample; n]),
        }])
    }

    #[test]
    fn round_trips_a_report() {
        let msg = report(3);
        let frame = encode(&msg).unwrap();
        let (header, payload) = split(&frame);
        assert_eq!(payload_len(header).unwrap(), payload.len());
        assert_eq!(decode::<EdgeMsg>(payload).unwrap(), msg);
    }

    #[test]
    fn refuses_to_encode_over_the_cap() {
        let err = encode(&report(40_000)).unwrap_err();
        assert!(matches!(err, CodecError::Oversized { len, .. } if len > MAX_FRAME_LEN));
    }

    #[test]
    fn refuses_an_oversized_header() {
        let header = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        assert!(matches!(
            payload_len(header),
            Err(CodecError::Oversized { .. })
        ));
        assert_eq!(
            payload_len((MAX_FRAME_LEN as u32).to_be_bytes()).unwrap(),
            MAX_FRAME_LEN
        );
    }

    #[test]
    fn truncated_payload_is_malformed() {
        let frame = encode(&report(2)).unwrap();
        let (_, payload) = split(&frame);
        let err = decode::<EdgeMsg>(&payload[..payload.len() / 2]).unwrap_err();
        assert!(matches!(err, CodecError::Malformed(_)), "{err}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<EdgeMsg>(&bytes);
            let _ = decode::<crate::CloudMsg>(&bytes);
        }
    }
}
