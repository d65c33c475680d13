//! How far the coordinator trusts what an edge says (`[trust]`): the bounds
//! its reports are range-checked against, how long an acknowledged
//! assignment may take to start, and how much of a forecast's confidence
//! its history earns.
//!
//! The forecast rule: a forecast is trusted only as far as its own history
//! goes. Each idle window's confidence is capped at
//! `c_max = min(1, h / H)`, where `h` (hours) is the history the forecast
//! states it was built on (its best-observed resource) and `H` (hours) is
//! `forecast_full_trust_hours`; a forecast that states no history (`h` = 0,
//! or none given) offers no window at all. The coordinator cannot check `h`
//! against the edge's own samples (a replaying or re-joined edge has history
//! the coordinator never saw), so an edge that lies about its history gets
//! planned work: what keeps other tenants' secrets from such an edge is a
//! label only an admin sets (`requires`).
//!
//! Two exceptions, for a new box:
//! - **A peers' prior.** Where the coordinator sent the node a prior (its
//!   site's, class's or fleet's tide: `store::priors`), the parts of its
//!   windows that the prior itself shows idle (sure windows on the prior's
//!   P90, likely ones on its P50, by the same rule as any forecast) are
//!   capped at `max(c_max, c_prior)` instead, `c_prior` being the prior's own
//!   confidence there: that trust rests on the peers' history, not the
//!   node's word.
//! - **Idle now.** A node whose forecast earns nothing keeps the likely grade
//!   for the slot in progress while it reports itself idle, so a fresh
//!   install takes best-effort and meet-deadline work; promises never rest
//!   on it.

use serde::Deserialize;
use tidemill_forecast::{Prior, Resource};
use tidemill_proto::NodeForecast;
use tidemill_sched::{EdgeAvailability, Window};

use crate::report_checks::ReportBounds;

/// Longest node label, in bytes.
pub const MAX_LABEL: usize = 64;

/// Why `label` cannot be a node label, if it cannot: labels are 1 to
/// [`MAX_LABEL`] lower-case letters, digits, '.', '_' or '-'.
pub fn label_problem(label: &str) -> Option<String> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
    (label.is_empty() || label.len() > MAX_LABEL || !label.chars().all(ok)).then(|| {
        format!("label {label:?} is invalid: use 1 to {MAX_LABEL} lower-case letters, digits, '.', '_' or '-', e.g. \"trusted\"")
    })
}

/// `[trust]`: every key has a default, so the section may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustConfig {
    /// Seconds an edge's timestamps may be ahead of the coordinator's clock.
    pub report_skew_secs: u64,
    /// Seconds an acknowledged assignment has to start before it is taken back.
    pub start_timeout_secs: u64,
    /// Assignments not started after which a node is cordoned.
    pub cordon_after_unstarted: u32,
    /// Hours of history that earn a forecast its full confidence.
    pub forecast_full_trust_hours: f64,
}

impl Default for TrustConfig {
    fn default() -> Self {
        TrustConfig {
            report_skew_secs: 300,
            start_timeout_secs: 120,
            cordon_after_unstarted: 3,
            forecast_full_trust_hours: 48.0,
        }
    }
}

impl TrustConfig {
    /// Why the section is invalid, if it is: (key, value, rule).
    pub fn invalid(&self) -> Option<(&'static str, String, &'static str)> {
        if self.start_timeout_secs == 0 {
            Some(("start_timeout_secs", "0".into(), "must be at least 1"))
        } else if self.cordon_after_unstarted == 0 {
            Some(("cordon_after_unstarted", "0".into(), "must be at least 1"))
        } else if !(self.forecast_full_trust_hours.is_finite()
            && self.forecast_full_trust_hours > 0.0)
        {
            Some((
                "forecast_full_trust_hours",
                self.forecast_full_trust_hours.to_string(),
                "must be a number of hours above 0",
            ))
        } else {
            None
        }
    }

    /// The report bounds on a clock running `speed` times real time that
    /// keeps `retention_hours` of history: the skew is wall time, so it
    /// scales with the clock.
    pub fn report_bounds(&self, speed: f64, retention_hours: u64) -> ReportBounds {
        ReportBounds {
            skew_ms: (self.report_skew_secs as f64 * 1000.0 * speed) as i64,
            max_age_ms: retention_hours as i64 * 3_600_000,
        }
    }

    /// The start timeout in ms of a clock running `speed` times real time.
    pub fn start_timeout_ms(&self, speed: f64) -> i64 {
        (self.start_timeout_secs as f64 * 1000.0 * speed) as i64
    }

    /// `availability` with its windows' confidence capped by the history
    /// `forecast` stands on, and by the `prior` the node was sent, at
    /// `now_ms`; see the module docs for the rules.
    pub fn cap(
        &self,
        mut availability: EdgeAvailability,
        forecast: Option<&NodeForecast>,
        prior: Option<&Prior>,
        now_ms: i64,
    ) -> EdgeAvailability {
        let stated_h = forecast
            .and_then(NodeForecast::history)
            .map_or(0.0, |h| h.observed_h);
        let trust = (stated_h / self.forecast_full_trust_hours).clamp(0.0, 1.0);
        let backing = forecast
            .zip(prior)
            .and_then(|(f, p)| prior_availability(f, p, now_ms));
        let capped = |windows: &[Window], by: Option<&[Window]>| -> Vec<Window> {
            let mut out: Vec<Window> = windows
                .iter()
                .filter(|_| trust > 0.0)
                .map(|w| Window {
                    confidence: w.confidence.min(trust),
                    ..*w
                })
                .collect();
            if let Some(by) = by {
                out = overlay(&out, &intersect(windows, by));
            }
            out
        };
        let sure = capped(
            &availability.windows,
            backing.as_ref().map(|b| b.windows.as_slice()),
        );
        let likely = if availability.likely.is_empty() {
            Vec::new()
        } else if trust > 0.0 {
            std::mem::take(&mut availability.likely)
        } else {
            let mut kept = backing
                .as_ref()
                .map(|b| intersect(&availability.likely, b.likely_windows()))
                .unwrap_or_default();
            if let Some(f) = forecast {
                let slot_ms = i64::from(f.slot_len_s).max(1) * 1000;
                let slot_end =
                    f.start_ms + ((now_ms - f.start_ms).div_euclid(slot_ms) + 1) * slot_ms;
                let present = [Window {
                    start_ms: now_ms.min(slot_end - slot_ms),
                    end_ms: slot_end,
                    confidence: 1.0,
                }];
                kept = overlay(&kept, &intersect(&availability.likely, &present));
            }
            kept
        };
        availability.windows = sure;
        // An empty likely grade means "the same as the sure one": a node
        // with sure windows and nothing likely keeps its sure windows alone.
        availability.likely = if likely.is_empty() && !availability.windows.is_empty() {
            availability.windows.clone()
        } else {
            likely
        };
        availability
    }
}

/// The prior's own windows on `forecast`'s slot grid, by the rule every
/// forecast goes through ([`EdgeAvailability::from_forecast`]), over the
/// idle resources the forecast reports; `None` when the prior lacks one.
fn prior_availability(
    forecast: &NodeForecast,
    prior: &Prior,
    now_ms: i64,
) -> Option<EdgeAvailability> {
    let slot_ms = i64::from(forecast.slot_len_s) * 1000;
    let mut slices = Vec::new();
    for r in [Resource::Cpu, Resource::Gpu] {
        let Some(own) = forecast.resource(r) else {
            continue;
        };
        let p = prior.resource(r)?;
        slices.push(
            (0..own.slots.len())
                .map(|k| p.at(forecast.start_ms + k as i64 * slot_ms, prior.slot_len_s))
                .collect::<Vec<_>>(),
        );
    }
    let refs: Vec<&[_]> = slices.iter().map(Vec::as_slice).collect();
    (!refs.is_empty()).then(|| {
        EdgeAvailability::from_forecast(
            forecast.start_ms,
            slot_ms,
            &refs,
            forecast.idle_threshold_pct,
            now_ms,
            None,
        )
    })
}

/// The parts of `windows` inside some window of `by`, each with the smaller
/// of the two confidences.
fn intersect(windows: &[Window], by: &[Window]) -> Vec<Window> {
    let mut out = Vec::new();
    for w in windows {
        for b in by {
            let (start_ms, end_ms) = (w.start_ms.max(b.start_ms), w.end_ms.min(b.end_ms));
            if start_ms < end_ms {
                out.push(Window {
                    start_ms,
                    end_ms,
                    confidence: w.confidence.min(b.confidence),
                });
            }
        }
    }
    out
}

/// `base` with `top` laid over it: where they overlap, `top`'s windows
/// stand; the rest of `base` is kept. Both sorted, each without overlaps;
/// so is the result, in which windows that touch merge into one with the
/// smaller confidence (a window is as sure as its least certain slot).
fn overlay(base: &[Window], top: &[Window]) -> Vec<Window> {
    let mut out: Vec<Window> = top.to_vec();
    for w in base {
        let mut pieces = vec![*w];
        for t in top {
            pieces = pieces
                .into_iter()
                .flat_map(|p| {
                    [
                        Window {
                            end_ms: p.end_ms.min(t.start_ms),
                            ..p
                        },
                        Window {
                            start_ms: p.start_ms.max(t.end_ms),
                            ..p
                        },
                    ]
                })
                .filter(|p| p.start_ms < p.end_ms)
                .collect();
        }
        out.extend(pieces);
    }
    out.sort_by_key(|w| w.start_ms);
    let mut merged: Vec<Window> = Vec::with_capacity(out.len());
    for w in out {
        match merged.last_mut() {
            Some(last) if last.end_ms >= w.start_ms => {
                last.end_ms = last.end_ms.max(w.end_ms);
                last.confidence = last.confidence.min(w.confidence);
            }
            _ => merged.push(w),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use tidemill_sched::Window;

    use super::*;

    fn idle_48h() -> EdgeAvailability {
        EdgeAvailability {
            windows: vec![Window {
                start_ms: 0,
                end_ms: 48 * 3_600_000,
                confidence: 0.9,
            }],
            likely: Vec::new(),
            idle_since_ms: None,
            util_now_pct: Some(0.0),
            idle_threshold_pct: 30.0,
        }
    }

    #[test]
    fn a_forecast_without_history_offers_nothing_and_history_earns_confidence() {
        let t = TrustConfig::default();
        assert!(
            t.cap(idle_48h(), None, None, 0).windows.is_empty(),
            "no forecast"
        );
        let stating = |observed_h: f64| {
            let mut f = crate::world::tests::forecast(&[]);
            f.resources[0].observed_h = observed_h;
            f
        };
        assert!(
            t.cap(idle_48h(), Some(&stating(0.0)), None, 0)
                .windows
                .is_empty(),
            "0 h of history stated"
        );
        // By hand: c_max = min(1, 12 h / 48 h) = 0.25 caps a window of 0.9;
        // 96 h earns min(1, 2) = 1, which leaves it at 0.9.
        let young = t.cap(idle_48h(), Some(&stating(12.0)), None, 0);
        assert!((young.windows[0].confidence - 0.25).abs() < 1e-12);
        let old = t.cap(idle_48h(), Some(&stating(96.0)), None, 0);
        assert!((old.windows[0].confidence - 0.9).abs() < 1e-12);
        assert!(t.invalid().is_none());
        let bounds = t.report_bounds(1200.0, 336);
        assert_eq!(bounds.skew_ms, 300 * 1000 * 1200, "the skew is wall time");
    }

    #[test]
    fn a_young_node_is_trusted_where_its_peers_are_idle_and_idle_now_for_the_slot_in_progress() {
        use tidemill_forecast::{PriorSource, Quantiles, ResourcePrior};
        let t = TrustConfig::default();
        // 0 h stated, idle (P90 5 %) in 8 slots from 1 000 000 ms; the node
        // samples 5 % now, in the slot before the forecast starts.
        let mut f = crate::world::tests::forecast(&[Some(5.0); 8]);
        f.resources[0].observed_h = 0.0;
        let now = 700_000;
        let sample = crate::world::LatestSample {
            utils: [Some(5.0), None],
            sampled_ms: Some(now),
            busy_ms: None,
        };
        let a = crate::world::edge_availability(&sample, Some(&f), now);
        let span = |ws: &[Window]| {
            ws.iter()
                .map(|w| (w.start_ms, w.end_ms))
                .collect::<Vec<_>>()
        };

        let alone = t.cap(a.clone(), Some(&f), None, now);
        assert!(alone.windows.is_empty(), "no promise on 0 h");
        assert_eq!(
            span(&alone.likely),
            [(100_000, 1_000_000)],
            "the slot in progress only"
        );

        // Peers idle (P90 5 %) from 00:00 to 01:00 UTC, busy after: forecast
        // slots 0 to 2 (starting 1.0, 1.9 and 2.8 M ms) fall in slots 1 to 3
        // of the day, slot 3 (3.7 M ms) in the busy 4th.
        let q = |v: f64| {
            Some(Quantiles {
                p10: v,
                p50: v,
                p90: v,
            })
        };
        let prior = Prior {
            source: PriorSource::Site,
            peers: 2,
            slot_len_s: 900,
            resources: vec![ResourcePrior {
                resource: Resource::Cpu,
                slots: (0..96).map(|s| q(if s < 4 { 5.0 } else { 80.0 })).collect(),
            }],
        };
        let backed = t.cap(a.clone(), Some(&f), Some(&prior), now);
        assert_eq!(span(&backed.windows), [(1_000_000, 3_700_000)]);
        assert!(backed.windows[0].confidence > 0.9, "{:?}", backed.windows);
        assert_eq!(
            span(&backed.likely),
            [(100_000, 3_700_000)],
            "the slot in progress and the prior's"
        );

        // With 24 h stated, the node's own window stands, past the prior's
        // too, at c_max = 0.5: one window is as sure as its least sure part.
        f.resources[0].observed_h = 24.0;
        let grown = t.cap(a, Some(&f), Some(&prior), now);
        assert_eq!(span(&grown.windows), [(100_000, 1_000_000 + 8 * 900_000)]);
        assert_eq!(grown.windows[0].confidence, 0.5);
    }
}
