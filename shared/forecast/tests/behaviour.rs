//! Behaviour of the forecaster on synthetic series with known answers.

use proptest::prelude::*;
use tidemill_forecast::{
    DailyCycle, ForecastConfig, LoadSample, Method, NodeForecaster, Quantiles, Resource,
    SeriesForecaster,
};

const MIN_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// Deterministic white noise in [-1, 1] (SplitMix64 of the index, so tests need
/// no RNG crate).
fn noise(i: i64) -> f64 {
    let mut x = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

/// Utilisation of a tidal node: 15 % at 03:00, 65 % at 15:00, sine in between.
fn tide(t_ms: i64) -> f64 {
    let phase = (t_ms.rem_euclid(DAY_MS) as f64 / DAY_MS as f64 - 0.625) * std::f64::consts::TAU;
    40.0 + 25.0 * phase.cos()
}

fn fed(points: impl IntoIterator<Item = (i64, f64)>) -> SeriesForecaster {
    let mut f = SeriesForecaster::new(Resource::Cpu, ForecastConfig::default()).unwrap();
    for (t, v) in points {
        f.update(t, v).unwrap();
    }
    f
}

fn every_5min(days: i64, mut value: impl FnMut(i64, i64) -> f64) -> Vec<(i64, f64)> {
    (0..days * 288)
        .map(|i| (i * 5 * MIN_MS, value(i, i * 5 * MIN_MS)))
        .collect()
}

fn slots(f: &SeriesForecaster, now: i64) -> Vec<Quantiles> {
    f.forecast(Method::Tidemill, now)
        .slots
        .into_iter()
        .map(Option::unwrap)
        .collect()
}

#[test]
fn constant_series_forecasts_the_constant_without_a_cycle() {
    let f = fed(every_5min(4, |_, _| 12.5));
    let fc = f.forecast(Method::Tidemill, 4 * DAY_MS);
    assert_eq!(fc.cycle.daily_cycle, DailyCycle::Absent);
    for q in fc.slots.iter().map(|q| q.unwrap()) {
        assert!(
            (q.p10 - 12.5).abs() < 1e-9 && (q.p90 - 12.5).abs() < 1e-9,
            "{q:?}"
        );
    }
}

#[test]
fn noisy_sine_recovers_the_daily_period_and_converges() {
    let points = every_5min(14, |i, t| tide(t) + 8.0 * noise(i));
    let mae_after = |days: i64| {
        let now = days * DAY_MS;
        let f = fed(points.iter().copied().filter(|p| p.0 < now));
        let fc = f.forecast(Method::Tidemill, now);
        assert_eq!(
            fc.cycle.daily_cycle,
            DailyCycle::Present,
            "after {days} days"
        );
        let qs: Vec<Quantiles> = fc.slots.into_iter().map(Option::unwrap).collect();
        let mae = qs
            .iter()
            .enumerate()
            .map(|(i, q)| (q.p50 - tide(now + i as i64 * 900_000 + 450_000)).abs())
            .sum::<f64>()
            / qs.len() as f64;
        let width = qs.iter().map(|q| q.p90 - q.p10).sum::<f64>() / qs.len() as f64;
        // The busiest slot of the first forecast day is within an hour of
        // 15:00 (the 48-hour horizon holds a second, equally busy, day).
        let peak = qs[..96]
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.p50.total_cmp(&b.1.p50))
            .unwrap()
            .0;
        assert!(
            (peak as i64 * 15 - 15 * 60).abs() <= 60,
            "peak at slot {peak}"
        );
        (mae, width)
    };
    let (mae2, width2) = mae_after(2);
    let (mae13, width13) = mae_after(13);
    assert!(mae13 < 2.0, "MAE after 13 days: {mae13}");
    assert!(mae13 < mae2, "{mae13} vs {mae2}");
    assert!(
        width13 < width2,
        "intervals must tighten: {width13} vs {width2}"
    );
}

#[test]
fn series_without_a_cycle_is_reported_as_such() {
    // White noise and a random walk, both with no daily structure.
    let white = every_5min(7, |i, _| 40.0 + 15.0 * noise(i));
    let mut level = 40.0;
    let walk: Vec<(i64, f64)> = every_5min(7, |i, _| {
        level = (level + 2.0 * noise(i)).clamp(5.0, 95.0);
        level
    });
    for points in [white, walk] {
        let fc = fed(points).forecast(Method::Tidemill, 7 * DAY_MS);
        assert_eq!(fc.cycle.daily_cycle, DailyCycle::Absent, "{:?}", fc.cycle);
        assert!(fc.cycle.strength.unwrap() < 0.1);
    }
}

#[test]
fn too_little_history_is_unknown_and_wide() {
    let f = fed(every_5min(1, |i, t| tide(t) + 3.0 * noise(i))
        .into_iter()
        .take(100));
    let fc = f.forecast(Method::Tidemill, 100 * 5 * MIN_MS);
    assert_eq!(fc.cycle.daily_cycle, DailyCycle::Unknown);
    let long = slots(
        &fed(every_5min(10, |i, t| tide(t) + 3.0 * noise(i))),
        10 * DAY_MS,
    );
    let short: Vec<Quantiles> = fc.slots.into_iter().map(Option::unwrap).collect();
    let width = |qs: &[Quantiles]| qs.iter().map(|q| q.p90 - q.p10).sum::<f64>() / qs.len() as f64;
    assert!(
        width(&short) > 2.0 * width(&long),
        "{} vs {}",
        width(&short),
        width(&long)
    );
}

#[test]
fn step_change_is_followed_at_short_leads() {
    // Flat 20 % for three days, then 70 % for the last three hours.
    let points = every_5min(3, |_, t| {
        if t >= 3 * DAY_MS - 3 * HOUR_MS {
            70.0
        } else {
            20.0
        }
    });
    let qs = slots(&fed(points), 3 * DAY_MS);
    assert!(qs[0].p50 > 60.0, "first slot {:?}", qs[0]);
    assert!(qs[0].p10 <= 70.0 && 70.0 <= qs[0].p90 + 1e-9);
}

#[test]
fn gaps_are_bridged_briefly_and_forecasts_survive_them() {
    // Five days of tide with a 10-hour hole on day 3 and no data in the last 2 h.
    let points: Vec<(i64, f64)> = every_5min(5, |_, t| tide(t))
        .into_iter()
        .filter(|p| !(2 * DAY_MS + 3 * HOUR_MS..2 * DAY_MS + 13 * HOUR_MS).contains(&p.0))
        .filter(|p| p.0 < 5 * DAY_MS - 2 * HOUR_MS)
        .collect();
    let f = fed(points);
    let fc = f.forecast(Method::Tidemill, 5 * DAY_MS);
    assert_eq!(fc.cycle.daily_cycle, DailyCycle::Present);
    let qs: Vec<Quantiles> = fc.slots.into_iter().map(Option::unwrap).collect();
    let mae = qs
        .iter()
        .enumerate()
        .map(|(i, q)| (q.p50 - tide(5 * DAY_MS + i as i64 * 900_000 + 450_000)).abs())
        .sum::<f64>()
        / qs.len() as f64;
    assert!(mae < 3.0, "MAE {mae}");
    // Yesterday's slot is missing 2 h back, so the baseline still has an answer.
    assert!(
        f.forecast(Method::SameSlotYesterday, 5 * DAY_MS)
            .slots
            .iter()
            .all(Option::is_some)
    );
}

#[test]
fn samples_at_or_after_now_are_not_read() {
    let points = every_5min(3, |i, t| tide(t) + 5.0 * noise(i));
    let now = 2 * DAY_MS + 7 * HOUR_MS;
    let past_only = fed(points.iter().copied().filter(|p| p.0 < now));
    let everything = fed(points
        .iter()
        .copied()
        .map(|(t, v)| if t >= now { (t, 99.0) } else { (t, v) }));
    assert_eq!(
        past_only.forecast(Method::Tidemill, now),
        everything.forecast(Method::Tidemill, now)
    );
}

#[test]
fn too_old_and_non_finite_samples_are_typed_errors() {
    let mut f = fed([(20 * DAY_MS, 5.0)]);
    let err = f.update(0, 5.0).unwrap_err();
    assert!(
        err.to_string().contains("older than the oldest kept slot"),
        "{err}"
    );
    assert!(
        f.update(10 * DAY_MS, f64::NAN)
            .unwrap_err()
            .to_string()
            .contains("not a finite number")
    );
}

#[test]
fn node_idle_windows_cover_the_quiet_night_with_confidence() {
    let mut node = NodeForecaster::new(ForecastConfig::default()).unwrap();
    for (i, (t, v)) in every_5min(7, |i, t| tide(t) + 3.0 * noise(i))
        .into_iter()
        .enumerate()
    {
        let gpu = (i % 2 == 0).then_some(v / 2.0);
        node.update(&LoadSample {
            t_ms: t,
            cpu_pct: Some(v),
            mem_pct: Some(80.0),
            gpu_pct: gpu,
        })
        .unwrap();
    }
    let fc = node.forecast(7 * DAY_MS);
    assert_eq!(fc.resources.len(), 3);
    let summary = fc.summary();
    let next = summary.next_idle.expect("the night is idle");
    assert!(next.confidence >= 0.9 && next.confidence <= 1.0);
    // tide < 30 % for about 7.4 h a day (around 03:00); memory is not judged.
    assert!(
        (4.0..10.0).contains(&summary.idle_hours_next_24h),
        "{summary:?}"
    );
    assert_eq!(summary.daily_cycle, Some(DailyCycle::Present));
    for w in &fc.idle_windows {
        let mid_hour = ((w.start_ms + w.end_ms) / 2).rem_euclid(DAY_MS) / HOUR_MS;
        assert!(!(9..21).contains(&mid_hour), "window at {mid_hour}h");
    }
    let json = serde_json::to_string(&fc).unwrap();
    let back: tidemill_forecast::NodeForecast = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (back.idle_windows.len(), back.resources.len()),
        (fc.idle_windows.len(), 3)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn quantiles_are_ordered_bounded_and_order_independent(
        raw in prop::collection::vec((0i64..4 * DAY_MS, -20.0f64..130.0), 1..400),
        method in prop::sample::select(Method::ALL.to_vec()),
    ) {
        let mut shuffled = raw.clone();
        shuffled.reverse();
        shuffled.rotate_left(raw.len() / 3);
        let now = 4 * DAY_MS;
        let a = fed(raw).forecast(method, now);
        let b = fed(shuffled).forecast(method, now);
        // The default horizon, 48 h of 15-minute slots.
        prop_assert_eq!(a.slots.len(), 192);
        for q in a.slots.iter().flatten() {
            prop_assert!(0.0 <= q.p10 && q.p10 <= q.p50 && q.p50 <= q.p90 && q.p90 <= 100.0, "{:?}", q);
        }
        for (x, y) in a.slots.iter().zip(&b.slots) {
            match (x, y) {
                (Some(x), Some(y)) => {
                    prop_assert!((x.p10 - y.p10).abs() < 1e-6 && (x.p50 - y.p50).abs() < 1e-6 && (x.p90 - y.p90).abs() < 1e-6);
                }
                (None, None) => {}
                _ => prop_assert!(false, "availability differs"),
            }
        }
        prop_assert_eq!(a.cycle.daily_cycle, b.cycle.daily_cycle);
    }

    #[test]
    fn constant_levels_are_forecast_exactly(level in 0.0f64..100.0, days in 2i64..6) {
        let qs = slots(&fed(every_5min(days, |_, _| level)), days * DAY_MS);
        for q in qs {
            prop_assert!((q.p50 - level).abs() < 1e-6 && (q.p90 - q.p10).abs() < 1e-6);
        }
    }
}
