//! tidemill-edge: the daemon on each edge box. It samples utilisation (or
//! replays a trace), journals every report durably, reports over QUIC, and runs
//! the training tasks it is assigned.
#![warn(missing_docs, unreachable_pub)]

pub mod accel;
pub mod checkpoint_config;
pub mod checkpoint_files;
pub mod checkpoint_move;
pub mod checkpoint_shared;
pub mod ckprobe;
pub mod ckwatch;
pub mod cli;
pub mod config;
pub mod confine;
pub mod coordinators;
pub mod daemon;
pub mod doctor;
pub mod executor;
pub mod forecasting;
pub mod join;
pub mod journal;
pub mod link;
pub mod netns;
pub mod renewal;
pub mod replay;
pub mod sampler;
pub mod status;
pub mod taskdirs;
pub mod uids;
