//! tidemill's wire protocol, free of I/O in the manner of quinn-proto: the message
//! types that edges and the coordinator exchange, and the size-capped frames that
//! carry them. Drivers in `tidemill-runtime` move these frames over QUIC streams.
#![warn(missing_docs, unreachable_pub)]

mod checkpoint;
mod codec;
mod env;
mod msg;
mod version;

#[doc(hidden)]
pub mod fuzzing;

pub use checkpoint::{
    CHUNK_BYTES, ChunkRef, MAX_CHUNKS, MAX_FILES, MAX_NAME, Manifest, ManifestError, ManifestFile,
    STEP_FILE, valid_name,
};
pub use codec::{CodecError, HEADER_LEN, MAX_FRAME_LEN, decode, encode, payload_len};
pub use env::{COORDINATOR_SET_ENV, EDGE_SET_ENV, is_reserved_env};
pub use msg::{
    Accelerator, AcceleratorKind, CLOUD_PEER, Capabilities, CheckpointState, CloudMsg, Command,
    EdgeMsg, ErrorCode, Hello, Issued, Join, LinkSample, MAX_SITE, Peer, Report, ReportBody,
    SHARED_STORE_PEER, Sample, TaskAssignment, TaskEvent, TaskProgress, TaskResume, TaskStatus,
    TrainArrival, Transfer, Welcome, WireError, site_problem,
};
pub use tidemill_forecast::NodeForecast;
pub use version::{ALPN, PROTOCOL_VERSION, alpn_version};
