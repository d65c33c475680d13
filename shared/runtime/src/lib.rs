//! The I/O layer that tidemill's daemons share. Protocol logic lives in
//! `tidemill-proto`; this crate drives it over QUIC, reads the clock, and loads
//! configuration.
#![warn(missing_docs, unreachable_pub)]

pub mod backoff;
pub mod checkpoint;
pub mod clock;
pub mod config_file;
pub mod datadir;
pub mod doctor;
pub mod frames;
pub mod identity;
pub mod lifecycle;
pub mod metrics;
pub mod notify;
pub mod probe;
pub mod quic;
pub mod secrets;
pub mod sqlite;
pub mod tls;
