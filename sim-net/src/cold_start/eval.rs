//! The cold-start backtest itself: boxes grouped into sites, join times, the
//! peers' forecasts at every origin, and the arms scored on the same slots.

use std::collections::BTreeMap;

use tidemill_forecast::metrics::{Scoreboard, ScoredPoint};
use tidemill_forecast::{
    DAY_S, ForecastConfig, LoadSample, NodeForecast, NodeForecaster, Prior, PriorSource, Quantiles,
    Resource, ResourceForecast, ResourcePrior, is_idle,
};

use crate::backtest::{SlotMeans, fan_out};
use crate::trace::Series;

const DAY_MS: i64 = DAY_S as i64 * 1_000;
const HOUR_MS: i64 = 3_600_000;

/// Days of a box's life that are scored after its join.
pub const WEEK_DAYS: i64 = 7;
/// Hours of the 48 before a join that the peers' samples must cover.
pub const PEER_HOURS: i64 = 36;

/// One forecaster under test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arm {
    /// The box's own samples only, no prior.
    Nothing,
    /// Own samples blended with the site peers' prior, as tidemill does.
    Peers {
        /// `ForecastConfig::prior_blend_h`.
        blend_h: f64,
    },
    /// As [`Arm::Peers`] but without shifting the prior to the box's level.
    PeersNoShift {
        /// `ForecastConfig::prior_blend_h`.
        blend_h: f64,
    },
}

/// The two scored periods of a box's life, from its join.
pub const PERIODS: [(&str, i64); 2] = [("first_24h", DAY_MS), ("first_7d", WEEK_DAYS * DAY_MS)];

/// Idle node-hours over every scorable slot: a slot an arm did not forecast
/// counts as not predicted idle.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdleTally {
    /// Hours predicted idle and idle.
    pub both_h: f64,
    /// Hours predicted idle.
    pub predicted_h: f64,
    /// Hours idle.
    pub actual_h: f64,
}

impl IdleTally {
    fn merge(&mut self, o: &IdleTally) {
        self.both_h += o.both_h;
        self.predicted_h += o.predicted_h;
        self.actual_h += o.actual_h;
    }
}

/// One arm's sums over one period.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Slots with a truth and a reference.
    pub scorable: u64,
    /// The scorable slots the arm forecast, scored.
    pub answered: Scoreboard,
    /// The slots the "from nothing" arm also forecast: like for like.
    pub paired: Scoreboard,
    /// Idle figures over every scorable slot.
    pub idle: IdleTally,
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        self.scorable += o.scorable;
        self.answered.merge(&o.answered);
        self.paired.merge(&o.paired);
        self.idle.merge(&o.idle);
    }
}

/// Every arm's tallies (`[arm][period]`) and how many joins were scored.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Per arm, per period of [`PERIODS`].
    pub tallies: Vec<[Tally; 2]>,
    /// Joins scored.
    pub joins: u64,
    /// Joins with samples on 7 distinct days of their first week.
    pub full_week_joins: u64,
    /// Boxes with at least one join.
    pub boxes: u64,
}

impl Totals {
    fn new(arms: usize) -> Self {
        Self {
            tallies: vec![Default::default(); arms],
            ..Self::default()
        }
    }

    fn merge(&mut self, o: &Totals) {
        for (a, b) in self.tallies.iter_mut().zip(&o.tallies) {
            a[0].merge(&b[0]);
            a[1].merge(&b[1]);
        }
        self.joins += o.joins;
        self.full_week_joins += o.full_week_joins;
        self.boxes += o.boxes;
    }
}

/// A site: its boxes, and which of them are evaluated (all are peers).
#[derive(Debug, Clone)]
pub struct Site<'a> {
    /// The site label.
    pub name: String,
    /// Every box of the site.
    pub boxes: Vec<&'a Series>,
    /// Indices into `boxes` of the boxes that join.
    pub joining: Vec<usize>,
}

/// The site of a C2TM box `rrh_<site>_<box>`; `None` for anything else
/// (the `fog_<site>` aggregates are sums, not boxes).
pub fn site_of(node: &str) -> Option<&str> {
    let rest = node.strip_prefix("rrh_")?;
    let (site, _) = rest.rsplit_once('_')?;
    (!site.is_empty()).then_some(site)
}

/// Groups the boxes into sites, keeping the sites with at least two boxes.
pub fn sites(series: &[Series]) -> Vec<Site<'_>> {
    let mut by_site: BTreeMap<&str, Vec<&Series>> = BTreeMap::new();
    for s in series {
        if let Some(site) = site_of(&s.node) {
            by_site.entry(site).or_default().push(s);
        }
    }
    by_site
        .into_iter()
        .filter(|(_, b)| b.len() >= 2)
        .map(|(name, boxes)| Site {
            name: name.to_string(),
            joining: (0..boxes.len()).collect(),
            boxes,
        })
        .collect()
}

/// What the backtest needs besides the data.
#[derive(Debug, Clone)]
pub struct ColdStart {
    /// Slot, horizon, idle threshold and confidence (prior_blend_h is set per arm).
    pub config: ForecastConfig,
    /// Time between origins, ms.
    pub step_ms: i64,
    /// The arms scored.
    pub arms: Vec<Arm>,
}

/// The hours (as `t / HOUR_MS`) at which any of `boxes` has a sample.
fn hours_covered(boxes: &[&Series], from: i64, to: i64) -> usize {
    let mut hours: Vec<i64> = boxes
        .iter()
        .flat_map(|b| b.points.iter())
        .filter(|p| p.0 >= from && p.0 < to)
        .map(|p| p.0.div_euclid(HOUR_MS))
        .collect();
    hours.sort_unstable();
    hours.dedup();
    hours.len()
}

/// The join times of box `b` of `site`: every UTC midnight whose previous 48 h
/// the other boxes' samples cover for at least [`PEER_HOURS`] hours, and after
/// which the box has a sample within 24 h.
pub fn joins(site: &Site<'_>, b: usize) -> Vec<i64> {
    let me = site.boxes[b];
    let peers: Vec<&Series> = (0..site.boxes.len())
        .filter(|&i| i != b)
        .map(|i| site.boxes[i])
        .collect();
    let (Some(first), Some(last)) = (
        peers
            .iter()
            .filter_map(|p| p.points.first())
            .map(|p| p.0)
            .min(),
        me.points.last().map(|p| p.0),
    ) else {
        return Vec::new();
    };
    let start = first.div_euclid(DAY_MS) * DAY_MS + 2 * DAY_MS;
    (0..)
        .map(|d| start + d * DAY_MS)
        .take_while(|j| *j <= last)
        .filter(|j| hours_covered(&peers, j - 2 * DAY_MS, *j) >= PEER_HOURS as usize)
        .filter(|j| me.points.iter().any(|p| p.0 >= *j && p.0 < j + DAY_MS))
        .collect()
}

fn sample(t_ms: i64, v: f64) -> LoadSample {
    LoadSample {
        t_ms,
        cpu_pct: Some(v),
        mem_pct: None,
        gpu_pct: None,
    }
}

impl ColdStart {
    fn origins(&self, join: i64) -> impl Iterator<Item = i64> + '_ {
        (0..)
            .map(move |k| join + k * self.step_ms)
            .take_while(move |o| *o < join + WEEK_DAYS * DAY_MS)
    }

    /// Scores every joining box of every site; `progress(done, total)` after
    /// each site. Sites are spread over the available cores.
    pub fn run(&self, sites: &[Site<'_>], progress: impl Fn(usize, usize) + Sync) -> Totals {
        fan_out(
            sites,
            || Totals::new(self.arms.len()),
            |site, totals| self.site(site, totals),
            |total, mine| total.merge(mine),
            progress,
        )
    }

    /// Every box's forecast (tidemill, all its history before the origin, no
    /// prior) at each origin any join of the site needs.
    fn peer_forecasts(&self, site: &Site<'_>, origins: &[i64]) -> BTreeMap<i64, Vec<NodeForecast>> {
        let mut models: Vec<(NodeForecaster, usize)> = site
            .boxes
            .iter()
            .map(|_| {
                let m = NodeForecaster::new(self.config.clone()).expect("config was validated");
                (m, 0)
            })
            .collect();
        let mut out = BTreeMap::new();
        for &o in origins {
            let forecasts = models
                .iter_mut()
                .zip(&site.boxes)
                .map(|((model, fed), series)| {
                    while let Some(&(t, v)) = series.points.get(*fed).filter(|p| p.0 < o) {
                        // Sorted and fed in order: never too old.
                        let _ = model.update(&sample(t, v));
                        *fed += 1;
                    }
                    model.forecast(o)
                })
                .collect();
            out.insert(o, forecasts);
        }
        out
    }

    fn site(&self, site: &Site<'_>, totals: &mut Totals) {
        let slot_ms = self.config.slot_len_ms();
        let horizon_ms = i64::from(self.config.horizon_s) * 1_000;
        let truths: Vec<SlotMeans> = site
            .boxes
            .iter()
            .map(|b| SlotMeans::new(&b.points, slot_ms))
            .collect();
        let has_truth = |b: usize, o: i64| {
            site.boxes[b]
                .points
                .iter()
                .any(|p| p.0 >= o && p.0 < o + horizon_ms)
        };
        let per_box: Vec<(usize, Vec<i64>)> =
            site.joining.iter().map(|&b| (b, joins(site, b))).collect();
        let mut needed: Vec<i64> = per_box
            .iter()
            .flat_map(|(b, js)| {
                js.iter()
                    .flat_map(|j| self.origins(*j))
                    .filter(|o| has_truth(*b, *o))
                    .collect::<Vec<_>>()
            })
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let peers = self.peer_forecasts(site, &needed);
        for (b, js) in &per_box {
            if !js.is_empty() {
                totals.boxes += 1;
            }
            for &join in js {
                self.join(site, *b, join, &truths[*b], &peers, totals);
            }
        }
    }

    /// One box joining at `join`: every arm from the box's own samples from
    /// `join` on, scored at each origin of its first week.
    fn join(
        &self,
        site: &Site<'_>,
        b: usize,
        join: i64,
        truth: &SlotMeans,
        peers: &BTreeMap<i64, Vec<NodeForecast>>,
        totals: &mut Totals,
    ) {
        let series = site.boxes[b];
        let mut own = NodeForecaster::new(self.config.clone()).expect("config was validated");
        let mut blended: Vec<Option<NodeForecaster>> = self
            .arms
            .iter()
            .map(|arm| match arm {
                Arm::Peers { blend_h } => Some(
                    NodeForecaster::new(ForecastConfig {
                        prior_blend_h: *blend_h,
                        ..self.config.clone()
                    })
                    .expect("config was validated"),
                ),
                _ => None,
            })
            .collect();
        let mut fed = series.points.partition_point(|p| p.0 < join);
        totals.joins += 1;
        let week_days = series
            .points
            .iter()
            .filter(|p| p.0 >= join && p.0 < join + WEEK_DAYS * DAY_MS)
            .map(|p| (p.0 - join).div_euclid(DAY_MS))
            .collect::<std::collections::BTreeSet<_>>();
        totals.full_week_joins += u64::from(week_days.len() as i64 == WEEK_DAYS);
        for origin in self.origins(join) {
            while let Some(&(t, v)) = series.points.get(fed).filter(|p| p.0 < origin) {
                let _ = own.update(&sample(t, v));
                for m in blended.iter_mut().flatten() {
                    let _ = m.update(&sample(t, v));
                }
                fed += 1;
            }
            let Some(at) = peers.get(&origin) else {
                continue;
            };
            let others: Vec<&NodeForecast> = at
                .iter()
                .enumerate()
                .filter(|(i, f)| *i != b && !f.resources.is_empty())
                .map(|(_, f)| f)
                .collect();
            let prior = Prior::from_peers(PriorSource::Site, &others, self.config.slot_len_s);
            let nothing = own.forecast_resource(Resource::Cpu, origin);
            let forecasts: Vec<Option<Vec<Option<Quantiles>>>> = self
                .arms
                .iter()
                .zip(&mut blended)
                .map(|(arm, model)| match (arm, model) {
                    (Arm::Peers { .. }, Some(model)) => {
                        model.set_prior(prior.clone());
                        model
                            .forecast_resource(Resource::Cpu, origin)
                            .map(|(_, r)| r.slots)
                    }
                    (Arm::PeersNoShift { blend_h }, _) => unshifted(
                        nothing.as_ref().map(|(_, r)| r),
                        prior.as_ref().and_then(|p| p.resource(Resource::Cpu)),
                        &self.config,
                        origin,
                        *blend_h,
                    ),
                    _ => nothing.as_ref().map(|(_, r)| r.slots.clone()),
                })
                .collect();
            let nothing_slots = nothing.as_ref().map(|(_, r)| &r.slots);
            self.score(origin, join, truth, nothing_slots, &forecasts, totals);
        }
    }

    /// Scores each arm's forecast made at `origin` on every slot with a
    /// truth and a reference.
    fn score(
        &self,
        origin: i64,
        join: i64,
        truth: &SlotMeans,
        nothing: Option<&Vec<Option<Quantiles>>>,
        forecasts: &[Option<Vec<Option<Quantiles>>>],
        totals: &mut Totals,
    ) {
        let slot_ms = self.config.slot_len_ms();
        let per_day = DAY_MS / slot_ms;
        let hours = f64::from(self.config.slot_len_s) / 3_600.0;
        let threshold = self.config.idle_threshold_pct;
        let confidence = self.config.idle_confidence;
        let first_slot = self.config.forecast_start_ms(origin).div_euclid(slot_ms);
        for lead in 0..self.config.horizon_slots() {
            let slot = first_slot + lead as i64;
            // same-slot-yesterday from the true values: the slot one day back,
            // or two for leads past a day (what that baseline could know).
            let back = 1 + lead as i64 / per_day;
            let (Some(y), Some(r)) = (truth.get(slot), truth.get(slot - back * per_day)) else {
                continue;
            };
            let both_answered = nothing.and_then(|n| n[lead]).is_some();
            for (f, tally) in forecasts.iter().zip(totals.tallies.iter_mut()) {
                let q = f.as_ref().and_then(|s| s[lead]);
                for (p, (_, len)) in PERIODS.iter().enumerate() {
                    if origin >= join + len {
                        continue;
                    }
                    let t = &mut tally[p];
                    t.scorable += 1;
                    let idle = y < threshold;
                    let predicted = q.is_some_and(|q| is_idle(&q, threshold, confidence));
                    t.idle.actual_h += if idle { hours } else { 0.0 };
                    t.idle.predicted_h += if predicted { hours } else { 0.0 };
                    t.idle.both_h += if idle && predicted { hours } else { 0.0 };
                    let Some(q) = q else { continue };
                    let point = ScoredPoint {
                        actual: y,
                        forecast: q,
                        reference_p50: r,
                        hours,
                    };
                    t.answered.add(&point, threshold, confidence);
                    if both_answered {
                        t.paired.add(&point, threshold, confidence);
                    }
                }
            }
        }
    }
}

/// tidemill's blend of the box's own forecast with the prior
/// ([`Prior::blend`]) without the level shift: the prior alone where the box
/// has no forecast.
fn unshifted(
    own: Option<&ResourceForecast>,
    prior: Option<&ResourcePrior>,
    config: &ForecastConfig,
    origin: i64,
    blend_h: f64,
) -> Option<Vec<Option<Quantiles>>> {
    let Some(prior) = prior else {
        return own.map(|o| o.slots.clone());
    };
    let (start_ms, slot_ms) = (config.forecast_start_ms(origin), config.slot_len_ms());
    let weight = Prior::weight(own.map_or(0.0, |o| o.observed_h), blend_h);
    let slots = (0..config.horizon_slots())
        .map(|i| {
            let at = prior.at(start_ms + i as i64 * slot_ms, config.slot_len_s);
            Prior::blend(own.and_then(|o| o.slots[i]), at, 0.0, weight)
        })
        .collect();
    Some(slots)
}
