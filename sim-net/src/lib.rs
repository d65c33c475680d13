//! tidemill's simulator: synthetic tidal traces, the forecaster backtest, and a
//! demo cluster on loopback.
#![warn(missing_docs, unreachable_pub)]

pub mod allreduce;
pub mod backtest;
pub mod cli;
pub mod cold_start;
pub mod demo;
mod edge_link;
pub mod forecast_eval;
pub mod gen_trace;
mod line_chart;
pub mod plot;
pub mod simulate;
pub mod swarm;
pub mod sweep;
pub mod trace;
pub mod twin;
pub mod wan;
