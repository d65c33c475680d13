//! Entry points for the fuzz targets (`tests/fuzz`) and for replaying their
//! corpus in `cargo test`. Each takes any bytes and must neither panic nor
//! allocate without bound; a message that decodes must encode again to the
//! bytes it decodes from once more.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{HEADER_LEN, decode, encode, payload_len};
use crate::msg::{CloudMsg, EdgeMsg};

/// A frame as it arrives on a stream: the length header, then a payload
/// decoded as either side's message.
pub fn frame(data: &[u8]) {
    let Some((header, rest)) = data.split_first_chunk::<HEADER_LEN>() else {
        return;
    };
    if let Some(payload) = payload_len(*header).ok().and_then(|len| rest.get(..len)) {
        round_trip::<EdgeMsg>(payload);
        round_trip::<CloudMsg>(payload);
    }
}

/// A payload decoded as an edge's message.
pub fn edge_msg(data: &[u8]) {
    round_trip::<EdgeMsg>(data);
}

/// A payload decoded as the coordinator's message.
pub fn cloud_msg(data: &[u8]) {
    round_trip::<CloudMsg>(data);
}

/// Decodes `payload` as `T`; if that works, the encoding of what it decoded
/// must decode to something that encodes the same.
fn round_trip<T: Serialize + DeserializeOwned>(payload: &[u8]) {
    let Ok(msg) = decode::<T>(payload) else {
        return;
    };
    let Ok(once) = encode(&msg) else { return };
    let again: T = decode(&once[HEADER_LEN..]).expect("a re-encoded message decodes");
    let twice = encode(&again).expect("a decoded message encodes");
    assert_eq!(once, twice, "a message survives a round trip");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_bytes_are_safe(data in proptest::collection::vec(any::<u8>(), 0..2_048)) {
            frame(&data);
            edge_msg(&data);
            cloud_msg(&data);
        }
    }

    #[test]
    fn a_valid_message_round_trips() {
        let msg = EdgeMsg::CommandAck { task_id: 7 };
        let bytes = encode(&msg).unwrap();
        frame(&bytes);
        edge_msg(&bytes[HEADER_LEN..]);
    }
}
