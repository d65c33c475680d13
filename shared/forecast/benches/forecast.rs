//! One forecast from a box's history: what each edge computes every refresh,
//! and what the simulator computes per box and refresh hour. The curve over
//! history lengths from 2 to 14 days (the default window) shows the cost is
//! linear in the history.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tidemill_forecast::{ForecastConfig, LoadSample, NodeForecaster, Resource};

const MIN: i64 = 60_000;
const DAY: i64 = 1_440 * MIN;
/// Forecasts are made at noon, Unix ms (a whole number of days after the epoch).
const NOW: i64 = 20_000 * DAY + 720 * MIN;

/// A forecaster fed `days` of 5-minute CPU samples: busy (60 %) 08:00-20:00,
/// idle (10 %) otherwise, with deterministic noise of up to ±10 points.
fn fed(days: i64) -> NodeForecaster {
    let mut f = NodeForecaster::new(ForecastConfig::default()).expect("defaults are valid");
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut t = NOW - days * DAY;
    while t < NOW {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let hour = t.rem_euclid(DAY) / (60 * MIN);
        let level = if (8..20).contains(&hour) { 60.0 } else { 10.0 };
        let noise = (state % 2_001) as f64 / 100.0 - 10.0;
        f.update(&LoadSample {
            t_ms: t,
            cpu_pct: Some(level + noise),
            mem_pct: None,
            gpu_pct: None,
        })
        .expect("samples are in order and finite");
        t += 5 * MIN;
    }
    f
}

fn forecast(c: &mut Criterion) {
    let mut g = c.benchmark_group("forecast");
    for days in [2, 7, 14] {
        let f = fed(days);
        g.bench_with_input(BenchmarkId::new("cpu", days), &f, |b, f| {
            b.iter(|| f.forecast_resource(Resource::Cpu, black_box(NOW)))
        });
        g.bench_with_input(BenchmarkId::new("node_with_windows", days), &f, |b, f| {
            b.iter(|| f.forecast(black_box(NOW)))
        });
    }
    g.finish();
}

criterion_group!(benches, forecast);
criterion_main!(benches);
