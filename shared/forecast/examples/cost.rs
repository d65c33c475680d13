//! What the forecaster costs an edge: a node forecaster fed `DAYS` days of
//! CPU, memory and GPU samples every `SAMPLE_S` seconds (as an edge samples),
//! then `REFRESHES` full refreshes (every resource, idle windows, the 48-hour
//! horizon). Prints the CPU time per refresh (user + system, from
//! /proc/self/stat, in clock ticks of 10 ms, averaged over the refreshes) and
//! the process's peak resident set (VmHWM) after feeding and after forecasting.
//!
//! `cargo run --release -p tidemill-forecast --example cost [DAYS] [REFRESHES]`
//! (defaults 14 and 200). Linux only: it reads /proc.

use std::hint::black_box;

use tidemill_forecast::{ForecastConfig, LoadSample, NodeForecaster};

/// Seconds between samples: the edge's default sample interval.
const SAMPLE_S: i64 = 10;
/// Clock ticks per second of /proc/self/stat (USER_HZ, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// user + system CPU of this process so far, seconds.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc/self/stat");
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / TICKS_PER_S
}

/// A line of /proc/self/status, e.g. `VmHWM:     7208 kB`.
fn status(key: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .expect("Linux /proc/self/status")
        .lines()
        .find(|l| l.starts_with(key))
        .map_or_else(|| format!("{key} unknown"), str::to_string)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let days: i64 = args
        .next()
        .map_or(14, |a| a.parse().expect("DAYS is a number"));
    let refreshes: u32 = args
        .next()
        .map_or(200, |a| a.parse().expect("REFRESHES is a number"));
    let cfg = ForecastConfig::default();
    let mut node = NodeForecaster::new(cfg.clone()).expect("defaults are valid");
    let day_ms = 86_400_000;
    let now = 20_000 * day_ms + 12 * 3_600_000;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut t = now - days * day_ms;
    while t < now {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let hour = t.rem_euclid(day_ms) / 3_600_000;
        let weekend = (t.div_euclid(day_ms) % 7) >= 5;
        let level = if (8..20).contains(&hour) && !weekend {
            60.0
        } else {
            10.0
        };
        let noise = (state % 2_001) as f64 / 100.0 - 10.0;
        node.update(&LoadSample {
            t_ms: t,
            cpu_pct: Some(level + noise),
            mem_pct: Some(40.0 + noise / 2.0),
            gpu_pct: Some(level / 2.0 + noise),
        })
        .expect("samples are in order and finite");
        t += SAMPLE_S * 1_000;
    }
    println!("fed {days} days of 3 resources every {SAMPLE_S} s");
    println!("after feeding: {}", status("VmHWM"));
    let before = cpu_s();
    for k in 0..refreshes {
        black_box(node.forecast(black_box(now + i64::from(k) * 300_000)));
    }
    let per = (cpu_s() - before) / f64::from(refreshes);
    println!(
        "refresh (3 resources, horizon {} h): {:.2} ms CPU each, over {refreshes}",
        cfg.horizon_s / 3_600,
        per * 1e3
    );
    println!("after forecasting: {}", status("VmHWM"));
}
