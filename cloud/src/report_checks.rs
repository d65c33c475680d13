//! Range checks on what an edge reports. A value out of range (a utilisation
//! outside 0-100 %, an RTT or bandwidth not positive and finite, a loss
//! outside 0-1, a timestamp in the future beyond the skew bound or older
//! than the retention period) is dropped with the sample, link or forecast
//! that carries it; the rest of the report stands. A task event or progress
//! line with such a timestamp keeps its news but takes the coordinator's
//! time, so that a job's life is never lost to a wrong clock.

use tidemill_forecast::NodeForecast;
use tidemill_proto::{LinkSample, Sample};

/// How far an edge's timestamps may stray from the coordinator's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportBounds {
    /// Most ms a timestamp may be ahead of the coordinator's clock.
    pub skew_ms: i64,
    /// Most ms a timestamp may be behind it (the retention period).
    pub max_age_ms: i64,
}

impl Default for ReportBounds {
    /// Five minutes ahead, fourteen days behind: `[trust]`'s defaults.
    fn default() -> Self {
        ReportBounds {
            skew_ms: 300_000,
            max_age_ms: 14 * 86_400_000,
        }
    }
}

/// A value dropped from a report, for the log and the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The report's sequence number.
    pub seq: u64,
    /// The field, e.g. `links.rtt_ms`: a fixed name, a metric label.
    pub field: &'static str,
    /// The value, as the edge sent it.
    pub value: String,
}

impl ReportBounds {
    /// Why timestamp `t_ms` is out of bounds at `now_ms`, if it is.
    pub fn time_problem(&self, t_ms: i64, now_ms: i64) -> Option<String> {
        (t_ms > now_ms.saturating_add(self.skew_ms)
            || t_ms < now_ms.saturating_sub(self.max_age_ms))
        .then(|| t_ms.to_string())
    }

    /// The first out-of-range value of a sample: (field, value).
    pub fn sample_problem(&self, s: &Sample, now_ms: i64) -> Option<(&'static str, String)> {
        if let Some(v) = self.time_problem(s.t_ms, now_ms) {
            return Some(("samples.t_ms", v));
        }
        let pct = |v: f32| (0.0..=100.0).contains(&v);
        [
            ("samples.cpu_pct", Some(s.cpu_pct)),
            ("samples.mem_pct", Some(s.mem_pct)),
            ("samples.gpu_pct", s.gpu_pct),
        ]
        .into_iter()
        .chain(
            s.per_core_pct
                .iter()
                .map(|&c| ("samples.per_core_pct", Some(c))),
        )
        .find_map(|(field, v)| v.filter(|&v| !pct(v)).map(|v| (field, v.to_string())))
    }

    /// The first out-of-range value of a link measurement: (field, value).
    pub fn link_problem(&self, l: &LinkSample, now_ms: i64) -> Option<(&'static str, String)> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if let Some(v) = self.time_problem(l.t_ms, now_ms) {
            Some(("links.t_ms", v))
        } else if !positive(l.rtt_ms) {
            Some(("links.rtt_ms", l.rtt_ms.to_string()))
        } else if !positive(l.bandwidth_bps) {
            Some(("links.bandwidth_bps", l.bandwidth_bps.to_string()))
        } else if !(0.0..=1.0).contains(&l.loss) {
            Some(("links.loss", l.loss.to_string()))
        } else {
            None
        }
    }

    /// The first out-of-range value of a forecast: (field, value).
    pub fn forecast_problem(
        &self,
        f: &NodeForecast,
        now_ms: i64,
    ) -> Option<(&'static str, String)> {
        let unit = |v: f64| (0.0..=1.0).contains(&v);
        let hours = |v: f64| v.is_finite() && v >= 0.0;
        if let Some(v) = self.time_problem(f.issued_ms, now_ms) {
            Some(("forecast.issued_ms", v))
        } else if f.slot_len_s == 0 {
            Some(("forecast.slot_len_s", "0".into()))
        } else if !(0.0..=100.0).contains(&f.idle_threshold_pct) {
            Some((
                "forecast.idle_threshold_pct",
                f.idle_threshold_pct.to_string(),
            ))
        } else if let Some(w) = f.idle_windows.iter().find(|w| !unit(w.confidence)) {
            Some(("forecast.confidence", w.confidence.to_string()))
        } else {
            f.resources
                .iter()
                .find(|r| !hours(r.observed_h))
                .map(|r| ("forecast.observed_h", r.observed_h.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn link(t_ms: i64, rtt_ms: f64, bandwidth_bps: f64, loss: f64) -> LinkSample {
        LinkSample {
            peer: "cloud".into(),
            t_ms,
            rtt_ms,
            bandwidth_bps,
            loss,
            probe_sent_bytes: 0,
            probe_received_bytes: 0,
        }
    }

    #[test]
    fn absurd_links_and_times_are_named_and_sane_ones_pass() {
        let b = ReportBounds::default();
        assert_eq!(b.link_problem(&link(NOW, 20.0, 1e6, 0.01), NOW), None);
        let year_2100 = 4_102_444_800_000;
        assert_eq!(
            b.link_problem(&link(year_2100, 20.0, 1e6, 0.0), NOW)
                .unwrap()
                .0,
            "links.t_ms"
        );
        assert_eq!(
            b.link_problem(&link(NOW, -5.0, 1e6, 0.0), NOW).unwrap().0,
            "links.rtt_ms"
        );
        let inf = link(NOW, 5.0, f64::INFINITY, 0.0);
        assert_eq!(b.link_problem(&inf, NOW).unwrap().0, "links.bandwidth_bps");
        assert_eq!(
            b.link_problem(&link(NOW, 5.0, 1.0, -3.0), NOW).unwrap().0,
            "links.loss"
        );
        assert_eq!(
            b.link_problem(&link(NOW, f64::NAN, 1.0, 0.0), NOW)
                .unwrap()
                .0,
            "links.rtt_ms"
        );
        assert!(
            b.time_problem(NOW + 299_000, NOW).is_none(),
            "within the skew"
        );
        assert!(
            b.time_problem(NOW - 15 * 86_400_000, NOW).is_some(),
            "past retention"
        );
    }

    #[test]
    fn a_utilisation_outside_0_to_100_is_named() {
        let b = ReportBounds::default();
        let mut s = Sample {
            t_ms: NOW,
            cpu_pct: 10.0,
            per_core_pct: vec![5.0, 15.0],
            mem_pct: 50.0,
            net_rx_bytes: 0,
            net_tx_bytes: 0,
            gpu_pct: None,
        };
        assert_eq!(b.sample_problem(&s, NOW), None);
        s.gpu_pct = Some(-1.0);
        assert_eq!(b.sample_problem(&s, NOW).unwrap().0, "samples.gpu_pct");
        s.gpu_pct = None;
        s.cpu_pct = f32::NAN;
        assert_eq!(b.sample_problem(&s, NOW).unwrap().0, "samples.cpu_pct");
    }
}
