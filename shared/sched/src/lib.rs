//! tidemill's scheduling policies, free of I/O: a [`Snapshot`] of nodes and
//! queued jobs goes in, a [`Plan`] comes out. The live coordinator and the
//! simulator call the same functions; neither time nor randomness is read here.
#![warn(missing_docs, unreachable_pub)]

mod first_fit;
mod snapshot;

pub use first_fit::{FirstFit, first_fit};
pub use snapshot::{JobView, NodeView, Placement, Plan, Snapshot, Waiting};
