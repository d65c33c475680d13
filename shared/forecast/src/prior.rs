//! A cold-start prior: the tide of a box's peers, for a box with too little
//! history of its own (Seagull falls back to a fleet model when history is
//! short; Resource Central uses class-level priors for new VMs).
//!
//! The coordinator holds every node's latest forecast, so it builds the prior
//! ([`Prior::from_peers`]) from the forecasts of the box's site peers, else of
//! boxes of its class, else of the whole fleet, and sends it to the box. The
//! box's forecaster blends it out as its own history grows
//! ([`crate::NodeForecaster::set_prior`]).

use serde::{Deserialize, Serialize};

use crate::{DAY_S, NodeForecast, Quantiles, Resource};

/// Whose forecasts a prior was built from, most specific first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PriorSource {
    /// Boxes with the same `site` label: the same tide.
    Site,
    /// Boxes of the same class (same hardware, same operator role).
    Class,
    /// Every box with a forecast.
    Fleet,
}

impl std::fmt::Display for PriorSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PriorSource::Site => "site",
            PriorSource::Class => "class",
            PriorSource::Fleet => "fleet",
        })
    }
}

/// One resource's prior: quantiles per slot of the UTC day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourcePrior {
    /// Which resource.
    pub resource: Resource,
    /// Entry `s` is the slot starting `s × slot_len_s` after UTC midnight;
    /// `None` where no peer forecast that slot.
    pub slots: Vec<Option<Quantiles>>,
}

/// The daily tide of a box's peers, per resource and slot of the day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prior {
    /// Whose forecasts it was built from.
    pub source: PriorSource,
    /// How many forecasts it was built from.
    pub peers: u32,
    /// Slot length, seconds: a prior only blends into a forecaster with the same.
    pub slot_len_s: u32,
    /// One entry per resource some peer forecast.
    pub resources: Vec<ResourcePrior>,
}

/// What a prior contributed to a forecast: what `nodes` shows beside the
/// history, so that a forecast that rests on peers says so.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PriorUse {
    /// Whose forecasts the prior came from.
    pub source: PriorSource,
    /// How many.
    pub peers: u32,
    /// The prior's weight in the forecast, 0-1 (`1 − w` of
    /// [`Prior::blend`]; 1 for a box with no history of its own).
    pub weight: f64,
}

impl std::fmt::Display for PriorUse {
    /// `prior from 3 site peers (weight 0.75)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.peers == 1 { "" } else { "s" };
        write!(
            f,
            "prior from {} {} peer{s} (weight {:.2})",
            self.peers, self.source, self.weight
        )
    }
}

/// The `q`-quantile (0-1) of `v` by linear interpolation between order
/// statistics; `v` must be sorted and not empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

impl Prior {
    /// Builds a prior from peer forecasts made with `slot_len_s` slots (the
    /// others are skipped). For each resource and slot of the UTC day `s`,
    /// every peer slot starting at that time of day (a 48 h forecast gives
    /// two per peer) is pooled, and, in percent:
    ///
    /// - P50(s) = median of the pooled P50s;
    /// - P10(s) = min(median of the pooled P10s, 10th percentile of the pooled P50s);
    /// - P90(s) = max(median of the pooled P90s, 90th percentile of the pooled P50s);
    ///
    /// so the band is at least a typical peer's own band and at least the
    /// spread between the peers' medians. `None` when no forecast has a slot.
    pub fn from_peers(
        source: PriorSource,
        peers: &[&NodeForecast],
        slot_len_s: u32,
    ) -> Option<Prior> {
        let per_day = (DAY_S / slot_len_s.max(1)) as usize;
        let day_ms = i64::from(DAY_S) * 1_000;
        let slot_ms = i64::from(slot_len_s) * 1_000;
        let used: Vec<&&NodeForecast> = peers
            .iter()
            .filter(|f| f.slot_len_s == slot_len_s)
            .collect();
        let mut resources = Vec::new();
        for resource in [Resource::Cpu, Resource::Mem, Resource::Gpu] {
            let mut pooled: Vec<Vec<Quantiles>> = vec![Vec::new(); per_day];
            for f in &used {
                let Some(r) = f.resource(resource) else {
                    continue;
                };
                for (i, q) in r.slots.iter().enumerate() {
                    if let Some(q) = q {
                        let s = (f.slot_start_ms(i).rem_euclid(day_ms) / slot_ms) as usize;
                        pooled[s % per_day].push(*q);
                    }
                }
            }
            if pooled.iter().all(Vec::is_empty) {
                continue;
            }
            let slots = pooled.iter().map(|qs| summarise(qs)).collect();
            resources.push(ResourcePrior { resource, slots });
        }
        (!resources.is_empty()).then_some(Prior {
            source,
            peers: used.len() as u32,
            slot_len_s,
            resources,
        })
    }

    /// The prior of `resource`, if a peer forecast it.
    pub fn resource(&self, resource: Resource) -> Option<&ResourcePrior> {
        self.resources.iter().find(|r| r.resource == resource)
    }

    /// The prior's weight for a box with `observed_h` hours of its own
    /// history: `1 − w`, where the box's own weight is
    /// w = min(1, observed_h / blend_h) (hours over hours).
    pub fn weight(observed_h: f64, blend_h: f64) -> f64 {
        1.0 - (observed_h / blend_h.max(f64::MIN_POSITIVE)).clamp(0.0, 1.0)
    }

    /// Blends one slot, percent: q = w × own + (1 − w) × (prior + δ) per
    /// quantile, where `prior_weight` is 1 − w and δ (percentage points) is
    /// the box's level against its peers' (see [`ResourcePrior::offset`]).
    /// A slot the box has no forecast for takes prior + δ. Public so that a
    /// backtest can score the blend without the shift (δ = 0).
    pub fn blend(
        own: Option<Quantiles>,
        prior: Option<Quantiles>,
        offset: f64,
        prior_weight: f64,
    ) -> Option<Quantiles> {
        let shifted = prior.map(|p| Quantiles {
            p10: p.p10 + offset,
            p50: p.p50 + offset,
            p90: p.p90 + offset,
        });
        let mix = |o: f64, p: f64| (1.0 - prior_weight) * o + prior_weight * p;
        match (own, shifted) {
            (Some(o), Some(p)) => Some(Quantiles {
                p10: mix(o.p10, p.p10),
                p50: mix(o.p50, p.p50),
                p90: mix(o.p90, p.p90),
            }),
            (o, p) => o.or(p),
        }
        .map(Quantiles::clamped)
    }
}

impl ResourcePrior {
    /// The prior for the slot starting at `t_ms` (Unix ms).
    pub fn at(&self, t_ms: i64, slot_len_s: u32) -> Option<Quantiles> {
        let slot_ms = i64::from(slot_len_s) * 1_000;
        let s = (t_ms.rem_euclid(i64::from(DAY_S) * 1_000) / slot_ms) as usize;
        self.slots.get(s).copied().flatten()
    }

    /// The box's level against its peers, percentage points: the mean of
    /// (observed value − prior P50) over the box's observed slots of the last
    /// day, `observed` holding (slot start in Unix ms, value in percent).
    /// 0 with nothing to compare: a box with no history takes its peers'
    /// level.
    pub(crate) fn offset(&self, observed: &[(i64, f64)], slot_len_s: u32) -> f64 {
        let diffs: Vec<f64> = observed
            .iter()
            .filter_map(|&(t, v)| self.at(t, slot_len_s).map(|p| v - p.p50))
            .collect();
        if diffs.is_empty() {
            0.0
        } else {
            diffs.iter().sum::<f64>() / diffs.len() as f64
        }
    }
}

/// One slot of the day from the pooled peer quantiles (see [`Prior::from_peers`]).
fn summarise(qs: &[Quantiles]) -> Option<Quantiles> {
    if qs.is_empty() {
        return None;
    }
    let sorted = |f: fn(&Quantiles) -> f64| {
        let mut v: Vec<f64> = qs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (p10s, p50s, p90s) = (sorted(|q| q.p10), sorted(|q| q.p50), sorted(|q| q.p90));
    Some(
        Quantiles {
            p10: quantile(&p10s, 0.5).min(quantile(&p50s, 0.1)),
            p50: quantile(&p50s, 0.5),
            p90: quantile(&p90s, 0.5).max(quantile(&p50s, 0.9)),
        }
        .clamped(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CycleVerdict, DailyCycle, Method, ResourceForecast};

    fn q(p10: f64, p50: f64, p90: f64) -> Quantiles {
        Quantiles { p10, p50, p90 }
    }

    /// A CPU forecast of two 15-minute slots, starting at 00:15 UTC.
    fn peer(slots: [Quantiles; 2]) -> NodeForecast {
        NodeForecast {
            method: Method::Tidemill,
            issued_ms: 0,
            start_ms: 900_000,
            slot_len_s: 900,
            idle_threshold_pct: 30.0,
            resources: vec![ResourceForecast {
                resource: Resource::Cpu,
                cycle: CycleVerdict {
                    daily_cycle: DailyCycle::Unknown,
                    strength: None,
                    days_used: 0,
                },
                slots: slots.iter().copied().map(Some).collect(),
                observed_h: 72.0,
            }],
            idle_windows: vec![],
            history_days: 14,
            prior: None,
        }
    }

    #[test]
    fn peers_pool_by_time_of_day_by_hand() {
        // Slot 1 of the day (00:15): P50s 10, 20, 60 → median 20; their 10th
        // percentile is 10 + 0.2 × (20 − 10) = 12, against the median P10 of
        // 15 → P10 = 12; the 90th is 20 + 0.8 × (60 − 20) = 52 against the
        // median P90 of 30 → P90 = 52.
        let a = peer([q(5.0, 10.0, 20.0), q(1.0, 2.0, 3.0)]);
        let b = peer([q(15.0, 20.0, 30.0), q(1.0, 2.0, 3.0)]);
        let c = peer([q(40.0, 60.0, 80.0), q(1.0, 2.0, 3.0)]);
        let mut other = peer([q(0.0, 0.0, 0.0); 2]);
        other.slot_len_s = 300;
        let p = Prior::from_peers(PriorSource::Site, &[&a, &b, &c, &other], 900).unwrap();
        assert_eq!(
            (p.peers, p.source),
            (3, PriorSource::Site),
            "another slot length is skipped"
        );
        let cpu = p.resource(Resource::Cpu).unwrap();
        assert_eq!(cpu.slots.len(), 96);
        let s1 = cpu.slots[1].unwrap();
        assert!((s1.p10 - 12.0).abs() < 1e-9 && s1.p50 == 20.0 && (s1.p90 - 52.0).abs() < 1e-9);
        assert_eq!(cpu.slots[2], Some(q(1.0, 2.0, 3.0)));
        assert_eq!(cpu.slots[0], None);
        assert_eq!(
            cpu.at(86_400_000 + 1_800_000, 900),
            Some(q(1.0, 2.0, 3.0)),
            "any day, same slot"
        );
        assert!(p.resource(Resource::Gpu).is_none());
        assert!(Prior::from_peers(PriorSource::Fleet, &[], 900).is_none());
    }

    #[test]
    fn blending_by_hand() {
        // 12 h of own history against blend_h = 48 h: w = 0.25, prior weight 0.75.
        assert_eq!(Prior::weight(12.0, 48.0), 0.75);
        assert_eq!(Prior::weight(0.0, 48.0), 1.0);
        assert_eq!(Prior::weight(96.0, 48.0), 0.0);
        // δ = 4 shifts the prior to 14/24/34; then P10 = 0.25 × 30 + 0.75 × 14 = 18,
        // P50 = 0.25 × 40 + 0.75 × 24 = 28, P90 = 0.25 × 50 + 0.75 × 34 = 38.
        let b = Prior::blend(
            Some(q(30.0, 40.0, 50.0)),
            Some(q(10.0, 20.0, 30.0)),
            4.0,
            0.75,
        )
        .unwrap();
        assert_eq!((b.p10, b.p50, b.p90), (18.0, 28.0, 38.0));
        assert_eq!(
            Prior::blend(None, Some(q(1.0, 2.0, 3.0)), -5.0, 0.2),
            Some(q(0.0, 0.0, 0.0))
        );
        assert_eq!(
            Prior::blend(Some(q(1.0, 2.0, 3.0)), None, 9.0, 0.9),
            Some(q(1.0, 2.0, 3.0))
        );
    }

    #[test]
    fn the_offset_is_the_mean_gap_to_the_peers_median() {
        let p = ResourcePrior {
            resource: Resource::Cpu,
            slots: (0..96).map(|s| Some(q(0.0, s as f64, 50.0))).collect(),
        };
        // Slots 4 (01:00) and 8 (02:00) observed at 10 and 20: gaps 6 and 12, mean 9.
        assert_eq!(p.offset(&[(3_600_000, 10.0), (7_200_000, 20.0)], 900), 9.0);
        assert_eq!(p.offset(&[], 900), 0.0);
        assert_eq!(
            PriorUse {
                source: PriorSource::Site,
                peers: 3,
                weight: 0.75
            }
            .to_string(),
            "prior from 3 site peers (weight 0.75)"
        );
    }
}
