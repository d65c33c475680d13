/// The protocol version this build speaks. Bump it when a message changes shape
/// in a way an older peer cannot decode.
pub const PROTOCOL_VERSION: u32 = 4;

/// The ALPN token for [`PROTOCOL_VERSION`]. QUIC's handshake refuses a peer that
/// offers no matching token, so mismatched versions fail before any frame is sent.
pub const ALPN: &[u8] = b"tidemill/4";

/// Reads the protocol version out of an ALPN token such as `tidemill/7`, so that an
/// error can tell the operator which version the other side speaks.
pub fn alpn_version(alpn: &[u8]) -> Option<u32> {
    std::str::from_utf8(alpn)
        .ok()?
        .strip_prefix("tidemill/")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpn_names_the_version() {
        assert_eq!(alpn_version(ALPN), Some(PROTOCOL_VERSION));
        assert_eq!(alpn_version(b"tidemill/12"), Some(12));
        assert_eq!(alpn_version(b"h3"), None);
        assert_eq!(alpn_version(b"tidemill/x"), None);
    }
}
