//! tidemill-cloud: the coordinator. It accepts edges over QUIC, keeps durable
//! state in SQLite, schedules jobs onto idle capacity, and serves the operator
//! API that its own CLI uses.
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
pub mod api;
pub mod api_ops;
pub mod api_trust;
pub mod auth;
pub mod budget;
pub mod checkpoints;
pub mod claims;
pub mod cli;
pub mod client;
pub mod config;
pub mod conn_limit;
pub mod coordinator;
mod dispatch;
pub mod doctor;
pub mod duplicate;
#[doc(hidden)]
pub mod fuzzing;
pub mod group_commit;
pub mod http;
pub mod ingest;
pub mod job;
pub mod leadership;
pub mod lifecycle;
pub mod local_admin;
pub mod metrics;
pub mod owed_listener;
pub mod probing;
pub mod rendezvous;
pub mod report_checks;
pub mod rotation;
pub mod round;
pub mod server;
pub mod store;
pub mod trust;
pub mod visibility;
pub mod world;
